"""A throwaway ComfyUI with H3 for the real-ComfyUI tests, built from the one in H3KIT_COMFYUI_DIR.

The tests never write into the user's ComfyUI: `make_test_comfyui` makes a
new tree whose code files are hard links to the real one (cheap, read-only
use), whose `venv` is a link to the real venv, and whose `custom_nodes/`
holds only the test node that lets tiny H3 files load (`tiny_h3_testnode`:
ComfyUI builds the text encoder and the VAEs at their real size whatever
the file holds). `make_tiny_h3.py` writes the random-weight files; it runs
in ComfyUI's Python because it needs torch.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

HERE = Path(__file__).resolve().parent
SKIP_TOP = {".git", "venv", ".venv", "models", "output", "input", "user", "custom_nodes", "temp", "__pycache__"}
PROBE_MP4 = r"""
import av, json, sys
with av.open(sys.argv[1]) as c:
    v = [s for s in c.streams if s.type == "video"]
    a = [s for s in c.streams if s.type == "audio"]
    frames = sum(1 for _ in c.decode(video=0)) if v else 0
print(json.dumps({"video_streams": len(v), "audio_streams": len(a), "frames": frames,
                  "video_codec": v[0].codec_context.name if v else None,
                  "audio_codec": a[0].codec_context.name if a else None}))
"""


# A config that makes h3kit plan files ComfyUI's stock loaders take (safetensors through UNETLoader /
# CLIPLoader / VAELoader) at a tiny canvas, and which settings key names which part for write_tiny_files.
TINY_CONFIG = """overrides:
  dit_weights: h3-dit-pruned-bf16
  text_encoder_weights: h3-te-qwen3vl32b-int8_convrot
  vae_weights: h3-vae-video-fp16
  canvas: [64, 64]
  frames: 22
  steps: 2
"""
# Calibration's quick run against a real install: the bf16 DiT at 256x256x22, 4 steps, and a DiT small
# enough (5 blocks of 512) that the runner's measuring points take seconds on a CPU.
CALIBRATION_CONFIG = """overrides:
  dit_weights: h3-dit-pruned-bf16
  canvas: [256, 256]
  frames: 22
  steps: 4
"""
CALIBRATION_DIT = {"hidden_size": 512, "num_layers": 5, "num_attention_heads": 4, "attention_head_dim": 128,
                   "ffn_hidden_size": 1376, "text_dim": 48, "timestep_input_dim": 256, "time_embed_hidden_size": 512,
                   "time_embed_dim": 256, "rope_inv_freq_len": 16}
PART_OF = {"dit_weights": "dit", "text_encoder_weights": "text_encoder", "vae_weights": "video_vae",
           "audio_vae_weights": "audio_vae"}


def h3_comfyui() -> tuple[Path | None, Path | None, str]:
    """(ComfyUI folder, its Python, why not): a ComfyUI >= 0.31 from H3KIT_COMFYUI_DIR with its own venv."""
    raw = os.environ.get("H3KIT_COMFYUI_DIR")
    if not raw:
        return None, None, "set H3KIT_COMFYUI_DIR to a ComfyUI >= 0.31 checkout with a venv (docs/development.md)"
    comfy = Path(raw).expanduser().resolve()
    if not (comfy / "comfy_extras" / "nodes_minimax_h3.py").is_file():
        return None, None, f"{comfy} has no H3 support (ComfyUI >= 0.31 needed for these tests)"
    python = next((p for p in (comfy / "venv/bin/python", comfy / ".venv/bin/python") if p.exists()), None)
    if python is None:
        return None, None, f"{comfy} has no venv/ with a Python"
    return comfy, python, ""


def make_test_comfyui(real: Path, where: Path) -> Path:
    """A new ComfyUI tree at `where` sharing `real`'s code (hard links) and venv (a link)."""
    def ignore(folder, names):
        return [n for n in names if n == "__pycache__" or (Path(folder) == real and n in SKIP_TOP)]

    shutil.copytree(real, where, ignore=ignore, copy_function=os.link, symlinks=True)
    venv = next(p for p in (real / "venv", real / ".venv") if p.exists())
    os.symlink(venv, where / venv.name)
    for folder in ("models/diffusion_models", "models/text_encoders", "models/vae", "output", "input", "user"):
        (where / folder).mkdir(parents=True, exist_ok=True)
    shutil.copytree(HERE / "tiny_h3_testnode", where / "custom_nodes" / "tiny_h3_testnode",
                    ignore=shutil.ignore_patterns("__pycache__", "example_workflows"))
    example = real / "input" / "example.png"
    if example.is_file():
        shutil.copy(example, where / "input" / "example.png")
    return where


