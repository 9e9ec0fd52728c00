"""Uninstall removes exactly what the record lists; the tree ends byte-identical to before install."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
from pathlib import Path

import pytest

from fixtures.comfyui import comfy_tree
from h3kit.comfyui import manifest as mf
from h3kit.core.paths import locations

pytestmark = pytest.mark.native  # installs: the session's native library, not a compile per test

FIXTURES = Path(__file__).parents[1] / "fixtures" / "comfyui"


def _install(run_cli, comfy: Path):
    code, out, err = run_cli("install", "--comfyui", str(comfy), "--yes", "--skip-calibrate", "--no-models", "--json")
    assert code == 0, err
    return json.loads(out)


@pytest.mark.slow
@pytest.mark.parametrize("layout", ["plain", "portable"])
def test_install_then_uninstall_is_byte_identical(tmp_path, run_cli, layout, monkeypatch):
    monkeypatch.setenv("H3KIT_HOME", str(tmp_path / "h3kit state ö"))  # h3kit's own paths odd too
    root = tmp_path / "Users" / "José Ñandú" / "AI stuff"
    comfy = comfy_tree.make_comfyui(root, layout=layout)
    before = comfy_tree.snapshot(root)
    doc = _install(run_cli, comfy)
    assert comfy_tree.snapshot(root) != before
    # ComfyUI running the pack writes byte code into it: uninstall must clear that too.
    pyc = Path(doc["node_dir"]) / "__pycache__"
    pyc.mkdir()
    (pyc / "__init__.cpython-311.pyc").write_bytes(b"\x00pyc")
    code, out, err = run_cli("uninstall", "--comfyui", str(comfy), "--yes", "--json")
    assert code == 0, err
    result = json.loads(out)
    assert result["backed_up"] == [] and comfy_tree.snapshot(root) == before
    assert not Path(doc["manifest"]).exists()


def test_changed_and_added_files_go_to_backup(tmp_path, run_cli, h3kit_home):
    comfy = comfy_tree.make_comfyui(tmp_path / "c")
    before = comfy_tree.snapshot(comfy)
    doc = _install(run_cli, comfy)
    node = Path(doc["node_dir"])
    (node / "h3kit_decode" / "logic.py").write_text("# my tweak\n")
    (node / "notes.txt").write_text("keep me")
    (node / "sub").mkdir()
    (node / "sub" / "deep.txt").write_text("deep")
    code, out, err = run_cli("uninstall", "--comfyui", str(comfy), "--yes", "--json")
    assert code == 0, err
    result = json.loads(out)
    backups = {Path(b["path"]).name: Path(b["backup"]) for b in result["backed_up"]}
    assert set(backups) == {"logic.py", "notes.txt", "sub"}
    assert backups["logic.py"].read_text() == "# my tweak\n"
    assert (backups["sub"] / "deep.txt").read_text() == "deep"
    assert str(Path(h3kit_home) / "state" / "backups") in str(backups["notes.txt"])
    assert comfy_tree.snapshot(comfy) == before


def test_symlink_inside_pack_is_never_followed(tmp_path, run_cli):
    comfy = comfy_tree.make_comfyui(tmp_path / "c")
    outside = tmp_path / "precious"
    outside.mkdir()
    (outside / "data.bin").write_bytes(b"do not delete")
    doc = _install(run_cli, comfy)
    node = Path(doc["node_dir"])
    os.symlink(outside, node / "link_out")
    (node / "h3kit_profile.json").unlink()
    os.symlink(outside / "data.bin", node / "h3kit_profile.json")  # a recorded file replaced by a link
    code, out, err = run_cli("uninstall", "--comfyui", str(comfy), "--yes", "--json")
    assert code == 0, err
    assert (outside / "data.bin").read_bytes() == b"do not delete"
    moved = [Path(b["backup"]) for b in json.loads(out)["backed_up"]]
    assert all(p.is_symlink() for p in moved) and len(moved) == 2
    assert not node.exists()


def test_models_and_outputs_are_never_touched(tmp_path, run_cli, h3kit_home):
    comfy = comfy_tree.make_comfyui(tmp_path / "c")
    doc = _install(run_cli, comfy)
    record = mf.load(doc["manifest"])
    weights = comfy / "models" / "vae" / "h3_vae.safetensors"
    weights.write_bytes(b"weights")
    record.record_file(weights, "model")
    record.save()
    code, out, err = run_cli("uninstall", "--comfyui", str(comfy), "--yes", "--json")
    assert code == 0, err
    assert weights.read_bytes() == b"weights" and (comfy / "output" / "ComfyUI_00001_.png").exists()
    kept = json.loads(out)["kept"]
    assert [k["path"] for k in kept] == [str(weights)] and "models remove" in kept[0]["why"]
    assert [e.path for e in mf.load(doc["manifest"]).entries] == [str(weights)]


@pytest.mark.parametrize("damage", ["corrupt", "missing"])
def test_bad_record_refuses_and_dry_run_shows(tmp_path, run_cli, damage):
    comfy = comfy_tree.make_comfyui(tmp_path / "c")
    doc = _install(run_cli, comfy)
    if damage == "corrupt":
        Path(doc["manifest"]).write_text("{not json")
    else:
        Path(doc["manifest"]).unlink()
    code, out, err = run_cli("uninstall", "--comfyui", str(comfy), "--yes")
    assert code == 2 and "--dry-run" in err and "Traceback" not in err
    assert Path(doc["node_dir"]).is_dir()
    code, out, err = run_cli("uninstall", "--comfyui", str(comfy), "--yes", "--dry-run", "--json")
    assert code == 0
    shown = json.loads(out)
    assert set(shown["would_remove"]) == {doc["node_dir"], str(comfy / "run_h3kit.sh")}
    assert Path(doc["node_dir"]).is_dir()


def test_dry_run_changes_nothing(tmp_path, run_cli):
    comfy = comfy_tree.make_comfyui(tmp_path / "c")
    doc = _install(run_cli, comfy)
    after_install = comfy_tree.snapshot(comfy)
    code, out, err = run_cli("uninstall", "--comfyui", str(comfy), "--yes", "--dry-run", "--json")
    assert code == 0 and doc["node_dir"] in json.loads(out)["removed"]
    assert comfy_tree.snapshot(comfy) == after_install and Path(doc["manifest"]).exists()


def test_interrupted_install_cleaned_by_uninstall(tmp_path, run_cli):
    from h3kit.comfyui.deploy import STAGING_MARK, STAGING_SUFFIX

    comfy = comfy_tree.make_comfyui(tmp_path / "c")
    before = comfy_tree.snapshot(comfy)
    _install(run_cli, comfy)
    stale = comfy / "custom_nodes" / ("ComfyUI-h3kit" + STAGING_SUFFIX)
    stale.mkdir()
    (stale / STAGING_MARK).write_text("x")
    code, out, err = run_cli("uninstall", "--comfyui", str(comfy), "--yes", "--json")
    assert code == 0 and json.loads(out)["staging_cleaned"] == [str(stale)]
    assert comfy_tree.snapshot(comfy) == before


def test_purge_removes_h3kit_data_but_keeps_backups(tmp_path, run_cli, h3kit_home):
    comfy = comfy_tree.make_comfyui(tmp_path / "c")
    doc = _install(run_cli, comfy)
    (Path(doc["node_dir"]) / "mine.txt").write_text("x")
    loc = locations()
    loc.config_file.write_text("profile: auto\n")
    (loc.venv_dir / "bin").mkdir(parents=True)
    loc.reports_dir.mkdir(parents=True, exist_ok=True)
    code, out, err = run_cli("uninstall", "--comfyui", str(comfy), "--yes", "--purge", "--json")
    assert code == 0, err
    assert not loc.config_file.exists() and not loc.cache_dir.exists() and not loc.venv_dir.exists()
    assert not loc.reports_dir.exists()
    [backup] = json.loads(out)["backed_up"]
    assert Path(backup["backup"]).read_text() == "x"


def test_backups_never_overwrite_each_other(tmp_path):
    from h3kit.comfyui.deploy import move_to_backup

    base, backups = tmp_path / "pack", tmp_path / "backups"
    base.mkdir()
    for text in ("first", "second"):
        (base / "f.txt").write_text(text)
        move_to_backup(base / "f.txt", base, backups)
    assert sorted(p.read_text() for p in backups.iterdir()) == ["first", "second"]


@pytest.mark.parametrize("edited", [False, True])
def test_purge_removes_the_bootstrap_path_launcher_only_while_unchanged(tmp_path, run_cli, h3kit_home, monkeypatch, edited):
    """The PATH launcher is written by scripts/bootstrap.py (the real function), removed by --purge."""
    spec = importlib.util.spec_from_file_location("bootstrap", Path(__file__).parents[2] / "scripts" / "bootstrap.py")
    bootstrap = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bootstrap)
    monkeypatch.setenv("HOME", str(tmp_path / "user home"))
    env = bootstrap.PrivateEnv(locations().venv_dir, "/usr/bin/python3")
    launcher = bootstrap.write_path_launcher(env, bootstrap.Log(tmp_path / "bootstrap.log"))
    assert launcher is not None and launcher.is_file()
    if edited:
        launcher.write_text(launcher.read_text() + "# my own line\n")
    comfy = comfy_tree.make_comfyui(tmp_path / "c")
    _install(run_cli, comfy)
    code, out, err = run_cli("uninstall", "--comfyui", str(comfy), "--yes", "--purge", "--json")
    assert code == 0, err
    assert launcher.exists() == edited
    assert (str(launcher) in json.loads(out)["purged"]) != edited


def test_a_pack_folder_replaced_by_a_link_is_never_followed(tmp_path, run_cli):
    """A developer swaps the installed pack for a link to their checkout: uninstall touches nothing behind it."""
    comfy = comfy_tree.make_comfyui(tmp_path / "ComfyUI")
    assert run_cli("install", "--comfyui", str(comfy), "--yes", "--skip-calibrate", "--no-models")[0] == 0
    pack = comfy / "custom_nodes" / "ComfyUI-h3kit"
    checkout = tmp_path / "my checkout of the pack"
    shutil.copytree(pack, checkout)  # the same files, so their hashes match the record
    shutil.rmtree(pack)
    os.symlink(checkout, pack)
    before = comfy_tree.snapshot(checkout)
    code, out, err = run_cli("uninstall", "--comfyui", str(comfy), "--yes", "--json")
    assert code == 4, err
    doc = json.loads(out)
    assert doc["behind_links"] and all(b["link"] == str(pack) for b in doc["behind_links"])
    after = comfy_tree.snapshot(checkout)
    assert {k for k in before if before[k] != after.get(k)} == set() and set(after) == set(before)
    assert pack.is_symlink() and os.readlink(pack) == str(checkout)  # the user's link is left as it was
