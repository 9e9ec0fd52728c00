"""`--comfyui PATH` learns the app that made the folder and takes its launch arguments exactly as the search
with no --comfyui does, so a Desktop 2.0 install's shared model folder counts the same both ways; and the
values in an extra_model_paths.yaml that ComfyUI cannot start with (base_path: ~, ...) are named with the fix."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from h3kit.cli.context import Context
from h3kit.comfyui import apps, locate
from h3kit.comfyui import model_folders as mf
from test_locate_apps import _build  # the recorded layouts' builder

FP = str(Path(__file__).parents[1] / "fixtures" / "fingerprints" / "nvidia-rtx4090-24gb-64gb.json")
LAYOUTS = Path(__file__).parents[1] / "fixtures" / "apps"


def _comfy_tree(comfy: Path) -> Path:
    for sub in ("comfy", "custom_nodes", "models/diffusion_models"):
        (comfy / sub).mkdir(parents=True, exist_ok=True)
    (comfy / "main.py").write_text("# stand-in\n")
    (comfy / "nodes.py").write_text("")
    return comfy


def _desktop2_linux(home: Path) -> tuple[Path, Path]:
    """Desktop 2.0 on Linux: one install in ComfyUI-Installs, the models shared in ComfyUI-Shared (is_default)."""
    data = home / ".local" / "share" / "Comfy-Desktop"
    comfy = _comfy_tree(data / "ComfyUI-Installs" / "Video" / "ComfyUI")
    shared = data / "ComfyUI-Shared"
    (shared / "models").mkdir(parents=True)
    (shared / "extra_models_config.yaml").write_text(
        f"comfy_desktop:\n  base_path: {shared / 'models'}\n  is_default: true\n"
        "  diffusion_models: diffusion_models\n  text_encoders: text_encoders\n  vae: vae\n", encoding="utf-8")
    return comfy, shared / "models"


def _put_planned_files(run_cli, folder: Path) -> list[str]:
    code, out, err = run_cli("models", "plan", "--fingerprint", FP, "--json")
    assert code == 0, err
    names = []
    for f in json.loads(out)["files"]:
        (folder / f["folder"]).mkdir(parents=True, exist_ok=True)
        with open(folder / f["folder"] / f["name"], "wb") as fh:
            fh.truncate(f["exact_bytes"] or f["bytes"])
        names.append(f["name"])
    return names


def test_desktop2_shared_files_count_the_same_with_and_without_comfyui(tmp_path, run_cli, monkeypatch):
    home = tmp_path / "home ü"
    comfy, shared = _desktop2_linux(home)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("COMFYUI_PATH", raising=False)
    monkeypatch.delenv("XDG_DATA_HOME", raising=False)
    monkeypatch.chdir(tmp_path)
    names = _put_planned_files(run_cli, shared)
    answers = {}
    for how, extra in (("search", ()), ("--comfyui", ("--comfyui", str(comfy))),
                       ("--comfyui via a link", ("--comfyui", str(tmp_path / "link")))):
        if how.endswith("link"):
            os.symlink(comfy, tmp_path / "link")
        code, out, err = run_cli("models", "status", "--fingerprint", FP, "--json", *extra)
        assert code == 0, err
        answers[how] = {r["name"]: (r["state"], r.get("shared")) for r in json.loads(out)["files"]}
    assert answers["search"] == {n: ("present", True) for n in names}, answers["search"]
    assert answers["--comfyui"] == answers["search"], answers
    assert answers["--comfyui via a link"] == answers["search"], answers


@pytest.mark.parametrize("layout", sorted(p.name for p in LAYOUTS.glob("*.json")))
def test_an_explicit_path_gets_the_searchs_app_and_launch_arguments(tmp_path, layout):
    home = tmp_path / "home"
    doc = _build(layout, home)
    kw = dict(environ=doc["environ"], cwd=tmp_path, home=home, system=doc["system"])
    searched = locate.find(None, None, Context(json=True), need_write=False, **kw)
    os.symlink(searched.path, tmp_path / "another spelling")
    for given in (searched.path, tmp_path / "another spelling", searched.path / "custom_nodes" / ".."):
        explicit = locate.find(str(given), None, Context(json=True), need_write=False, **kw)
        assert (explicit.app, explicit.launch_args, explicit.code_dir) == \
            (searched.app, searched.launch_args, searched.code_dir), given
        assert explicit.python == searched.python


def test_an_app_install_no_finder_reaches_is_told_by_its_place(tmp_path):
    """Installs on another drive: nothing under this home names them, yet the folder's place says which app."""
    drive, home = tmp_path / "D", tmp_path / "empty home"
    home.mkdir()
    desktop = _comfy_tree(drive / "Comfy-Desktop" / "ComfyUI-Installs" / "Video" / "ComfyUI")
    shared_cfg = drive / "Comfy-Desktop" / "ComfyUI-Shared" / "extra_models_config.yaml"
    shared_cfg.parent.mkdir(parents=True)
    shared_cfg.write_text("a:\n  base_path: /x\n  vae: vae\n")
    sm_data = drive / "SM" / "Data"
    sm = _comfy_tree(sm_data / "Packages" / "ComfyUI")
    (sm_data / "settings.json").write_text(json.dumps({"InstalledPackages": [
        {"DisplayName": "ComfyUI", "PackageName": "ComfyUI", "LibraryPath": "Packages/ComfyUI",
         "LaunchArgs": [{"Name": "--reserve-vram", "OptionValue": "1.5"}]}]}))
    pinokio = _comfy_tree(drive / "pinokio" / "api" / "comfy.git" / "app")
    kw = dict(environ={}, cwd=tmp_path, home=home, system="linux")
    expect = {desktop: (apps.DESKTOP2, ("--extra-model-paths-config", str(shared_cfg))),
              sm: (apps.STABILITY_MATRIX, ("--reserve-vram", "1.5")), pinokio: (apps.PINOKIO, ())}
    for path, (app, args) in expect.items():
        install = locate.find(str(path), None, Context(json=True), need_write=False, **kw)
        assert (install.app, install.launch_args) == (app, args), path
    plain = _comfy_tree(drive / "Packages" / "ComfyUI")  # Packages/ with no settings.json beside: no app
    assert locate.find(str(plain), None, Context(json=True), need_write=False, **kw).app is None


