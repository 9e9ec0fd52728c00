"""How deep h3kit's streamed loader reads ahead, and what the reads add to a model call.

The pipeline arithmetic the planner's docs and calibration use: one reader
thread fills a ring of buffers in block order while compute consumes them, so
a block costs max(compute, read) in the steady state (`call_wait_s`
simulates it). `prefetch_for` picks the depth at a disk's read rate;
`measured_pass_overhead` turns calibration's measured figures into the share
streaming adds to each model call.
"""

from __future__ import annotations

from typing import Mapping

from h3kit.plan.loader_facts import MAX_PREFETCH

# A read may run this many times slower than its measured mean (other I/O, a cold extent) before
# the block waits: a read within 1/JITTER of a block's compute needs one buffer in flight, a closer one two.
JITTER = 2.0


def call_wait_s(read_s: float, compute_s: float, blocks: int, resident: int, depth: int,
                fixed_s: float = 0.0, calls: int = 4) -> tuple[float, float]:
    """(seconds one model call waits for reads, seconds the call takes) in the steady state.

    The streamed loader's order (nodes/h3kit_streaming/logic.py): the first `resident` blocks stay in
    memory; one reader reads the others in model order, wrapping to the next call, at most `depth`
    ahead of the block computing -- a read may start once compute has reached the block `depth`
    streamed blocks before it. `fixed_s` is the call's work outside the blocks (embeddings, final
    layer), done before block 0. The last of `calls` simulated calls is reported."""
    streamed = [b >= resident for b in range(blocks)]
    read_end: list[float] = []
    compute_start: list[float] = []
    t, wait, call_start = 0.0, 0.0, 0.0
    for _ in range(calls):
        call_start, wait = t, 0.0
        t += fixed_s
        for b in range(blocks):
            if streamed[b]:
                k = len(read_end)
                start = max(read_end[-1] if read_end else 0.0,
                            compute_start[k - depth] if k >= depth else 0.0)
                read_end.append(start + read_s)
                if read_end[k] > t:
                    wait += read_end[k] - t
                    t = read_end[k]
                compute_start.append(t)
            t += compute_s
    return wait, t - call_start


def prefetch_for(disk_bytes_per_s: float, block_bytes: int, block_compute_s: float,
                 max_blocks: int = MAX_PREFETCH, *, blocks: int | None = None, resident_blocks: int = 0,
                 fixed_s: float = 0.0) -> dict:
    """Read-ahead depth for one block's compute time at the disk's read rate.

    read = block_bytes / rate. The depth is the smallest (up to `max_blocks`) at which the steady-state
    wait stops falling (call_wait_s), and at least 2 when a read takes over 1/JITTER of a block's
    compute, so a read that runs slower than measured still hides. Without `blocks` the model is a
    long run of streamed blocks; with `blocks` and `resident_blocks` (the first ones, as the loader
    keeps them) and `fixed_s`, the resident stretch and the fixed work give the reader time to fill
    a deeper ring. io_wait_fraction is the share of a call spent waiting for reads; disk_bound when
    that is above 1%. Also: "ring_blocks" (buffers held at once: the block computing plus those read
    ahead) and, with `blocks`, "hide_resident_blocks" (the fewest resident blocks at which the reads
    hide with `max_blocks` read ahead; None when even all but one do not)."""
    if not block_bytes or block_bytes <= 0:
        raise ValueError("block_bytes must be positive")
    if disk_bytes_per_s is None or disk_bytes_per_s <= 0:
        raise ValueError("disk_bytes_per_s must be positive")
    compute = max(float(block_compute_s or 0.0), 0.0)
    cap = max(1, min(int(max_blocks), MAX_PREFETCH))
    read = block_bytes / float(disk_bytes_per_s)
    n = int(blocks) if blocks else 16
    resident = max(0, min(int(resident_blocks or 0), n - 1)) if blocks else 0
    fixed = max(float(fixed_s or 0.0), 0.0) if blocks else 0.0
    waits = [call_wait_s(read, compute, n, resident, d, fixed) for d in range(1, cap + 1)]
    best = min(w for w, _ in waits)
    depth = next(d for d, (w, total) in enumerate(waits, 1) if w <= best + 0.005 * total)
    if read * JITTER > compute:
        depth = min(max(depth, 2), cap)
    wait, total = waits[depth - 1]
    fraction = wait / total if total > 0 else (1.0 if read > 0 else 0.0)
    out = {"prefetch_blocks": depth, "io_wait_fraction": round(fraction, 4), "read_s_per_block": read,
           "compute_s_per_block": compute, "disk_bound": fraction > 0.01, "ring_blocks": depth + 1}
    if blocks:
        out["hide_resident_blocks"] = next((r for r in range(n) if _hidden(call_wait_s(read, compute, n, r, cap, fixed))),
                                           None)
    return out


def measured_pass_overhead(fig: Mapping, streamed_share: float = 1.0, copy_s_per_block: float | None = None) -> float:
    """The share h3kit's loader adds to a model call, from measured figures instead of the table's.

    `fig` is prefetch_for's result at the measured disk rate and block compute time: its io_wait_fraction
    w of a call waiting for the disk adds w / (1 - w) of the compute. `copy_s_per_block` is the time the
    model waits while a block is read into its buffers (the CPU's in-place read, done with the compute
    stopped; None or 0 where a helper thread overlaps it, as on a GPU). Both scale with the share of
    blocks streamed (resident blocks cost neither)."""
    wait = min(max(float(fig.get("io_wait_fraction") or 0.0), 0.0), 0.99)
    compute = float(fig.get("compute_s_per_block") or 0.0)
    copy = float(copy_s_per_block or 0.0) / compute if compute > 0 else 0.0
    return round((wait / (1.0 - wait) + copy) * max(0.0, min(1.0, float(streamed_share))), 4)


def _hidden(wait_total: tuple[float, float]) -> bool:
    wait, total = wait_total
    return wait <= 0.01 * total
