"""The disk probe: sequential read GB/s on the disk that holds the models, measured in this process.

Stdlib only, so it runs the same with or without a ComfyUI. The page-cache
helpers are the runner's own (`h3kit.bundled.h3k_calibration_runner`), so
the probe and the scaled DiT's streamed reads drop the cache the same way.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

from h3kit.bundled.h3k_calibration_runner import drop_page_cache, no_cache
from h3kit.core.files import nearest_existing

PROBE_BYTES = {"quick": 128 << 20, "full": 512 << 20}


def _probe_dir(folder: Path, scratch: Path | None, create: bool) -> Path:
    """Where the probe file goes: `scratch` when it is on `folder`'s device, else `folder`.

    With `create` the folders are made; without it (a dry run) the nearest
    folders that already exist are used, so the probe leaves no folder behind.
    """
    if create:
        folder.mkdir(parents=True, exist_ok=True)
    else:
        folder = nearest_existing(folder)
    if scratch is None:
        return folder
    if create:
        scratch.mkdir(parents=True, exist_ok=True)
    else:
        scratch = nearest_existing(scratch)
    return scratch if os.stat(scratch).st_dev == os.stat(folder).st_dev else folder


def measure_disk(folder: Path, nbytes: int, scratch: Path | None = None, *, create: bool = True) -> dict:
    """Sequential read GB/s on `folder`'s disk; never raises.

    Reads a temporary file written on the same file system (in `scratch`
    when it is on the same device, else in `folder`) after asking the OS to
    drop it from the page cache (posix_fadvise DONTNEED on Linux, F_NOCACHE
    on macOS). Where neither exists the figure may include cache hits, and
    `cache_dropped` says so. The file is removed afterwards.
    """
    folder = Path(folder)
    try:
        where = _probe_dir(folder, Path(scratch) if scratch is not None else None, create)
        fd, tmp = tempfile.mkstemp(prefix=".h3kit-disk-probe-", dir=where)
    except OSError as exc:
        return {"status": "error", "path": str(folder), "reason": f"cannot write a probe file: {exc}"}
    chunk = os.urandom(1 << 20)
    try:
        t0 = time.perf_counter()
        with os.fdopen(fd, "wb") as f:
            for _ in range(max(1, nbytes >> 20)):
                f.write(chunk)
            f.flush()
            os.fsync(f.fileno())
        write_s = time.perf_counter() - t0
        dropped = drop_page_cache(tmp) or sys.platform == "darwin"  # macOS: F_NOCACHE on the read handle
        t0 = time.perf_counter()
        read = 0
        with open(tmp, "rb", buffering=0) as f:
            no_cache(f.fileno())
            while True:
                block = f.read(8 << 20)
                if not block:
                    break
                read += len(block)
        read_s = time.perf_counter() - t0
        return {"status": "measured", "path": str(folder), "probe_dir": str(where), "bytes": read,
                "gb_per_s": read / read_s / 1e9, "write_gb_per_s": read / write_s / 1e9,
                "seconds": read_s, "cache_dropped": dropped}
    except OSError as exc:
        return {"status": "error", "path": str(folder), "reason": str(exc)}
    finally:
        try:
            os.unlink(tmp)
        except OSError:
            pass
