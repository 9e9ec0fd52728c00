"""Issue 16 item 9 and the end of install: an earlier calibration survives --skip-calibrate, a hand-edited
profile is backed up by apply (and stays the user's), a re-install says what it moved, the start line is
quoted for the shell, and the plan's warnings come last."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from h3kit.comfyui import deploy
from h3kit.comfyui import manifest as mf
from h3kit.comfyui.journal import Journal
from h3kit.core.paths import locations
from h3kit.steps.next_steps import shell_quoted

pytestmark = pytest.mark.native  # installs: the session's native library, not a compile per test

FIXTURES = Path(__file__).parents[1] / "fixtures"
_spec = importlib.util.spec_from_file_location("comfy_tree", FIXTURES / "comfyui" / "comfy_tree.py")
comfy_tree = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(comfy_tree)

INSTALL = ("install", "--yes", "--skip-calibrate", "--no-models")
GOLDEN = json.loads((FIXTURES / "plans" / "nvidia-rtx4060-8gb-16gb.json").read_text(encoding="utf-8"))["settings"]


@pytest.fixture
def comfy(tmp_path) -> Path:
    return comfy_tree.make_comfyui(tmp_path / "ComfyUI")


def _install(run_cli, comfy: Path, *extra: str) -> tuple[str, str]:
    code, out, err = run_cli(*INSTALL, "--comfyui", str(comfy), *extra)
    assert code == 0, err
    return out, err


def test_skip_calibrate_keeps_the_packs_earlier_calibration(comfy, run_cli):
    _install(run_cli, comfy)
    summary = comfy / "custom_nodes" / "ComfyUI-h3kit" / deploy.CALIBRATION_FILE
    record = mf.load_for(locations().state_dir, comfy)
    # What h3kit.calibrate.pack_summary leaves after a calibration: a recorded file in the pack.
    Journal(record).write(summary, json.dumps({"schema": "h3kit.calibration-summary/1", "lines": ["12 s/step"]}),
                      "node-pack")
    record.save()
    text = summary.read_text()
    _install(run_cli, comfy)  # --skip-calibrate: nothing new to put there
    assert summary.read_text() == text
    record = mf.load_for(locations().state_dir, comfy)
    assert record.still_ours(record.find(summary))


def test_apply_backs_up_a_hand_edited_profile_and_uninstall_leaves_the_backup(comfy, run_cli, planned):
    planned.update(profile="nvidia-16gb", settings=dict(GOLDEN, vae_tile_size=256))
    before = comfy_tree.snapshot(comfy)
    _install(run_cli, comfy)
    profile = comfy / "custom_nodes" / "ComfyUI-h3kit" / deploy.PROFILE_FILE
    edited = profile.read_text().replace('"vae_tile_size": 256', '"vae_tile_size": 320')
    profile.write_text(edited)
    planned["settings"] = dict(GOLDEN, vae_tile_size=192)
    code, out, err = run_cli("apply", "--comfyui", str(comfy))
    assert code == 0, err
    assert "Your edited h3kit_profile.json was moved out of the way first (yours, kept): " in out
    backup = Path(out.split("(yours, kept): ")[1].splitlines()[0])
    assert backup.read_text() == edited and str(locations().state_dir / "backups") in str(backup)
    assert json.loads(profile.read_text())["settings"]["vae_tile_size"] == 192
    record = mf.load_for(locations().state_dir, comfy)
    assert record.find(backup).role == mf.BACKUP_ROLE and record.still_ours(record.find(profile))
    code, out, err = run_cli("uninstall", "--comfyui", str(comfy), "--yes")
    assert code == 0, err
    assert f"kept: {backup} (your own version" in out and "moved to backup" not in out
    assert backup.read_text() == edited and comfy_tree.snapshot(comfy) == before
    assert mf.find_record(locations().state_dir, comfy) is None  # a backup alone does not keep the record


def test_a_reinstall_says_which_edited_files_it_moved(comfy, run_cli):
    _install(run_cli, comfy)
    logic = comfy / "custom_nodes" / "ComfyUI-h3kit" / "h3kit_decode" / "logic.py"
    logic.write_text("# my fix\n")
    out, err = _install(run_cli, comfy)
    [line] = [x for x in out.splitlines() if "edited copy" in x]
    assert line.startswith("note: moved your edited copy of logic.py out of the way")
    assert Path(line.split("it is in ")[1]).read_text() == "# my fix\n"


def test_the_start_line_is_one_word_for_the_platforms_shell():
    assert shell_quoted("/home/zoë/Comfy UI/run_h3kit.sh", windows=False) == '"/home/zoë/Comfy UI/run_h3kit.sh"'
    weird = "/home/me/$HOME `x` \"q\"/run_h3kit.sh"
    quoted = shell_quoted(weird, windows=False)
    echoed = subprocess.run(["sh", "-c", f"printf %s {quoted}"], capture_output=True, text=True, timeout=30)
    assert echoed.stdout == weird
    assert shell_quoted(r"C:\Users\Zoë\ComfyUI\run_h3kit.bat", windows=True) == r'"C:\Users\Zoë\ComfyUI\run_h3kit.bat"'


def test_the_plans_warnings_are_printed_last_after_verified(comfy, tmp_path, h3kit_home):
    fingerprint = FIXTURES / "fingerprints" / "nvidia-rtx4060-8gb-16gb.json"
    # a clip target no preset meets: the plan warns how long a clip takes
    (h3kit_home / "config.yaml").write_text("overrides:\n  target_minutes: 0.2\n")
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}  # the order a terminal shows
    from h3kit.comfyui.inspect import comfyui_version

    # planned for this ComfyUI's version, as install plans: a release's known problems are warnings too
    plan = subprocess.run([sys.executable, "-m", "h3kit", "plan", "--fingerprint", str(fingerprint), "--json",
                           "--comfyui-version", comfyui_version(comfy)], capture_output=True, text=True, timeout=120,
                          env=env)
    warnings = json.loads(plan.stdout)["warnings"]
    assert warnings, "this fingerprint's plan has warnings to show"
    done = subprocess.run([sys.executable, "-m", "h3kit", *INSTALL, "--comfyui", str(comfy), "--fingerprint",
                           str(fingerprint)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=300, env=env)
    assert done.returncode == 0, done.stdout[-2000:]
    lines = done.stdout.rstrip("\n").splitlines()
    assert lines[-len(warnings):] == [f"warning: {w}" for w in warnings]
    verified = max(i for i, x in enumerate(lines) if "verified" in x)
    assert verified < len(lines) - len(warnings)
