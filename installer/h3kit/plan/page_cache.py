"""What the page cache holds of a streamed DiT between steps, and what streaming then adds to a model call.

h3kit's streamed loader reads the streamed blocks through the OS's page
cache, in the same order every step. Whether the next step finds them there
depends on one comparison: the streamed bytes against the memory the cache
can keep, which is the RAM minus the run's own peak minus what the OS and
the other programs keep. A file that fits is read from the disk once and
from memory every step after. A file larger than that room is a cyclic
sequential scan bigger than the cache: with least-recently-used eviction
each page leaves before its next use, so every step reads everything from
the disk again -- the cached share is then about 0, not room / file.
Between the two (the file fits in what the run leaves, but not after the
OS's share) the outcome depends on what else runs; the share is taken
linearly across that band.

The planner and calibration both use `stream_overhead` on this share: the
cached part costs the in-place read from memory, the rest the disk's read
(what a model call waits for it, behind the read-ahead). The planner has
only the throughput table's two figures; calibration measures both.

Pure functions: no file, no clock.
"""

from __future__ import annotations

from dataclasses import dataclass

from h3kit.data.fingerprint import Fingerprint

FITS, PARTLY, DOES_NOT_FIT = "fits", "partly", "does not fit"


@dataclass(frozen=True)
class CacheShare:
    share: float  # of the bytes the loader reads each step, the share the page cache serves
    case: str  # FITS | PARTLY | DOES_NOT_FIT
    streamed_bytes: int  # what the loader reads each step (the blocks not kept resident)
    ram_bytes: int
    run_peak_bytes: int
    os_keep_bytes: int

    @property
    def room_bytes(self) -> int:
        """What the page cache can keep for the file: RAM - the run's peak - what the OS keeps."""
        return max(0, self.ram_bytes - self.run_peak_bytes - self.os_keep_bytes)

    def to_json(self) -> dict:
        return {"share": round(self.share, 4), "case": self.case, "streamed_bytes": self.streamed_bytes,
                "ram_bytes": self.ram_bytes, "run_peak_bytes": self.run_peak_bytes,
                "os_keep_bytes": self.os_keep_bytes, "room_bytes": self.room_bytes, "sentence": sentence(self)}


def cache_share(streamed_bytes: int, ram_bytes: int, run_peak_bytes: int, os_keep_bytes: int) -> CacheShare:
    """The share of the streamed bytes that stays in the page cache from one step to the next (module docstring)."""
    streamed, ram = max(0, int(streamed_bytes)), max(0, int(ram_bytes))
    peak, keep = max(0, int(run_peak_bytes)), max(0, int(os_keep_bytes))
    left = ram - peak  # what the run leaves of the RAM
    room = left - keep
    if streamed <= room:
        share, case = 1.0, FITS
    elif streamed >= left or keep == 0:
        share, case = 0.0, DOES_NOT_FIT
    else:
        share, case = (left - streamed) / keep, PARTLY
    return CacheShare(share, case, streamed, ram, peak, keep)


def os_keep(fingerprint: Fingerprint | None, headroom: int) -> int:
    """What the OS and the other programs keep: the profile's headroom, or what they use now when that is more
    (total - available in the fingerprint; the page cache is counted as available, since it gives way)."""
    total = fingerprint.memory.total_bytes if fingerprint is not None else None
    avail = fingerprint.memory.available_bytes if fingerprint is not None else None
    used = int(total) - int(avail) if isinstance(total, int) and isinstance(avail, int) and avail <= total else 0
    return max(int(headroom or 0), used)


def stream_overhead(cached: float, disk_cost: float, cached_cost: float, streamed: float = 1, blocks: float = 1) -> float:
    """The share streaming adds to one model call: `streamed` of the call's `blocks` are streamed; of their bytes
    the `cached` share costs `cached_cost` (the in-place read from memory, per unit of compute) and the rest
    `disk_cost` (waiting for the disk behind the read-ahead, plus that same read)."""
    c = max(0.0, min(1.0, float(cached)))
    per = c * max(0.0, float(cached_cost)) + (1.0 - c) * max(0.0, float(disk_cost))
    return per * max(0.0, min(float(streamed), float(blocks))) / float(blocks) if blocks else 0.0


def bypassed_overhead(fig: dict, compute_s: float, widen_s: float) -> float:
    """The share streaming adds to a streamed block read past the page cache (the loader's page_cache "bypass",
    for a file this module says does not fit): the disk reads the next blocks the whole time while the model
    computes and widens each block as it arrives, so `fig` is plan.prefetch.prefetch_for at the compute plus
    the widening. Per block the model spends compute + widen + its wait; over the compute alone that is
    widen / compute plus the wait, w / (1 - w) of (compute + widen) for the share w of time waiting."""
    compute, widen = max(0.0, float(compute_s)), max(0.0, float(widen_s))
    if compute <= 0:
        return 0.0
    wait = min(max(float(fig.get("io_wait_fraction") or 0.0), 0.0), 0.99)
    return round(widen / compute + wait / (1.0 - wait) * (compute + widen) / compute, 4)


def loader_choice(cs: CacheShare, setting: str = "auto") -> tuple[bool, str]:
    """(bypass, the rationale's sentence): the streamed loader's page_cache input. The settings' use / bypass
    when they name one; else bypass exactly when the cache cannot hold the streamed blocks (DOES_NOT_FIT)."""
    what = f"The loader reads the {_gb(cs.streamed_bytes)} of blocks streamed each step"
    if setting in ("use", "bypass"):
        bypass = setting == "bypass"
        return bypass, (f"{what} {'past' if bypass else 'through'} the page cache (page_cache: {setting}, from "
                        "the settings).")
    if cs.case == DOES_NOT_FIT:
        return True, (f"{what} past the page cache (page_cache: bypass; it can keep {_gb(cs.room_bytes)} next to "
                      "the run): every step reads them from the disk anyway, and through the cache that costs a "
                      "copy out of it and the reclaim of the pages it evicts, on the cores the compute needs.")
    return False, f"{what} through the page cache (page_cache: use)."


def _gb(n: float) -> str:
    return f"{n / 1e9:.1f} GB"


def sentence(cs: CacheShare) -> str:
    """Which case this machine is in, with the numbers (one sentence for the plan and the report)."""
    sums = (f"{_gb(cs.ram_bytes)} RAM - {_gb(cs.run_peak_bytes)} run peak - {_gb(cs.os_keep_bytes)} the OS and "
            f"other programs keep = {_gb(cs.room_bytes)}")
    what = f"the {_gb(cs.streamed_bytes)} of DiT blocks streamed each step"
    if cs.case == FITS:
        return (f"The page cache holds {what} ({sums}), so after the first step they are read from memory, "
                "not from the disk.")
    if cs.case == DOES_NOT_FIT:
        return (f"The page cache cannot hold {what} ({sums}): a sequential scan larger than the cache misses "
                "every time, so every step reads them from the disk.")
    return (f"The page cache holds part of {what} ({sums}, but {_gb(cs.ram_bytes - cs.run_peak_bytes)} without "
            f"what the OS keeps): about {cs.share:.0%} is counted as read from memory, the rest from the disk.")
