"""`h3kit calibrate --quick --comfyui` on a real ComfyUI with the plan's DiT file present: the runner builds
ComfyUI's own H3 at the width read from that file's header, and the estimate, decisions and `calibrated:`
come from that measurement (a throwaway copy of H3KIT_COMFYUI_DIR; yours is never written to)."""

from __future__ import annotations

import json

import pytest

import comfy_h3
from h3kit.data import catalog as catalog_mod

REAL, PYTHON, WHY = comfy_h3.h3_comfyui()
pytestmark = [pytest.mark.native, pytest.mark.comfyui, pytest.mark.slow, pytest.mark.skipif(REAL is None, reason=WHY)]

CONFIG, DIMS = comfy_h3.CALIBRATION_CONFIG, comfy_h3.CALIBRATION_DIT


def test_calibration_measures_comfyuis_h3_at_the_files_width(tmp_path, h3kit_home, run_cli, native_library_env):
    comfy = comfy_h3.make_test_comfyui(REAL, tmp_path / "ComfyUI")
    dit = catalog_mod.load().weight("h3-dit-pruned-bf16").file
    comfy_h3.write_tiny_files(comfy, PYTHON, {"dit": f"{dit.folder}/{dit.name}"}, DIMS)
    (h3kit_home / "config.yaml").write_text(CONFIG, encoding="utf-8")
    code, out, err = run_cli("calibrate", "--quick", "--comfyui", str(comfy), "--json")
    assert code == 0, err
    doc = json.loads(out)
    h3 = doc["h3_model"]
    assert h3["status"] == "measured", h3
    assert h3["arch"]["hidden"] == 512 and h3["arch"]["blocks_total"] == 5
    assert h3["arch"]["from"].startswith("file header") and dit.name in h3["arch"]["from"]
    est = doc["estimates"]
    assert est["kind"] == "measured" and est["arch"]["hidden"] == 512
    assert est["timing"]["source"].startswith("calibrated ") and "ComfyUI's Python (cpu" in est["timing"]["source"]
    assert est["time"]["seconds_per_step"] > 0 and est["time"]["canvas"] == [256, 256] and est["time"]["frames"] == 22
    assert est["memory"]["peak_rss_bytes"] > h3["memory"]["baseline_rss_bytes"]
    by = {d["setting"]: d for d in doc["decisions"]}
    assert by["timing"]["changed"] and "measured in ComfyUI's Python" in by["timing"]["evidence"]
    assert {"canvas", "frames", "steps"} <= set(by)
    # the measured rates are in calibrated:, so the next plan estimates with them
    code, out, err = run_cli("plan", "--json")
    assert code == 0, err
    assert json.loads(out)["settings"]["timing"]["source"] == est["timing"]["source"]
    assert not any((h3kit_home / "cache" / "calibrate").glob("run-*"))  # the work folder went away
