"""Record before write (h3kit.comfyui.journal): nothing lands in a ComfyUI before the saved record names it,
and what a crash leaves pending is settled by the next install or uninstall."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from fixtures.comfyui import comfy_tree
from h3kit.cli.context import Context
from h3kit.comfyui import deploy
from h3kit.comfyui import manifest as mf
from h3kit.comfyui.journal import Journal
from h3kit.comfyui.locate import find
from h3kit.core import files
from h3kit.core.files import sha256_bytes
from h3kit.data.plan_doc import PlanSettings

pytestmark = pytest.mark.native  # installs: the session's native library, not a compile per test

FIXTURES = Path(__file__).parents[1] / "fixtures" / "comfyui"

SETTINGS = {"vae_tile_size": 256, "vae_tile_overlap": 64, "vae_temporal_tile": 32, "max_frames": 73,
            "comfyui_args": ["--lowvram"], "env": {}}
INSTALL = ("install", "--yes", "--skip-calibrate", "--no-models", "--json")


@pytest.fixture
def comfy(tmp_path) -> Path:
    return comfy_tree.make_comfyui(tmp_path / "ComfyUI ü")


def _deploy(comfy: Path, home: Path, **kw):
    inst = find(str(comfy), None, Context(yes=True))
    return inst, deploy.deploy(inst, settings=PlanSettings.from_json(SETTINGS), profile=kw.pop("profile", "cpu-only"), library=None,
                               state_dir=home / "state", cache_dir=home / "cache", **kw)


# -- the Manifest rule ----------------------------------------------------------------------------------


def test_settle_decides_each_pending_entry_by_what_is_there(tmp_path):
    record = mf.Manifest(str(tmp_path))
    journal = Journal(record)
    ours, old, theirs, gone, linked = (tmp_path / n for n in ("ours", "old", "theirs", "gone", "linked"))
    ours.write_bytes(b"new")
    old.write_bytes(b"old")
    theirs.write_bytes(b"someone else's")
    os.symlink(ours, linked)
    record.record_file(old, "node-pack")  # final, then replaced: its hash becomes `previous`
    for p in (ours, old, theirs, gone, linked):
        journal.intend_file(p, sha256_bytes(b"new"), 3, "node-pack")
    journal.intend_dir(tmp_path / "made", "node-pack")
    (tmp_path / "made").mkdir()
    journal.intend_dir(tmp_path / "never made", "node-pack")
    files.tmp_path(gone).write_bytes(b"ne")  # a temporary file torn by the crash
    found = {Path(f["path"]).name: f["outcome"] for f in journal.settle()}
    assert found == {"ours": "ours", "old": "ours", "theirs": "not ours", "gone": "absent", "linked": "not ours",
                     "made": "ours", "never made": "absent", f".gone{files.TMP_SUFFIX}": "temporary"}
    assert not files.tmp_path(gone).exists() and theirs.read_bytes() == b"someone else's"
    assert {Path(e.path).name for e in record.entries} == {"ours", "old", "made"}
    assert all(not e.pending and record.still_ours(e) for e in record.entries)
    assert record.find(old).sha256 == sha256_bytes(b"old")  # the file of ours that was there stays recorded


def test_a_record_without_pending_entries_reads_as_before(tmp_path):
    record = mf.Manifest(str(tmp_path), path=tmp_path / "m.json")
    (tmp_path / "f").write_bytes(b"x")
    Journal(record).write(tmp_path / "g", b"y", "node-pack")
    record.record_file(tmp_path / "f", "node-pack")
    record.save()
    entries = json.loads((tmp_path / "m.json").read_text())["entries"]
    assert all(set(e) == {"path", "kind", "sha256", "bytes", "role", "created"} for e in entries)
    Journal(record).intend_file(tmp_path / "h", "ab" * 32, 1)
    record.save()
    [pending] = [e for e in json.loads((tmp_path / "m.json").read_text())["entries"] if e.get("pending")]
    assert pending["path"] == str(tmp_path / "h") and pending["previous"] is None
    assert mf.load(tmp_path / "m.json").pending()[0].path == str(tmp_path / "h")


# -- deploy and apply keep the rule ---------------------------------------------------------------------


def _watch(monkeypatch, comfy: Path, home: Path) -> list[str]:
    """Check, at every file operation into `comfy`, that the saved record already names what it makes."""
    real = files.checkpoint
    seen = []
    staging = comfy / "custom_nodes" / ("ComfyUI-h3kit" + deploy.STAGING_SUFFIX)

    def check(op: str, path) -> None:
        p = Path(path)
        if comfy in p.parents and op in ("mkdir", "write", "rename", "replace"):
            [saved] = list((home / "state" / "manifests").glob("*.json"))
            named = {e["path"] for e in json.loads(saved.read_text(encoding="utf-8"))["entries"]}
            inside_staging = p == staging or staging in p.parents
            assert str(p) in named or (inside_staging and str(staging) in named), (op, p)
            if op == "rename":  # the staged pack appears at once under its real name: all of it named
                for q in staging.rglob("*"):
                    assert str(p / q.relative_to(staging)) in named, q
            seen.append(op)
        real(op, path)

    monkeypatch.setattr(files, "checkpoint", check)
    return seen


def test_every_write_into_comfyui_is_named_in_the_saved_record_first(comfy, h3kit_home, monkeypatch):
    home = Path(h3kit_home)
    seen = _watch(monkeypatch, comfy, home)
    inst, first = _deploy(comfy, home)
    assert first.created and {"mkdir", "write", "rename"} <= set(seen)
    seen.clear()
    (first.node_dir / "h3kit_decode" / "logic.py").write_text("# edited\n")
    _deploy(comfy, home, profile="nvidia-12gb")  # in place: replaces, a backup, the launcher again
    assert {"write", "replace"} <= set(seen)
    seen.clear()
    doc = deploy.apply(inst, PlanSettings.from_json(dict(SETTINGS, vae_tile_size=192)), "nvidia-12gb", home / "state", home / "cache",
                       generated={"workflows/new/one.json": b"{}"})
    assert Path(doc["profile_file"]).is_file() and {"mkdir", "write", "replace"} <= set(seen)
    record = mf.load_for(home / "state", comfy)
    assert not record.pending() and all(record.still_ours(e) for e in record.entries if e.role != mf.BACKUP_ROLE)


def test_a_launcher_written_just_before_a_crash_is_h3kits_next_time(comfy, h3kit_home, monkeypatch, run_cli):
    """Issue 16 item 2: killed right after run_h3kit.sh lands, before the record is saved final."""
    home = Path(h3kit_home)
    real = files.atomic_write

    def crash_after_the_launcher(path, data, mode=None, *, fixed_tmp=False):
        real(path, data, mode, fixed_tmp=fixed_tmp)
        if Path(path).name == "run_h3kit.sh":
            raise KeyboardInterrupt

    monkeypatch.setattr(files, "atomic_write", crash_after_the_launcher)
    monkeypatch.setattr(mf, "atomic_write", crash_after_the_launcher)
    with pytest.raises(KeyboardInterrupt):
        _deploy(comfy, home)
    monkeypatch.setattr(files, "atomic_write", real)
    monkeypatch.setattr(mf, "atomic_write", real)
    [pending] = mf.load_for(home / "state", comfy).pending()
    assert pending.path == str(comfy / "run_h3kit.sh")
    code, out, err = run_cli(*INSTALL, "--comfyui", str(comfy))
    assert code == 0, err
    doc = json.loads(out)
    assert doc["launchers"] == [str(comfy / "run_h3kit.sh")] and "not written by h3kit" not in out
    code, out, err = run_cli("uninstall", "--comfyui", str(comfy), "--yes")
    assert code == 0 and "changed or added by you" not in out and not (comfy / "run_h3kit.sh").exists(), out


def test_after_a_crash_uninstall_calls_nothing_of_h3kits_the_users(tmp_path, h3kit_home, monkeypatch, run_cli):
    """Killed between the rename into place and the record's final save: uninstall at once."""
    comfy = comfy_tree.make_comfyui(tmp_path / "c")
    before = comfy_tree.snapshot(comfy)

    def crash(src, dst):
        os.rename(src, dst)
        raise KeyboardInterrupt

    real = files.rename
    monkeypatch.setattr(files, "rename", crash)
    with pytest.raises(KeyboardInterrupt):
        _deploy(comfy, Path(h3kit_home))
    monkeypatch.setattr(files, "rename", real)
    code, out, err = run_cli("uninstall", "--comfyui", str(comfy), "--yes")
    assert code == 0, err
    assert "changed or added by you" not in out and "kept:" not in out, out
    assert comfy_tree.snapshot(comfy) == before


