"""The fast preset's LoRA in a real ComfyUI >= 0.31 (opt-in: H3KIT_COMFYUI_DIR), with tiny random-weight H3 files.

install with `preset: fast` -> the installed text-to-video workflow holds
LoraLoaderModelOnly between the DiT loader and the sampler -> it runs in
ComfyUI with a LoRA made for the tiny DiT (every key applied: no "lora key
not loaded") -> the same graph at LoRA strength 0 gives a different video, so
the LoRA really reaches the model. The LoRA file is written here in the
standard lora_up/lora_down layout under the Turbo LoRA's file name.
"""

from __future__ import annotations

import json
import os
import random
import struct
import subprocess
from pathlib import Path

import pytest

import comfy_h3
from h3kit.comfyui import client as comfy_api
from h3kit.comfyui import workflows
from h3kit.comfyui.graph import ui_to_api
from h3kit.data import catalog as catalog_mod
from h3kit.data import comfy_nodes

REAL, PYTHON, WHY = comfy_h3.h3_comfyui()
pytestmark = [pytest.mark.native, pytest.mark.comfyui, pytest.mark.slow, pytest.mark.skipif(REAL is None, reason=WHY)]

CONFIG = comfy_h3.TINY_CONFIG + "  preset: fast\n  stream_dit: off\n"
PART_OF = comfy_h3.PART_OF
FRAMES_DIGEST = r"""
import av, hashlib, sys
h = hashlib.sha256()
with av.open(sys.argv[1]) as c:
    for frame in c.decode(video=0):
        h.update(frame.to_ndarray(format="rgb24").tobytes())
print(h.hexdigest())
"""
KEY_PROBE = r"""
import json, logging, sys

# dit path, LoRA path -> which weights ComfyUI's own key map and LoRA loader patch, and how exactly
from comfy.cli_args import args
args.cpu = True
import torch
import comfy.lora, comfy.sd, comfy.utils

dit_path, lora_path = sys.argv[1], sys.argv[2]
warned = []
class Catch(logging.Handler):
    def emit(self, record):
        warned.append(record.getMessage())
logging.getLogger().addHandler(Catch(level=logging.WARNING))
model = comfy.sd.load_diffusion_model(dit_path)
lora = comfy.utils.load_torch_file(lora_path)
key_map = comfy.lora.model_lora_keys_unet(model.model, {})
patches = comfy.lora.load_lora(lora, key_map)
before = {k: v.detach().float().clone() for k, v in model.model.state_dict().items()}
patched, _ = comfy.sd.load_lora_for_models(model, None, lora, 1.0, 0)
patched.patch_model()
after = patched.model.state_dict()
worst, changed = 0.0, []
for key in sorted(patches):
    prefix = next(p for p, k in key_map.items() if k == key and (p + ".lora_up.weight" in lora or p + ".lora_B.weight" in lora))
    up = lora.get(prefix + ".lora_up.weight", lora.get(prefix + ".lora_B.weight")).float()
    down = lora.get(prefix + ".lora_down.weight", lora.get(prefix + ".lora_A.weight")).float()
    delta = after[key].float() - before[key]
    want = up @ down
    worst = max(worst, float((delta - want).abs().max() / want.abs().max()))
    changed.append(key)
others = [k for k in before if k not in patches and not torch.equal(before[k], after[k].float())]
print(json.dumps({"lora_tensors": len(lora), "patched": changed, "not_loaded": [w for w in warned if "lora key not loaded" in w],
                  "worst_rel_error": worst, "other_weights_changed": others}))
"""

# The tiny DiT of tests/support/comfy_h3/make_tiny_h3.py: 2 blocks and 2 token-refiner blocks, hidden 64,
# 2 heads x 32, FFN 128 (fc1 is SwiGLU: 2 x 128 out).
TINY_BLOCKS, TINY_REFINERS, TINY_HIDDEN, TINY_INNER, TINY_FFN, RANK = 2, 2, 64, 64, 128, 4


