"""Every workflow h3kit installs, end to end in a real ComfyUI >= 0.31 (opt-in: H3KIT_COMFYUI_DIR), tiny random files.

install with `preset: fast` and `reference_to_video: on` -> the pack holds text-to-video, image-to-video,
first/last-frame-to-video and reference-to-video, each UI file standing for its API twin -> each runs in
ComfyUI and writes an MP4 with a video and an audio track. The reference workflow loads the plan's ref2va
twin of the DiT (the tiny DiT under the twin's file name: the two checkpoints share one architecture) with
ComfyUI's own ref2v LoRA layout, every key applied; without its reference image the same graph gives other
frames, so the picture reaches the model through MiniMaxH3ReferenceToVideo.
"""

from __future__ import annotations

import json
import os
import subprocess

import pytest

import comfy_h3
from h3kit.comfyui import client as comfy_api
from h3kit.comfyui import workflows
from h3kit.comfyui.graph import ui_to_api
from h3kit.data import catalog as catalog_mod
from h3kit.data import comfy_nodes
from test_presets_real_comfyui import FRAMES_DIGEST, tiny_lora

REAL, PYTHON, WHY = comfy_h3.h3_comfyui()
pytestmark = [pytest.mark.native, pytest.mark.comfyui, pytest.mark.slow, pytest.mark.skipif(REAL is None, reason=WHY)]

CONFIG = comfy_h3.TINY_CONFIG + "  preset: fast\n  stream_dit: off\n  reference_to_video: on\n"
KINDS = ("t2v", "i2v", "flf2v", "r2v")


def test_every_installed_workflow_runs_and_writes_video_with_audio(h3kit_home, run_cli, tmp_path):
    comfy, roomy, plan = comfy_h3.planned_test_comfyui(REAL, run_cli, h3kit_home, tmp_path, CONFIG)
    s = plan["settings"]
    ref = s["reference"]
    cat = catalog_mod.load()
    twin = cat.weight(ref["dit_weights"])
    assert twin is cat.reference_twin(cat.weight(s["dit_weights"]))
    assert (s["lora"], ref["lora"], ref["steps"]) == ("h3-lora-turbo-768p", "h3-lora-ref2v-turbo", 2)  # steps: 2 wins

    files = {part: cat.weight(s[key]).file for key, part in comfy_h3.PART_OF.items()}
    comfy_h3.write_tiny_files(comfy, PYTHON, {part: f"{f.folder}/{f.name}" for part, f in files.items()})
    dit = comfy / "models" / files["dit"].folder / files["dit"].name
    os.link(dit, comfy / "models" / twin.file.folder / twin.file.name)
    for lora_id in (s["lora"], ref["lora"]):
        f = cat.weight(lora_id).file
        tiny_lora(comfy / "models" / f.folder / f.name)

    code, out, err = run_cli("install", "--comfyui", str(comfy), "--fingerprint", roomy, "--yes",
                             "--skip-calibrate", "--no-models", "--json")
    assert code == 0, err
    node = comfy / "custom_nodes" / "ComfyUI-h3kit"
    specs, graphs = comfy_nodes.load(), {}
    for kind in KINDS:
        name = f"{workflows.NAMES[kind]}.json"
        graphs[kind] = json.loads((node / workflows.API_DIR / name).read_text(encoding="utf-8"))
        assert ui_to_api(json.loads((node / workflows.UI_DIR / name).read_text(encoding="utf-8")), specs) == graphs[kind]
    r2v = graphs["r2v"]
    (encode_id,) = [k for k, n in r2v.items() if n["class_type"] == "MiniMaxH3ReferenceToVideo"]
    assert {n["inputs"].get("unet_name") for n in r2v.values()} >= {twin.file.name}
    without_ref = json.loads(json.dumps(r2v))
    del without_ref[encode_id]["inputs"]["ref_images.ref_image_0"]

    work = tmp_path / "work"
    videos = {}
    with comfy_api.ComfyServer(comfy, PYTHON, ["--cpu"], work) as server:
        server.start(timeout=180)
        order = server.object_info()["MiniMaxH3ReferenceToVideo"]["input_order"]
        spec = [i["name"] for i in specs["MiniMaxH3ReferenceToVideo"]["inputs"]]
        assert order["required"] == spec[:len(order["required"])], order  # the widget order the UI file relies on
        for kind, graph in [*graphs.items(), ("r2v without its reference", without_ref)]:
            ran = comfy_api.run_workflow(server, graph, timeout=600)
            assert ran["ran"], kind + ": " + ran["message"] + server.log_tail(3000)
            videos[kind] = sorted((work / "output").rglob("*.mp4"), key=lambda p: p.stat().st_mtime)[-1]
        log = server.log_tail(400_000)
    assert "lora key not loaded" not in log, log[-3000:]
    assert len(set(videos.values())) == len(videos)
    for kind, video in videos.items():
        probe = comfy_h3.probe_mp4(PYTHON, video)
        assert (probe["video_streams"], probe["audio_streams"], probe["frames"]) == (1, 1, 22), (kind, probe)
        assert (probe["video_codec"], probe["audio_codec"]) == ("h264", "aac"), (kind, probe)
    assert videos["r2v"].parent.name == "h3kit" and videos["r2v"].name.startswith(workflows.NAMES["r2v"])
    digests = [subprocess.run([str(PYTHON), "-c", FRAMES_DIGEST, str(videos[k])], capture_output=True, text=True,
                              timeout=300, check=True).stdout.strip() for k in ("r2v", "r2v without its reference")]
    assert digests[0] != digests[1]  # the reference image reached the model
