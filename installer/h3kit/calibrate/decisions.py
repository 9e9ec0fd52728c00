"""What calibration decides from its measurements: pure functions, each with its evidence.

Every decision is `{"setting", "value", "previous", "changed", "evidence"}`,
the evidence a sentence with the measured numbers. None of them raises
memory use above the plan's budget: a tile is chosen only among those whose
measured peak fits, the preload only ever shrinks, and the workflow defaults
(canvas, frames, steps, preset) never go beyond the plan's memory limits
(`max_canvas`, `max_frames`). `calibrated_values` turns the decisions into
the config's `calibrated:` section; the measured `timing` goes there too, so
every later plan estimates time with the rates measured here.

The workflow defaults (`decide_workload`) are chosen among the catalog's
canvas and frame ladders within the limits and the steps of the plan and of
the fast preset: the best one (largest canvas, then most frames, then most
steps) whose estimated minutes per clip meet `target_minutes`, else the
fastest, with the shortfall in the evidence.
"""

from __future__ import annotations

import math
import os
from typing import Any, TypedDict

from h3kit.core.units import human_bytes
from h3kit.data.fingerprint import Fingerprint
from h3kit.data.plan_doc import Plan, PlanSettings
from h3kit.data.settings import RANGES, TARGET_MINUTES


def _hb(n) -> str:
    return human_bytes(n, "-")


class Decision(TypedDict):
    """One calibration decision, as the calibration document, the report (report.DECISION_KEYS) and the pack's
    summary carry it: the setting, its new and previous value, whether it changed, and the measurement behind it."""

    setting: str
    value: Any
    previous: Any
    changed: bool
    evidence: str


def decision(setting: str, value, previous, evidence: str) -> Decision:
    return Decision(setting=setting, value=value, previous=previous, changed=value != previous, evidence=evidence)


def decide_tile(tiles: list[dict], budget_bytes: int | None, current: int) -> Decision:
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
                        f"{_hb(best['peak_bytes'])}, the fastest of {len(fits)} within the "
                        f"{_hb(budget_bytes)} budget")
    smallest = min(ran, key=lambda t: t["tile"])
    value = min(smallest["tile"], current)
    return decision("vae_tile_size", value, current,
                    f"no swept tile fits the {_hb(budget_bytes)} budget (smallest, {smallest['tile']}, "
                    f"peaked at {_hb(smallest['peak_bytes'])}); chose the smallest")


def decide_preload(settings: PlanSettings, budget: int | None, estimated_peak: int | None, memory: str = "RAM") -> Decision:
    """Shrink the preload by what the estimated peak overshoots the budget (whole shards).

    `memory` names where the preload lives: GPU memory on a GPU plan, RAM
    otherwise. Never grows it: more read-ahead is only ever the plan's call.
    """
    preload = int(settings.preload_bytes or 0)
    shard = int(settings.shard_size_bytes or 0) or 1
    if not budget or not estimated_peak:
        return decision("preload_bytes", preload, preload, f"no {memory} peak estimate to compare with a budget; kept")
    over = estimated_peak - budget
    if over <= 0:
        return decision("preload_bytes", preload, preload,
                        f"estimated peak {memory} {_hb(estimated_peak)} is within the {_hb(budget)} budget; "
                        f"kept {_hb(preload)}")
    if preload == 0:
        return decision("preload_bytes", 0, 0,
                        f"estimated peak {memory} {_hb(estimated_peak)} overshoots the {_hb(budget)} budget by "
                        f"{_hb(over)}, but the preload is already 0; a smaller canvas or fewer frames would help "
                        "(h3kit plan)")
    value = max(0, preload - math.ceil(over / shard) * shard)
    return decision("preload_bytes", value, preload,
                    f"estimated peak {memory} {_hb(estimated_peak)} overshoots the {_hb(budget)} budget by "
                    f"{_hb(over)}; preload cut by whole {_hb(shard)} shards")


def preload_memory(plan: Plan, device: dict, estimates: dict) -> tuple[str, int | None, int | None]:
    """Which memory the preload lives in, its budget and the estimated peak there.

    On a GPU plan that is GPU memory, and the budget is the smaller of the
    plan's and the free memory torch measured; otherwise RAM.
    """
    gpu = plan.budget.gpu_bytes
    if gpu:
        free = device.get("free_bytes") if device.get("status") == "measured" else None
        return "GPU memory", min(gpu, free) if free else gpu, estimates.get("peak_gpu_bytes")
    return "RAM", plan.budget.ram_bytes, estimates.get("peak_ram_bytes")