def write_safetensors(path: Path, tensors: dict[str, tuple[list, list]], dtype: str = "F32") -> None:
    """A safetensors file from {name: (shape, values)} in F32 or BF16 (u64 header size, JSON header, data)."""
    header, blobs, offset = {}, [], 0
    for name, (shape, values) in tensors.items():
        blob = struct.pack(f"<{len(values)}f", *values)
        if dtype == "BF16":  # bf16 is the high half of each little-endian float32
            blob = b"".join(blob[i + 2:i + 4] for i in range(0, len(blob), 4))
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    head = json.dumps(header).encode("utf-8")
    head += b" " * (-len(head) % 8)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(struct.pack("<Q", len(head)) + head + b"".join(blobs))


def tiny_lora(path: Path, names: tuple[str, str] = ("lora_down", "lora_up")) -> int:
    """A random LoRA for the tiny DiT in the layout of ComfyUI's own turbo LoRA
    (minimax_h3_fl2v_turbo_8step_v1.0_comfyui_bf16.safetensors, and the 768p file of the same bytes the fast preset
    loads): bf16; in every block and token-refiner block
    attn.qkv_proj (fused: down = q, k and v's downs stacked, rank 3r; up = their ups block-diagonal),
    attn.out_proj, mlp.fc1 and mlp.fc2; no AdaLN and no alpha keys. `names`: the down/up suffixes (the file's are
    lora_down/lora_up by a converter's description; lora_A/lora_B is the other form ComfyUI takes).
    Returns how many layers it patches."""
    rng = random.Random(14)

    def rand(n):
        return [rng.uniform(-1, 1) for _ in range(n)]

    down_name, up_name = names
    tensors = {}
    prefixes = [f"token_refiner.blocks.{i}" for i in range(TINY_REFINERS)] + [f"blocks.{i}" for i in range(TINY_BLOCKS)]
    for prefix in prefixes:
        key = f"diffusion_model.{prefix}"
        qkv_up = [0.0] * (3 * TINY_INNER * 3 * RANK)  # block diagonal: q's rows use only q's rank columns
        for part in range(3):
            for row in range(TINY_INNER):
                for col in range(RANK):
                    qkv_up[(part * TINY_INNER + row) * 3 * RANK + part * RANK + col] = rng.uniform(-1, 1)
        tensors[f"{key}.attn.qkv_proj.{down_name}.weight"] = ([3 * RANK, TINY_HIDDEN], rand(3 * RANK * TINY_HIDDEN))
        tensors[f"{key}.attn.qkv_proj.{up_name}.weight"] = ([3 * TINY_INNER, 3 * RANK], qkv_up)
        for name, (out_f, in_f) in {"attn.out_proj": (TINY_HIDDEN, TINY_INNER), "mlp.fc1": (2 * TINY_FFN, TINY_HIDDEN),
                                    "mlp.fc2": (TINY_HIDDEN, TINY_FFN)}.items():
            tensors[f"{key}.{name}.{up_name}.weight"] = ([out_f, RANK], rand(out_f * RANK))
            tensors[f"{key}.{name}.{down_name}.weight"] = ([RANK, in_f], rand(RANK * in_f))
    write_safetensors(path, tensors, "BF16")
    return len(tensors) // 2


def installed_text_to_video(run_cli, comfy: Path, fingerprint) -> dict:
    """Install h3kit (no calibration, no downloads) and read back the text-to-video workflow it wrote, as API."""
    code, out, err = run_cli("install", "--comfyui", str(comfy), "--fingerprint", fingerprint, "--yes",
                             "--skip-calibrate", "--no-models", "--json")
    assert code == 0, err
    ui_file = comfy / "custom_nodes" / "ComfyUI-h3kit" / workflows.UI_DIR / "h3kit_text_to_video.json"
    return ui_to_api(json.loads(ui_file.read_text(encoding="utf-8")), comfy_nodes.load())


