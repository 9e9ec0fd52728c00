"""`h3kit install` on a real ComfyUI with the plan's DiT file present (a throwaway copy of H3KIT_COMFYUI_DIR): the
calibration measures install's own plan (no fingerprint, no plan of its own), re-applies the pack with install's
profile as the second and last plan, and the last lines give one clip time: the one the calibration measured."""

from __future__ import annotations

import json
import re

import pytest

import comfy_h3
from call_counter import plans_and_fingerprints
from h3kit.data import catalog as catalog_mod

REAL, PYTHON, WHY = comfy_h3.h3_comfyui()
pytestmark = [pytest.mark.native, pytest.mark.comfyui, pytest.mark.slow, pytest.mark.skipif(REAL is None, reason=WHY)]

CONFIG, DIMS = comfy_h3.CALIBRATION_CONFIG, comfy_h3.CALIBRATION_DIT
DURATION = re.compile(r"One clip (?:at [^,]+, \d+ frames )?(?:would )?takes? about ((?:\d+ h )?\d+(?:\.\d+)? (?:min|s|h))")


def test_install_measures_its_own_plan_and_ends_with_the_measured_clip_time(tmp_path, h3kit_home, run_cli,
                                                                             native_library_env, monkeypatch):
    comfy, roomy, _plan = comfy_h3.planned_test_comfyui(REAL, run_cli, h3kit_home, tmp_path, CONFIG)
    dit = catalog_mod.load().weight("h3-dit-pruned-bf16").file
    comfy_h3.write_tiny_files(comfy, PYTHON, {"dit": f"{dit.folder}/{dit.name}"}, DIMS)
    counted = plans_and_fingerprints(monkeypatch)
    code, out, err = run_cli("install", "--comfyui", str(comfy), "--fingerprint", roomy, "--profile", "cpu-only",
                             "--yes", "--no-models", "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert counted["fingerprints"] == [] and len(counted["plans"]) == 2, counted
    deployed = json.loads((comfy / "custom_nodes" / "ComfyUI-h3kit" / "h3kit_profile.json").read_text())
    assert doc["profile"] == deployed["profile"] == "cpu-only"
    assert doc["calibration_estimates"]["kind"] == "measured", doc["calibration_estimates"].get("note")
    # the pack now holds the re-applied plan, timed with the rates calibration measured: that is the figure
    assert deployed["settings"]["timing"]["source"].startswith("calibrated ")
    closing = doc["next_steps"][2]
    assert doc["clip_time"]["measured"] is True and "calibration's measured estimate: calibrated " in closing
    said = DURATION.findall(closing + "\n" + err)  # the plan's warnings go to stderr
    assert said and len(set(said)) == 1, (closing, err[-2000:])
