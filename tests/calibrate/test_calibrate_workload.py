"""Calibration's workflow defaults: the best canvas/frames/steps that meet target_minutes, never beyond the
memory limits; the measured timing goes to calibrated:; read-ahead from the measured disk and compute."""

from __future__ import annotations

import dataclasses
import json
import random
from pathlib import Path

import pytest

from h3kit.data.fingerprint import Fingerprint
from h3kit.calibrate import decisions as dec
from h3kit.calibrate import estimates as est_mod
from h3kit.data import catalog as catalog_mod
from h3kit.data.plan_doc import Plan
from h3kit.data.settings import KEYS
from h3kit.plan import make_plan, timing

FIXTURES = Path(__file__).parents[1] / "fixtures" / "fingerprints"


@pytest.fixture(scope="module")
def cat():
    return catalog_mod.load()


@pytest.fixture(scope="module")
def plan(cat):
    fp = Fingerprint.from_json(json.loads((FIXTURES / "nvidia-rtx3060-12gb-32gb.json").read_text()))
    return make_plan(fp, cat, catalog_mod.load_profiles(cat))


def minutes_by(cat, rate: float):
    """Minutes per clip with the plan's formula at rates `rate` times a CPU-like machine's."""
    t = {"block_s_per_token": 2e-4 * rate, "block_s_per_token2": 1e-8 * rate, "step_fixed_s": 2.0 * rate}

    def minutes(canvas, frames, steps, cfg):
        return timing.estimate_clip({"blocks": 50}, t, tuple(canvas), frames, steps, cfg, cat)["minutes_per_clip"]
    return minutes


def _with(plan: Plan, **settings) -> Plan:
    return dataclasses.replace(plan, settings=dataclasses.replace(plan.settings, **settings))


def test_a_slow_machine_lowers_the_defaults_to_meet_the_target(cat, plan):
    p = _with(plan, target_minutes=15.0)
    minutes = minutes_by(cat, 1.0)
    out = {d["setting"]: d for d in dec.decide_workload(p, cat, minutes)}
    before = minutes(p.settings.canvas, p.settings.frames, p.settings.steps, 1.0)
    after = minutes(out["canvas"]["value"], out["frames"]["value"], out["steps"]["value"], 1.0)
    assert before > 15 and after <= 15
    assert any(d["changed"] for d in out.values()) and "lowered" in out["canvas"]["evidence"]


def test_a_fast_machine_raises_them_to_the_memory_limits(cat, plan):
    small = cat.canvas_ladder[-1]
    p = _with(plan, canvas=tuple(small), frames=cat.frames_ladder[-1], target_minutes=60.0)
    out = {d["setting"]: d for d in dec.decide_workload(p, cat, minutes_by(cat, 1e-6))}
    assert tuple(out["canvas"]["value"]) == plan.settings.max_canvas
    assert out["frames"]["value"] == plan.settings.max_frames and "raised" in out["canvas"]["evidence"]


def test_nothing_meets_the_target_chooses_the_fastest_and_says_so(cat, plan):
    out = {d["setting"]: d for d in dec.decide_workload(_with(plan, target_minutes=1.0), cat, minutes_by(cat, 100.0))}
    assert "no canvas" in out["canvas"]["evidence"] and "fastest" in out["canvas"]["evidence"]


@pytest.mark.parametrize("seed", range(60))
def test_defaults_never_exceed_the_memory_limits(cat, plan, seed):
    rng = random.Random(seed)
    ladder = cat.canvas_ladder
    limit = ladder[rng.randrange(len(ladder))]
    max_frames = rng.choice(cat.frames_ladder)
    p = _with(plan, max_canvas=list(limit), max_frames=max_frames, canvas=list(limit), frames=max_frames,
              target_minutes=rng.choice([1.0, 15.0, 240.0]))
    for d in dec.decide_workload(p, cat, minutes_by(cat, 10 ** rng.uniform(-6, 2))):
        assert d["evidence"]
        if d["setting"] == "canvas":
            w, h = d["value"]
            assert w <= limit[0] and h <= limit[1]
        if d["setting"] == "frames":
            assert d["value"] <= max_frames


