"""Calibration: measure this machine, tune the profile, write the report.

The steps, in order (each one's result lands in the `h3kit.calibration/1`
document, and a step that cannot run says why instead of failing the run):

1. fingerprint -> plan (issue #3 / #4) with the config's profile;
2. the native library (issue #5): found in the cache, else built;
3. the runner (`calibration_runner.py`, self-contained) in ComfyUI's Python
   when a ComfyUI is known, else in this Python: native kernels, thread
   scaling, the scaled H3-shaped DiT through the streamer, device rates and
   the tile sweep when torch sees a GPU;
4. disk: sequential read GB/s on the models folder's disk (here, stdlib);
5. estimates for the real model from the measured rates (`estimate`);
6. decisions (`decide`, pure functions: never above the plan's budget);
7. report (h3kit.calibrate.report), the config's `calibrated:` section, and the
   installed pack, when there is one.

Model numbers (layers, widths, token rule, file sizes) come from the catalog
under profiles/models/, never from this file.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import sys
import tempfile
import threading
import time
from datetime import datetime, timezone
from pathlib import Path

from h3kit import __version__

from h3kit.calibrate import report
from h3kit.data import catalog as catalog_mod
from h3kit import bundled
from h3kit.bundled.h3k_calibration_runner import drop_page_cache, no_cache
from h3kit.comfy import deploy
from h3kit.comfy import manifest as mf
from h3kit.core.session import Session as Context
from h3kit.core.errors import NotReady
from h3kit.core.subproc import run as run_process

RUNNER = bundled.CALIBRATION_RUNNER
BRIDGE = bundled.NATIVE_BRIDGE
QUICK_SECONDS = 60
FULL_SECONDS = 300
# The scaled DiT: H3's block shape (from the catalog) at a width this machine can run in seconds.
SCALED = {"quick": {"blocks": 2, "hidden": 512}, "full": {"blocks": 4, "hidden": 1024}}
CALIBRATION_CANVAS = (256, 256, 22)  # w, h, frames: the smallest H3 canvas (issue #7)
DISK_PROBE_BYTES = {"quick": 128 << 20, "full": 512 << 20}


# -- catalog numbers -----------------------------------------------------------------

def tokens_for(catalog: dict, width: int, height: int, frames: int) -> int:
    """The DiT's token count for a canvas, by the catalog's rule."""
    rule = catalog["tokens"]
    px = rule["spatial_tokens_px"]
    latent_frames = math.ceil(frames / rule["temporal_compression"])
    return max(1, (width // px) * (height // px) * latent_frames)


def scaled_dit_config(catalog: dict, plan: dict, quick: bool) -> dict:
    """The scaled-down H3-shaped DiT the runner builds: H3's ratios, a small width."""
    arch = catalog["architecture"]
    size = SCALED["quick" if quick else "full"]
    hidden = size["hidden"]
    head_dim = arch["head_dim"]
    ffn = int(round(hidden * arch["ffn"] / arch["hidden"] / 32)) * 32  # same FFN ratio, whole quant blocks
    quant = (plan.get("settings") or {}).get("quantization")
    return {
        "blocks": size["blocks"],
        "hidden": hidden,
        "heads": hidden // head_dim,
        "head_dim": head_dim,
        "ffn": ffn,
        "tokens": tokens_for(catalog, *CALIBRATION_CANVAS),
        "canvas": list(CALIBRATION_CANVAS),
        "quantization": native_kind(quant),
        "plan_quantization": quant,
    }


def native_kind(fmt: str | None) -> str:
    """The native kernel closest to a weight format: q4_0 for 5 bits and below, else q8_0."""
    if fmt in ("q8_0", "q4_0"):
        return fmt
    low_bits = ("q5", "q4", "q3", "q2", "w4a8", "nvfp4")
    return "q4_0" if fmt and fmt.startswith(low_bits) else "q8_0"


# -- estimates ------------------------------------------------------------------------

