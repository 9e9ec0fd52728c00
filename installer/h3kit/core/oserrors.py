"""The one place where errors from the environment become the contract's errors.

A full disk, a read-only file system, a file h3kit may not write, or a folder
already in the way are not bugs: `environment_errors` turns the OSError into
`NotReady` (exit 3) with one sentence that names the path and a fix. The CLI
wraps every command in it; anything else still escapes as an internal error.
"""

from __future__ import annotations

import contextlib
import errno

from h3kit.core.errors import NotReady

_NOSPACE = {errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)}
_DENIED = {errno.EACCES, errno.EPERM}
HANDLED = _NOSPACE | _DENIED | {errno.EROFS, errno.EEXIST}


def _path(exc: OSError, what: str) -> str:
    name = exc.filename if exc.filename is not None else exc.filename2
    return str(name) if name is not None else what


def translate(exc: OSError, what: str = "h3kit's files") -> NotReady | None:
    """The NotReady an OSError from the environment stands for, or None when it is something else."""
    code = exc.errno
    if code not in HANDLED:
        return None
    path = _path(exc, what)
    if code in _NOSPACE:
        return NotReady(f"No space left on the disk that holds {path}.",
                        "Free space on that disk (or point H3KIT_HOME / --comfyui at a disk with room), "
                        "then run the command again: it picks up where it stopped.")
    if code == errno.EROFS:
        return NotReady(f"{path} is on a read-only file system.",
                        "Remount that disk read-write, or use a ComfyUI / H3KIT_HOME on a writable disk, "
                        "then run the command again.")
    if code == errno.EEXIST:
        return NotReady(f"{path} already exists and is not h3kit's, so h3kit will not write over it.",
                        "Move or delete it (it is not one of h3kit's files), then run the command again.")
    return NotReady(f"h3kit is not allowed to write {path} ({exc.strerror or 'permission denied'}).",
                    "Make it writable for this user (check its owner, 'chmod u+w', or 'chattr -i' for an "
                    "immutable file), or run h3kit as the folder's owner, then run the command again.")


@contextlib.contextmanager
def environment_errors(what: str = "h3kit's files"):
    """Raise NotReady (chained) for an OSError the environment caused; let every other error through."""
    try:
        yield
    except OSError as exc:
        err = translate(exc, what)
        if err is None:
            raise
        raise err from exc
