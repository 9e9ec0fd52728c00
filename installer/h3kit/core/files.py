"""Files written safely and recognised later: atomic writes, hashes, free space.

Every write that a reader may see half-done (config, reports, records, the
profile inside the pack) goes through `atomic_write`: a temporary file in the
same folder, flushed and fsynced, then renamed over the target (and the
folder fsynced on POSIX), so a crash leaves either the old file or the new
one, never a torn one. `fixed_tmp=True` names that temporary file after the
target (`.<name>.h3kit-tmp`, see `tmp_path`), so the install record can name
it before it exists and a crash's leftover is found again.

Every other file operation h3kit performs inside a ComfyUI (make a folder,
write a staged file, rename, replace, move, unlink, remove a tree) goes
through the small helpers below, so there is one place that sees them all.

The crash-test hook: with `H3KIT_TEST_KILL_AT=N[:INT]` in the environment,
the N-th file operation (1-based, counted over `atomic_write` and every
helper here) sends this process SIGKILL (or SIGINT with `:INT`) just before
it acts; `H3KIT_TEST_FILEOPS=FILE` appends one line per operation
(`N<TAB>op<TAB>path`). Both are read once at import and taken out of the
environment, so child processes do not count; unset, each operation pays one
`is None` test. tests/comfyui/test_crash_harness.py drives it.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import shutil
import signal
import sys
import tempfile
from pathlib import Path

CHUNK = 1 << 20
TMP_SUFFIX = ".h3kit-tmp"


# -- the crash-test hook -----------------------------------------------------------------------------


def _read_hook() -> dict | None:
    kill = os.environ.pop("H3KIT_TEST_KILL_AT", None)
    log = os.environ.pop("H3KIT_TEST_FILEOPS", None)
    if not kill and not log:
        return None
    at, _, sig = (kill or "0").partition(":")
    return {"at": int(at) if at.isdigit() else 0, "signal": signal.SIGINT if sig.upper() == "INT" else getattr(signal, "SIGKILL", None),
            "log": log, "count": 0}


_HOOK = _read_hook()


def checkpoint(op: str, path: str | os.PathLike) -> None:
    """Called by every file operation just before it acts (the crash-test hook; free when unset)."""
    if _HOOK is None:
        return
    _HOOK["count"] += 1
    n = _HOOK["count"]
    if _HOOK["log"]:
        fd = os.open(_HOOK["log"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, f"{n}\t{op}\t{path}\n".encode("utf-8", "surrogateescape"))
        finally:
            os.close(fd)
    if n == _HOOK["at"] and _HOOK["signal"] is not None:
        signal.raise_signal(_HOOK["signal"])  # SIGINT: KeyboardInterrupt raised right here


# -- writing ----------------------------------------------------------------------------------------


def tmp_path(path: str | os.PathLike) -> Path:
    """The temporary name `atomic_write(..., fixed_tmp=True)` writes `path` under first."""
    p = Path(path)
    return p.with_name(f".{p.name}{TMP_SUFFIX}")


def _fsync_dir(folder: Path) -> None:
    if sys.platform == "win32":
        return  # Windows cannot open a folder for fsync; its rename is durable enough for NTFS
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some file systems refuse fsync on a folder; the file itself was fsynced
    finally:
        os.close(fd)


@contextlib.contextmanager
def naming(path: str | os.PathLike):
    """A write that fails (a full disk says ENOSPC on write or close, with no file name) names its file, so the
    sentence for the user can say which disk is full (h3kit.core.oserrors)."""
    try:
        yield
    except OSError as exc:
        if exc.filename is None and exc.errno is not None:  # (a network error, errno None, passes as it is)
            exc.filename = str(path)
        raise


def atomic_write(path: str | os.PathLike, data: bytes | str, mode: int | None = None, *,
                 fixed_tmp: bool = False) -> Path:
    """Write `data` (str is UTF-8 with \\n line ends) to `path` atomically; returns the path.

    fixed_tmp: write through `tmp_path(path)` (replacing a leftover there, never through a link) instead
    of a random name, so a record made before the write names the temporary file too.
    """
    path = Path(path)
    raw = data.encode("utf-8") if isinstance(data, str) else bytes(data)
    checkpoint("write", path)
    if fixed_tmp:
        tmp = str(tmp_path(path))
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0)
                     | getattr(os, "O_BINARY", 0), 0o666)
    else:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}-", suffix=".tmp", dir=path.parent)
    try:
        with naming(path), os.fdopen(fd, "wb") as f:
            f.write(raw)
            f.flush()
            os.fsync(f.fileno())
        if mode is not None:
            os.chmod(tmp, mode)
        checkpoint("replace", path)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    _fsync_dir(path.parent)
    return path


def write_new(path: str | os.PathLike, data: bytes, mode: int | None = None) -> Path:
    """Write a file nobody reads yet (a staged copy), not atomically: a crash may leave it torn, which is why
    it is only used inside a staging folder that is removed whole. The hook also stops half-way through."""
    path = Path(path)
    checkpoint("write", path)
    half = len(data) // 2
    with naming(path), open(path, "wb") as f:
        f.write(data[:half])
        if half:
            f.flush()
            checkpoint("write-torn", path)
        f.write(data[half:])
    if mode is not None:
        os.chmod(path, mode)
    return path


def make_dir(path: str | os.PathLike) -> Path:
    checkpoint("mkdir", path)
    os.mkdir(path)
    return Path(path)


def make_dirs(path: str | os.PathLike) -> Path:
    """A folder and its parents, fine when it exists (h3kit's own folders: backups)."""
    checkpoint("mkdirs", path)
    os.makedirs(path, exist_ok=True)
    return Path(path)


def rename(src: str | os.PathLike, dst: str | os.PathLike) -> None:
    checkpoint("rename", dst)
    os.rename(src, dst)


def replace(src: str | os.PathLike, dst: str | os.PathLike) -> None:
    checkpoint("replace", dst)
    os.replace(src, dst)


def move(src: str | os.PathLike, dst: str | os.PathLike) -> None:
    """Move a file or folder (a link moves as a link); across disks it is copied, then removed.

    A file copy that fails (a full disk at `dst`) leaves no partial or 0-byte copy behind: the source is
    still whole, so the copy is removed, and the error names `dst`."""
    checkpoint("move", src)
    was_there = os.path.lexists(dst)
    try:
        shutil.move(str(src), str(dst))
    except OSError as exc:
        src_p, dst_p = Path(src), Path(dst)
        if not was_there and src_p.is_file() and not src_p.is_symlink() and dst_p.is_file() and not dst_p.is_symlink():
            try:
                os.unlink(dst_p)
            except OSError:
                pass
        full = exc.errno in (errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC))
        if exc.errno is not None and (exc.filename is None or full):
            exc.filename, exc.filename2 = str(dst), None  # the disk that is full is dst's
        raise


