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
  whole machine's cache), or the rate of the same read past the page cache
  (O_DIRECT), whichever is faster.

The streamed step is a 1-step prompt of h3kit's text-to-video graph through
H3kitStreamedDiTLoader on the big DiT (--blocks, 30 by default: 24.7 GB,
more than the page cache can keep next to the run on a 25 GB machine), its
pages dropped first, timed by bench_streaming's wrapper node, with the
loader's page_cache "bypass" (what the plan picks for such a file) and, with
--page-cache both (the default), "use" in turn beside it, each in its own
ComfyUI; the rounds go streamed, disk alone, streamed, so other work on the
machine falls on all alike. The targets are judged on "bypass". The text
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


def read_alone_uncached(path: Path, chunk: int = 16 << 20) -> dict | None:
    """Read all of `path` past the page cache (O_DIRECT, as the loader's page_cache "bypass" does): bytes,
    seconds, bytes/s; None where the system or file system has no such reads."""
    import mmap
    import os

    flag = getattr(os, "O_DIRECT", None)
    if flag is None:
        return None
    try:
        fd = os.open(path, os.O_RDONLY | flag)
    except OSError:
        return None
    buf = mmap.mmap(-1, chunk)  # page-aligned, as O_DIRECT wants
    got, size = 0, path.stat().st_size
    t0 = time.perf_counter()
    try:
        while got < size:
            n = os.preadv(fd, [buf], got)
            if n <= 0:
                break
            got += n
    finally:
        os.close(fd)
        buf.close()
    seconds = time.perf_counter() - t0
    return {"bytes": got, "seconds": round(seconds, 2), "bytes_per_s": got / max(1e-9, seconds), "uncached": True}


def _stats(bench, comfy: Path) -> dict:
    return bench._stats(comfy) or {}


def run(bench, a) -> int:
    """The measurement; prints the JSON document (or a summary) and returns the exit code."""
    import psutil
    import comfy_h3

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
    small, _small_facts = write_dit(python, models, a.resident_blocks)
    ram = psutil.virtual_memory().total
    stream = {"preload_bytes": 0, "shard_size_bytes": a.shard_size_bytes, "prefetch_blocks": a.prefetch_blocks}
    alone = _compute_alone(bench, a, comfy, python, small)
    modes = ["use", "bypass"] if a.page_cache == "both" else [a.page_cache]
    by_mode, reads = _streamed_and_disk(bench, a, comfy, python, big, stream, modes)
    judged = "bypass" if "bypass" in modes else modes[0]  # what the plan picks for a file the cache cannot hold
    doc = _document(a, ram, big, big_facts, stream, alone, by_mode, reads, judged)
    doc["seconds"] = round(time.perf_counter() - t_start, 1)
    if a.json:
        print(json.dumps(doc, indent=2))
    else:
        _summary(a, doc, big_facts, ram)
    return 0 if all(doc["targets"].values()) else 1


def _prompt(bench, a, server, dit: Path, st: dict, steps: int, seed: int, name: str) -> list[float]:
    """One timed prompt of the text-to-video graph on `dit` with streaming settings `st`: its model calls' seconds."""
    from h3kit.comfyui import client

    api = bench.graph(dit.name, st, steps, seed, canvas=(a.canvas, a.canvas), frames=a.frames,
                      prefix=f"floor/{name}", timed=name)
    r = client.run_workflow(server, api, timeout=7200)
    if not r["ran"]:
        raise RuntimeError(f"prompt {name} failed: {r['message']}\n{server.log_tail(3000)}")
    return bench.call_times(server.workdir, name)


def _compute_alone(bench, a, comfy: Path, python, small: Path) -> dict:
    """Compute alone: every block of the small DiT resident, warmed up, then timed; scaled to a.blocks."""
    from h3kit.comfyui import client

    resident = {"preload_bytes": 1 << 40, "shard_size_bytes": 0, "prefetch_blocks": 1}
    with client.ComfyServer(comfy, python, ["--cpu"], a.workdir / "run-resident") as server:
        (server.workdir / "output" / "bench_calls.jsonl").unlink(missing_ok=True)
        server.start(timeout=300)
        _prompt(bench, a, server, small, resident, 1, 1, "resident-warm")
        steps = _prompt(bench, a, server, small, resident, a.steps, 3, "resident")
        st = _stats(bench, comfy)
        resident_rss = server.peak_rss_bytes
    calls = max(1, st.get("model_calls") or len(steps))
    per_block = st["compute_s"] / calls / a.resident_blocks
    fixed = max(0.0, statistics.median(steps) - a.resident_blocks * per_block)
    return {"seconds_per_step": fixed + a.blocks * per_block, "per_block_s": per_block, "fixed_s": fixed,
            "steps": steps, "peak_rss_bytes": resident_rss}


def _streamed_and_disk(bench, a, comfy: Path, python, big: Path, stream: dict,
                       modes: list[str]) -> tuple[dict, list[dict]]:
    """Streamed (each page_cache mode in turn), the disk alone, streamed again; one server per mode, so the
    peak RSS is each mode's own. ({mode: rounds, cold shares, peak RSS}, the plain reads of the file)."""
    from h3kit.comfyui import client

    by_mode = {m: {"rounds": [], "cold": [], "rss": 0} for m in modes}
    reads = []
    servers = {m: client.ComfyServer(comfy, python, ["--cpu"], a.workdir / f"run-streamed-{m}") for m in modes}
    try:
        for m, server in servers.items():
            (server.workdir / "output" / "bench_calls.jsonl").unlink(missing_ok=True)
            server.start(timeout=300)
        for r in range(a.rounds):
            if r:
                reads.append(read_alone(big))
                uncached = read_alone_uncached(big)
                if uncached is not None:
                    reads.append(uncached)
            for m, server in servers.items():
                by_mode[m]["cold"].append(drop(big))
                t = _prompt(bench, a, server, big, dict(stream, page_cache=m), 1, 5 + r, f"streamed{r}-{m}")
                by_mode[m]["rounds"].append({"seconds": round(t[0], 2), "stats": _stats(bench, comfy)})
                print(f"bench_streaming --floor: round {r + 1}, page_cache {m}: {t[0]:.2f} s", file=sys.stderr)
        if not reads:
            reads.append(read_alone(big))
        for m, server in servers.items():
            by_mode[m]["rss"] = server.peak_rss_bytes
    finally:
        for server in servers.values():
            server.stop()
    return by_mode, reads