def block_params(hidden: int, ffn: int) -> int:
    """Weights of one block: q, k, v, o (4 h^2) and the SwiGLU gate, up, down (3 h ffn)."""
    return 4 * hidden * hidden + 3 * hidden * ffn


def flops_per_pass(blocks: int, hidden: int, ffn: int, tokens: int) -> float:
    """One forward pass: 2 FLOPs per weight per token, plus attention's QK^T and AV (4 T^2 h per block)."""
    return blocks * (2.0 * block_params(hidden, ffn) * tokens + 4.0 * tokens * tokens * hidden)


def estimate(catalog: dict, plan: dict, measured: dict, dit_bytes: int | None) -> dict:
    """Seconds per sampling step and peak memory of the real model at the plan's settings.

    `measured` holds the rates the run found: native GFLOP/s and GB/s (for
    the plan's quantization), device TFLOP/s and H2D GB/s when there is a GPU,
    disk GB/s, and the scaled DiT's measured vs predicted peak RSS. Every
    value carries its formula in `formulas`; all of it is an estimate.
    """
    arch = catalog["architecture"]
    s = plan.get("settings") or {}
    w, h = (s.get("max_canvas") or [CALIBRATION_CANVAS[0], CALIBRATION_CANVAS[1]])[:2]
    frames = s.get("max_frames") or CALIBRATION_CANVAS[2]
    tokens = tokens_for(catalog, w, h, frames)
    flops = flops_per_pass(arch["blocks"], arch["hidden"], arch["ffn"], tokens)
    device_tflops = measured.get("device_tflops")
    rate = device_tflops * 1e12 if device_tflops else (measured.get("native_gflops") or 0) * 1e9
    rate_name = "device bf16 matmul" if device_tflops else "native CPU matmul"
    compute_s = flops / rate if rate else None
    streamed, source = streamed_per_step(plan, dit_bytes)
    if source == "disk":
        link, link_name = measured.get("disk_gbps"), "disk read"
    elif measured.get("h2d_gbps"):
        link, link_name = measured.get("h2d_gbps"), "host-to-device copy"
    else:  # CPU compute reads the weights where they lie: already in the measured matmul rate
        link, link_name = None, None
    stream_s = streamed / (link * 1e9) if (streamed and link) else 0.0
    overlapped = (s.get("preload_bytes") or 0) > 0
    step_s = None
    if compute_s is not None:
        step_s = max(compute_s, stream_s) if overlapped else compute_s + stream_s
    growth = measured.get("memory_growth_ratio") or 1.0
    plan_est = plan.get("estimates") or {}
    plan_peak_ram = plan_est.get("peak_ram_bytes")
    plan_peak_gpu = plan_est.get("peak_gpu_bytes")
    moving = (plan_est.get("activation_bytes") or 0) + (s.get("shard_size_bytes") or 0) + (s.get("preload_bytes") or 0)
    out = {
        "label": "estimate",
        "canvas": [w, h, frames],
        "tokens": tokens,
        "flops_per_pass": flops,
        "compute_seconds_per_step": compute_s,
        "stream_seconds_per_step": stream_s,
        "seconds_per_step": step_s,
        "peak_ram_bytes": int(plan_peak_ram + (growth - 1.0) * moving) if plan_peak_ram else None,
        "peak_gpu_bytes": plan_peak_gpu,
        "memory_growth_ratio": growth,
        "formulas": {
            "tokens": f"(w/{catalog['tokens']['spatial_tokens_px']}) x (h/{catalog['tokens']['spatial_tokens_px']})"
                      f" x ceil(frames/{catalog['tokens']['temporal_compression']}) = {tokens}",
            "flops_per_pass": f"blocks x (2 x (4 h^2 + 3 h ffn) x T + 4 T^2 h) with blocks={arch['blocks']}, "
                              f"h={arch['hidden']}, ffn={arch['ffn']}, T={tokens} (one model pass per step; "
                              "classifier-free guidance doubles it)",
            "compute_seconds_per_step": f"flops_per_pass / measured {rate_name} rate "
                                        f"({_g(rate / 1e9 if rate else None)} GFLOP/s)",
            "stream_seconds_per_step": (f"streamed DiT bytes per step ({_g(streamed / 1e9)} GB from {source}) / "
                                        f"measured {link_name} GB/s ({_g(link)})") if link_name else
                                       "0: the CPU reads the weights in RAM (counted in the matmul rate)",
            "seconds_per_step": ("max(compute, stream): the streamer reads the next block while this one runs"
                                 if overlapped else "compute + stream: no preload, reads are not overlapped"),
            "peak_ram_bytes": f"planner's peak RAM + (g - 1) x (activations + shard + preload), g = measured / "
                              f"predicted RSS growth of the scaled DiT while streaming = {_g(growth)}",
            "peak_gpu_bytes": "planner's estimate (a GPU run with the real model measures it: --with-model)",
        },
    }
    return out