def decide_threads(scaling: list[dict], cores: int) -> Decision:
    """The fewest threads within 5% of the best measured rate (the rest stay free for ComfyUI)."""
    ok = [s for s in scaling if s.get("gflop_per_s")]
    if not ok:
        return decision("native_threads", cores, cores, "no thread scaling measured; all cores")
    best = max(s["gflop_per_s"] for s in ok)
    pick = min((s for s in ok if s["gflop_per_s"] >= 0.95 * best), key=lambda s: s["threads"])
    verb = "threads reach" if pick["threads"] > 1 else "thread reaches"
    return decision("native_threads", pick["threads"], cores,
                    f"{pick['threads']} {verb} {pick['gflop_per_s']:.3g} GFLOP/s, within 5% of the best "
                    f"{best:.3g} GFLOP/s measured from 1 to {max(s['threads'] for s in ok)} threads")


def decide_shard(settings: PlanSettings, inference: dict) -> Decision:
    """The shard size stays the plan's; the evidence says how the scaled DiT streamed with it."""
    shard = settings.shard_size_bytes
    if inference.get("status") != "measured":
        return decision("shard_size_bytes", shard, shard, "the scaled DiT did not run; kept the plan's shard size")
    return decision("shard_size_bytes", shard, shard,
                    f"the scaled DiT streamed {_hb(inference.get('bytes_streamed'))} with {_hb(shard)} shards, "
                    f"waiting {100 * (inference.get('wait_fraction') or 0):.3g}% of the time; kept")


def decide(plan: Plan, measurements: dict, estimates: dict, *, minutes_for=None, cat=None,
           disk: dict | None = None, streaming: dict | None = None) -> list[dict]:
    """Every decision, each with its evidence; none raises memory use above the plan's budget.

    `minutes_for(canvas, frames, steps, cfg) -> minutes` (the calibrated estimate) and `cat` (the Catalog)
    enable the workflow-default decisions; `disk` (the disk probe) the read-ahead depth; `streaming`
    (prefetch_figures with the fingerprint) the loader's page_cache."""
    s = plan.settings
    native = measurements.get("native") or {}
    tile_budget = plan.budget.gpu_bytes or plan.budget.ram_bytes
    memory, preload_budget, peak = preload_memory(plan, measurements.get("device") or {}, estimates)
    out = [
        decide_tile(measurements.get("tiles") or [], tile_budget, int(s.vae_tile_size or 512)),
        decide_preload(s, preload_budget, peak, memory),
        decide_threads(native.get("scaling") or [], int(native.get("threads_max") or os.cpu_count() or 1)),
    ]
    if s.shard_size_bytes:
        out.append(decide_shard(s, measurements.get("inference") or {}))
    if minutes_for is not None and cat is not None and estimates.get("kind") == "measured":
        out += decide_workload(plan, cat, minutes_for)
    elif minutes_for is not None and cat is not None:  # table rates: the plan chose its defaults with the same ones
        kept = {"canvas": list(s.canvas) if s.canvas else None, "frames": s.frames, "steps": s.steps}
        out += [decision(k, kept[k], kept[k], "no measurement of ComfyUI's H3 here; the plan's default, chosen "
                         "with the throughput table's rates, stands") for k in ("canvas", "frames", "steps")]
    timing = decide_timing(plan, estimates)
    if timing is not None:
        out.append(timing)
    prefetch = decide_prefetch(plan, estimates, disk or {})
    if prefetch is not None:
        out.append(prefetch)
    disk_read = decide_disk_read(plan, disk or {})
    if disk_read is not None:
        out.append(disk_read)
    cache = decide_page_cache(plan, streaming)
    if cache is not None:
        out.append(cache)
    return out


def calibrated_values(decisions: list[Decision], settings_keys) -> dict:
    """The `calibrated:` config section: the values calibration changed, for keys the config accepts.

    Kept values are left out on purpose: written down they would pin today's
    profile values over the next profile the user picks (profile < calibrated).
    Decisions on other keys (native_threads) stay in the report only.
    """
    return {d["setting"]: d["value"] for d in decisions
            if d["changed"] and d["value"] is not None and d["setting"] in settings_keys}




def _minutes(m) -> str:
    if m is None:
        return "an unknown time"
    return f"{m:.0f} min" if m < 120 else f"{m / 60:.1f} h"


def _label(canvas, frames, steps) -> str:
    return f"{canvas[0]}x{canvas[1]}, {frames} frames, {steps} steps"


