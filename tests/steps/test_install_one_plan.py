"""Issue 34: one install fingerprints once, makes at most two plans (its own, with the format probe's evidence,
and calibration's re-apply with the calibrated values), keeps --profile through calibration and ends with one
clip-time figure that names its source."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from call_counter import count_calls, plans_and_fingerprints
from fixtures.comfyui import comfy_tree
from h3kit.calibrate.handover import Planned, uncalibrated
from h3kit.data.config import Config
from h3kit.steps.install_result import ComfyFound, InstallResult

pytestmark = pytest.mark.native  # installs deploy the pack with the native library: the session's one build
FINGERPRINTS = Path(__file__).parents[1] / "fixtures" / "fingerprints"
PROFILE = "apple-unified-48"  # never the profile this machine (no Apple GPU) would be matched to


@pytest.fixture
def counted(monkeypatch):
    """make_plan, this_machine and locate.inspect calls (call_counter), and the searches for a ComfyUI
    (h3kit.comfyui.locate.find: --comfyui's path checked, or the usual places searched)."""
    return {**plans_and_fingerprints(monkeypatch), "searches": count_calls(monkeypatch, "h3kit.comfyui.locate", "find")}


@pytest.mark.parametrize("saved", [False, True])
def test_one_install_plans_at_most_twice_fingerprints_once_and_keeps_the_profile(tmp_path, run_cli, counted, saved):
    comfy = comfy_tree.make_comfyui(tmp_path / "ComfyUI")
    extra = ["--fingerprint", str(FINGERPRINTS / "apple-m2max-64gb.json")] if saved else []
    code, out, err = run_cli("install", "--comfyui", str(comfy), "--profile", PROFILE, "--yes", "--no-models",
                             "--json", *extra)
    assert code == 0, err
    doc = json.loads(out)
    assert doc["report"], doc.get("notes")  # the calibration ran and re-applied the pack
    assert counted["fingerprints"] == ([] if saved else [None])
    assert len(counted["plans"]) == 2, counted["plans"]  # install's, and calibration's re-apply
    assert len(counted["inspections"]) == 1  # one inspection, handed to the probe, the plan and calibration
    assert len(counted["searches"]) == 1  # found once: calibration measures in the ComfyUI install handed it
    deployed = json.loads((comfy / "custom_nodes" / "ComfyUI-h3kit" / "h3kit_profile.json").read_text())
    assert doc["profile"] == deployed["profile"] == PROFILE
    report = json.loads(Path(doc["report"]).with_suffix(".json").read_text())
    assert report["profile"] == PROFILE and report["applied"]["status"] == "applied"
    if saved:  # calibration measured the saved machine's plan, not this one's
        assert report["fingerprint"]["memory"]["total_bytes"] == \
            json.loads((FINGERPRINTS / "apple-m2max-64gb.json").read_text())["memory"]["total_bytes"]


def test_skip_calibrate_plans_once(tmp_path, run_cli, counted, h3kit_home):
    comfy = comfy_tree.make_comfyui(tmp_path / "ComfyUI")
    code, out, err = run_cli("install", "--comfyui", str(comfy), "--yes", "--no-models", "--skip-calibrate")
    assert code == 0, err
    assert len(counted["plans"]) == 1 and len(counted["fingerprints"]) == 1
    assert len(counted["inspections"]) == 1 and len(counted["searches"]) == 1
    states = json.loads(next((Path(h3kit_home) / "state" / "history").glob("*.json")).read_text())["states"]
    assert [s["command"] for s in states] == ["install"]  # the install's state is recorded


def test_a_bad_profile_stops_the_install_before_anything_is_set_up(tmp_path, run_cli, counted):
    comfy = comfy_tree.make_comfyui(tmp_path / "ComfyUI")
    code, out, err = run_cli("install", "--comfyui", str(comfy), "--profile", "no-such", "--yes", "--json")
    assert code == 2 and "no-such" in json.loads(out)["error"]
    assert counted["plans"] == [] and counted["fingerprints"] == []
    assert not (comfy / "custom_nodes" / "ComfyUI-h3kit").exists()


DURATION = re.compile(r"One clip (?:at [^,]+, \d+ frames )?(?:would )?takes? about ((?:\d+ h )?\d+(?:\.\d+)? (?:min|s|h))")


def test_the_last_lines_give_one_clip_time_naming_its_source(tmp_path, run_cli, h3kit_home):
    comfy = comfy_tree.make_comfyui(tmp_path / "ComfyUI")
    # a target no preset meets on this fingerprint: the plan's warning quotes the clip time too
    (h3kit_home / "config.yaml").write_text("overrides:\n  target_minutes: 0.2\n")
    code, out, err = run_cli("install", "--comfyui", str(comfy), "--yes", "--no-models",
                             "--fingerprint", str(FINGERPRINTS / "nvidia-rtx4060-8gb-16gb.json"))
    assert code == 0, err
    said = DURATION.findall(out + err)  # the warnings go to stderr
    code, doc_out, err = run_cli("install", "--comfyui", str(comfy), "--yes", "--no-models", "--json",
                                 "--fingerprint", str(FINGERPRINTS / "nvidia-rtx4060-8gb-16gb.json"))
    doc = json.loads(doc_out)
    closing = doc["next_steps"][2]
    # the fake ComfyUI has no torch: nothing of H3 was measured, so the figure is the plan's table estimate
    assert doc["clip_time"]["measured"] is False and "the plan's estimate from the throughput table" in closing
    assert len(said) >= 2 and len(set(said)) == 1, (out + err)[-3000:]  # the warning and the closing line: one figure


def test_the_plan_calibration_measures_has_no_earlier_calibrated_values():
    cfg = Config(calibrated={"vae_tile_size": 256}, overrides={"vae_tile_size": 320})
    assert dict(uncalibrated(cfg).calibrated.items()) == {} and cfg.calibrated.vae_tile_size == 256
    assert uncalibrated(cfg).overrides.vae_tile_size == 320
    assert Planned(None, None, probe=object(), saved=True).evidence is None


def test_the_install_document_keeps_the_contracts_keys():
    found = ComfyFound("/c", "/c/python", "0.33.0", "git", "flag", None, None)
    doc = InstallResult("cpu-only", comfyui=found, node_dir="/c/custom_nodes/ComfyUI-h3kit", verified=True).to_json()
    for key in ("schema", "comfyui", "node_dir", "profile", "launchers", "manifest", "verified", "report"):
        assert key in doc
    assert doc["schema"] == "h3kit.install/1" and doc["comfyui"]["version"] == "0.33.0" and "dry_run" not in doc


@pytest.mark.parametrize("saved", [False, True])
def test_doctor_plans_once_after_probing_the_comfyui_it_checks(tmp_path, run_cli, counted, saved):
    comfy = comfy_tree.make_comfyui(tmp_path / "ComfyUI")
    extra = ["--fingerprint", str(FINGERPRINTS / "apple-m2max-64gb.json")] if saved else []
    code, out, err = run_cli("doctor", "--comfyui", str(comfy), "--json", *extra)
    assert "findings" in json.loads(out), err
    assert len(counted["plans"]) == 1, counted["plans"]
    assert counted["fingerprints"] == ([] if saved else [None])


def test_doctor_without_a_comfyui_plans_nothing(tmp_path, run_cli, counted):
    code, out, err = run_cli("doctor", "--comfyui", str(tmp_path / "nowhere"), "--json")
    assert code != 0 and json.loads(out)["findings"][-1]["check"] == "comfyui.found"
    assert counted["plans"] == [] and len(counted["fingerprints"]) == 1