def streamed_per_step(plan: dict, dit_bytes: int | None) -> tuple[int, str]:
    """DiT bytes moved per sampling step and where they come from (ram or disk), by the plan's streaming."""
    s = plan.get("settings") or {}
    streaming = s.get("streaming") or {}
    ram_budget = (plan.get("budget") or {}).get("ram_bytes") or 0
    source = "disk" if s.get("stream_from") == "disk" or (dit_bytes and ram_budget and dit_bytes > ram_budget) else "ram"
    if streaming.get("resident"):
        return 0, source
    if streaming.get("block_bytes") and streaming.get("blocks"):
        moving_blocks = streaming["blocks"] - (streaming.get("resident_blocks") or 0)
        return int(moving_blocks * streaming["block_bytes"]), source
    return int(dit_bytes or 0), source


def _g(x) -> str:
    return "-" if x is None else f"{x:.3g}"


def check_scaled(config: dict, inference: dict, native_gflops: float | None) -> dict:
    """The estimate formula applied to the scaled DiT, next to what the run measured."""
    if inference.get("status") != "measured" or not native_gflops:
        return {}
    ran = inference.get("config") or config  # the native+python path runs a smaller shape
    flops_block = flops_per_pass(1, ran["hidden"], ran["ffn"], ran["tokens"])
    out = {
        "measured_seconds_per_block": inference["seconds_per_block"],
        "estimated_seconds_per_block": flops_block / (native_gflops * 1e9),
        "formula": "(2 x (4 h^2 + 3 h ffn) x T + 4 T^2 h) / measured native GFLOP/s",
    }
    if inference.get("path") == "native+python":
        out["note"] = ("measured in the native+python path: the norms, softmax and SwiGLU ran as plain Python, "
                       "so the measured time is an upper bound on what the formula describes")
    return out


# -- decisions (pure) ---------------------------------------------------------------

def decision(setting: str, value, previous, evidence: str) -> dict:
    return {"setting": setting, "value": value, "previous": previous, "changed": value != previous,
            "evidence": evidence}


def decide_tile(tiles: list[dict], budget_bytes: int | None, current: int) -> dict:
    """The fastest swept tile whose peak stays within the budget.

    When none fits, the smallest tile measured (never larger than the current
    one), so memory only goes down. With no sweep, the plan's tile stays.
    """
    ran = [t for t in tiles if t.get("seconds") and t.get("peak_bytes")]
    if not ran:
        return decision("vae_tile_size", current, current, "no tile sweep ran (no GPU seen by torch); kept the plan's tile")
    fits = [t for t in ran if budget_bytes is None or t["peak_bytes"] <= budget_bytes]
    if fits:
        best = min(fits, key=lambda t: (t["seconds"], t["peak_bytes"]))
        return decision("vae_tile_size", best["tile"], current,
                        f"tile {best['tile']} decoded in {best['seconds']:.3g} s with peak "
                        f"{report.human_bytes(best['peak_bytes'])}, the fastest of {len(fits)} within the "
                        f"{report.human_bytes(budget_bytes)} budget")
    smallest = min(ran, key=lambda t: t["tile"])
    value = min(smallest["tile"], current)
    return decision("vae_tile_size", value, current,
                    f"no swept tile fits the {report.human_bytes(budget_bytes)} budget (smallest, {smallest['tile']}, "
                    f"peaked at {report.human_bytes(smallest['peak_bytes'])}); chose the smallest")


