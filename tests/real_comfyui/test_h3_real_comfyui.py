"""The whole H3 path in a real ComfyUI >= 0.31 (opt-in: H3KIT_COMFYUI_DIR), with tiny random-weight H3 files.

install -> the templates browser lists h3kit's workflows -> the text-to-video UI
file, converted to the API format by h3kit's own code, runs to an MP4 with an
audio track -> apply after a config edit changes the workflow -> calibrate
--with-model runs that same graph -> uninstall leaves the tree as it was.
The ComfyUI is a throwaway copy (tests/support/comfy_h3): nothing is written into
the one H3KIT_COMFYUI_DIR names.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

import comfy_h3
from fixtures.comfyui.comfy_tree import snapshot
from h3kit.comfyui import client as comfy_api
from h3kit.comfyui import workflows
from h3kit.comfyui.graph import ui_to_api
from h3kit.data import catalog as catalog_mod
from h3kit.data import comfy_nodes

REAL, PYTHON, WHY = comfy_h3.h3_comfyui()
pytestmark = [pytest.mark.native, pytest.mark.comfyui, pytest.mark.slow, pytest.mark.skipif(REAL is None, reason=WHY)]

CONFIG, PART_OF = comfy_h3.TINY_CONFIG, comfy_h3.PART_OF
COMFYUI_MAKES = ("user", "input/3d")  # ComfyUI itself creates these when it starts, with or without h3kit


def _say(*parts) -> None:
    """Figures for the log (run with -s); past capsys, which run_cli empties after every command."""
    sys.__stdout__.write(" ".join(parts) + "\n")


@pytest.fixture(scope="module")
def h3_comfy(tmp_path_factory):
    return comfy_h3.make_test_comfyui(REAL, tmp_path_factory.mktemp("real") / "Comfy UI ü")


def _names(plan: dict) -> dict[str, str]:
    cat = catalog_mod.load()
    out = {}
    for key, part in PART_OF.items():
        f = cat.weight(plan["settings"][key]).file
        out[part] = f"{f.folder}/{f.name}"
    return out


def _run_ui_workflow(comfy: Path, ui: dict, workdir: Path) -> tuple[dict, Path]:
    api = ui_to_api(ui, comfy_nodes.load())
    server = comfy_api.ComfyServer(comfy, PYTHON, ["--cpu"], workdir)
    with server:
        server.start(timeout=180)
        templates = server.get("/workflow_templates")
        measured = comfy_api.run_workflow(server, api, timeout=600)
    videos = sorted((workdir / "output").rglob("*.mp4"))
    assert measured["ran"], measured["message"] + server.log_tail(3000)
    assert videos, f"no MP4 under {workdir / 'output'}"
    return {"templates": templates, **measured}, videos[-1]


def test_install_run_apply_calibrate_uninstall(h3_comfy, h3kit_home, run_cli, tmp_path):
    (h3kit_home / "config.yaml").write_text(CONFIG, encoding="utf-8")
    roomy = comfy_h3.roomy_fingerprint(run_cli, tmp_path)
    code, out, err = run_cli("plan", "--fingerprint", roomy, "--json")
    assert code == 0, err
    plan = json.loads(out)
    comfy_h3.write_tiny_files(h3_comfy, PYTHON, _names(plan))
    before = snapshot(h3_comfy, skip=COMFYUI_MAKES, skip_names=("__pycache__",))

    code, out, err = run_cli("install", "--comfyui", str(h3_comfy), "--fingerprint", roomy, "--yes", "--skip-calibrate",
                             "--no-models", "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["verified"] and doc["h3"]["ready"], doc.get("h3")
    node = h3_comfy / "custom_nodes" / "ComfyUI-h3kit"
    ui_file = node / workflows.UI_DIR / "h3kit_text_to_video.json"
    ui = json.loads(ui_file.read_text(encoding="utf-8"))
    assert ui_to_api(ui, comfy_nodes.load()) == json.loads((node / workflows.API_DIR / ui_file.name).read_text())

    ran, video = _run_ui_workflow(h3_comfy, ui, tmp_path / "work")
    assert sorted(ran["templates"].get("ComfyUI-h3kit", [])) == ["h3kit_first_last_frame_to_video",
                                                                  "h3kit_image_to_video", "h3kit_text_to_video"]
    probe = comfy_h3.probe_mp4(PYTHON, video)
    _say("first run:", json.dumps({k: ran[k] for k in ("seconds", "peak_rss_bytes")}), json.dumps(probe))
    assert (probe["video_streams"], probe["audio_streams"]) == (1, 1)
    assert probe["frames"] == 22 and probe["video_codec"] == "h264" and probe["audio_codec"] == "aac"

    (h3kit_home / "config.yaml").write_text(CONFIG.replace("frames: 22", "frames: 39"), encoding="utf-8")
    code, out, err = run_cli("apply", "--comfyui", str(h3_comfy), "--yes", "--json")
    assert code == 0, err
    after = json.loads(ui_file.read_text(encoding="utf-8"))
    encode = next(n for n in after["nodes"] if n["type"] == "MiniMaxH3ImageToVideo")
    assert encode["widgets_values"][3] == 39  # prompt, width, height, length

    code, out, err = run_cli("calibrate", "--quick", "--with-model", "--comfyui", str(h3_comfy), "--json")
    assert code == 0, err
    real = json.loads(out)["real_model"]
    _say("calibrate --with-model:", json.dumps({k: real.get(k) for k in ("status", "reason", "workflow", "canvas",
                                                                         "steps", "seconds", "peak_rss_bytes")}))
    assert real["status"] == "measured", real
    assert real["workflow"] == str(node / workflows.API_DIR / "h3kit_text_to_video.json")
    assert real["canvas"] == [64, 64, 39] and real["steps"] == 2

    code, out, err = run_cli("uninstall", "--comfyui", str(h3_comfy), "--yes")
    assert code == 0, err
    assert snapshot(h3_comfy, skip=COMFYUI_MAKES, skip_names=("__pycache__",)) == before
