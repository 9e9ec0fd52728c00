"""Finding ComfyUI and its Python, reading what that Python holds, torch-fit warnings."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from fixtures.comfyui import comfy_tree
from h3kit.comfyui import inspect as comfy_inspect
from h3kit.comfyui import locate as comfyui_locate
from h3kit.cli.context import Context
from h3kit.core.errors import BadInput, NotReady
from h3kit.data.fingerprint import Fingerprint

FIXTURES = Path(__file__).parents[1] / "fixtures" / "comfyui"

NO_ENV: dict = {}


@pytest.fixture
def home(tmp_path) -> Path:
    h = tmp_path / "home"
    h.mkdir()
    return h


class Cfg:
    def __init__(self, comfyui_path=None, comfyui_python=None):
        self.comfyui_path = comfyui_path
        self.comfyui_python = comfyui_python
        self.overrides = {}


def test_search_order_explicit_env_config(tmp_path, home):
    a, b, c = (comfy_tree.make_comfyui(tmp_path / n) for n in "abc")
    env = {"COMFYUI_PATH": str(b)}
    kw = dict(cwd=tmp_path, home=home, system="linux")
    assert comfyui_locate.search(str(a), str(c), environ=env, **kw).source == "--comfyui"
    r = comfyui_locate.search(None, str(c), environ=env, **kw)
    assert (r.chosen, r.source) == (b, "COMFYUI_PATH")
    r = comfyui_locate.search(None, str(c), environ=NO_ENV, **kw)
    assert (r.chosen, r.source) == (c, "config comfyui_path")


def test_comfy_cli_workspace_then_cwd(tmp_path, home):
    ws = comfy_tree.make_comfyui(tmp_path / "ws")
    cfg = home / ".config" / "comfy-cli" / "config.ini"
    cfg.parent.mkdir(parents=True)
    cfg.write_text(f"[DEFAULT]\nrecent_workspace = {ws}\n", encoding="utf-8")
    here = comfy_tree.make_comfyui(tmp_path / "here")
    r = comfyui_locate.search(None, None, environ=NO_ENV, cwd=here / "custom_nodes", home=home, system="linux")
    assert (r.chosen, r.source) == (ws, "comfy-cli workspace")
    cfg.unlink()
    r = comfyui_locate.search(None, None, environ=NO_ENV, cwd=here / "custom_nodes", home=home, system="linux")
    assert (r.chosen, r.source) == (here, "current directory")


def test_parse_comfy_cli_config_recorded():
    text = (FIXTURES / "comfy-cli-config.ini").read_text(encoding="utf-8")
    assert comfyui_locate.parse_comfy_cli_config(text) == ["/home/user/ComfyUI-recent", "/home/user/comfy/ComfyUI"]
    assert comfyui_locate.parse_comfy_cli_config("not an ini [[[") == []


def test_usual_folders_portable_and_desktop(tmp_path, home):
    portable_root = home / "Desktop"
    comfy = comfy_tree.make_comfyui(portable_root, layout="portable")
    r = comfyui_locate.search(None, None, environ=NO_ENV, cwd=tmp_path, home=home, system="windows")
    assert (r.chosen, r.source) == (comfy, "usual folder")
    base = home / "Documents" / "ComfyDesktop"
    (base / "custom_nodes").mkdir(parents=True)
    (base / "models").mkdir()
    cfgdir = home / "AppData" / "Roaming" / "ComfyUI"
    cfgdir.mkdir(parents=True)
    (cfgdir / "config.json").write_text('{"basePath": "%s"}' % base.as_posix(), encoding="utf-8")
    r = comfyui_locate.search(None, None, environ=NO_ENV, cwd=tmp_path, home=home, system="windows")
    assert r.chosen is None and set(r.candidates) == {comfy, base}
    assert comfyui_locate.detect_layout(comfy) == "portable" and comfyui_locate.detect_layout(base) == "desktop"


def test_several_found_yes_takes_most_recent(tmp_path, home, capsys):
    old = comfy_tree.make_comfyui(home / "ComfyUI")
    new = comfy_tree.make_comfyui(home / "comfy" / "ComfyUI")
    past = time.time() - 86400
    for p in (old, old / "user", old / "output", old / "custom_nodes"):
        os.utime(p, (past, past))
    kw = dict(environ=NO_ENV, cwd=tmp_path, home=home, system="linux")
    found = comfyui_locate.find(None, None, Context(yes=True), **kw)
    assert found.path == new
    assert "most recently used" in capsys.readouterr().err
    with pytest.raises(BadInput, match="Several ComfyUI folders"):
        comfyui_locate.find(None, None, Context(yes=False, json=True), **kw)


def test_none_found_names_the_flag(tmp_path, home):
    with pytest.raises(NotReady) as exc:
        comfyui_locate.find(None, None, Context(yes=True), environ=NO_ENV, cwd=tmp_path, home=home, system="linux")
    assert "--comfyui" in exc.value.fix


def test_bad_paths_each_one_sentence(tmp_path):
    f = tmp_path / "file.txt"
    f.write_text("x")
    with pytest.raises(BadInput, match="does not exist"):
        comfyui_locate.check_dir(tmp_path / "nope", need_write=True)
    with pytest.raises(BadInput, match="is a file"):
        comfyui_locate.check_dir(f, need_write=True)
    with pytest.raises(BadInput, match="does not look like ComfyUI"):
        comfyui_locate.check_dir(tmp_path, need_write=True)
    comfy = comfy_tree.make_comfyui(tmp_path / "c")
    (comfy / "custom_nodes" / "websocket_image_save.py").unlink()
    (comfy / "custom_nodes").rmdir()
    with pytest.raises(BadInput, match="no custom_nodes folder"):
        comfyui_locate.check_dir(comfy, need_write=True)


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="permission bits do not bind root")
def test_read_only_and_unreadable(tmp_path):
    comfy = comfy_tree.make_comfyui(tmp_path / "c")
    (comfy / "custom_nodes").chmod(0o555)
    try:
        with pytest.raises(BadInput, match="read-only"):
            comfyui_locate.check_dir(comfy, need_write=True)
        comfyui_locate.check_dir(comfy, need_write=False)
    finally:
        (comfy / "custom_nodes").chmod(0o755)
    comfy.chmod(0o000)
    try:
        with pytest.raises(BadInput, match="not readable"):
            comfyui_locate.check_dir(comfy, need_write=False)
    finally:
        comfy.chmod(0o755)


def test_find_python_order(tmp_path):
    portable = comfy_tree.make_comfyui(tmp_path / "p", layout="portable")
    inst = comfyui_locate.ComfyInstall(portable, "test", "portable")
    assert comfyui_locate.find_python(inst)[1] == "portable python_embeded"
    plain = comfy_tree.make_comfyui(tmp_path / "q")
    inst = comfyui_locate.ComfyInstall(plain, "test")
    assert comfyui_locate.find_python(inst) == (plain / "venv" / "bin" / "python", "venv inside ComfyUI")
    (plain / "venv" / "bin" / "python").unlink()
    assert comfyui_locate.find_python(inst, Cfg(comfyui_python="/opt/py/bin/python3"))[1] == "config comfyui_python"
    assert comfyui_locate.find_python(inst) == (None, "")


def test_comfyui_python_from_the_config_file(tmp_path, h3kit_home):
    from h3kit.data.config import load
    from h3kit.core.paths import locations

    comfy = comfy_tree.make_comfyui(tmp_path / "q")
    (comfy / "venv" / "bin" / "python").unlink()
    loc = locations()
    loc.config_file.write_text(f"profile: auto\ncomfyui_path: {comfy}\ncomfyui_python: /opt/py ü/bin/python3\n", encoding="utf-8")
    found = comfyui_locate.find(None, load(loc), Context(yes=True))
    assert (found.path, found.source) == (comfy, "config comfyui_path")
    assert (str(found.python), found.python_source) == ("/opt/py ü/bin/python3", "config comfyui_python")


def test_parse_inspect_recorded():
    info = comfy_inspect.parse_inspect_output("noise from a sitecustomize\n" + (FIXTURES / "inspect-linux-cu130.txt").read_text())
    assert info["torch"] == "2.14.1+cu130" and info["torch_build"] == "cuda" and info["python_version"] == "3.11.7"
    assert comfy_inspect.parse_inspect_output("Traceback (most recent call last):") is None
    assert comfy_inspect.torch_build({"torch": "2.5.0+rocm6.2", "torch_hip": "6.2.4", "torch_cuda": None}) == "rocm"
    assert comfy_inspect.torch_build({"torch": "2.5.0", "mps_built": True, "system": "darwin"}) == "mps"
    assert comfy_inspect.torch_build({"torch": None}) is None


def test_inspect_runs_the_trees_python(tmp_path):
    comfy = comfy_tree.make_comfyui(tmp_path / "with space ü")
    inst = comfyui_locate.find(str(comfy), None, Context(yes=True))
    info = comfyui_locate.inspect(inst)
    assert info["torch"] == "2.5.1+cpu" and info["torch_build"] == "cpu" and isinstance(info["packages"], dict)
    assert info["comfyui_version"] == "0.33.0"
    assert info["python_version"] == ".".join(map(str, sys.version_info[:3]))


def test_python_that_does_not_start(tmp_path):
    comfy = comfy_tree.make_comfyui(tmp_path / "c")
    comfy_tree.broken_python(comfy)
    inst = comfyui_locate.find(str(comfy), None, Context(yes=True))
    with pytest.raises(NotReady, match="does not start"):
        comfyui_locate.inspect(inst)


NVIDIA_FP = Fingerprint.from_json({"gpus": [{"vendor": "nvidia", "name": "RTX 3060", "cuda_driver_version": "12.4"}],
                                   "rosetta": False})


def test_torch_fit_findings():
    cpu = {"torch": "2.5.1+cpu", "torch_build": "cpu", "python": "/c/py"}
    [f] = comfy_inspect.torch_fit_findings(NVIDIA_FP, cpu)
    assert f["status"] == "fail" and "CPU-only" in f["message"] and "whl/cu124" in f["fix"] and "/c/py" in f["fix"]
    newer = {"torch": "2.9.0+cu130", "torch_build": "cuda", "torch_cuda": "13.0"}
    [f] = comfy_inspect.torch_fit_findings(NVIDIA_FP, newer)
    assert f["status"] == "fail" and "CUDA 13.0" in f["message"] and "12.4" in f["message"]
    apple = Fingerprint.from_json({"gpus": [{"vendor": "apple", "name": "M2"}], "rosetta": True})
    [f] = comfy_inspect.torch_fit_findings(apple, {"torch": "2.5", "torch_build": "cpu", "machine": "x86_64", "system": "darwin"})
    assert f["check"] == "python.arch" and "Rosetta" in f["message"]
    [f] = comfy_inspect.torch_fit_findings(Fingerprint(), cpu)
    assert f["status"] == "ok"
    [f] = comfy_inspect.torch_fit_findings(NVIDIA_FP, {"torch": None, "torch_error": "ModuleNotFoundError"})
    assert f["status"] == "fail"
