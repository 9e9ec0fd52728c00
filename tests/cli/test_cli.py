"""The CLI frame: every contract command is listed, flags go anywhere, errors map to exit codes."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from h3kit.cli import COMMANDS

CONTRACT_COMMANDS = {"fingerprint", "plan", "profile", "build", "install", "apply", "calibrate", "doctor", "models", "uninstall"}
ADDED_COMMANDS = {"update", "rollback", "history"}  # issue 43: keeping H3 working when ComfyUI changes


def test_every_contract_command_is_listed():
    proc = subprocess.run([sys.executable, "-m", "h3kit", "--help"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0
    for name in CONTRACT_COMMANDS:
        assert f"\n    {name}" in proc.stdout, name
    assert set(COMMANDS) == CONTRACT_COMMANDS | ADDED_COMMANDS


def test_version(h3kit_exe):
    from h3kit import __version__

    proc = subprocess.run(h3kit_exe + ["--version"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0
    assert proc.stdout.strip() == f"h3kit {__version__}"


def test_unknown_flag_is_exit_2_with_one_sentence(run_cli):
    code, out, err = run_cli("--no-such-flag")
    assert code == 2
    assert "Traceback" not in err
    assert err.startswith("error: ")


@pytest.mark.parametrize("position", ["before", "after"])
def test_json_flag_in_either_position(run_cli, position):
    argv = ["--json", "profile", "bogus-action"] if position == "before" else ["profile", "bogus-action", "--json"]
    code, out, err = run_cli(*argv)
    assert code == 2
    doc = json.loads(out)
    assert doc["exit_code"] == 2 and "invalid choice" in doc["error"]


@pytest.mark.slow
def test_every_command_has_help(h3kit_exe):
    for name in COMMANDS:
        proc = subprocess.run(h3kit_exe + [name, "--help"], capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, name
        assert "--json" in proc.stdout


def test_internal_error_is_exit_1_with_log_path(run_cli, monkeypatch, h3kit_home):
    import h3kit.cli.fingerprint as fp

    def boom(args, ctx):
        raise RuntimeError("synthetic bug")

    monkeypatch.setattr(fp, "run", boom)
    code, out, err = run_cli("fingerprint")
    assert code == 1
    assert "synthetic bug" in err and "Traceback" not in err
    log = h3kit_home / "state" / "logs" / "h3kit.log"
    assert f"log: {log}" in err
    assert "Traceback" in log.read_text()
