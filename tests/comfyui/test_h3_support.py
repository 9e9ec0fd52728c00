"""Can this ComfyUI run H3: the tree check, the report from its Python, the sentences, and install's exit."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from fixtures.comfyui import comfy_tree
from h3kit.comfyui import h3_support, locate
from h3kit.data import catalog as catalog_mod

pytestmark = pytest.mark.native  # installs: the session's native library, not a compile per test

CAT = catalog_mod.load()


class _Install:
    def __init__(self, path, layout="plain", python=sys.executable):
        self.path, self.layout, self.python = Path(path), layout, python


def test_the_catalog_names_0_30_as_the_first_release_with_h3():
    minimum, need = h3_support.requirements(CAT)
    assert minimum == "0.30.0"
    assert "comfy_extras/nodes_minimax_h3.py" in need.files
    assert {m.import_name for m in need.modules} >= {"torchaudio", "av", "comfy_kitchen", "comfy_aimdo"}


def test_a_0_8_0_tree_is_below_h3_and_the_sentence_names_the_release(tmp_path):
    comfy = comfy_tree.make_comfyui(tmp_path / "old", h3=False)
    support = h3_support.check(_Install(comfy), CAT, locate.run_python)
    assert not support.tree_ready and not support.python_checked  # no point asking its Python
    assert "ComfyUI 0.8.0 cannot run MiniMax H3" in h3_support.problem(support)
    assert "0.30.0" in h3_support.problem(support)
    assert "--new-comfyui" in h3_support.fix(support, _Install(comfy), CAT)


def test_a_version_bump_without_h3_files_is_not_enough(tmp_path):
    comfy = comfy_tree.make_comfyui(tmp_path / "fork", h3=True)
    (comfy / "comfy_extras" / "nodes_minimax_h3.py").unlink()
    support = h3_support.check_tree(comfy, CAT)
    assert support.version == "0.33.0" and support.missing_files == ["comfy_extras/nodes_minimax_h3.py"]
    assert not support.ready


def test_an_h3_tree_with_its_modules_is_ready(tmp_path):
    comfy = comfy_tree.make_comfyui(tmp_path / "new")
    support = h3_support.check(locate.ComfyInstall(comfy, "test", "plain", python=comfy / "venv" / "bin" / "python"),
                               CAT, locate.run_python)
    assert support.python_checked and support.ready, support.to_json()
    assert h3_support.finding(support, _Install(comfy), CAT)["status"] == "ok"


def test_missing_torchaudio_and_encoder_name_the_pip_command(tmp_path):
    report = "noise\nH3KIT-H3 " + json.dumps({
        "modules": {"torchaudio": {"ok": False, "error": "ModuleNotFoundError: No module named 'torchaudio'"},
                    "av": {"ok": True, "version": "18.1.0"}, "comfy_kitchen": {"ok": True, "version": None},
                    "comfy_aimdo": {"ok": True, "version": "0.4.13"}},
        "encoders": {"h264": False, "aac": True}})
    support = h3_support.add_python_report(h3_support.H3Support("0.33.0", "0.31.0"), report, CAT)
    text = h3_support.problem(support)
    assert "torchaudio (ModuleNotFoundError" in text and "PyAV without the h264 encoder" in text
    fix = h3_support.fix(support, _Install(tmp_path, python="/opt/py/python"), CAT)
    assert fix == '"/opt/py/python" -m pip install "torchaudio" "av>=16"'


def test_an_old_pyav_counts_as_missing():
    report = "H3KIT-H3 " + json.dumps({"modules": {"torchaudio": {"ok": True}, "av": {"ok": True, "version": "14.2.0"},
                                                  "comfy_kitchen": {"ok": True}, "comfy_aimdo": {"ok": True}},
                                      "encoders": {"h264": True, "aac": True}})
    support = h3_support.add_python_report(h3_support.H3Support("0.33.0", "0.31.0"), report, CAT)
    assert [m["import"] for m in support.missing_modules] == ["av"] and "older than 16" in support.missing_modules[0]["error"]


def test_no_readable_report_is_not_taken_for_ready():
    support = h3_support.add_python_report(h3_support.H3Support("0.33.0", "0.31.0"), "Segmentation fault", CAT)
    assert not support.ready and not support.python_checked


@pytest.mark.parametrize("layout, words", [("portable", "update_comfyui.bat"), ("desktop", "Desktop app")])
def test_portable_and_desktop_get_their_own_update_action(tmp_path, layout, words):
    support = h3_support.H3Support("0.8.0", "0.31.0", ["comfy_extras/nodes_minimax_h3.py"])
    assert words in h3_support.fix(support, _Install(tmp_path, layout=layout), CAT)


def test_a_git_checkout_is_offered_doctor_fix(tmp_path):
    (tmp_path / ".git").mkdir()
    support = h3_support.H3Support("0.8.0", "0.31.0", ["comfy_extras/nodes_minimax_h3.py"])
    assert "h3kit doctor --fix" in h3_support.fix(support, _Install(tmp_path), CAT)


@pytest.mark.parametrize("version, ready", [("0.30.0", True), ("0.29.0", False)])
def test_0_30_0_is_the_first_release_accepted(tmp_path, version, ready):
    comfy = comfy_tree.make_comfyui(tmp_path / version)
    (comfy / "comfyui_version.py").write_text(f'__version__ = "{version}"\n', encoding="utf-8")
    support = h3_support.check_tree(comfy, CAT)
    assert support.tree_ready is ready
    if not ready:
        assert h3_support.problem(support).startswith("ComfyUI 0.29.0 cannot run MiniMax H3")
        assert "arrived in ComfyUI 0.30.0" in h3_support.problem(support)


def test_doctor_fails_on_a_0_8_0_tree_naming_0_30(tmp_path, run_cli):
    comfy = comfy_tree.make_comfyui(tmp_path / "ComfyUI 0.8", h3=False)
    code, out, err = run_cli("doctor", "--comfyui", str(comfy), "--json")
    doc = json.loads(out)
    h3 = next(f for f in doc["findings"] if f["check"] == "comfyui.h3")
    assert code != 0 and h3["status"] == "fail" and "0.30.0" in h3["message"]


def test_install_into_0_8_0_deploys_verifies_fetches_nothing_and_exits_3(tmp_path, run_cli, monkeypatch):
    comfy = comfy_tree.make_comfyui(tmp_path / "ComfyUI 0.8", h3=False)
    fetched = []
    monkeypatch.setattr("h3kit.steps.install.ensure_models", lambda *a, **k: fetched.append(a) or {})
    before = comfy_tree.snapshot(comfy / "models")
    code, out, err = run_cli("install", "--comfyui", str(comfy), "--yes", "--skip-calibrate", "--json")
    assert code == 3, err
    assert "0.30.0" in err and "No model weights were downloaded" in err and "fix:" in err
    assert fetched == [] and comfy_tree.snapshot(comfy / "models") == before
    node = comfy / "custom_nodes" / "ComfyUI-h3kit"
    assert (node / "__init__.py").is_file() and (node / "example_workflows" / "h3kit_text_to_video.json").is_file()
