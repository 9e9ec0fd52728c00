"""Issue 26 (1, 11): a full h3kit home is named as the h3kit home, with the space, exit 3; never a compiler's
fault, never a full ComfyUI disk, and nothing half-written is left (in ComfyUI or as a 0-byte backup)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fixtures.comfyui import comfy_tree
from small_disk import fill, small_tmpfs

pytestmark = pytest.mark.native  # installs: the session's native library, not a compile per test

FIXTURES = Path(__file__).parents[1] / "fixtures" / "comfyui"
INSTALL = ("install", "--yes", "--skip-calibrate", "--no-models")


def _one_sentence_exit_3(rc: int, err: str, home: Path) -> str:
    assert rc == 3, err
    assert "Traceback" not in err and "This is a bug" not in err and "compiler" not in err.split("fix:")[0], err
    line = next(ln for ln in err.splitlines() if ln.startswith("error: "))
    assert f"h3kit's home (H3KIT_HOME) {home}" in line and " free" in line, line
    return line


@pytest.mark.slow
def test_install_with_a_full_h3kit_home_is_exit_3_naming_the_home_and_leaves_comfyui_untouched(
        tmp_path, run_cli, monkeypatch):
    """A real 100 KB tmpfs as H3KIT_HOME; the native library really compiles into it and the linker fails."""
    comfy = comfy_tree.make_comfyui(tmp_path / "c")
    before = comfy_tree.snapshot(comfy)
    with small_tmpfs(tmp_path / "home", "100k") as home:
        monkeypatch.setenv("H3KIT_HOME", str(home))
        rc, out, err = run_cli(*INSTALL, "--comfyui", str(comfy))
        line = _one_sentence_exit_3(rc, err, home)
        assert "needed" in line and "native library" in line, line
        assert "installs without it" not in err
        assert comfy_tree.snapshot(comfy) == before  # nothing half-written in ComfyUI
        assert not list((home / "cache" / "native").glob(".*")) if (home / "cache" / "native").exists() else True


def test_uninstall_with_a_full_h3kit_home_names_the_home_and_leaves_no_empty_backup(tmp_path, run_cli,
                                                                                   monkeypatch, h3kit_home):
    comfy = comfy_tree.make_comfyui(tmp_path / "c")
    with small_tmpfs(tmp_path / "home", "8m") as home:
        for sub in ("cache",):  # the session's native build, as the h3kit_home fixture gave it
            import shutil
            shutil.copytree(h3kit_home / sub, home / sub)
        monkeypatch.setenv("H3KIT_HOME", str(home))
        assert run_cli(*INSTALL, "--comfyui", str(comfy))[0] == 0
        edited = comfy / "custom_nodes" / "ComfyUI-h3kit" / "h3kit_decode" / "logic.py"
        edited.write_bytes(b"# my edit\n" + b"x" * (3 << 20))  # the user's: uninstall must back it up
        fill(home, 256 * 1024)
        rc, out, err = run_cli("uninstall", "--comfyui", str(comfy), "--yes")
        line = _one_sentence_exit_3(rc, err, home)
        assert str(comfy) not in line.split("(writing")[0], line  # not blamed on the ComfyUI disk
        backups = home / "state" / "backups"
        left = [p for p in backups.rglob("*") if p.is_file()] if backups.exists() else []
        assert not [p for p in left if p.stat().st_size == 0 or p.name == edited.name], left
        assert edited.is_file() and edited.stat().st_size > 3 << 20  # the user's file is where it was
        (home / "filler").unlink()
        rc, out, err = run_cli("uninstall", "--comfyui", str(comfy), "--yes")
        assert rc == 0, err
        assert not (comfy / "custom_nodes" / "ComfyUI-h3kit").exists()
        assert any(b["path"] == str(edited) for b in json.loads(
            run_cli("uninstall", "--comfyui", str(comfy), "--dry-run", "--json")[1] or "{}").get("backed_up", [])) \
            or "moved to backup" in out


def test_a_compile_failure_is_read_as_the_disk_only_when_the_disk_says_so(tmp_path):
    from h3kit.native.build import environment_cause

    full = environment_cause("/usr/bin/ld: final link failed: No space left on device\ncollect2: error: ld "
                             "returned 1 exit status\n", tmp_path)
    assert full is not None and full.exit_code == 3 and "no space left on the disk that holds" in full.message
    assert str(tmp_path) in full.message and "compiler" not in (full.fix or "")
    ro = environment_cause("cannot open output file x.so: Read-only file system\n", tmp_path)
    assert ro is not None and "read-only" in ro.message
    assert environment_cause("h3k.c:1:1: error: unknown type name 'flaot'\n", tmp_path) is None  # the compiler's
