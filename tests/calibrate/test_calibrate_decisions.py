"""Decisions from measurements: pure functions, checked over many synthetic measurements."""

from __future__ import annotations

import random

import pytest

from h3kit import calibrate
from h3kit.data.plan_doc import MemoryBudget, Plan, PlanSettings

TILES = [128, 256, 384, 512, 640, 768]
GB = 10**9


def synthetic_sweep(rng: random.Random) -> list[dict]:
    """A tile sweep as a GPU might report it: time falls with tile size (mostly), memory grows."""
    out = []
    for tile in TILES[: rng.randint(0, len(TILES))]:
        if rng.random() < 0.1:
            out.append({"tile": tile, "seconds": None, "peak_bytes": None, "error": "out of memory"})
            break
        out.append({"tile": tile, "seconds": rng.uniform(0.01, 5.0),
                    "peak_bytes": int(tile * tile * rng.uniform(1e3, 1e5))})
    return out


def synthetic_plan(rng: random.Random) -> Plan:
    shard = rng.choice([64, 128, 278, 512]) * 10**6
    return Plan(settings=PlanSettings(shard_size_bytes=shard, preload_bytes=shard * rng.randint(0, 8),
                                      vae_tile_size=rng.choice(TILES)),
                budget=MemoryBudget(gpu_bytes=rng.choice([None, rng.randint(1, 48) * GB]),
                                    ram_bytes=rng.randint(4, 128) * GB))


@pytest.mark.parametrize("seed", range(400))
def test_decisions_never_raise_memory_above_the_budget(seed):
    rng = random.Random(seed)
    plan = synthetic_plan(rng)
    tiles = synthetic_sweep(rng)
    budget_gpu = plan.budget.gpu_bytes or plan.budget.ram_bytes
    gpu_plan = bool(plan.budget.gpu_bytes)
    free = rng.choice([None, rng.randint(1, 48) * GB]) if gpu_plan else None
    device = {"status": "measured", "free_bytes": free} if free else {"status": "skipped"}
    preload_budget = min(plan.budget.gpu_bytes, free or 10**30) if gpu_plan else plan.budget.ram_bytes
    peak = int(preload_budget * rng.uniform(0.3, 1.8))
    estimates = {"peak_gpu_bytes": peak, "peak_ram_bytes": peak} if gpu_plan else \
        {"peak_ram_bytes": peak, "peak_gpu_bytes": None}
    scaling = [{"threads": t, "gflop_per_s": rng.uniform(1, 100)} for t in (1, 2, 4, 8)[: rng.randint(0, 4)]]
    decisions = calibrate.decide(plan, {"tiles": tiles, "native": {"scaling": scaling, "threads_max": 8},
                                        "inference": {}, "device": device}, estimates)
    by = {d["setting"]: d for d in decisions}
    for d in decisions:
        assert d["evidence"] and isinstance(d["evidence"], str)

    tile = by["vae_tile_size"]["value"]
    measured = {t["tile"]: t for t in tiles if t.get("seconds") and t.get("peak_bytes")}
    fitting = [t for t in measured.values() if t["peak_bytes"] <= budget_gpu]
    if fitting:
        # The chosen tile was measured, fits, and nothing that fits was faster.
        assert measured[tile]["peak_bytes"] <= budget_gpu
        assert measured[tile]["seconds"] == min(t["seconds"] for t in fitting)
    else:
        # Nothing fits (or nothing ran): memory never goes up.
        assert tile <= plan.settings.vae_tile_size

    preload = by["preload_bytes"]["value"]
    old = plan.settings.preload_bytes
    shard = plan.settings.shard_size_bytes
    assert 0 <= preload <= old
    if peak <= preload_budget:
        assert preload == old
    else:
        # Cut by whole shards until the overshoot is covered, or down to zero.
        over = peak - preload_budget
        assert preload == 0 or old - preload >= over
        assert (old - preload) % shard == 0 or preload == 0


def test_fastest_fitting_tile_wins_over_a_faster_one_over_budget():
    tiles = [{"tile": 256, "seconds": 2.0, "peak_bytes": 3 * GB},
             {"tile": 512, "seconds": 1.0, "peak_bytes": 6 * GB},
             {"tile": 768, "seconds": 0.5, "peak_bytes": 12 * GB}]
    d = calibrate.decide_tile(tiles, 8 * GB, 384)
    assert d["value"] == 512 and d["changed"] and "512" in d["evidence"]


def test_no_sweep_keeps_the_plan_tile_and_says_why():
    d = calibrate.decide_tile([], 8 * GB, 384)
    assert d["value"] == 384 and not d["changed"] and "no tile sweep" in d["evidence"]


def test_preload_shrinks_by_whole_shards_when_the_peak_overshoots():
    settings = PlanSettings(shard_size_bytes=100, preload_bytes=800)
    d = calibrate.decide_preload(settings, budget=1000, estimated_peak=1250)
    assert d["value"] == 500 and d["changed"]
    assert calibrate.decide_preload(settings, 1000, 900)["value"] == 800


def test_threads_pick_the_fewest_within_five_percent():
    scaling = [{"threads": 1, "gflop_per_s": 10}, {"threads": 2, "gflop_per_s": 19.5}, {"threads": 4, "gflop_per_s": 20}]
    assert calibrate.decide_threads(scaling, 4)["value"] == 2


def test_calibrated_section_has_only_changed_settings_keys():
    decisions = [calibrate.decision("vae_tile_size", 512, 384, "x"), calibrate.decision("preload_bytes", 5, 5, "kept"),
                 calibrate.decision("native_threads", 2, None, "not a settings key")]
    assert calibrate.calibrated_values(decisions, ("vae_tile_size", "preload_bytes")) == {"vae_tile_size": 512}


def test_native_kind_follows_bits():
    assert calibrate.native_kind("q8_0") == "q8_0"
    assert calibrate.native_kind("q5_0") == "q4_0"
    assert calibrate.native_kind("int8_convrot") == "q8_0"
    assert calibrate.native_kind(None) == "q8_0"


def test_gpu_plan_preload_is_checked_against_measured_free_gpu_memory():
    plan = Plan(settings=PlanSettings(shard_size_bytes=GB, preload_bytes=6 * GB, vae_tile_size=256),
                budget=MemoryBudget(gpu_bytes=20 * GB, ram_bytes=64 * GB))
    device = {"status": "measured", "free_bytes": 16 * GB}
    memory, budget, peak = calibrate.preload_memory(plan, device, {"peak_gpu_bytes": 18 * GB, "peak_ram_bytes": GB})
    assert (memory, budget, peak) == ("GPU memory", 16 * GB, 18 * GB)
    d = calibrate.decide_preload(plan.settings, budget, peak, memory)
    assert d["value"] == 4 * GB and "GPU memory" in d["evidence"]
