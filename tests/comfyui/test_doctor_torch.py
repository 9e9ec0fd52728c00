"""`h3kit doctor` torch checks through the CLI: the acceptance case, --fix and --undo in a throwaway venv."""

from __future__ import annotations

import json
import shutil

import pytest

from comfy_setup_support import FP_4090, make_venv, pip_install
from h3kit.comfyui import setup as comfy_setup
from tests.fixtures.comfyui.comfy_tree import make_comfyui

pytestmark = pytest.mark.native  # installs: the session's native library, not a compile per test


def torch_finding(doc: dict) -> dict:
    found = [f for f in doc["findings"] if f["check"] == "torch.build"]
    assert len(found) == 1, doc["findings"]
    return found[0]


def test_doctor_json_reports_cpu_torch_under_the_4090_fingerprint(tmp_path, run_cli):
    comfy = make_comfyui(tmp_path / "ComfyUI")  # its torch answers 2.5.1+cpu
    code, out, err = run_cli("doctor", "--comfyui", str(comfy), "--fingerprint", str(FP_4090), "--json")
    doc = json.loads(out)
    assert code == 4
    f = torch_finding(doc)
    assert f["status"] == "fail"
    assert "2.5.1+cpu" in f["message"] and "cu130" in f["message"]
    assert f["index_url"] == "https://download.pytorch.org/whl/cu130"
    assert "torch==2.14.1 torchvision==0.29.1" in f["fix"] and f["fix"].endswith("--index-url https://download.pytorch.org/whl/cu130")
    assert f["fix"].startswith(f'"{comfy / "venv" / "bin" / "python"}" -m pip install --force-reinstall')


def test_doctor_bad_fingerprint_file_is_bad_input(tmp_path, run_cli):
    comfy = make_comfyui(tmp_path / "ComfyUI")
    code, _out, err = run_cli("doctor", "--comfyui", str(comfy), "--fingerprint", str(tmp_path / "none.json"))
    assert code == 2 and "does not exist" in err and "Traceback" not in err


@pytest.mark.slow
def test_doctor_fix_and_undo_through_the_cli(tmp_path, run_cli, wheelhouse, offline_pip, venv_template):
    python = make_venv(venv_template, tmp_path / "venv")
    pip_install(python, "torch==2.13.0+cpu", "torchvision==0.28.0+cpu", wheelhouse=wheelhouse)
    comfy = make_comfyui(tmp_path / "ComfyUI", python=python)
    shutil.rmtree(comfy / "torch")  # the tree's stand-in torch; the venv's own is the one under test
    # The tree links venv/bin/python to the venv's python; a link outside its venv would run as the base
    # interpreter (no pyvenv.cfg beside it), so name the real one.
    pick = ("--comfyui", str(comfy), "--comfyui-python", python)
    code, _out, err = run_cli("install", *pick, "--fingerprint", str(FP_4090), "--yes",
                              "--skip-calibrate", "--no-models")
    assert code == 0, err
    assert "WARNING" in err and "cu130" in err  # install warns about the torch build, doctor --fix repairs it

    code, out, err = run_cli("doctor", *pick, "--fingerprint", str(FP_4090), "--fix", "--yes", "--json")
    doc = json.loads(out)
    assert torch_finding(doc)["status"] == "ok", err
    assert any("torch reinstalled" in n for n in doc["notes"])
    assert comfy_setup.probe_torch(python)["packages"]["torch"] == "2.14.1+cu130"

    code, out, err = run_cli("doctor", *pick, "--fingerprint", str(FP_4090), "--json")
    assert torch_finding(json.loads(out))["status"] == "ok"

    code, out, err = run_cli("doctor", *pick, "--undo", "--yes", "--json")
    assert code == 0, err
    assert json.loads(out)["undo"]["restored"] == {"torch": "2.13.0+cpu", "torchvision": "0.28.0+cpu"}
    assert comfy_setup.probe_torch(python)["packages"] == {"torch": "2.13.0+cpu", "torchvision": "0.28.0+cpu"}

    code, out, err = run_cli("doctor", *pick, "--undo", "--yes")
    assert code == 2 and "no earlier torch to restore" in err


@pytest.mark.slow
def test_undo_after_a_fix_that_changed_nothing_does_nothing_and_says_so(tmp_path, run_cli, wheelhouse,
                                                                       venv_template, monkeypatch):
    """Issue 26 (8): --fix recorded the old torch, then pip failed (no wheels): torch is as it was, so --undo
    must not force-reinstall it and say "Restored"."""
    from comfy_setup_support import pip_only_from

    pip_only_from(wheelhouse, monkeypatch)
    python = make_venv(venv_template, tmp_path / "venv")
    pip_install(python, "torch==2.13.0+cpu", "torchvision==0.28.0+cpu", wheelhouse=wheelhouse)
    comfy = make_comfyui(tmp_path / "ComfyUI", python=python)
    shutil.rmtree(comfy / "torch")
    pick = ("--comfyui", str(comfy), "--comfyui-python", python)
    empty = tmp_path / "no-wheels"
    empty.mkdir()
    pip_only_from(empty, monkeypatch)  # every pip run fails: nothing to install from
    assert run_cli("install", *pick, "--fingerprint", str(FP_4090), "--yes", "--skip-calibrate", "--no-models")[0] == 0
    code, out, err = run_cli("doctor", *pick, "--fingerprint", str(FP_4090), "--fix", "--yes")
    assert code != 0
    before = comfy_setup.probe_torch(python)["packages"]
    assert before == {"torch": "2.13.0+cpu", "torchvision": "0.28.0+cpu"}

    code, out, err = run_cli("doctor", *pick, "--undo", "--yes")
    assert code == 0, err
    assert "Nothing to undo for torch" in out and "pip was not run" in out and "Restored" not in out, out
    assert comfy_setup.probe_torch(python)["packages"] == before
    code, out, err = run_cli("doctor", *pick, "--undo", "--yes")
    assert code == 2 and "no earlier torch to restore" in err  # that --fix is off the record now