def decide_preload(settings: dict, budget: int | None, estimated_peak: int | None, memory: str = "RAM") -> dict:
    """Shrink the preload by what the estimated peak overshoots the budget (whole shards).

    `memory` names where the preload lives: GPU memory on a GPU plan, RAM
    otherwise. Never grows it: more read-ahead is only ever the plan's call.
    """
    preload = int(settings.get("preload_bytes") or 0)
    shard = int(settings.get("shard_size_bytes") or 0) or 1
    hb = report.human_bytes
    if not budget or not estimated_peak:
        return decision("preload_bytes", preload, preload, f"no {memory} peak estimate to compare with a budget; kept")
    over = estimated_peak - budget
    if over <= 0:
        return decision("preload_bytes", preload, preload,
                        f"estimated peak {memory} {hb(estimated_peak)} is within the {hb(budget)} budget; kept {hb(preload)}")
    if preload == 0:
        return decision("preload_bytes", 0, 0,
                        f"estimated peak {memory} {hb(estimated_peak)} overshoots the {hb(budget)} budget by {hb(over)}, "
                        "but the preload is already 0; a smaller canvas or fewer frames would help (h3kit plan)")
    value = max(0, preload - math.ceil(over / shard) * shard)
    return decision("preload_bytes", value, preload,
                    f"estimated peak {memory} {hb(estimated_peak)} overshoots the {hb(budget)} budget by {hb(over)}; "
                    f"preload cut by whole {hb(shard)} shards")


def preload_memory(plan: dict, device: dict, estimates: dict) -> tuple[str, int | None, int | None]:
    """Which memory the preload lives in, its budget and the estimated peak there.

    On a GPU plan that is GPU memory, and the budget is the smaller of the
    plan's and the free memory torch measured; otherwise RAM.
    """
    budget = plan.get("budget") or {}
    gpu = budget.get("gpu_bytes")
    if gpu:
        free = device.get("free_bytes") if device.get("status") == "measured" else None
        return "GPU memory", min(gpu, free) if free else gpu, estimates.get("peak_gpu_bytes")
    return "RAM", budget.get("ram_bytes"), estimates.get("peak_ram_bytes")


def decide_threads(scaling: list[dict], cores: int) -> dict:
    """The fewest threads within 5% of the best measured rate (the rest stay free for ComfyUI)."""
    ok = [s for s in scaling if s.get("gflop_per_s")]
    if not ok:
        return decision("native_threads", cores, cores, "no thread scaling measured; all cores")
    best = max(s["gflop_per_s"] for s in ok)
    pick = min((s for s in ok if s["gflop_per_s"] >= 0.95 * best), key=lambda s: s["threads"])
    return decision("native_threads", pick["threads"], cores,
                    f"{pick['threads']} thread{'s reach' if pick['threads'] > 1 else ' reaches'} {pick['gflop_per_s']:.3g} GFLOP/s, within 5% of the best "
                    f"{best:.3g} GFLOP/s measured from 1 to {max(s['threads'] for s in ok)} threads")