def _document(a, ram: int, big: Path, big_facts: dict, stream: dict, alone: dict, by_mode: dict, reads: list[dict],
              judged: str) -> dict:
    """The h3kit.bench_streaming_floor/1 document: the floor, the streamed step against it (judged on `judged`),
    each page_cache mode, the targets."""
    compute_alone = alone["seconds_per_step"]
    rounds, cold, streamed_rss = by_mode[judged]["rounds"], by_mode[judged]["cold"], by_mode[judged]["rss"]
    bytes_per_step = statistics.median(r["stats"].get("bytes_read", 0) for r in rounds)
    # the disk's rate: the faster way of reading it, through the page cache or past it (the median of each)
    rate = max(statistics.median(x["bytes_per_s"] for x in reads if x.get("uncached") is c)
               for c in {x.get("uncached") for x in reads})
    disk_alone = bytes_per_step / rate
    floor = max(compute_alone, disk_alone)
    streamed = statistics.median(r["seconds"] for r in rounds)
    doc = {"schema": "h3kit.bench_streaming_floor/1", "ram_bytes": ram,
           "dit": {"path": big.name, "bytes": big_facts["bytes"], "blocks": a.blocks,
                   "block_bytes": big_facts["block_bytes"], "dims": big_facts["dims"],
                   "larger_than_ram": big_facts["bytes"] > ram},
           "canvas": [a.canvas, a.canvas, a.frames], "stream": stream,
           "compute_alone": {"seconds_per_step": round(compute_alone, 2), "per_block_s": round(alone["per_block_s"], 3),
                             "fixed_s": round(alone["fixed_s"], 2), "resident_blocks": a.resident_blocks,
                             "resident_step_seconds": [round(x, 2) for x in alone["steps"]],
                             "peak_rss_bytes": alone["peak_rss_bytes"]},
           "disk_alone": {"seconds_per_step": round(disk_alone, 2), "bytes_per_step": bytes_per_step,
                          "bytes_per_s": round(rate), "reads": reads},
           "streamed": {"seconds_per_step": streamed, "rounds": [r["seconds"] for r in rounds],
                        "wait_s": [round(r["stats"].get("wait_s", 0.0), 2) for r in rounds],
                        "compute_s": [round(r["stats"].get("compute_s", 0.0), 2) for r in rounds],
                        "read_mode": rounds[0]["stats"].get("read_mode"), "resident_share_at_start": cold,
                        "page_cache": judged, "peak_rss_bytes": streamed_rss},
           "page_cache_modes": _each_mode(by_mode, floor),
           "floor_seconds_per_step": round(floor, 2), "floor_is": "compute" if compute_alone >= disk_alone else "disk",
           "ratio_to_floor": round(streamed / floor, 3), "peak_rss_share_of_ram": round(streamed_rss / ram, 3)}
    doc["targets"] = {f"ratio_to_floor <= {FLOOR_TARGET}": doc["ratio_to_floor"] <= FLOOR_TARGET,
                      f"peak_rss_share_of_ram < {RSS_SHARE_TARGET}": doc["peak_rss_share_of_ram"] < RSS_SHARE_TARGET}
    return doc


def _each_mode(by_mode: dict, floor: float) -> dict:
    return {m: {"seconds_per_step": statistics.median(r["seconds"] for r in v["rounds"]),
                "rounds": [r["seconds"] for r in v["rounds"]],
                "wait_s": [round(r["stats"].get("wait_s", 0.0), 2) for r in v["rounds"]],
                "read_mode": v["rounds"][0]["stats"].get("read_mode"),
                "page_cache": v["rounds"][0]["stats"].get("page_cache"),
                "ratio_to_floor": round(statistics.median(r["seconds"] for r in v["rounds"]) / floor, 3),
                "peak_rss_bytes": v["rss"]} for m, v in by_mode.items()}


def _summary(a, doc: dict, big_facts: dict, ram: int) -> None:
    streamed = doc["streamed"]
    print(f"{a.blocks} blocks ({big_facts['bytes'] / 1e9:.1f} GB, RAM {ram / 1e9:.1f} GB): compute alone "
          f"{doc['compute_alone']['seconds_per_step']:.1f} s, disk alone {doc['disk_alone']['seconds_per_step']:.1f} s "
          f"({doc['disk_alone']['bytes_per_s'] / 1e9:.2f} GB/s), streamed "
          f"{streamed['seconds_per_step']:.1f} s: {doc['ratio_to_floor']:.2f}x the floor; peak RSS "
          f"{streamed['peak_rss_bytes'] / 1e9:.2f} GB ({doc['peak_rss_share_of_ram']:.0%} of RAM), page_cache "
          f"{streamed['page_cache']}")
    for m, v in doc["page_cache_modes"].items():
        print(f"  page_cache {m}: {v['seconds_per_step']:.1f} s = {v['ratio_to_floor']:.2f}x the floor "
              f"(rounds {v['rounds']}, read mode {v['read_mode']}, page cache {v['page_cache']})")