def test_the_measured_timing_goes_to_calibrated_and_a_table_one_does_not(cat, plan):
    t = {"source": "calibrated 2026-12-01 in ComfyUI's Python (cpu, float32)", "device": "cpu", "dtype": "float32",
         "block_s_per_token": 1e-4, "block_s_per_token2": 1e-9, "step_fixed_s": 0.5}
    measured = dec.decide_timing(plan, {"kind": "measured", "timing": t, "time": {"seconds_per_step": 3.0, "tokens": 99}})
    assert measured["changed"] and measured["value"] == t and "measured in ComfyUI" in measured["evidence"]
    assert dec.calibrated_values([measured], KEYS)["timing"] == t
    table = dec.decide_timing(plan, {"kind": "table", "timing": {**t, "source": "table: cpu"}})
    assert not table["changed"] and "timing" not in dec.calibrated_values([table], KEYS)


def test_decide_adds_workload_and_timing_with_a_real_estimate(cat, plan):
    fp = Fingerprint.from_json(json.loads((FIXTURES / "nvidia-rtx3060-12gb-32gb.json").read_text()))
    h3 = {"status": "measured", "device": "cuda", "dtype": "bfloat16",
          "fit": {"block_s_per_token": 1e-6, "block_s_per_token2": 1e-11, "step_fixed_s": 0.2}}
    arch = est_mod.arch_mod.from_catalog(cat) if hasattr(est_mod, "arch_mod") else \
        __import__("h3kit.calibrate.arch", fromlist=["x"]).from_catalog(cat)
    est = est_mod.clip_estimate(cat, plan, fp, h3, arch, day="2026-12-01", device="cuda")

    def minutes(canvas, frames, steps, cfg):
        return est_mod.clip_time(arch, est["timing"], {"canvas": canvas, "frames": frames, "steps": steps, "cfg": cfg},
                                 cat, timing)["minutes_per_clip"]
    out = dec.decide(plan, {"tiles": [], "native": {}, "inference": {}, "device": {}}, est, minutes_for=minutes, cat=cat)
    settings = {d["setting"] for d in out}
    assert {"canvas", "frames", "steps", "timing", "vae_tile_size"} <= settings
    written = dec.calibrated_values(out, KEYS)
    assert "timing" in written
    from h3kit.data import config as config_mod

    text_plan = {"calibrated": written}
    assert text_plan  # the mapping is what write_section validates below
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "config.yaml"
        path.write_text("profile: auto\n")
        config_mod.write_section(path, "calibrated", written)  # refuses anything the next plan would reject
        assert "block_s_per_token" in path.read_text()


def test_read_ahead_when_the_plan_streams(cat, plan):
    p = _with(plan, streaming=dataclasses.replace(plan.settings.streaming, enabled=True, block_bytes=400 * 10**6))
    est = {"timing": {"block_s_per_token": 1e-4, "block_s_per_token2": 0.0, "step_fixed_s": 0.1},
           "time": {"tokens": 10000}}
    fast_disk = dec.decide_prefetch(p, est, {"status": "measured", "gb_per_s": 3.0, "cache_dropped": True})
    slow_disk = dec.decide_prefetch(p, est, {"status": "measured", "gb_per_s": 0.1, "cache_dropped": True})
    assert fast_disk["value"] == 1 and "hide behind compute" in fast_disk["evidence"]
    assert slow_disk["value"] == 2 and "disk is the limit" in slow_disk["evidence"]
    assert dec.decide_prefetch(plan, est, {"status": "measured", "gb_per_s": 3.0}) is None  # not streaming
    fig = dec.prefetch_figures(p, est, {"status": "measured", "gb_per_s": 0.1, "cache_dropped": True})
    assert set(fig) >= {"enabled", "disk_bytes_per_s", "cache_dropped", "compute_s_per_block", "read_s_per_block",
                        "io_wait_fraction", "prefetch_blocks"}


def test_the_fastest_is_never_slower_than_the_plans_own_defaults(cat, plan):
    """Frames between the ladder's rungs (22 when the ladder starts at 39): 'the fastest' still counts them."""
    p = _with(plan, canvas=tuple(cat.canvas_ladder[-1]), frames=22, steps=6, target_minutes=0.5)
    minutes = minutes_by(cat, 100.0)
    out = {d["setting"]: d for d in dec.decide_workload(p, cat, minutes)}
    chosen = minutes(out["canvas"]["value"], out["frames"]["value"], out["steps"]["value"], 1.0)
    assert chosen <= minutes(p.settings.canvas, 22, 6, 1.0)
    assert out["frames"]["value"] == 22 and not out["frames"]["changed"]