def decide(plan: dict, measurements: dict, estimates: dict) -> list[dict]:
    """Every decision, each with its evidence; none raises memory use above the plan's budget."""
    s = plan.get("settings") or {}
    budget = plan.get("budget") or {}
    tile_budget = budget.get("gpu_bytes") or budget.get("ram_bytes")
    out = [
        decide_tile(measurements.get("tiles") or [], tile_budget, int(s.get("vae_tile_size") or 512)),
        decide_preload(s, *_budget_and_peak(plan, measurements, estimates)),
        decide_threads((measurements.get("native") or {}).get("scaling") or [],
                       int((measurements.get("native") or {}).get("threads_max") or os.cpu_count() or 1)),
    ]
    shard = s.get("shard_size_bytes")
    if shard:
        inf = measurements.get("inference") or {}
        out.append(decision("shard_size_bytes", shard, shard,
                            f"the scaled DiT streamed {report.human_bytes(inf.get('bytes_streamed'))} with "
                            f"{report.human_bytes(shard)} shards, waiting {100 * (inf.get('wait_fraction') or 0):.3g}% "
                            "of the time; kept" if inf.get("status") == "measured" else
                            "the scaled DiT did not run; kept the plan's shard size"))
    return out


def _budget_and_peak(plan: dict, measurements: dict, estimates: dict) -> tuple:
    memory, budget, peak = preload_memory(plan, measurements.get("device") or {}, estimates)
    return budget, peak, memory


def calibrated_values(decisions: list[dict], settings_keys) -> dict:
    """The `calibrated:` config section: the values calibration changed, for keys the config accepts.

    Kept values are left out on purpose: written down they would pin today's
    profile values over the next profile the user picks (profile < calibrated).
    Decisions on other keys (native_threads) stay in the report only.
    """
    return {d["setting"]: d["value"] for d in decisions
            if d["changed"] and d["value"] is not None and d["setting"] in settings_keys}


# -- disk ------------------------------------------------------------------------------

