"""Files other programs keep, read bounded (h3kit.core.bounded_read): the apps' settings (Desktop 2.0's
installations.json, the legacy Desktop's config.json, Stability Matrix's settings.json, Pinokio's config.json),
comfy-cli's config.ini and a Hugging Face cache's refs/main. A FIFO, a link to /dev/zero, JSON nested 200,000
deep or bytes that are not UTF-8 there are skipped with one logged line naming the file and why: no hang, no
growing memory, no RecursionError or UnicodeDecodeError, and `doctor --comfyui` does not end in exit 1."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import pytest

from h3kit.comfyui import apps, locate
from h3kit.models import local
from within import within

pytestmark = pytest.mark.skipif(os.name != "posix", reason="FIFOs and /dev/zero are POSIX")

APP_FILES = {  # what each app reads on Linux, under the home folder
    "Desktop 2.0": ".local/share/comfyui-desktop-2/installations.json",
    "legacy Desktop": ".config/ComfyUI/config.json",
    "Stability Matrix": ".config/StabilityMatrix/settings.json",
    "Stability Matrix library": ".config/StabilityMatrix/library.json",
    "Pinokio": ".pinokio/config.json",
}




def _hostile(path: Path, kind: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "dev-zero":
        path.symlink_to("/dev/zero")
    elif kind == "deep":
        path.write_text("[" * 200_000 + "]" * 200_000)
    else:
        path.write_bytes(b'{"basePath": "/home/caf\xe9"}')


@pytest.mark.parametrize("kind", ["fifo", "dev-zero", "deep", "latin-1"])
@pytest.mark.parametrize("app", sorted(APP_FILES))
def test_a_hostile_app_file_is_skipped_with_one_line(tmp_path, caplog, app, kind):
    home = tmp_path / "home"
    bad = home / APP_FILES[app]
    _hostile(bad, kind)
    with caplog.at_level(logging.WARNING, logger="h3kit"):
        assert within(5, apps.all_installs, home, "linux", {}) == []
    assert any(r.getMessage().startswith(f"skipped {bad}: ") for r in caplog.records), caplog.text


def test_the_other_apps_are_still_found_beside_a_hostile_file(tmp_path):
    home = tmp_path / "home"
    _hostile(home / APP_FILES["Desktop 2.0"], "fifo")
    app = home / "pinokio" / "api" / "comfy.git" / "app"
    (app / "custom_nodes").mkdir(parents=True)
    found = within(5, apps.all_installs, home, "linux", {})
    assert [(a.app, a.path) for a in found] == [(apps.PINOKIO, app)]


def _comfy(root: Path) -> Path:
    for sub in ("comfy", "custom_nodes", "models"):
        (root / sub).mkdir(parents=True)
    (root / "main.py").write_text("# stand-in\n")
    (root / "nodes.py").write_text("")
    return root


@pytest.mark.parametrize("kind", ["fifo", "dev-zero", "latin-1"])
def test_comfy_clis_config_that_cannot_be_read_is_passed_over(tmp_path, caplog, kind):
    home = tmp_path / "home"
    ini = locate.comfy_cli_config_file(home, "linux")
    _hostile(ini, kind)
    with caplog.at_level(logging.WARNING, logger="h3kit"):
        result = within(5, locate.search, None, None, environ={}, cwd=tmp_path, home=home, system="linux")
    assert result.chosen is None and result.candidates == []
    assert f"skipped {ini}: " in caplog.text
    # A readable one still names its workspace.
    os.remove(ini)
    comfy = _comfy(tmp_path / "ws")
    ini.write_text(f"[DEFAULT]\nrecent_workspace = {comfy}\n", encoding="utf-8")
    found = locate.search(None, None, environ={}, cwd=tmp_path, home=home, system="linux")
    assert (found.chosen, found.source) == (comfy, "comfy-cli workspace")


@pytest.mark.parametrize("kind", ["fifo", "dev-zero"])
def test_a_hugging_face_refs_main_that_never_ends_is_passed_over(tmp_path, kind):
    repo = tmp_path / "hub" / "models--Comfy-Org--MiniMax-H3"
    blob = repo / "blobs" / "0123abcd"
    blob.parent.mkdir(parents=True)
    blob.write_bytes(b"weights")
    for rev in ("aaaa", "bbbb"):
        (repo / "snapshots" / rev).mkdir(parents=True)
        (repo / "snapshots" / rev / "vae.safetensors").symlink_to(blob)
    _hostile(repo / "refs" / "main", kind)
    found = within(5, local.find_local, tmp_path / "hub", "vae.safetensors")
    assert found == repo / "snapshots" / "aaaa" / "vae.safetensors"  # neither is known as main: path order
    os.remove(repo / "refs" / "main")
    (repo / "refs" / "main").write_text("bbbb")
    assert local.find_local(tmp_path / "hub", "vae.safetensors") == repo / "snapshots" / "bbbb" / "vae.safetensors"


def test_doctor_with_installations_json_200000_deep_is_no_internal_error(tmp_path, monkeypatch, run_cli):
    home = tmp_path / "home"
    _hostile(home / APP_FILES["Desktop 2.0"], "deep")
    monkeypatch.setenv("HOME", str(home))
    for var in ("XDG_DATA_HOME", "XDG_CONFIG_HOME", "COMFYUI_PATH", "PINOKIO_HOME"):
        monkeypatch.delenv(var, raising=False)
    comfy = _comfy(tmp_path / "ComfyUI")
    code, out, err = run_cli("doctor", "--comfyui", str(comfy), "--json")
    assert code != 1, err
    assert "RecursionError" not in err and "internal error" not in err
    assert json.loads(out)["findings"]
    # the file it went on without is named on the screen, without -v (core.logs.skipped)
    (note,) = [line for line in err.splitlines() if line.startswith("note: skipped")]
    assert "installations.json" in note and "nested" in note
