"""`bench_streaming.py --floor`: a streamed step at H3's real block width against its floor, in one run.

The floor of a streamed step is the larger of two times measured here:

- compute alone: the same blocks with their weights resident. A DiT of
  `--resident-blocks` blocks of the same width (scripts/make_h3_dit.py) is
  loaded by the streamed loader with every block kept once read; after a
  warm-up, the step time and the time inside the blocks (the loader's own
  block hooks) give the fixed part and the per-block part, and compute
  alone for the big DiT is fixed + blocks x per-block (its blocks are all
  the same shape).
- the disk alone: the big DiT's block bytes read per step over the rate a
  plain sequential read of the whole file gets with its pages dropped from
  the page cache (posix_fadvise DONTNEED, checked with mincore; never the
  whole machine's cache).

The streamed step is a 1-step prompt of h3kit's text-to-video graph through
H3kitStreamedDiTLoader on the big DiT (--blocks, 30 by default: 24.8 GB,
larger than a 23 GB machine's RAM), its pages dropped first, timed by
bench_streaming's wrapper node; the rounds go streamed, disk alone,
streamed, so other work on the machine falls on both alike. The text
encoder is the tests' tiny one, so the DiT's text dim is 48 (condition_proj
only; every block has the real shapes).

Targets: streamed step / floor <= 1.25, and the streamed process's peak RSS
(psutil, sampled from outside) under 40% of the machine's RAM.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

FLOOR_TARGET, RSS_SHARE_TARGET = 1.25, 0.40
MAKE_DIT = Path(__file__).resolve().parent / "make_h3_dit.py"


def write_dit(python: Path, folder: Path, blocks: int) -> tuple[Path, dict]:
    """The real-width random DiT of `blocks` blocks (kept when one of the same size is there): (path, facts)."""
    path = folder / f"h3real{blocks}_dit_bf16.safetensors"
    argv = [str(python), str(MAKE_DIT), "--out", str(path), "--blocks", str(blocks), "--text-dim", "48", "--json"]
    planned = json.loads(_run(argv + ["--dry-run"], 120))
    if path.is_file() and path.stat().st_size == planned["bytes"]:
        return path, planned
    folder.mkdir(parents=True, exist_ok=True)
    return path, dict(planned, **json.loads(_run(argv, 3600)))


def _run(argv: list[str], timeout: float) -> str:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        raise RuntimeError(f"{Path(argv[1]).name} failed ({done.returncode}): {done.stderr[-2000:]}")
    return done.stdout.strip().splitlines()[-1]


def drop(path: Path) -> float | None:
    """Drop `path`'s pages from the page cache (that file only); the share still resident after."""
    from h3kit.calibrate.disk import drop_cache

    dropped, _, resident = drop_cache(str(path), drop_all=False)
    if not dropped:
        raise RuntimeError(f"could not drop {path.name} from the page cache (resident share {resident})")
    return resident


def read_alone(path: Path, chunk: int = 16 << 20) -> dict:
    """Read all of `path` from the disk (pages dropped first): bytes, seconds, bytes/s."""
    drop(path)
    buf = bytearray(chunk)
    view = memoryview(buf)
    got = 0
    t0 = time.perf_counter()
    with open(path, "rb", buffering=0) as f:
        while True:
            n = f.readinto(view)
            if not n:
                break
            got += n
    seconds = time.perf_counter() - t0
    drop(path)
    return {"bytes": got, "seconds": round(seconds, 2), "bytes_per_s": got / max(1e-9, seconds)}


def _stats(bench, comfy: Path) -> dict:
    return bench._stats(comfy) or {}


