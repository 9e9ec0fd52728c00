"""Issue 16 item 4: a full disk, a read-only or unwritable folder, a folder in the way are exit 3 with a fix,
not "This is a bug"; logging that cannot write its file never prints a traceback."""

from __future__ import annotations

import errno
import logging
import os
import subprocess
from pathlib import Path

import pytest

from fixtures.comfyui import comfy_tree
from h3kit.comfyui import deploy as deploy_mod
from h3kit.comfyui.deploy import STAGING_MARK, STAGING_SUFFIX
from h3kit.core import logs
from h3kit.core.oserrors import environment_errors

FIXTURES = Path(__file__).parents[1] / "fixtures" / "comfyui"

INSTALL = ("install", "--yes", "--skip-calibrate", "--no-models")


def _staging(comfy: Path) -> Path:
    return comfy / "custom_nodes" / ("ComfyUI-h3kit" + STAGING_SUFFIX)


def _fails_in_the_deploy_step(monkeypatch, code: int) -> None:
    """Every staged file write fails with `code` (staging writes go through h3kit.core.files.write_new)."""
    from h3kit.core import files

    real = files.write_new

    def write_new(path, data, mode=None):
        if STAGING_SUFFIX in str(path) and Path(path).name != STAGING_MARK:
            raise OSError(code, os.strerror(code), str(path))
        return real(path, data, mode)

    monkeypatch.setattr(files, "write_new", write_new)


@pytest.mark.parametrize("code, words", [(errno.ENOSPC, "No space left on the disk that holds"),
                                         (errno.EROFS, "is on a read-only file system")])
def test_a_full_or_read_only_disk_while_staging_is_exit_3_with_the_path_and_a_fix(tmp_path, run_cli,
                                                                                  monkeypatch, code, words):
    comfy = comfy_tree.make_comfyui(tmp_path / "c")
    _fails_in_the_deploy_step(monkeypatch, code)
    rc, out, err = run_cli(*INSTALL, "--comfyui", str(comfy))
    assert rc == 3, err
    assert words in err and str(_staging(comfy)) in err and "fix: " in err
    assert "This is a bug" not in err and "Traceback" not in err
    assert not _staging(comfy).exists()  # nothing half-written is left taking the space


def test_enospc_from_os_replace_in_an_upgrade_is_exit_3(tmp_path, run_cli, monkeypatch):
    comfy = comfy_tree.make_comfyui(tmp_path / "c")
    assert run_cli(*INSTALL, "--comfyui", str(comfy))[0] == 0

    def replace(src, dst):
        raise OSError(errno.ENOSPC, "No space left on device", str(src), None, str(dst))

    monkeypatch.setattr(deploy_mod.os, "replace", replace)
    rc, out, err = run_cli(*INSTALL, "--comfyui", str(comfy))
    assert rc == 3 and "No space left" in err and "fix: Free space" in err, err
    assert "This is a bug" not in err


def test_eacces_from_mkdir_in_the_state_folder_is_exit_3(tmp_path, run_cli, monkeypatch):
    comfy = comfy_tree.make_comfyui(tmp_path / "c")
    real = os.mkdir

    def mkdir(path, *a, **k):
        if str(_staging(comfy)) == str(path):
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        return real(path, *a, **k)

    monkeypatch.setattr(os, "mkdir", mkdir)
    rc, out, err = run_cli(*INSTALL, "--comfyui", str(comfy))
    assert rc == 3 and "is not allowed to write" in err and "chmod" in err, err
    assert "This is a bug" not in err


def test_a_foreign_folder_with_the_staging_name_is_exit_3_and_left_alone(tmp_path, run_cli):
    comfy = comfy_tree.make_comfyui(tmp_path / "c")
    theirs = _staging(comfy)
    theirs.mkdir()
    (theirs / "mine.txt").write_text("mine")
    rc, out, err = run_cli(*INSTALL, "--comfyui", str(comfy))
    assert rc == 3 and f"{theirs} already exists and is not h3kit's" in err, err
    assert "This is a bug" not in err
    assert (theirs / "mine.txt").read_text() == "mine"


@pytest.mark.skipif(os.geteuid() == 0, reason="permission bits do not bind root")
def test_an_unwritable_state_folder_is_exit_3(tmp_path, run_cli, monkeypatch):
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("H3KIT_HOME", str(home))
    comfy = comfy_tree.make_comfyui(tmp_path / "c")
    home.chmod(0o500)
    try:
        rc, out, err = run_cli(*INSTALL, "--comfyui", str(comfy))
    finally:
        home.chmod(0o755)
    assert rc == 3 and "This is a bug" not in err and "Traceback" not in err, err


def test_other_errors_are_still_bugs():
    with pytest.raises(OSError):
        with environment_errors("x"):
            raise OSError(errno.EIO, "I/O error")


