"""What every measurement shares: progress lines, sampled peak RSS, medians, random inputs, the page cache."""

from __future__ import annotations

import json
import os
import statistics
import sys
import threading
import time

from . import _numpy

QUANT_BLOCK = 32  # values per q8_0 / q4_0 block (ggml's layout)


class Progress:
    """Appends {"stage", "done", "total"} lines to a file h3kit follows; a no-op without one."""

    def __init__(self, path: str | None):
        self.path = path

    def __call__(self, stage: str, done: int, total: int) -> None:
        if not self.path:
            return
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(json.dumps({"stage": stage, "done": done, "total": total, "t": time.time()}) + "\n")


def current_rss() -> int | None:
    """This process's resident set in bytes, or None where it cannot be read cheaply."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError, AttributeError):
        pass
    try:
        import psutil

        return psutil.Process().memory_info().rss
    except Exception:  # psutil missing or refused: fall back to the lifetime peak
        try:
            import resource

            peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
            return peak if sys.platform == "darwin" else peak * 1024
        except Exception:
            return None


class PeakSampler:
    """Samples RSS every few milliseconds in a thread while a `with` block runs."""

    def __init__(self, interval: float = 0.005):
        self.interval = interval
        self.peak = 0
        self._stop = threading.Event()

    def __enter__(self):
        self.start = current_rss() or 0
        self.peak = self.start
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()
        return self

    def _loop(self):
        while not self._stop.is_set():
            rss = current_rss()
            if rss and rss > self.peak:
                self.peak = rss
            self._stop.wait(self.interval)

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        rss = current_rss()
        if rss and rss > self.peak:
            self.peak = rss
        return False


def drop_page_cache(path: str) -> bool:
    """Ask the OS to forget a written file's cached pages, so the next read comes from the disk.

    Linux (and other POSIX systems with posix_fadvise): fsync, then
    POSIX_FADV_DONTNEED. Returns False where that does not exist (macOS,
    Windows): readers there may be served from memory, and reports say so.
    """
    if not hasattr(os, "posix_fadvise"):
        return False
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


def no_cache(fd: int) -> None:
    """macOS: read this handle around the unified buffer cache (F_NOCACHE); elsewhere nothing."""
    if sys.platform == "darwin":
        import fcntl

        try:
            fcntl.fcntl(fd, 48, 1)  # F_NOCACHE from sys/fcntl.h; Python's fcntl module lacks the name
        except OSError:
            pass


def random_floats(n: int, seed: int, scale: float = 1.0):
    """n pseudo-random float32 values of about `scale`: normal (numpy) or uniform in [-scale, scale) (array('f'))."""
    np = _numpy.np
    if np is not None:
        return (np.random.default_rng(seed).standard_normal(n, dtype=np.float32) * scale).astype(np.float32)
    import array
    import random

    rnd = random.Random(seed)
    return array.array("f", (rnd.uniform(-scale, scale) for _ in range(n)))


def median_seconds(fn, repeats: int) -> float:
    """The median wall time of `repeats` calls of `fn`, after one warm-up call."""
    fn()  # warm caches and thread pools
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)
