"""The disk probe: how fast the folder holding the weights reads when the page cache does not help.

Stdlib only, so it runs the same with or without a ComfyUI. A probe file is
written on the weights' file system and dropped from the page cache before it
is read back: posix_fadvise(POSIX_FADV_DONTNEED) on the file (any user, Linux;
the runner's own `drop_page_cache`, so the probe and the scaled DiT's streamed
reads drop it the same way), F_NOCACHE on macOS, and as root on Linux
/proc/sys/vm/drop_caches when the file's pages are still resident after that.
Whether the pages really left is checked with mincore(2), not assumed: a
figure read from memory is marked `cache_dropped: false` and says so.

With a native library, the probe file (warm by then) is also read the way
the streamed loader reads a block on a CPU: straight into an fp32 buffer,
widened from bf16 in place (`direct_read_rate`). That copy happens while
the model waits, so it is part of what streaming costs a CPU step.

`streaming_block` turns the measured rate and a block's compute time into the
calibration document's `streaming` block (h3kit.plan.prefetch.prefetch_for
does the arithmetic, so the plan and calibration agree).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import mmap
import os
import sys
import tempfile
import time
from pathlib import Path

from h3kit.bundled.h3k_calibration_runner import drop_page_cache, no_cache
from h3kit.core.files import nearest_existing

PROBE_BYTES = {"quick": 128 << 20, "full": 512 << 20}
READ_CHUNK = 8 << 20
# Pages still resident after the drop, as a share of the file, above which the read is not the disk's.
RESIDENT_LIMIT = 0.05
NOT_DROPPED = "cache not dropped: the figure may be the page cache's"
DROP_CACHES = "/proc/sys/vm/drop_caches"


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


def resident_fraction(path: str) -> float | None:
    """Share of `path`'s pages in the page cache (mincore on a read-only mapping); None where it cannot tell."""
    size = os.path.getsize(path)
    if size == 0 or sys.platform == "win32":
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
        libc.mmap.restype = ctypes.c_void_p
        libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                              ctypes.c_long]
        libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
        libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
    except (OSError, AttributeError):
        return None
    pages = -(-size // mmap.PAGESIZE)
    vec = (ctypes.c_ubyte * pages)()
    fd = os.open(path, os.O_RDONLY)
    try:
        addr = libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        if addr in (None, ctypes.c_void_p(-1).value):
            return None
        try:
            if libc.mincore(ctypes.c_void_p(addr), size, vec) != 0:
                return None
        finally:
            libc.munmap(ctypes.c_void_p(addr), size)
    finally:
        os.close(fd)
    return sum(1 for b in vec if b & 1) / pages


MEMORY_FS = ("tmpfs", "ramfs", "devtmpfs")


def fs_type(path: str) -> str | None:
    """The file system type of the mount holding `path` (Linux /proc/self/mounts), else None."""
    try:
        with open("/proc/self/mounts", encoding="utf-8", errors="replace") as f:
            mounts = [line.split() for line in f]
    except OSError:
        return None
    real = os.path.realpath(path)
    best = None
    for parts in mounts:
        if len(parts) < 3:
            continue
        point = parts[1].replace("\\040", " ")
        if (real == point or real.startswith(point.rstrip("/") + "/")) and (best is None or len(point) >= len(best[0])):
            best = (point, parts[2])
    return best[1] if best else None


def _drop_all_caches() -> bool:
    """Root on Linux: write back dirty pages, then drop the clean page cache of the whole machine."""
    if not sys.platform.startswith("linux") or os.geteuid() != 0:
        return False
    try:
        os.sync()
        with open(DROP_CACHES, "w", encoding="ascii") as f:
            f.write("1\n")
        return True
    except OSError:
        return False


def drop_cache(path: str, *, drop_all: bool = True) -> tuple[bool, str | None, float | None]:
    """(dropped, how, resident share after) for one file, checked with mincore where it exists.

    `drop_all` lets root fall back to dropping the whole machine's page cache; never on a memory file
    system, whose pages are the files themselves."""
    how = "posix_fadvise DONTNEED" if drop_page_cache(path) else None
    if how is None and sys.platform == "darwin":
        how = "F_NOCACHE"  # applied to the read handle; the pages may stay, the reads bypass them
    resident = resident_fraction(path)
    if (drop_all and resident is not None and resident > RESIDENT_LIMIT and fs_type(path) not in MEMORY_FS
            and _drop_all_caches()):
        how, resident = "drop_caches", resident_fraction(path)
    if resident is None:  # no way to look: trust the call that succeeded
        return how is not None, how, None
    return resident <= RESIDENT_LIMIT or how == "F_NOCACHE", how, resident


def _read_all(path: str) -> tuple[int, float]:
    read = 0
    t0 = time.perf_counter()
    with open(path, "rb", buffering=0) as f:
        no_cache(f.fileno())
        while True:
            block = f.read(READ_CHUNK)
            if not block:
                break
            read += len(block)
    return read, time.perf_counter() - t0


DIRECT_READ_BYTES = 64 << 20  # of the probe file; the fp32 buffer is twice that


def direct_read_rate(library_path, path, nbytes: int = DIRECT_READ_BYTES, repeats: int = 5) -> float | None:
    """File bytes per second the native library reads `path` (from the page cache) straight into an fp32
    buffer as bf16 widened in place, on every core: the streamed loader's CPU read (h3k_streamer_read).
    The fastest of `repeats`: a copy on every core is what other work on the machine slows most (three
    quick calibrations measured 5.6, 5.6 and 2.8 GB/s with their medians), and it only ever slows it.
    None when there is no library or it cannot (a probe never raises)."""
    if library_path is None:
        return None
    try:
        from h3kit import native

        n = min(int(nbytes), os.path.getsize(path)) // 2 * 2
        if n <= 0:
            return None
        buf = bytearray(2 * n)
        times = []
        with native.Library(library_path).streamer(path, read_size=1 << 20, depth=1) as s:
            for _ in range(max(1, repeats)):
                t0 = time.perf_counter()
                s.read_into_buffer(0, n, buf, "BF16", "F32")
                times.append(time.perf_counter() - t0)
        return n / max(min(times), 1e-9)
    except Exception:  # noqa: BLE001 - an old library, no memory: the figure is simply not there
        return None


def measure_disk(folder: Path, nbytes: int, scratch: Path | None = None, *, create: bool = True,
                 drop_all: bool = True, library=None) -> dict:
    """Sequential read speed on `folder`'s disk with the page cache dropped; never raises.

    Returns {"status": "measured", "path", "probe_dir", "bytes", "read_bytes_per_s", "gb_per_s" (the same
    in GB/s), "cached_read_bytes_per_s" (a second read, from the page cache), "write_gb_per_s", "seconds",
    "cache_dropped", "cache_how", "resident_after_drop", "note", "direct_read_bytes_per_s" (with `library`,
    the native library's path: direct_read_rate on the probe, None without)} or {"status": "error", "path",
    "reason"}. The file is written in `scratch` when that is on the same device, else in `folder`, and
    removed; `drop_all` as in drop_cache."""
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
        dropped, how, resident = drop_cache(tmp, drop_all=drop_all)
        read, read_s = _read_all(tmp)
        _, cached_s = _read_all(tmp)  # now from memory: the ceiling a page-cache hit gives
        rate = read / max(read_s, 1e-9)  # a finite figure: the document is JSON
        out = {"status": "measured", "path": str(folder), "probe_dir": str(where), "bytes": read,
               "read_bytes_per_s": rate, "gb_per_s": rate / 1e9, "write_gb_per_s": read / max(write_s, 1e-9) / 1e9,
               "cached_read_bytes_per_s": read / cached_s if cached_s > 0 else None,
               "seconds": read_s, "cache_dropped": dropped, "cache_how": how,
               "resident_after_drop": resident, "direct_read_bytes_per_s": direct_read_rate(library, tmp)}
        kind = fs_type(tmp)
        if kind in MEMORY_FS:
            out["fs_type"] = kind
        if not dropped:
            out["note"] = NOT_DROPPED + (f" ({where} is on {kind}, which lives in memory)" if kind in MEMORY_FS else "")
        return out
    except OSError as exc:
        return {"status": "error", "path": str(folder), "reason": str(exc)}
    finally:
        try:
            os.unlink(tmp)
        except OSError:
            pass


def streaming_block(disk: dict, block_bytes: int, compute_s_per_block: float | None, *,
                    max_blocks: int = 8) -> dict | None:
    """The calibration document's `streaming` block (docs/calibrate.md) from a measured disk and the
    measured seconds one DiT block computes: {enabled, disk_bytes_per_s, cache_dropped, compute_s_per_block,
    read_s_per_block, io_wait_fraction, prefetch_blocks, disk_bound, resident_blocks}; None when either
    figure is missing (nothing to decide from)."""
    from h3kit.plan.prefetch import prefetch_for

    rate = disk.get("read_bytes_per_s") or (disk.get("gb_per_s") or 0) * 1e9
    if disk.get("status") != "measured" or not rate or not block_bytes or compute_s_per_block is None:
        return None
    fig = prefetch_for(rate, int(block_bytes), float(compute_s_per_block), max_blocks)
    out = {"enabled": True, "disk_bytes_per_s": rate, "cache_dropped": bool(disk.get("cache_dropped")), **fig}
    if not out["cache_dropped"]:
        out["note"] = NOT_DROPPED
    return out
