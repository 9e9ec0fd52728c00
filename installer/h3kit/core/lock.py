"""One h3kit at a time: an OS-level lock on a file in h3kit's own state folder.

The front (`held`, `holder`) is pure Python; the platform code is two small
functions per OS: `fcntl.flock` on POSIX, `msvcrt.locking` on Windows. The
operating system drops the lock when the process that holds it dies, however
it dies, so a lock left by a killed h3kit is simply taken over; the pid
written into the file is only for the message. A process may take a lock it
already holds again (doctor --fix runs apply inside its own run); it is
released when the outermost holder lets go.

Lock files never go inside the user's ComfyUI: the caller names a path
under the state folder (h3kit.comfyui.locks.lock_path).
"""

from __future__ import annotations

import json
import os
import sys
from contextlib import contextmanager
from pathlib import Path

from h3kit.core.errors import NotReady

_WINDOWS_OFFSET = 1 << 30  # Windows locks a byte range: lock one far past the pid, so the pid stays readable
_held: dict[str, list] = {}  # path -> [fd, depth]


if sys.platform == "win32":  # pragma: no cover - exercised on Windows only
    import msvcrt

    def _try_lock(fd: int) -> bool:
        os.lseek(fd, _WINDOWS_OFFSET, os.SEEK_SET)
        try:
            msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)
        except OSError:
            return False
        return True

    def _unlock(fd: int) -> None:
        os.lseek(fd, _WINDOWS_OFFSET, os.SEEK_SET)
        try:
            msvcrt.locking(fd, msvcrt.LK_UNLCK, 1)
        except OSError:
            pass
else:
    import fcntl

    def _try_lock(fd: int) -> bool:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        except OSError as exc:  # a file system without locks: say so rather than run unguarded silently
            raise NotReady(f"h3kit cannot lock {exc.filename or 'its lock file'} ({exc.strerror}).",
                           "Put h3kit's home on a local disk (set H3KIT_HOME).") from None
        return True

    def _unlock(fd: int) -> None:
        fcntl.flock(fd, fcntl.LOCK_UN)


def holder(path: Path) -> dict:
    """What the lock file says about its holder ({} when empty or unreadable): pid, command, target."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8") or "{}")
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def _open(path: Path) -> int:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        return os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise NotReady(f"h3kit cannot create its lock file {path} ({exc.strerror}).",
                       f"Make {path.parent} writable for this user, or set H3KIT_HOME to a folder you own.") from None


def acquire(path: Path, info: dict) -> int | None:
    """Take the lock at `path` without waiting; its fd, or None when another process holds it."""
    key = os.path.abspath(path)
    if key in _held:
        _held[key][1] += 1
        return _held[key][0]
    fd = _open(Path(key))
    if not _try_lock(fd):
        os.close(fd)
        return None
    try:
        os.ftruncate(fd, 0)
        os.lseek(fd, 0, os.SEEK_SET)
        os.write(fd, json.dumps({"pid": os.getpid(), **info}).encode("utf-8"))
    except OSError:
        pass  # the pid is only for the message; the lock itself is held
    _held[key] = [fd, 1]
    return fd


def release(path: Path) -> None:
    key = os.path.abspath(path)
    slot = _held.get(key)
    if slot is None:
        return
    slot[1] -= 1
    if slot[1] > 0:
        return
    del _held[key]
    try:
        os.ftruncate(slot[0], 0)  # no stale pid for the next reader
    except OSError:
        pass
    _unlock(slot[0])
    os.close(slot[0])


@contextmanager
def held(path: Path, busy: str, fix: str, info: dict | None = None):
    """Hold the lock at `path` for the with-block; NotReady (exit 3) when another h3kit holds it.

    `busy` is the sentence's start, e.g. "Another h3kit is installing into this ComfyUI"; the holder's pid
    is added as "(pid N)".
    """
    path = Path(path)
    if acquire(path, info or {}) is None:
        other = holder(path)
        pid = other.get("pid") or "unknown"
        raise NotReady(f"{busy} (pid {pid}), so this one stops before changing anything.", fix,
                       details={"lock": str(path), "holder": other})
    try:
        yield path
    finally:
        release(path)
