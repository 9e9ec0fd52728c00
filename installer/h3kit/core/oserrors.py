"""The one place where errors from the environment become the contract's errors.

A full disk, a read-only file system, a file h3kit may not write, or a folder
already in the way are not bugs: `environment_errors` turns the OSError into
`NotReady` (exit 3) with one sentence that names the path and a fix. The CLI
wraps every command in it; anything else still escapes as an internal error.
"""

from __future__ import annotations

import contextlib
import errno
import os
from pathlib import Path

from h3kit.core import files
from h3kit.core.errors import NotReady
from h3kit.core.paths import locations
from h3kit.core.units import human_bytes

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
        return no_space(path if (exc.filename or exc.filename2) is not None else None, what=what)
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


def _home_of(path: Path) -> tuple[str, Path] | None:
    """('h3kit's home', folder) when `path` is in one of h3kit's own folders, else None."""
    loc = locations()
    folders = ([("h3kit's home (H3KIT_HOME)", loc.config_dir)] if loc.source == "H3KIT_HOME" else
               [("h3kit's state folder", loc.state_dir), ("h3kit's cache folder", loc.cache_dir),
                ("h3kit's config folder", loc.config_dir)])
    for name, folder in folders:
        if path == folder or folder in path.parents:
            return name, folder
    return None


def no_space(path: str | os.PathLike | None, *, need: int | None = None, what: str = "h3kit's files") -> NotReady:
    """The full-disk sentence: which folder (h3kit's home named as such), the bytes free and needed where known."""
    if path is None:
        return NotReady(f"No space left on the disk that holds {what}.",
                        "Free space on that disk (or point H3KIT_HOME / --comfyui at a disk with room), "
                        "then run the command again: it picks up where it stopped.")
    p = Path(path).absolute()
    free = files.free_bytes(p)
    figures = ", ".join(x for x in (f"{human_bytes(need)} needed" if need else "",
                                    f"{human_bytes(free)} free" if free is not None else "") if x)
    home = _home_of(p)
    where = f"{home[0]} {home[1]}" if home else str(files.nearest_existing(p) if not p.exists() else p)
    detail = f" (writing {p})" if home and p != home[1] else ""
    move = "point H3KIT_HOME at a disk with room" if home else "point --comfyui at a disk with room"
    return NotReady(f"No space left on the disk that holds {where}{detail}" + (f": {figures}." if figures else "."),
                    f"Free space on that disk (or {move}), then run the command again: it picks up where it stopped.",
                    details={"path": str(p), "free_bytes": free, "need_bytes": need, "h3kit_home": bool(home)})


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