@pytest.mark.parametrize("text, words", [
    ("desk:\n  base_path: ~\n  vae: vae\n", "section 'desk' has base_path: ~ (null)"),
    ("desk:\n  base_path: [a, b]\n  vae: vae\n", "section 'desk' has base_path: a list"),
    ("desk:\n  base_path: 5\n  vae: vae\n", "section 'desk' has base_path: 5 (a number)"),
    ("desk: 5\n", "section 'desk' is 5 (a number), not a mapping"),
    ("desk:\n  base_path: /x\n  vae:\n", "section 'desk' has vae: ~ (null), not a path"),
    ("desk:\n  base_path: /x\n  vae: [a, b]\n", "section 'desk' has vae: a list, not a path"),
    ("ok:\n  vae: v\ndesk:\n  is_default: true\n  loras: 7\n", "section 'desk' has loras: 7 (a number)"),
])
def test_values_comfyui_cannot_start_with_are_named_with_the_fix(tmp_path, run_cli, text, words):
    comfy = _comfy_tree(tmp_path / "ComfyUI")
    (comfy / "extra_model_paths.yaml").write_text(text, encoding="utf-8")
    assert words in (mf.yaml_problem(text) or ""), mf.yaml_problem(text)
    folders = mf.h3kit_reading(comfy / "models", mf.config_files(comfy, ()), ["vae", "loras"])
    assert words in (folders.problem or "") and "ComfyUI stops at start" in folders.problem
    assert ("delete" in folders.problem or "write" in folders.problem)
    code, out, err = run_cli("doctor", "--comfyui", str(comfy), "--fingerprint", FP, "--json")
    assert "Traceback" not in err
    finding = next(f for f in json.loads(out)["findings"] if f["check"] == "model folders")
    assert finding["status"] == "fail" and words in finding["message"], finding


@pytest.mark.parametrize("text", ["a:\n  base_path: /x\n  is_default: true\n  vae: |\n    vae\n    more\n",
                                  "a:\nb: []\nc: ''\n", "a:\n  base_path: ''\n  vae: v\n"])
def test_values_comfyui_starts_with_are_no_problem(text):
    assert mf.yaml_problem(text) is None