def test_a_pending_file_with_other_content_is_left_alone_and_named(comfy, h3kit_home, run_cli):
    home = Path(h3kit_home)
    code, out, err = run_cli(*INSTALL, "--comfyui", str(comfy))
    assert code == 0, err
    record = mf.load_for(home / "state", comfy)
    launcher = comfy / "run_h3kit.sh"
    Journal(record).intend_file(launcher, "0" * 64, 10, "launcher")  # as if h3kit died about to rewrite it...
    record.save()
    launcher.write_text("#!/bin/sh\n# ...and then someone wrote their own\n")
    code, out, err = run_cli("uninstall", "--comfyui", str(comfy), "--yes", "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert [s["outcome"] for s in doc["settled"] if s["path"] == str(launcher)] == ["not ours"]
    assert any(k["path"] == str(launcher) and "not h3kit's" in k["why"] for k in doc["kept"])
    assert launcher.read_text().endswith("their own\n")


def test_a_staging_folder_made_but_not_yet_marked_is_h3kits(comfy, h3kit_home, monkeypatch, run_cli):
    """Killed between mkdir and the mark: the record names the folder, so it goes (before: exit 3 forever)."""
    home = Path(h3kit_home)
    before = comfy_tree.snapshot(comfy)
    real = files.write_new

    def crash(path, data, mode=None):
        if Path(path).name == deploy.STAGING_MARK:
            raise KeyboardInterrupt
        return real(path, data, mode)

    monkeypatch.setattr(files, "write_new", crash)
    with pytest.raises(KeyboardInterrupt):
        _deploy(comfy, home)
    monkeypatch.setattr(files, "write_new", real)
    staging = comfy / "custom_nodes" / ("ComfyUI-h3kit" + deploy.STAGING_SUFFIX)
    assert staging.is_dir() and not (staging / deploy.STAGING_MARK).exists()
    code, out, err = run_cli("uninstall", "--comfyui", str(comfy), "--yes", "--json")
    assert code == 0 and json.loads(out)["staging_cleaned"] == [str(staging)], err
    assert comfy_tree.snapshot(comfy) == before
    _deploy(comfy, home)  # and an install after such a crash goes through