def measure_disk(folder: Path, nbytes: int, scratch: Path | None = None) -> dict:
    """Sequential read GB/s on `folder`'s disk; never raises.

    Reads a temporary file written on the same file system (in `scratch`
    when it is on the same device, else in `folder`) after asking the OS to
    drop it from the page cache (posix_fadvise DONTNEED on Linux, F_NOCACHE
    on macOS). Where neither exists the figure may include cache hits, and
    `cache_dropped` says so. The file is removed afterwards.
    """
    folder = Path(folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        where = folder
        if scratch is not None:
            scratch.mkdir(parents=True, exist_ok=True)
            if os.stat(scratch).st_dev == os.stat(folder).st_dev:
                where = scratch
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


# -- running the runner --------------------------------------------------------------------

def _progress_bar(ctx: Context, total: int, desc: str):
    from tqdm import tqdm

    # stderr only (so --json keeps stdout one document); tqdm turns itself off when stderr is no terminal.
    return tqdm(total=total, desc=desc, unit="step", file=sys.stderr, leave=False, disable=None)


def run_runner(ctx: Context, python: str, bridge: Path, lib: Path | None, job: dict, quick: bool,
               workdir: Path) -> dict:
    """Start the runner in `python`, follow its progress file, return its result document."""
    plan_file = workdir / "plan.json"
    out_file = workdir / "result.json"
    progress_file = workdir / "progress.jsonl"
    plan_file.write_text(json.dumps(job), encoding="utf-8")
    progress_file.write_text("", encoding="utf-8")
    argv = [python, str(RUNNER), "--bridge", str(bridge), "--plan", str(plan_file), "--out", str(out_file),
            "--progress", str(progress_file)]
    if lib:
        argv += ["--lib", str(lib)]
    if quick:
        argv.append("--quick")
    timeout = (QUICK_SECONDS if quick else FULL_SECONDS) + 30
    holder = {}
    worker = threading.Thread(target=lambda: holder.update(result=run_process(argv, timeout=timeout)), daemon=True)
    worker.start()
    _follow(ctx, progress_file, worker)
    res = holder.get("result")
    if res is None or not out_file.exists():
        detail = res.detail if res is not None else "no result"
        return {"status": "error", "reason": f"the runner did not finish ({detail}); "
                f"stderr: {(res.stderr if res else '')[-600:]}"}
    doc = json.loads(out_file.read_text(encoding="utf-8"))
    doc.setdefault("stderr_tail", res.stderr[-2000:])
    return doc


def _follow(ctx: Context, progress_file: Path, worker: threading.Thread) -> None:
    """Turn the runner's progress lines ({"stage", "done", "total"}) into tqdm bars."""
    bars: dict[str, object] = {}
    seen = 0
    try:
        while True:
            alive = worker.is_alive()
            try:
                lines = progress_file.read_text(encoding="utf-8").splitlines()
            except OSError:
                lines = []
            for line in lines[seen:]:
                try:
                    ev = json.loads(line)
                except ValueError:
                    break
                seen += 1
                stage = ev.get("stage", "?")
                bar = bars.get(stage)
                if bar is None:
                    for old in bars.values():
                        old.close()
                    bar = bars[stage] = _progress_bar(ctx, int(ev.get("total") or 1), stage)
                bar.n = int(ev.get("done") or 0)
                bar.refresh()
                ctx.log.debug("runner: %s", line)
            if not alive:
                break
            worker.join(0.2)
    finally:
        for bar in bars.values():
            bar.close()


# -- the whole run ------------------------------------------------------------------------

def _fingerprint() -> dict:
    try:
        from h3kit.fingerprint import collect
    except ImportError:
        raise NotReady("This h3kit has no machine fingerprint yet, so there is nothing to calibrate against.",
                       "Update h3kit (./install.sh); 'h3kit fingerprint' must work first.") from None
    return collect()


def _plan(ctx: Context, fp: dict, profile: str | None):
    try:
        from h3kit.data import config as config_mod
        from h3kit.plan import make_plan
    except ImportError:
        raise NotReady("This h3kit has no planner yet, so there is no profile to calibrate.",
                       "Update h3kit (./install.sh); 'h3kit plan' must work first.") from None
    cfg = config_mod.load(ctx.locations)
    # Plan without the previous calibration, so today's decisions start from profile + overrides
    # and a rerun (or a new profile) never stacks on stale calibrated values.
    return make_plan(fp, profile=profile, config=dataclasses.replace(cfg, calibrated={})), cfg


def _library(ctx: Context) -> tuple[Path | None, str | None]:
    """The native library: H3KIT_NATIVE_LIB (the bridge's own override), the cache, else built now.

    Returns (path, None) or (None, why not).
    """
    override = os.environ.get("H3KIT_NATIVE_LIB")
    if override:
        return (Path(override), None) if Path(override).is_file() else \
            (None, f"H3KIT_NATIVE_LIB names {override}, which does not exist")
    try:
        from h3kit.native import build
    except ImportError:
        return None, "this h3kit has no native build step yet (issue #5)"
    lib = build.find_library()
    if lib is None:
        ctx.progress("building the native library (first run)...")
        try:
            lib = Path(build.build()["library"])
        except NotReady as exc:
            return None, f"the native library could not be built: {exc.message}"
    return Path(lib), None


def _comfyui(ctx: Context, explicit: str | None, cfg) -> tuple[object | None, dict | None, str | None]:
    """(install, inspect info, why none) for the ComfyUI to run in, or Nones for this Python."""
    if not explicit and not getattr(cfg, "comfyui_path", None):
        return None, None, "no ComfyUI is known (pass --comfyui PATH or set comfyui_path in the config)"
    try:
        from h3kit.comfy import locate as comfyui
    except ImportError:
        return None, None, "this h3kit cannot inspect a ComfyUI yet (issue #6)"
    install = comfyui.find(str(explicit) if explicit else None, cfg, ctx, need_write=False)  # NotReady names the fix
    return install, comfyui.inspect(install), None


def run(ctx: Context, *, comfyui_dir: str | None = None, quick: bool = True, with_model: bool = False,
        profile: str | None = None, fingerprint: dict | None = None, write_config: bool = True) -> dict:
    """Calibrate and write the report; returns the `h3kit.calibration/1` document.

    Used by `h3kit calibrate` and by `h3kit install` (issue #6).
    """
    started = time.perf_counter()
    skipped: list[str] = []
    ctx.progress("calibrate: fingerprint and plan...")
    fp = fingerprint if fingerprint is not None else _fingerprint()
    plan, cfg = _plan(ctx, fp, profile)
    cat = catalog_mod.load()
    catalog = cat.data
    dit_weight = cat.weight((plan.get("settings") or {}).get("dit_weights") or "")
    lib, why_no_lib = _library(ctx) if (BRIDGE / '__init__.py').is_file() else (None, "this h3kit has no native bridge (bundled/h3k_native)")
    if why_no_lib:
        skipped.append(f"native kernels and the scaled DiT: {why_no_lib}")
    install, comfy_info, why_no_comfy = _comfyui(ctx, comfyui_dir, cfg)
    python = (comfy_info or {}).get("python") or sys.executable
    if why_no_comfy:
        skipped.append(f"ComfyUI's Python: {why_no_comfy}; ran in h3kit's own Python ({python})")
    dit = scaled_dit_config(catalog, plan, quick)
    if dit["plan_quantization"] not in ("q8_0", "q4_0"):
        skipped.append(f"the plan's quantization {dit['plan_quantization']!r} has no native kernel; "
                       f"the scaled DiT ran in {dit['quantization']}")
    job = {"plan": plan, "scaled_dit": dit, "quick": quick,
           "budget": plan.get("budget") or {}, "tile_candidates": [128, 256, 384, 512, 640, 768]}
    ctx.progress(f"calibrate: measuring in {python} ...")
    with tempfile.TemporaryDirectory(prefix="h3kit-calib-") as tmp:
        if lib is not None:
            measured = run_runner(ctx, python, BRIDGE, lib, job, quick, Path(tmp))
        else:
            measured = {"native": {"status": "skipped", "reason": why_no_lib},
                        "inference": {"status": "skipped", "reason": why_no_lib},
                        "device": {"status": "skipped", "reason": why_no_lib}, "tiles": []}
    skipped += measured.get("skipped") or []
    ctx.progress("calibrate: disk read speed...")
    models_dir = Path(install.path) / "models" if install is not None and hasattr(install, "path") else \
        ctx.locations.cache_dir
    disk = measure_disk(models_dir, DISK_PROBE_BYTES["quick" if quick else "full"], ctx.locations.cache_dir)
    native = measured.get("native") or {}
    inference = measured.get("inference") or {}
    device = measured.get("device") or {}
    native_gflops = (native.get("best") or {}).get("gflop_per_s")
    rates = {"native_gflops": _rate_for(native, dit["quantization"]) or native_gflops,
             "device_tflops": device.get("bf16_tflops") or device.get("fp16_tflops"),
             "h2d_gbps": device.get("h2d_gb_per_s"), "disk_gbps": disk.get("gb_per_s"),
             "memory_growth_ratio": inference.get("memory_growth_ratio")}
    est = estimate(catalog, plan, rates, dit_weight.bytes if dit_weight else None)
    est["check"] = check_scaled(dit, inference, _rate_for(native, dit["quantization"]) or native_gflops)
    decisions = decide(plan, measured, est)
    doc = {
        "schema": report.SCHEMA,
        "created": datetime.now(timezone.utc).replace(microsecond=0).isoformat(),
        "h3kit_version": __version__,
        "quick": quick,
        "fingerprint": fp,
        "plan": plan,
        "profile": plan.get("profile"),
        "runner": measured.get("runner") or {"python": python},
        "comfyui": comfy_info,
        "native": native,
        "inference": inference,
        "device": device,
        "disk": disk,
        "tiles": measured.get("tiles") or [],
        "estimates": est,
        "real_model": _real_model(with_model, install, cat, plan=plan, fingerprint=fp, ctx=ctx),
        "decisions": decisions,
        "calibrated": calibrated_values(decisions, _settings_keys()),
        "skipped": skipped,
        "duration_seconds": 0.0,
        "report_files": {},
    }
    doc["duration_seconds"] = round(time.perf_counter() - started, 3)
    if ctx.dry_run:
        doc["report_files"] = {"json": None, "md": None, "html": None}
        return doc
    if write_config:
        doc["config_written"] = _write_config(ctx, cfg, doc["calibrated"])
        doc["applied"] = _apply(ctx, install, fp)
    report.write(doc, ctx.locations.reports_dir)
    doc["pack_summary"] = write_pack_summary(ctx, install, doc)
    return doc


def _settings_keys() -> tuple:
    try:
        from h3kit.data.settings import KEYS
    except ImportError:
        return ()
    return KEYS


def _rate_for(native: dict, kind: str) -> float | None:
    """Best matmul GFLOP/s measured for one quantization kind."""
    rates = [k["gflop_per_s"] for k in native.get("kernels") or [] if k["kind"] == kind and k["op"] == "matmul"]
    return max(rates) if rates else None


def _real_model(with_model: bool, install, cat, *, plan: dict | None = None, fingerprint: dict | None = None,
                ctx: Context | None = None) -> dict:
    """The optional real-workflow run (h3kit.calibrate.with_model), or plainly why it did not run."""
    from h3kit.calibrate import with_model as real_model

    if not with_model:
        return real_model.not_run("pass --with-model to run the smallest real workflow")
    if install is None:
        return real_model.not_run("--with-model needs a ComfyUI (pass --comfyui PATH)")
    ctx = ctx or Context()
    return real_model.run(install, plan or {}, fingerprint or {}, cat, cache_dir=ctx.locations.cache_dir,
                          progress=ctx.progress)


def _write_config(ctx: Context, cfg, values: dict) -> str | None:
    try:
        from h3kit.data import config as config_mod
    except ImportError:
        return None
    path = getattr(cfg, "raw", None) or ctx.locations.config_file
    path.parent.mkdir(parents=True, exist_ok=True)
    config_mod.write_section(path, "calibrated", values)
    return str(path)


def _apply(ctx: Context, install, fingerprint: dict) -> dict:
    """Re-plan with the config's new calibrated values and apply that to the pack: the same code as `h3kit apply`."""
    if install is None:
        return {"status": "skipped", "reason": "no ComfyUI known"}
    try:
        plan = make_plan(fingerprint, config=config_mod.load(ctx.locations))
        doc = deploy.apply(install, dict(plan["settings"]), plan["profile"], ctx.locations.state_dir,
                           ctx.locations.cache_dir)
    except NotReady as exc:
        return {"status": "skipped", "reason": exc.message}
    return {"status": "applied", "profile_file": doc.get("profile_file"),
            "message": f"Applied profile '{doc['profile']}' to {install.node_dir}."}


SUMMARY_FILE = "h3kit_calibration.json"  # read by the pack's H3kitCalibrationReport node
SUMMARY_SCHEMA = "h3kit.calibration-summary/1"


def summary_document(doc: dict) -> dict:
    """What the ComfyUI node shows: the summary sentences, the decisions and where the full report is."""
    return {"schema": SUMMARY_SCHEMA, "created": doc.get("created"), "profile": doc.get("profile"),
            "lines": report.summary_lines(doc),
            "decisions": [{k: d[k] for k in ("setting", "value", "previous", "changed", "evidence")}
                          for d in doc.get("decisions", [])],
            "report_html": (doc.get("report_files") or {}).get("html")}


def write_pack_summary(ctx: Context, install, doc: dict) -> str | None:
    """Put the summary into an installed node pack (recorded in its install record), or None."""
    if install is None or not getattr(install, "node_dir", None) or not install.node_dir.is_dir():
        return None

    record = mf.load_or_new(ctx.locations.state_dir, install.path)
    if record.find(install.node_dir) is None:
        return None  # a pack h3kit did not install: leave it alone
    path = install.node_dir / SUMMARY_FILE
    tmp = path.with_name(f".{SUMMARY_FILE}.tmp")
    tmp.write_text(json.dumps(summary_document(doc), indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    os.replace(tmp, path)
    record.record_file(path, "node-pack")
    record.save()
    return str(path)