# -- logging ---------------------------------------------------------------------------------------


def test_a_log_file_that_cannot_be_opened_warns_once_without_a_traceback(tmp_path, capsys):
    blocker = tmp_path / "state"
    blocker.write_text("a file where the state folder should be")
    assert logs.setup(blocker / "logs" / "h3kit.log") is None
    logging.getLogger("h3kit").warning("still shown")
    err = capsys.readouterr().err
    assert err.count("warning: cannot write the log file") == 1 and "still shown" in err
    assert "Traceback" not in err


def test_a_log_file_on_a_full_disk_warns_once_without_a_traceback(tmp_path, capsys, monkeypatch):
    path = logs.setup(tmp_path / "h3kit.log")
    handler = next(h for h in logging.getLogger("h3kit").handlers if isinstance(h, logging.FileHandler))

    class Full:
        def write(self, _):
            raise OSError(errno.ENOSPC, "No space left on device")

        def flush(self):
            pass

    monkeypatch.setattr(handler, "stream", Full())
    for _ in range(3):
        logging.getLogger("h3kit").error("boom")
    err = capsys.readouterr().err
    assert path is not None and err.count(f"warning: cannot write the log file {path}") == 1, err
    assert "Traceback" not in err and "Logging error" not in err


# -- a real full disk ------------------------------------------------------------------------------


from small_disk import fill as _fill  # noqa: E402
from small_disk import mount_tmpfs as _small_tmpfs  # noqa: E402

pytestmark = pytest.mark.native  # installs: the session's native library, not a compile per test


def test_install_onto_a_full_tmpfs_is_exit_3_and_writes_nothing(tmp_path, run_cli):
    """The free-space check before staging: the folder, the bytes needed and free, nothing written."""
    disk = tmp_path / "disk"
    if not _small_tmpfs(disk):
        pytest.skip("needs root and a tmpfs mount")
    try:
        comfy = comfy_tree.make_comfyui(disk / "c")
        _fill(disk, 16 * 1024)  # a few KiB: too little for the pack
        before = comfy_tree.snapshot(comfy)
        rc, out, err = run_cli(*INSTALL, "--comfyui", str(comfy))
        assert rc == 3 and "This is a bug" not in err, err
        assert f"Not enough free space on the disk that holds {comfy / 'custom_nodes'}" in err
        assert "the node pack needs" in err and "is free. Nothing was written." in err
        assert comfy_tree.snapshot(comfy) == before
    finally:
        subprocess.run(["umount", str(disk)], capture_output=True)


def test_a_disk_that_fills_while_staging_is_exit_3_and_leaves_no_staging(tmp_path, run_cli, monkeypatch):
    """The check passes (free space is read as plenty), then the real 2 MiB tmpfs runs out mid-staging."""
    disk = tmp_path / "disk"
    if not _small_tmpfs(disk):
        pytest.skip("needs root and a tmpfs mount")
    try:
        comfy = comfy_tree.make_comfyui(disk / "c")
        _fill(disk, 16 * 1024)
        monkeypatch.setattr("h3kit.core.files.free_bytes", lambda path: 1 << 40)
        rc, out, err = run_cli(*INSTALL, "--comfyui", str(comfy))
        assert rc == 3 and "No space left on the disk" in err and "This is a bug" not in err, err
        assert not _staging(comfy).exists()
    finally:
        subprocess.run(["umount", str(disk)], capture_output=True)


def test_too_little_free_space_stops_before_staging(tmp_path, run_cli, monkeypatch):
    """Without root: the same check, with the free space read as 4096 bytes."""
    comfy = comfy_tree.make_comfyui(tmp_path / "c")
    before = comfy_tree.snapshot(comfy)
    seen = []

    def free(path):
        seen.append(Path(path))
        return 4096

    monkeypatch.setattr("h3kit.core.files.free_bytes", free)
    rc, out, err = run_cli(*INSTALL, "--comfyui", str(comfy))
    assert rc == 3, err
    assert f"Not enough free space on the disk that holds {comfy / 'custom_nodes'}" in err
    assert "the node pack needs" in err and "4.10 kB is free" in err
    assert comfy / "custom_nodes" in seen and comfy_tree.snapshot(comfy) == before


def test_the_space_needed_counts_every_file_and_folder_in_blocks():
    from h3kit.comfyui.deploy import BLOCK, bytes_to_write

    files = {"a.py": b"x", "sub/b.bin": b"y" * (BLOCK + 1), "sub/deeper/c": b""}
    # blocks: a 1, b 2, c 1 (an empty file still takes an entry); folders sub, sub/deeper; the mark and the staging folder
    assert bytes_to_write(files) == (1 + 2 + 1 + 2 + 2) * BLOCK