def test_the_fast_presets_lora_runs_in_comfyui_and_changes_the_video(h3kit_home, run_cli, tmp_path):
    comfy, roomy, plan = comfy_h3.planned_test_comfyui(REAL, run_cli, h3kit_home, tmp_path, CONFIG)
    assert (plan["settings"]["preset"], plan["settings"]["lora"]) == ("fast", "h3-lora-turbo-768p")
    cat = catalog_mod.load()
    names = {}
    for key, part in PART_OF.items():
        f = cat.weight(plan["settings"][key]).file
        names[part] = f"{f.folder}/{f.name}"
    comfy_h3.write_tiny_files(comfy, PYTHON, names)
    lora_file = cat.weight(plan["settings"]["lora"]).file
    patched = tiny_lora(comfy / "models" / lora_file.folder / lora_file.name)

    api = installed_text_to_video(run_cli, comfy, roomy)
    (lora_id,) = [k for k, n in api.items() if n["class_type"] == "LoraLoaderModelOnly"]
    assert api[lora_id]["inputs"]["lora_name"] == lora_file.name and api[lora_id]["inputs"]["strength_model"] == 1.0
    assert next(n for n in api.values() if n["class_type"] == "BasicScheduler")["inputs"]["steps"] == 2
    # the LoRA's published schedule (lightx2v discussion #48), which this ComfyUI runs as written
    one = {n["class_type"]: n["inputs"] for n in api.values()}
    assert one["KSamplerSelect"]["sampler_name"] == "euler" and one["BasicScheduler"]["scheduler"] == "simple"
    assert (one["MiniMaxH3SigmaShift"]["shift_video"], one["MiniMaxH3SigmaShift"]["shift_audio"]) == (6.0, 3.0)

    without = json.loads(json.dumps(api))
    without[lora_id]["inputs"]["strength_model"] = 0.0
    work = tmp_path / "work"
    server = comfy_api.ComfyServer(comfy, PYTHON, ["--cpu"], work)
    videos = []
    with server:
        server.start(timeout=180)
        for graph in (api, without):
            ran = comfy_api.run_workflow(server, graph, timeout=600)
            assert ran["ran"], ran["message"] + server.log_tail(3000)
            videos.append(sorted((work / "output").rglob("*.mp4"), key=lambda p: p.stat().st_mtime)[-1])
        log = server.log_tail(200_000)
    assert "lora key not loaded" not in log, log[-3000:]
    assert patched == 4 * (TINY_BLOCKS + TINY_REFINERS)
    assert videos[0] != videos[1]
    digests = [subprocess.run([str(PYTHON), "-c", FRAMES_DIGEST, str(v)], capture_output=True, text=True,
                              timeout=300, check=True).stdout.strip() for v in videos]
    assert digests[0] != digests[1]  # the decoded frames differ: the LoRA changed what the DiT computed
    probe = comfy_h3.probe_mp4(PYTHON, videos[0])
    assert probe["frames"] == 22 and (probe["video_streams"], probe["audio_streams"]) == (1, 1)