def workload_options(plan: Plan, cat) -> list[dict]:
    """Every (canvas, frames, steps, cfg, preset) within the memory limits that the search may choose."""
    s = plan.settings
    max_canvas = tuple(s.max_canvas or cat.canvas_ladder[0])
    max_frames = int(s.max_frames or cat.frames_ladder[0])
    steps = int(s.steps or cat.sampling.steps)
    cfg = float(s.cfg if s.cfg is not None else cat.sampling.cfg)
    runs = [(steps, cfg, s.preset)]
    fast = cat.presets.get("fast")
    if fast is not None and fast.steps < steps:
        runs.append((fast.steps, fast.cfg, "fast"))
    canvases = [tuple(c) for c in cat.canvas_ladder if c[0] <= max_canvas[0] and c[1] <= max_canvas[1]
                and c[0] * c[1] <= max_canvas[0] * max_canvas[1]] or [max_canvas]
    frames = [int(f) for f in cat.frames_ladder if int(f) <= max_frames] or [max_frames]

    def worth(c, f, p) -> bool:  # a preset's own floor: smaller canvases are not worth its steps (catalog)
        spec = cat.presets.get(p) if p else None
        if spec is None:
            return True
        lo = spec.min_canvas
        return c[0] * c[1] >= lo[0] * lo[1] and f >= spec.min_frames
    out = [{"canvas": list(c), "frames": f, "steps": st, "cfg": g, "preset": p}
           for c in canvases for f in frames for st, g, p in runs if p != "fast" or worth(c, f, p)]
    return out


def _rank(o: dict) -> tuple:
    return (o["canvas"][0] * o["canvas"][1], o["frames"], o["steps"])


def decide_workload(plan: Plan, cat, minutes_for) -> list[Decision]:
    """Canvas, frames, steps (and preset) for the workflows: the best within target_minutes and the memory limits."""
    s = plan.settings
    target = float(s.target_minutes or TARGET_MINUTES)
    sampling = cat.sampling
    now = {"canvas": list(s.canvas or s.max_canvas or cat.canvas_ladder[-1]),
           "frames": int(s.frames or s.max_frames or cat.frames_ladder[-1]),
           "steps": int(s.steps or sampling.steps),
           "cfg": float(s.cfg if s.cfg is not None else sampling.cfg),
           "preset": s.preset}
    m_now = minutes_for(now["canvas"], now["frames"], now["steps"], now["cfg"])
    options = workload_options(plan, cat) + [now]  # the plan's own values may lie between the ladders' rungs
    timed = [(o, minutes_for(o["canvas"], o["frames"], o["steps"], o["cfg"])) for o in options]
    timed = [(o, m) for o, m in timed if m is not None]
    if m_now is None or not timed:
        return [decision(k, now[k], now[k], "no time estimate for this machine; kept the plan's workflow defaults")
                for k in ("canvas", "frames", "steps")]
    within = [(o, m) for o, m in timed if m <= target]
    if m_now <= target and all(_rank(o) <= _rank(now) for o, _ in within):
        pick, m_pick = now, m_now
        why = (f"{_label(now['canvas'], now['frames'], now['steps'])} takes about {_minutes(m_now)} per clip by the "
               f"measured rates, within the {_minutes(target)} target and the memory limits; kept")
    elif within:
        pick, m_pick = max(within, key=lambda om: _rank(om[0]))
        verb = "raised" if _rank(pick) > _rank(now) else "lowered"
        why = (f"{_label(now['canvas'], now['frames'], now['steps'])} would take about {_minutes(m_now)} per clip by "
               f"the measured rates (target {_minutes(target)}); {_label(pick['canvas'], pick['frames'], pick['steps'])} "
               f"takes about {_minutes(m_pick)}, the best of {len(within)} choices within the target and the memory "
               f"limits; {verb}")
    else:
        pick, m_pick = min(timed, key=lambda om: om[1])
        why = (f"no canvas, frame count or step count within the memory limits meets the {_minutes(target)} target "
               f"by the measured rates: {_label(now['canvas'], now['frames'], now['steps'])} takes about "
               f"{_minutes(m_now)}, the fastest ({_label(pick['canvas'], pick['frames'], pick['steps'])}) about "
               f"{_minutes(m_pick)}; chose the fastest")
    out = [decision(k, pick[k], now[k], why) for k in ("canvas", "frames", "steps")]
    if pick.get("preset") != now.get("preset") and pick.get("preset"):
        out.append(decision("preset", pick["preset"], now.get("preset"), why))
    return out