def unlink(path: str | os.PathLike) -> None:
    checkpoint("unlink", path)
    os.unlink(path)


def remove_dir(path: str | os.PathLike) -> None:
    checkpoint("rmdir", path)
    os.rmdir(path)


def remove_tree(path: str | os.PathLike) -> None:
    checkpoint("rmtree", path)
    shutil.rmtree(path)


# -- recognising ----------------------------------------------------------------------------------


def sha256_file(path: str | os.PathLike, limit: int | None = None) -> str:
    """Hex sha256 of the file (of its first `limit` bytes when given)."""
    h = hashlib.sha256()
    left = limit
    with open(path, "rb") as f:
        while left is None or left > 0:
            block = f.read(CHUNK if left is None else min(CHUNK, left))
            if not block:
                break
            h.update(block)
            if left is not None:
                left -= len(block)
    return h.hexdigest()


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def nearest_existing(path: str | os.PathLike) -> Path:
    """`path` itself or its closest parent that exists: where a file about to be made will land."""
    p = Path(path).absolute()
    while not p.exists() and p != p.parent:
        p = p.parent
    return p


def free_bytes(path: str | os.PathLike) -> int | None:
    """Free bytes on the disk that holds `path` (or would hold it); None when that cannot be read."""
    try:
        return shutil.disk_usage(nearest_existing(path)).free
    except OSError:
        return None
