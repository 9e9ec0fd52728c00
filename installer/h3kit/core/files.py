"""Files written safely and recognised later: atomic writes, hashes, free space.

Every write that a reader may see half-done (config, reports, records, the
profile inside the pack) goes through `atomic_write`: a temporary file in the
same folder, flushed, then renamed over the target, so a crash leaves either
the old file or the new one, never a torn one.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from pathlib import Path

CHUNK = 1 << 20


def atomic_write(path: str | os.PathLike, data: bytes | str, mode: int | None = None) -> Path:
    """Write `data` (str is UTF-8 with \\n line ends) to `path` atomically; returns the path."""
    path = Path(path)
    raw = data.encode("utf-8") if isinstance(data, str) else bytes(data)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}-", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(raw)
            f.flush()
            os.fsync(f.fileno())
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return path


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