def decide_timing(plan: Plan, estimates: dict) -> Decision | None:
    """The measured rates go to `calibrated:` (every later plan then estimates with them); a table estimate does not."""
    timing = estimates.get("timing")
    if not timing:
        return None
    previous = dict(plan.settings.timing) or None
    if estimates.get("kind") != "measured":
        return decision("timing", previous, previous, f"no measurement of ComfyUI's H3 here; {timing.get('source')} "
                        "stays the plan's estimate")
    t = estimates.get("time") or {}
    return decision("timing", timing, previous,
                    f"measured in ComfyUI's Python: {timing['block_s_per_token']:.3g} s per block per token, "
                    f"{timing['block_s_per_token2']:.3g} s per token^2, {timing['step_fixed_s']:.3g} s fixed per call; "
                    f"{t.get('seconds_per_step') or 0:.3g} s per step at {t.get('tokens')} tokens")


def decide_disk_read(plan: Plan, disk: dict) -> Decision | None:
    """The disk probe's cold sequential read goes to `calibrated:` (disk_read_bytes_per_s): the streamed text
    encoder reads its whole file once per prompt, and the plan times that read at this rate, not the catalog's
    assumption for the disk's kind."""
    if disk.get("status") != "measured":
        return None
    rate = int(disk.get("read_bytes_per_s") or (disk.get("gb_per_s") or 0) * 1e9)
    if rate <= 0:
        return None
    span = RANGES["disk_read_bytes_per_s"]  # config.yaml refuses a rate outside it, so calibration writes none
    rate = int(min(max(rate, span.lo), span.hi))
    ts = plan.settings.text_encoder_streaming  # the rate the plan timed the read at, when it was a measured one
    previous = ts.disk_bytes_per_s if "measured" in (ts.rate_source or "") else None
    return decision("disk_read_bytes_per_s", rate, previous,
                    f"the disk probe read {rate / 1e9:.2f} GB/s from {disk.get('path') or 'the models disk'} with its "
                    "pages dropped from the page cache; the streamed text encoder's read per prompt is timed at it")


def streaming_enabled(plan: Plan) -> bool:
    return plan.streams_dit


def prefetch_figures(plan: Plan, estimates: dict, disk: dict, cpu: bool = False, fingerprint: Fingerprint | None = None,
                     block_fixed_s: float = 0.0) -> dict | None:
    """plan.prefetch.prefetch_for at the measured disk rate and the measured compute per block, or None.

    Also "pass_overhead", what streaming adds to a model call as measured, by the planner's formula
    (plan.page_cache.stream_overhead): "page_cache" (cache_share: the streamed blocks of the file, read from
    its header when `estimates["arch"]` has it, against the fingerprint's RAM, the estimated peak and what the
    OS keeps) splits the blocks into those read from memory and those read from the disk each step; the
    disk's share costs the wait behind the read-ahead (measured_pass_overhead), both the in-place read.
    `cpu`: the DiT computes on the CPU, where the loader reads each block into its buffers while the model
    waits; that read is the disk probe's `direct_read_bytes_per_s`, and without it the measured share is
    None (the waiting alone would understate it). `block_fixed_s`: the fit's per-block constant (folded into
    the timing's step_fixed_s), part of what a block computes while the next one is read."""
    if not streaming_enabled(plan) or disk.get("status") != "measured" or not disk.get("gb_per_s"):
        return None
    from h3kit.plan import page_cache
    from h3kit.plan.prefetch import prefetch_for

    st = plan.settings.streaming
    timing, t = estimates.get("timing") or {}, estimates.get("time") or {}
    tokens = t.get("tokens") or estimates.get("tokens") or 0
    arch = estimates.get("arch") or {}
    blocks = int(arch.get("blocks_total") or st.blocks or 0)
    block_bytes = int(arch["block_file_bytes"] / blocks) if arch.get("block_file_bytes") and blocks else \
        int(st.block_bytes or 0)
    if not block_bytes or not timing.get("block_s_per_token"):
        return None
    compute = (timing["block_s_per_token"] * tokens + timing.get("block_s_per_token2", 0.0) * tokens ** 2
               + max(0.0, float(block_fixed_s or 0.0)))
    res = prefetch_for(disk["gb_per_s"] * 1e9, block_bytes, compute)
    out = {"enabled": True, "disk_bytes_per_s": disk["gb_per_s"] * 1e9, "cache_dropped": disk.get("cache_dropped"),
           "block_bytes": block_bytes, **res}
    # on a CPU the loader reads each block into its buffers while the model waits (calibration measures
    # that read only there: a GPU's copy overlaps the compute)
    rate = disk.get("direct_read_bytes_per_s") if cpu else None
    if rate:
        out.update(direct_read_bytes_per_s=rate, copy_s_per_block=block_bytes / rate)
    resident = min(int(st.resident_blocks or 0), blocks)
    ram = int(fingerprint.ram_total_bytes or 0) if fingerprint is not None else 0
    # the plan does not carry the profile's headroom: what the OS and other programs use now
    keep = page_cache.os_keep(fingerprint, 0)
    share = page_cache.cache_share((blocks - resident) * block_bytes, ram,
                                   int((estimates.get("memory") or {}).get("peak_rss_bytes") or 0), keep)
    out["page_cache"] = share.to_json()
    if cpu and not rate:
        out["pass_overhead"] = None
    else:
        _add_pass_overhead(out, res, share, cpu=cpu, disk_bytes_per_s=disk["gb_per_s"] * 1e9, compute=compute,
                           streamed_blocks=blocks - resident, blocks=blocks)
    out["pass_overhead_planned"] = st.streamed.pass_overhead if st.streamed is not None else None
    if out["pass_overhead"] is None:
        out["pass_overhead_note"] = ("the CPU's in-place read of each block was not measured (no native "
                                     "library); the clip time keeps the plan's share")
    return out


