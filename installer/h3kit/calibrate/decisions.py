"""What calibration decides from its measurements: pure functions, each with its evidence.

Every decision is `{"setting", "value", "previous", "changed", "evidence"}`,
the evidence a sentence with the measured numbers. None of them raises
memory use above the plan's budget: a tile is chosen only among those whose
measured peak fits, and the preload only ever shrinks. `calibrated_values`
turns the decisions into the config's `calibrated:` section.
"""

from __future__ import annotations

import math
import os

from h3kit.core.units import human_bytes


def _hb(n) -> str:
    return human_bytes(n, "-")


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
                        f"{_hb(best['peak_bytes'])}, the fastest of {len(fits)} within the "
                        f"{_hb(budget_bytes)} budget")
    smallest = min(ran, key=lambda t: t["tile"])
    value = min(smallest["tile"], current)
    return decision("vae_tile_size", value, current,
                    f"no swept tile fits the {_hb(budget_bytes)} budget (smallest, {smallest['tile']}, "
                    f"peaked at {_hb(smallest['peak_bytes'])}); chose the smallest")


def decide_preload(settings: dict, budget: int | None, estimated_peak: int | None, memory: str = "RAM") -> dict:
    """Shrink the preload by what the estimated peak overshoots the budget (whole shards).

    `memory` names where the preload lives: GPU memory on a GPU plan, RAM
    otherwise. Never grows it: more read-ahead is only ever the plan's call.
    """
    preload = int(settings.get("preload_bytes") or 0)
    shard = int(settings.get("shard_size_bytes") or 0) or 1
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
    verb = "threads reach" if pick["threads"] > 1 else "thread reaches"
    return decision("native_threads", pick["threads"], cores,
                    f"{pick['threads']} {verb} {pick['gflop_per_s']:.3g} GFLOP/s, within 5% of the best "
                    f"{best:.3g} GFLOP/s measured from 1 to {max(s['threads'] for s in ok)} threads")


def decide_shard(settings: dict, inference: dict) -> dict:
    """The shard size stays the plan's; the evidence says how the scaled DiT streamed with it."""
    shard = settings.get("shard_size_bytes")
    if inference.get("status") != "measured":
        return decision("shard_size_bytes", shard, shard, "the scaled DiT did not run; kept the plan's shard size")
    return decision("shard_size_bytes", shard, shard,
                    f"the scaled DiT streamed {_hb(inference.get('bytes_streamed'))} with {_hb(shard)} shards, "
                    f"waiting {100 * (inference.get('wait_fraction') or 0):.3g}% of the time; kept")


def decide(plan: dict, measurements: dict, estimates: dict) -> list[dict]:
    """Every decision, each with its evidence; none raises memory use above the plan's budget."""
    s = plan.get("settings") or {}
    budget = plan.get("budget") or {}
    native = measurements.get("native") or {}
    tile_budget = budget.get("gpu_bytes") or budget.get("ram_bytes")
    memory, preload_budget, peak = preload_memory(plan, measurements.get("device") or {}, estimates)
    out = [
        decide_tile(measurements.get("tiles") or [], tile_budget, int(s.get("vae_tile_size") or 512)),
        decide_preload(s, preload_budget, peak, memory),
        decide_threads(native.get("scaling") or [], int(native.get("threads_max") or os.cpu_count() or 1)),
    ]
    if s.get("shard_size_bytes"):
        out.append(decide_shard(s, measurements.get("inference") or {}))
    return out


def calibrated_values(decisions: list[dict], settings_keys) -> dict:
    """The `calibrated:` config section: the values calibration changed, for keys the config accepts.

    Kept values are left out on purpose: written down they would pin today's
    profile values over the next profile the user picks (profile < calibrated).
    Decisions on other keys (native_threads) stay in the report only.
    """
    return {d["setting"]: d["value"] for d in decisions
            if d["changed"] and d["value"] is not None and d["setting"] in settings_keys}