def run(bench, a) -> int:
    """The measurement; prints the JSON document (or a summary) and returns the exit code."""
    import psutil
    import comfy_h3
    from h3kit.comfyui import client

    real, python, why = comfy_h3.h3_comfyui()
    if real is None:
        print(f"bench_streaming: {why}", file=sys.stderr)
        return 3
    t_start = time.perf_counter()
    a.workdir.mkdir(parents=True, exist_ok=True)
    library = bench.build_library(a.workdir / "home")
    comfy = bench.make_comfy(real, a.workdir / "comfy", library, python)
    models = comfy / "models" / "diffusion_models"
    big, big_facts = write_dit(python, models, a.blocks)
    small, small_facts = write_dit(python, models, a.resident_blocks)
    ram = psutil.virtual_memory().total
    canvas = (a.canvas, a.canvas)
    stream = {"preload_bytes": 0, "shard_size_bytes": a.shard_size_bytes, "prefetch_blocks": a.prefetch_blocks}
    resident = {"preload_bytes": 1 << 40, "shard_size_bytes": 0, "prefetch_blocks": 1}

    def prompt(server, dit, st, steps, seed, name):
        api = bench.graph(dit.name, st, steps, seed, canvas=canvas, frames=a.frames, prefix=f"floor/{name}", timed=name)
        r = client.run_workflow(server, api, timeout=7200)
        if not r["ran"]:
            raise RuntimeError(f"prompt {name} failed: {r['message']}\n{server.log_tail(3000)}")
        return bench.call_times(server.workdir, name)

    # compute alone: every block resident, warmed up, then timed
    with client.ComfyServer(comfy, python, ["--cpu"], a.workdir / "run-resident") as server:
        (server.workdir / "output" / "bench_calls.jsonl").unlink(missing_ok=True)
        server.start(timeout=300)
        prompt(server, small, resident, 1, 1, "resident-warm")
        steps = prompt(server, small, resident, a.steps, 3, "resident")
        st = _stats(bench, comfy)
        resident_rss = server.peak_rss_bytes
    calls = max(1, st.get("model_calls") or len(steps))
    per_block = st["compute_s"] / calls / a.resident_blocks
    fixed = max(0.0, statistics.median(steps) - a.resident_blocks * per_block)
    compute_alone = fixed + a.blocks * per_block

    # streamed, the disk alone, streamed again
    rounds, reads, cold = [], [], []
    with client.ComfyServer(comfy, python, ["--cpu"], a.workdir / "run-streamed") as server:
        (server.workdir / "output" / "bench_calls.jsonl").unlink(missing_ok=True)
        server.start(timeout=300)
        for r in range(a.rounds):
            if r:
                reads.append(read_alone(big))
            cold.append(drop(big))
            t = prompt(server, big, stream, 1, 5 + r, f"streamed{r}")
            rounds.append({"seconds": round(t[0], 2), "stats": _stats(bench, comfy)})
        if not reads:
            reads.append(read_alone(big))
        streamed_rss = server.peak_rss_bytes
    block_bytes = big_facts["block_bytes"]
    bytes_per_step = statistics.median(r["stats"].get("bytes_read", 0) for r in rounds)
    rate = statistics.median(x["bytes_per_s"] for x in reads)
    disk_alone = bytes_per_step / rate
    floor = max(compute_alone, disk_alone)
    streamed = statistics.median(r["seconds"] for r in rounds)
    waits = [r["stats"].get("wait_s", 0.0) for r in rounds]
    doc = {"schema": "h3kit.bench_streaming_floor/1", "ram_bytes": ram,
           "dit": {"path": big.name, "bytes": big_facts["bytes"], "blocks": a.blocks, "block_bytes": block_bytes,
                   "dims": big_facts["dims"], "larger_than_ram": big_facts["bytes"] > ram},
           "canvas": [a.canvas, a.canvas, a.frames], "stream": stream,
           "compute_alone": {"seconds_per_step": round(compute_alone, 2), "per_block_s": round(per_block, 3),
                             "fixed_s": round(fixed, 2), "resident_blocks": a.resident_blocks,
                             "resident_step_seconds": [round(x, 2) for x in steps],
                             "peak_rss_bytes": resident_rss},
           "disk_alone": {"seconds_per_step": round(disk_alone, 2), "bytes_per_step": bytes_per_step,
                          "bytes_per_s": round(rate), "reads": reads},
           "streamed": {"seconds_per_step": streamed, "rounds": [r["seconds"] for r in rounds],
                        "wait_s": [round(w, 2) for w in waits],
                        "compute_s": [round(r["stats"].get("compute_s", 0.0), 2) for r in rounds],
                        "read_mode": rounds[0]["stats"].get("read_mode"), "resident_share_at_start": cold,
                        "peak_rss_bytes": streamed_rss},
           "floor_seconds_per_step": round(floor, 2), "floor_is": "compute" if compute_alone >= disk_alone else "disk",
           "ratio_to_floor": round(streamed / floor, 3), "peak_rss_share_of_ram": round(streamed_rss / ram, 3)}
    doc["targets"] = {f"ratio_to_floor <= {FLOOR_TARGET}": doc["ratio_to_floor"] <= FLOOR_TARGET,
                      f"peak_rss_share_of_ram < {RSS_SHARE_TARGET}": doc["peak_rss_share_of_ram"] < RSS_SHARE_TARGET}
    doc["seconds"] = round(time.perf_counter() - t_start, 1)
    if a.json:
        print(json.dumps(doc, indent=2))
    else:
        print(f"{a.blocks} blocks ({big_facts['bytes'] / 1e9:.1f} GB, RAM {ram / 1e9:.1f} GB): compute alone "
              f"{compute_alone:.1f} s, disk alone {disk_alone:.1f} s ({rate / 1e9:.2f} GB/s), streamed "
              f"{streamed:.1f} s: {doc['ratio_to_floor']:.2f}x the floor; peak RSS {streamed_rss / 1e9:.2f} GB "
              f"({doc['peak_rss_share_of_ram']:.0%} of RAM)")
    return 0 if all(doc["targets"].values()) else 1