def write_tiny_files(comfy: Path, python: Path, names: dict[str, str], dit: dict | None = None) -> None:
    """Tiny H3 files under `names` ({part: path under models/}; parts: dit, text_encoder, video_vae, audio_vae)."""
    wanted = {"dit": None, "text_encoder": None, "taeh3": None, "video_vae": None, "audio_vae": None, **names}
    argv = [str(python), str(HERE / "make_tiny_h3.py"), "--out", str(comfy / "models"), "--names", json.dumps(wanted)]
    if dit:
        argv += ["--dit", json.dumps(dit)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise RuntimeError(f"make_tiny_h3.py failed: {done.stderr[-2000:]}")


def probe_mp4(python: Path, path: Path) -> dict:
    """Streams and decoded frame count of an MP4, read with PyAV in ComfyUI's Python."""
    done = subprocess.run([str(python), "-c", PROBE_MP4, str(path)], capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        raise RuntimeError(f"PyAV could not read {path}: {done.stderr[-1000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def machine_fingerprint(run_cli, tmp_path: Path, ram_gb: int, *, gpus: bool = True) -> str:
    """This machine as probed (`run_cli`: the tests' CLI fixture) with `ram_gb` of RAM, room on disk and, with
    `gpus` False, no GPU: the planner's arithmetic is about the real H3 on such a machine, whatever box runs the
    test. Returns the fingerprint file's path."""
    code, out, err = run_cli("fingerprint", "--json")
    assert code == 0, err
    fp = json.loads(out)
    if not gpus:
        fp["gpus"] = []
    fp["memory"].update(total_bytes=ram_gb * 10**9, available_bytes=(ram_gb - 2) * 10**9)
    for disk in fp["disks"]:
        disk.update(total_bytes=max(disk["total_bytes"] or 0, 2 * 10**12), free_bytes=10**12)
    path = tmp_path / f"fingerprint-{ram_gb}gb{'' if gpus else '-cpu'}.json"
    path.write_text(json.dumps(fp), encoding="utf-8")
    return str(path)


def roomy_fingerprint(run_cli, tmp_path: Path) -> str:
    """This machine with RAM and disk enough for the real model: the tiny files fit anywhere, and the tests that
    use it are about the path through ComfyUI, not this box. Returns the fingerprint file's path."""
    return machine_fingerprint(run_cli, tmp_path, 256)


def planned_test_comfyui(real: Path, run_cli, h3kit_home: Path, tmp_path: Path, config: str) -> tuple[Path, str, dict]:
    """A test ComfyUI (a space and a non-ASCII letter in its path), `config` as config.yaml, and the plan h3kit
    makes for this machine with room for the real model: (ComfyUI folder, fingerprint path, plan document)."""
    comfy = make_test_comfyui(real, tmp_path / "Comfy UI ü")
    (h3kit_home / "config.yaml").write_text(config, encoding="utf-8")
    roomy = roomy_fingerprint(run_cli, tmp_path)
    code, out, err = run_cli("plan", "--fingerprint", roomy, "--json")
    assert code == 0, err
    return comfy, roomy, json.loads(out)
