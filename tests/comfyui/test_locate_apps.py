"""Finding the ComfyUIs that apps made (h3kit.comfyui.apps through locate's search order), on recorded layouts
for Windows, macOS and Linux (tests/fixtures/apps, sources in SOURCES.md): each found with no --comfyui, with
the right Python, the arguments the app starts it with, and its version when several are listed."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from h3kit.cli.context import Context
from h3kit.comfyui import apps, locate
from h3kit.comfyui import model_folders as mf

LAYOUTS = Path(__file__).parents[1] / "fixtures" / "apps"


def _build(name: str, home: Path) -> dict:
    doc = json.loads((LAYOUTS / name).read_text(encoding="utf-8"))

    def fill(text):
        return text.replace("{home}", home.as_posix()) if isinstance(text, str) else text

    for rel, content in doc["files"].items():
        path = home / rel
        if content is None:
            path.mkdir(parents=True, exist_ok=True)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(fill(content), encoding="utf-8")
    for rel, target in doc.get("links", {}).items():
        (home / rel).parent.mkdir(parents=True, exist_ok=True)
        os.symlink(home / target, home / rel)
    doc["environ"] = {k: fill(v) for k, v in doc["environ"].items()}
    doc["expect"]["launch_args"] = [fill(a) for a in doc["expect"]["launch_args"]]
    return doc


@pytest.mark.parametrize("layout", sorted(p.name for p in LAYOUTS.glob("*.json")))
def test_each_recorded_layout_is_found_with_its_python(tmp_path, layout):
    home = tmp_path / "home ü"
    doc = _build(layout, home)
    expect = doc["expect"]
    kw = dict(environ=doc["environ"], cwd=tmp_path, home=home, system=doc["system"])
    result = locate.search(None, None, **kw)
    assert result.chosen == (home / expect["path"]).absolute(), (result.candidates, result.sources)
    assert result.sources[result.chosen].startswith(expect["app"])
    install = locate.find(None, None, Context(json=True), need_write=False, **kw)
    assert install.app == expect["app"] and install.python == home / expect["python"]
    assert list(install.launch_args) == expect["launch_args"]
    assert install.python_source == f"{expect['app']}'s Python"
    for gone in expect.get("not_found", []):
        assert (home / gone).absolute() not in result.candidates
    assert any(expect["app"] in place for place in locate.searched_places(home, doc["system"], doc["environ"]))
    if "searched" in expect:
        folders = mf.h3kit_reading(install.path / "models", mf.config_files(install.path, install.launch_args),
                                   list(expect["searched"]))
        for folder, rel in expect["searched"].items():
            assert home / rel in folders.search_list(folder)
            assert folders.search_list(folder)[0] == home / expect["search_first"][folder]


def test_several_apps_are_listed_with_source_and_version(tmp_path, capsys):
    home = tmp_path / "home"
    a = _build("pinokio-linux.json", home)
    _build("stability-matrix-config-linux.json", home)
    kw = dict(environ=a["environ"], cwd=tmp_path, home=home, system="linux")
    result = locate.search(None, None, **kw)
    assert result.chosen is None and len(result.candidates) == 2
    install = locate.find(None, None, Context(yes=True), need_write=False, **kw)
    listing = capsys.readouterr().err
    assert "Pinokio, from" in listing and "ComfyUI 0.34.2" in listing
    assert "Stability Matrix (ComfyUI), from" in listing and "ComfyUI 0.33.0" in listing
    assert install.app in (apps.PINOKIO, apps.STABILITY_MATRIX) and install.python is not None


def test_an_explicit_path_still_learns_which_app_made_it(tmp_path):
    home = tmp_path / "home"
    doc = _build("pinokio-linux.json", home)
    app_dir = home / "pinokio" / "api" / "comfy.git" / "app"
    install = locate.find(str(app_dir), None, Context(json=True), need_write=False, environ=doc["environ"],
                          cwd=tmp_path, home=home, system="linux")
    assert install.app == apps.PINOKIO and install.python == app_dir / "env" / "bin" / "python"


def test_stability_matrix_launch_args_as_a_command_line():
    items = [{"Name": "--reserve-vram", "Type": "String", "OptionValue": "1.5"},
             {"Name": "--cpu", "Type": "Bool", "OptionValue": True}, {"Name": "--highvram", "OptionValue": None},
             "junk", {"OptionValue": "x"}]
    assert apps.parse_sm_launch_args(items) == ("--reserve-vram", "1.5", "--cpu")
    assert apps.parse_sm_launch_args(None) == ()


def test_broken_app_files_find_nothing_and_never_raise(tmp_path):
    home = tmp_path / "home"
    (home / ".config" / "StabilityMatrix").mkdir(parents=True)
    (home / ".config" / "StabilityMatrix" / "settings.json").write_text("{not json", encoding="utf-8")
    (home / ".config" / "ComfyUI").mkdir(parents=True)
    (home / ".config" / "ComfyUI" / "config.json").write_text('["a list"]', encoding="utf-8")
    (home / ".pinokio").mkdir()
    (home / ".pinokio" / "config.json").write_text('{"home": 5}', encoding="utf-8")
    assert apps.all_installs(home, "linux", {}) == []