def _add_pass_overhead(out: dict, res: dict, share, *, cpu: bool, disk_bytes_per_s: float, compute: float,
                       streamed_blocks: int, blocks: int) -> None:
    """The measured pass overhead into `out` (prefetch_figures' answer, with its block size and copy time): the
    disk's share, the cached share and, weighed by the page cache's `share`, the whole."""
    from h3kit.plan import page_cache
    from h3kit.plan.prefetch import measured_pass_overhead, prefetch_for

    copy = (out.get("copy_s_per_block") or 0.0) / compute if compute > 0 else 0.0
    out["pass_overhead_disk"] = measured_pass_overhead(res, 1.0, out.get("copy_s_per_block"))
    if cpu and share.case == page_cache.DOES_NOT_FIT:
        # page_cache "bypass" (the plan's for such a file): the C thread reads past the cache the whole
        # time and the model widens each block as it arrives, so the widening is part of what a block
        # costs while the next ones are read (plan.page_cache.bypassed_overhead)
        out["pass_overhead_disk"] = page_cache.bypassed_overhead(
            prefetch_for(disk_bytes_per_s, out["block_bytes"], compute + out["copy_s_per_block"]),
            compute, out["copy_s_per_block"])
        out["read_path"] = "bypass"
    out["pass_overhead_cached"] = round(copy, 4)
    out["pass_overhead"] = round(page_cache.stream_overhead(share.share, out["pass_overhead_disk"], copy,
                                                            streamed_blocks, blocks), 4)


def decide_page_cache(plan: Plan, fig: dict | None) -> Decision | None:
    """The streamed loader's page_cache by what the cache can keep next to the run as measured (`fig`:
    prefetch_figures' document, with the file's own blocks and the measured peak): bypass when it cannot
    hold them, else use. None when the plan does not stream."""
    if not streaming_enabled(plan):
        return None
    run = plan.settings.streaming.streamed
    current = (run.page_cache if run is not None else None) or "use"
    if fig is None or not fig.get("page_cache"):
        return decision("page_cache", current, current, "no disk rate or block compute time measured; kept")
    cs = fig["page_cache"]
    value = "bypass" if cs["case"] == "does not fit" else "use"
    return decision("page_cache", value, current, cs["sentence"] + (
        " So the loader reads them past the cache." if value == "bypass" else
        " So the loader reads them through the cache."))


def decide_prefetch(plan: Plan, estimates: dict, disk: dict) -> Decision | None:
    """Blocks to read ahead while one computes, when the plan streams the DiT (None when it does not)."""
    if not streaming_enabled(plan):
        return None
    current = int(plan.settings.streaming.prefetch_blocks or 1)
    fig = prefetch_figures(plan, estimates, disk)
    if fig is None:
        return decision("prefetch_blocks", current, current, "no disk rate or block compute time measured; kept")
    return decision("prefetch_blocks", fig["prefetch_blocks"], current,
                    f"a block reads in {fig['read_s_per_block']:.3g} s at the measured {disk['gb_per_s']:.3g} GB/s and "
                    f"computes in {fig['compute_s_per_block']:.3g} s; "
                    + (f"the disk is the limit (waiting {100 * fig['io_wait_fraction']:.0f}% of the time)"
                       if fig["disk_bound"] else "reads hide behind compute"))
