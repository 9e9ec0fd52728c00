"""Estimates for the real model: the catalog's numbers, the measured rates, and formulas that say so."""

from __future__ import annotations

import pytest

from h3kit import calibrate
from h3kit.data import catalog as catalog_mod

GB = 10**9


@pytest.fixture(scope="module")
def cat():
    return catalog_mod.load().data


def _plan(**settings) -> dict:
    base = {"max_canvas": [608, 352], "max_frames": 73, "preload_bytes": 0, "shard_size_bytes": 278 * 10**6,
            "stream_from": "ram", "streaming": {"resident": False, "blocks": 50, "block_bytes": 400 * 10**6,
                                                "resident_blocks": 10}}
    base.update(settings)
    return {"settings": base, "budget": {"ram_bytes": 64 * GB, "gpu_bytes": 12 * GB},
            "estimates": {"peak_ram_bytes": 30 * GB, "activation_bytes": 2 * GB}}


def test_tokens_follow_the_catalog_rule(cat):
    px = cat["tokens"]["spatial_tokens_px"]
    tc = cat["tokens"]["temporal_compression"]
    assert calibrate.tokens_for(cat["tokens"], 256, 256, 22) == (256 // px) ** 2 * -(-22 // tc)


def test_compute_time_scales_with_the_measured_rate_and_is_labelled(cat):
    slow = calibrate.estimate(cat, _plan(), {"native_gflops": 10.0}, 20 * GB)
    fast = calibrate.estimate(cat, _plan(), {"native_gflops": 20.0}, 20 * GB)
    assert slow["label"] == "estimate"
    assert slow["compute_seconds_per_step"] == pytest.approx(2 * fast["compute_seconds_per_step"])
    assert slow["flops_per_pass"] == calibrate.flops_per_pass(cat["architecture"]["blocks"], cat["architecture"]["hidden"],
                                                              cat["architecture"]["ffn"], slow["tokens"])
    for key in ("tokens", "flops_per_pass", "compute_seconds_per_step", "stream_seconds_per_step",
                "seconds_per_step", "peak_ram_bytes"):
        assert slow["formulas"][key]


def test_streaming_uses_the_plan_blocks_and_the_measured_link(cat):
    est = calibrate.estimate(cat, _plan(), {"device_tflops": 100.0, "h2d_gbps": 20.0}, 20 * GB)
    assert est["stream_seconds_per_step"] == pytest.approx(40 * 400 * 10**6 / 20e9)
    assert est["seconds_per_step"] == pytest.approx(est["compute_seconds_per_step"] + est["stream_seconds_per_step"])
    overlapped = calibrate.estimate(cat, _plan(preload_bytes=GB), {"device_tflops": 100.0, "h2d_gbps": 20.0}, 20 * GB)
    assert overlapped["seconds_per_step"] == pytest.approx(max(overlapped["compute_seconds_per_step"],
                                                               overlapped["stream_seconds_per_step"]))
    from_disk = calibrate.estimate(cat, _plan(stream_from="disk"), {"native_gflops": 10.0, "disk_gbps": 2.0}, 20 * GB)
    assert from_disk["stream_seconds_per_step"] == pytest.approx(40 * 400 * 10**6 / 2e9)
    resident = calibrate.estimate(cat, _plan(streaming={"resident": True}), {"device_tflops": 100.0, "h2d_gbps": 20.0}, 20 * GB)
    assert resident["stream_seconds_per_step"] == 0


def test_peak_ram_moves_with_the_measured_memory_growth(cat):
    plan = _plan(preload_bytes=GB)
    moving = 2 * GB + 278 * 10**6 + GB
    same = calibrate.estimate(cat, plan, {"native_gflops": 10.0, "memory_growth_ratio": 1.0}, 20 * GB)
    more = calibrate.estimate(cat, plan, {"native_gflops": 10.0, "memory_growth_ratio": 1.5}, 20 * GB)
    assert same["peak_ram_bytes"] == 30 * GB
    assert more["peak_ram_bytes"] == 30 * GB + moving // 2


def test_scaled_check_applies_the_same_formula(cat):
    cfg = {"hidden": 512, "ffn": 1376, "tokens": 384}
    check = calibrate.check_scaled(cfg, {"status": "measured", "seconds_per_block": 0.3}, 10.0)
    assert check["estimated_seconds_per_block"] == pytest.approx(calibrate.flops_per_pass(1, 512, 1376, 384) / 10e9)
    assert calibrate.check_scaled(cfg, {"status": "skipped"}, 10.0) == {}