def test_the_streamed_loader_in_the_generated_workflow_gives_stock_output(h3kit_home, run_cli, tmp_path):
    """stream_dit: on puts H3kitStreamedDiTLoader in place of UNETLoader; the video's frames equal stock's."""
    comfy = comfy_h3.make_test_comfyui(REAL, tmp_path / "Comfy UI ü")
    config = CONFIG.replace("preset: fast", "preset: balanced").replace("stream_dit: off", "stream_dit: on")
    (h3kit_home / "config.yaml").write_text(config, encoding="utf-8")
    roomy = comfy_h3.roomy_fingerprint(run_cli, tmp_path)
    code, out, err = run_cli("plan", "--fingerprint", roomy, "--json")
    assert code == 0, err
    plan = json.loads(out)
    assert plan["settings"]["streaming"]["enabled"], plan["settings"]["streaming"]
    cat = catalog_mod.load()
    comfy_h3.write_tiny_files(comfy, PYTHON, {part: f"{cat.weight(plan['settings'][key]).file.folder}/"
                                                    f"{cat.weight(plan['settings'][key]).file.name}"
                                              for key, part in PART_OF.items()})
    api = installed_text_to_video(run_cli, comfy, roomy)
    (dit_id,) = [k for k, n in api.items() if n["class_type"] == "H3kitStreamedDiTLoader"]
    st = plan["settings"]["streaming"]
    inputs = api[dit_id]["inputs"]
    assert inputs["prefetch_blocks"] == st["prefetch_blocks"]
    assert inputs["shard_size_bytes"] == plan["settings"]["shard_size_bytes"]
    assert inputs["preload_bytes"] == st.get("preload_bytes", plan["settings"]["preload_bytes"])
    stock = json.loads(json.dumps(api))
    stock[dit_id] = {"class_type": "UNETLoader", "inputs": {"unet_name": inputs["unet_name"], "weight_dtype": "default"},
                     "_meta": {"title": "DiT"}}
    work = tmp_path / "work"
    videos = []
    with comfy_api.ComfyServer(comfy, PYTHON, ["--cpu"], work) as server:
        server.start(timeout=180)
        for graph in (api, stock):
            ran = comfy_api.run_workflow(server, graph, timeout=600)
            assert ran["ran"], ran["message"] + server.log_tail(3000)
            videos.append(sorted((work / "output").rglob("*.mp4"), key=lambda p: p.stat().st_mtime)[-1])
    digests = [subprocess.run([str(PYTHON), "-c", FRAMES_DIGEST, str(v)], capture_output=True, text=True,
                              timeout=300, check=True).stdout.strip() for v in videos]
    assert videos[0] != videos[1] and digests[0] == digests[1]


@pytest.mark.parametrize("names", [("lora_down", "lora_up"), ("lora_A", "lora_B")])
def test_every_key_of_the_turbo_lora_layout_reaches_the_dit(tmp_path, names):
    """ComfyUI's LoRA key map for H3 (the generic diffusion_model.<module> form in 0.33) takes every key of a LoRA
    laid out like ComfyUI's own turbo LoRA, and each weight moves by exactly up @ down at strength 1; a key the map
    does not know is reported, so the check would see one left over."""
    comfy_h3.write_tiny_files(tmp_path, PYTHON, {"dit": "diffusion_models/dit.safetensors"})
    dit = tmp_path / "models" / "diffusion_models" / "dit.safetensors"
    lora = tmp_path / "lora.safetensors"
    layers = tiny_lora(lora, names)

    def probe(lora_file: Path) -> dict:
        done = subprocess.run([str(PYTHON), "-c", KEY_PROBE, str(dit), str(lora_file)], capture_output=True,
                              text=True, timeout=300, cwd=REAL, env={**os.environ, "PYTHONPATH": str(REAL)})
        assert done.returncode == 0, done.stderr[-3000:]
        return json.loads(done.stdout.strip().splitlines()[-1])

    got = probe(lora)
    prefixes = [f"token_refiner.blocks.{i}" for i in range(TINY_REFINERS)] + [f"blocks.{i}" for i in range(TINY_BLOCKS)]
    want = sorted(f"diffusion_model.{p}.{m}.weight" for p in prefixes
                  for m in ("attn.qkv_proj", "attn.out_proj", "mlp.fc1", "mlp.fc2"))
    assert got["lora_tensors"] == 2 * layers and got["patched"] == want
    assert got["not_loaded"] == [] and got["other_weights_changed"] == []
    assert got["worst_rel_error"] < 1e-3

    stray = tmp_path / "stray.safetensors"  # the control: an AdaLN pair the DiT has no LoRA key for
    tensors = {"diffusion_model.blocks.0.adaln_proj.lora_down.weight": ([RANK, 8], [0.5] * RANK * 8),
               "diffusion_model.blocks.0.adaln_proj.lora_up.weight": ([8, RANK], [0.5] * RANK * 8)}
    write_safetensors(stray, tensors)
    left = set(probe(stray)["not_loaded"])  # the probe loads twice: its own call and load_lora_for_models
    assert left == {f"lora key not loaded: {k}" for k in tensors}
