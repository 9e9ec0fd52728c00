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
pytestmark = [pytest.mark.comfyui, pytest.mark.slow, pytest.mark.skipif(REAL is None, reason=WHY)]

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
# The tiny DiT of tests/support/comfy_h3/make_tiny_h3.py: 2 blocks, hidden 64, 2 heads x 32.
TINY_BLOCKS, TINY_HIDDEN, TINY_INNER, TINY_FFN, RANK = 2, 64, 64, 128, 4


def write_safetensors(path: Path, tensors: dict[str, tuple[list, list]]) -> None:
    """A float32 safetensors file from {name: (shape, values)} (the format: u64 header size, JSON header, data)."""
    header, blobs, offset = {}, [], 0
    for name, (shape, values) in tensors.items():
        blob = struct.pack(f"<{len(values)}f", *values)
        header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    head = json.dumps(header).encode("utf-8")
    head += b" " * (-len(head) % 8)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(struct.pack("<Q", len(head)) + head + b"".join(blobs))


def tiny_lora(path: Path) -> int:
    """A rank-4 LoRA on every attention and MLP projection of the tiny DiT; returns how many layers it patches."""
    rng = random.Random(14)
    layers = {"attn.qkv_proj": (3 * TINY_INNER, TINY_HIDDEN), "attn.out_proj": (TINY_HIDDEN, TINY_INNER),
              "mlp.fc1": (2 * TINY_FFN, TINY_HIDDEN), "mlp.fc2": (TINY_HIDDEN, TINY_FFN)}
    tensors = {}
    for b in range(TINY_BLOCKS):
        for name, (out_f, in_f) in layers.items():
            key = f"diffusion_model.blocks.{b}.{name}"
            tensors[f"{key}.lora_up.weight"] = ([out_f, RANK], [rng.uniform(-1, 1) for _ in range(out_f * RANK)])
            tensors[f"{key}.lora_down.weight"] = ([RANK, in_f], [rng.uniform(-1, 1) for _ in range(RANK * in_f)])
    write_safetensors(path, tensors)
    return len(tensors) // 2


def installed_text_to_video(run_cli, comfy: Path, fingerprint) -> dict:
    """Install h3kit (no calibration, no downloads) and read back the text-to-video workflow it wrote, as API."""
    code, out, err = run_cli("install", "--comfyui", str(comfy), "--fingerprint", fingerprint, "--yes",
                             "--skip-calibrate", "--no-models", "--json")
    assert code == 0, err
    ui_file = comfy / "custom_nodes" / "ComfyUI-h3kit" / workflows.UI_DIR / "h3kit_text_to_video.json"
    return ui_to_api(json.loads(ui_file.read_text(encoding="utf-8")), comfy_nodes.load())

def test_the_fast_presets_lora_runs_in_comfyui_and_changes_the_video(h3kit_home, run_cli, tmp_path):
    comfy = comfy_h3.make_test_comfyui(REAL, tmp_path / "Comfy UI ü")
    (h3kit_home / "config.yaml").write_text(CONFIG, encoding="utf-8")
    roomy = comfy_h3.roomy_fingerprint(run_cli, tmp_path)
    code, out, err = run_cli("plan", "--fingerprint", roomy, "--json")
    assert code == 0, err
    plan = json.loads(out)
    assert (plan["settings"]["preset"], plan["settings"]["lora"]) == ("fast", "h3-lora-turbo")
    cat = catalog_mod.load()
    names = {}
    for key, part in PART_OF.items():
        f = cat.weight(plan["settings"][key]).file
        names[part] = f"{f['folder']}/{f['name']}"
    comfy_h3.write_tiny_files(comfy, PYTHON, names)
    lora_file = cat.weight("h3-lora-turbo").file
    patched = tiny_lora(comfy / "models" / lora_file["folder"] / lora_file["name"])

    api = installed_text_to_video(run_cli, comfy, roomy)
    (lora_id,) = [k for k, n in api.items() if n["class_type"] == "LoraLoaderModelOnly"]
    assert api[lora_id]["inputs"]["lora_name"] == lora_file["name"] and api[lora_id]["inputs"]["strength_model"] == 1.0
    assert next(n for n in api.values() if n["class_type"] == "BasicScheduler")["inputs"]["steps"] == 2

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
    assert patched == 4 * TINY_BLOCKS
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
    comfy_h3.write_tiny_files(comfy, PYTHON, {part: f"{cat.weight(plan['settings'][key]).file['folder']}/"
                                                    f"{cat.weight(plan['settings'][key]).file['name']}"
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
