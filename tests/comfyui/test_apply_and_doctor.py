"""`h3kit apply` after a config change, and the ComfyUI half of `h3kit doctor`, with the real planner and build."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fixtures.comfyui import comfy_tree
from h3kit.core.paths import locations

pytestmark = pytest.mark.native  # installs: the session's native library, not a compile per test

FIXTURES = Path(__file__).parents[1] / "fixtures" / "comfyui"


@pytest.fixture
def installed(tmp_path, run_cli):
    comfy = comfy_tree.make_comfyui(tmp_path / "Comfy ä")
    code, out, err = run_cli("install", "--comfyui", str(comfy), "--yes", "--skip-calibrate", "--no-models", "--json")
    assert code == 0, err
    return comfy, json.loads(out)


def _findings(out: str) -> dict:
    return {f["check"]: f for f in json.loads(out)["findings"]}


def _use_profile(name: str) -> None:
    from h3kit.data.config import set_value

    set_value(locations().config_file, "profile", name)


def test_config_change_then_apply_changes_profile_and_launcher(installed, run_cli):
    comfy, doc = installed
    node = Path(doc["node_dir"])
    before_json = (node / "h3kit_profile.json").read_text()
    before_launcher = Path(doc["launchers"][0]).read_text()
    _use_profile("nvidia-8gb")
    code, out, err = run_cli("apply", "--comfyui", str(comfy), "--yes", "--json")
    assert code == 0, err
    applied = json.loads(out)
    assert applied["profile"] == "nvidia-8gb" and applied["changed"]
    assert json.loads((node / "h3kit_profile.json").read_text())["profile"] == "nvidia-8gb"
    assert (node / "h3kit_profile.json").read_text() != before_json
    launcher = Path(doc["launchers"][0]).read_text()
    assert launcher != before_launcher and "nvidia-8gb" in launcher


def test_doctor_all_ok_after_install(installed, run_cli):
    comfy, _ = installed
    code, out, err = run_cli("doctor", "--comfyui", str(comfy), "--json")
    found = _findings(out)
    mine = ("comfyui.", "torch.", "pack.", "launcher.", "native.", "profile.")
    failed_elsewhere = [f for f in found.values() if f["status"] == "fail" and not f["check"].startswith(mine)]
    assert code == (4 if failed_elsewhere else 0), out  # h3kit.models adds its own (missing weights here)
    for check in ("comfyui.found", "comfyui.python", "pack.present", "pack.intact", "launcher.flags", "profile.current"):
        assert found[check]["status"] == "ok", found[check]
    assert found["native.loads"]["status"] in ("ok", "warn")  # warn only where no compiler built the library


def test_doctor_finds_a_changed_pack_file(installed, run_cli):
    comfy, doc = installed
    (Path(doc["node_dir"]) / "h3kit_decode" / "node.py").write_text("# changed\n")
    code, out, err = run_cli("doctor", "--comfyui", str(comfy), "--json")
    found = _findings(out)
    assert code == 4 and found["pack.intact"]["status"] == "fail" and "node.py" in found["pack.intact"]["message"]
    assert "h3kit install" in found["pack.intact"]["fix"]


def test_doctor_stale_profile_and_fix(installed, run_cli):
    comfy, doc = installed
    _use_profile("nvidia-16gb")
    code, out, err = run_cli("doctor", "--comfyui", str(comfy), "--json")
    assert _findings(out)["profile.current"]["status"] == "warn" and "h3kit apply" in _findings(out)["profile.current"]["fix"]
    code, out, err = run_cli("doctor", "--comfyui", str(comfy), "--fix", "--yes", "--json")
    assert _findings(out)["profile.current"]["status"] == "ok"
    assert json.loads((Path(doc["node_dir"]) / "h3kit_profile.json").read_text())["profile"] == "nvidia-16gb"


def test_doctor_without_comfyui(tmp_path, run_cli, monkeypatch):
    monkeypatch.delenv("COMFYUI_PATH", raising=False)
    code, out, err = run_cli("doctor", "--comfyui", str(tmp_path / "gone"), "--json")
    assert code == 3 and _findings(out)["comfyui.found"]["status"] == "fail"


def test_turning_the_reference_workflow_off_removes_it_unless_it_was_edited(installed, run_cli):
    """reference_to_video: on, apply -> the pack lists the reference workflow; off, apply -> it is gone, since it
    names a DiT the plan no longer fetches. A copy the user edited in place stays, and so do the other workflows."""
    from h3kit.comfyui import workflows
    from h3kit.data.config import write_section

    comfy, doc = installed
    node = Path(doc["node_dir"])
    name = workflows.NAMES["r2v"] + ".json"
    ui, api = node / workflows.UI_DIR / name, node / workflows.API_DIR / name
    config = locations().config_file
    for edited in (False, True):
        write_section(config, "overrides", {"reference_to_video": True})
        code, out, err = run_cli("apply", "--comfyui", str(comfy), "--yes", "--json")
        assert code == 0, err
        assert ui.is_file() and api.is_file()
        if edited:
            ui.write_text(ui.read_text(encoding="utf-8").replace("example.png", "my_photo.png"), encoding="utf-8")
        write_section(config, "overrides", {"reference_to_video": False})
        code, out, err = run_cli("apply", "--comfyui", str(comfy), "--yes", "--json")
        assert code == 0, err
        assert not api.exists() and ui.exists() == edited
        assert sorted(json.loads(out)["removed"]) == sorted(str(p) for p in ((api,) if edited else (ui, api)))
        assert (node / workflows.UI_DIR / (workflows.NAMES["t2v"] + ".json")).is_file()


def test_apply_with_a_preset_writes_it_to_the_overrides_and_says_whether_to_restart(installed, run_cli):
    """`h3kit apply --preset` (the panel's switch): config.yaml's overrides gain `preset:`, every other line kept;
    the pack's profile, workflows and cost model follow; the launch flags did not change, so no restart."""
    comfy, doc = installed
    node = Path(doc["node_dir"])
    config = locations().config_file
    config.write_text("# mine\noverrides:\n  steps: 7  # my steps\n", encoding="utf-8")
    code, out, err = run_cli("apply", "--comfyui", str(comfy), "--preset", "fast", "--yes", "--json")
    assert code == 0, err
    applied = json.loads(out)
    assert applied["restart_needed"] is False and "no restart" in applied["restart_why"]
    text = config.read_text(encoding="utf-8")
    assert text.startswith("# mine\n") and "steps: 7  # my steps" in text and "preset: fast" in text
    profile = json.loads((node / "h3kit_profile.json").read_text())
    assert profile["settings"]["preset"] == "fast" and profile["settings"]["steps"] == 7
    assert profile["h3kit"]["command"][1:] == ["-m", "h3kit"] and profile["h3kit"]["comfyui"] == str(comfy)
    cost = json.loads((node / "h3kit_cost.json").read_text())
    assert cost["schema"] == "h3kit.cost/1" and cost["defaults"]["steps"] == 7

    code, out, err = run_cli("apply", "--comfyui", str(comfy), "--preset", "auto", "--yes", "--json")
    assert code == 0, err
    assert "preset" not in config.read_text(encoding="utf-8") and "steps: 7" in config.read_text(encoding="utf-8")
    code, out, err = run_cli("apply", "--comfyui", str(comfy), "--preset", "turbo", "--yes")
    assert code == 2 and "no preset named 'turbo'" in err and "Traceback" not in err


def test_apply_says_to_restart_when_the_launch_flags_change(installed, run_cli):
    comfy, _ = installed
    _use_profile("nvidia-8gb")
    code, out, err = run_cli("apply", "--comfyui", str(comfy), "--yes", "--json")
    assert code == 0, err
    applied = json.loads(out)
    assert applied["restart_needed"] is (applied["launcher"] != {} and "launch flags changed" in applied["restart_why"])
    assert applied["restart_why"].endswith(".")
