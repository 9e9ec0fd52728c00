"""Estimates for one clip: ComfyUI's measured H3 rates through the plan's own time formula, memory extrapolated
to the full depth, alternatives with their minutes; the native-kernel figure only as an appendix."""

from __future__ import annotations

import dataclasses
import json

import pytest

from h3kit.data.fingerprint import Fingerprint
from h3kit import calibrate
from h3kit.calibrate import estimates as est_mod
from h3kit.data import catalog as catalog_mod
from h3kit.data.plan_doc import Plan, StreamedRun, Streaming
from h3kit.plan import make_plan, timing

GB = 10**9
FIXTURES = __import__("pathlib").Path(__file__).parents[1] / "fixtures" / "fingerprints"


@pytest.fixture(scope="module")
def catobj():
    return catalog_mod.load()


@pytest.fixture(scope="module")
def cat(catobj):
    return catobj


@pytest.fixture(scope="module")
def cpu_case(catobj):
    fp = Fingerprint.from_json(json.loads((FIXTURES / "cpu-only-16gb.json").read_text()))
    plan = make_plan(fp, catobj, catalog_mod.load_profiles(catobj))
    return fp, plan


def h3_model(a=2e-4, b=1e-8, fixed=3.0, baseline=1.5 * GB, per_block=2.4 * GB, act=2e5) -> dict:
    """A runner `h3_model` block (docs/calibrate.md) as ComfyUI's H3 measured on some CPU."""
    return {"status": "measured", "device": "cpu", "dtype": "float32",
            "arch": {"hidden": 5376, "heads": 56, "head_dim": 128, "ffn": 14336, "blocks_built": 2,
                     "blocks_total": 50, "from": "catalog"},
            "fit": {"block_s_per_token": a, "block_s_per_token2": b, "step_fixed_s": fixed,
                    "step_fixed_s_per_token": 1e-5, "residual_pct": 3.0},
            "memory": {"baseline_rss_bytes": int(baseline), "peak_rss_bytes": int(baseline + 2 * per_block),
                       "weights_bytes_per_block": int(per_block), "activation_bytes_per_token": act,
                       "peak_device_bytes": None},
            "vae": {"status": "measured", "decode_s_per_pixel_frame": 3e-6},
            "text_encoder": {"status": "skipped", "reason": "no file"}}


def test_measured_rates_go_through_the_plans_formula(catobj, cpu_case):
    fp, plan = cpu_case
    arch = calibrate.arch.from_catalog(catobj, catobj.weight(plan.settings.dit_weights))
    est = est_mod.clip_estimate(catobj, plan, fp, h3_model(), arch, day="2026-12-01", device="cpu")
    s = plan.settings
    overhead = s.streaming.streamed.pass_overhead if s.streaming.enabled else 0.0
    same = timing.estimate_clip({"blocks": 50}, est["timing"], s.canvas, s.frames, s.steps, s.cfg, catobj,
                                pass_overhead=overhead)
    assert est["kind"] == "measured" and "ComfyUI's own H3" in est["note"]
    assert est["time"]["seconds_per_step"] == pytest.approx(same["seconds_per_step"])
    assert est["seconds_per_step"] == est["time"]["seconds_per_step"]
    assert est["minutes_per_clip"] == pytest.approx(same["minutes_per_clip"])
    assert est["timing"]["block_s_per_token"] == 2e-4 and est["timing"]["decode_s_per_pixel_frame"] == 3e-6
    # the text encoder was not measured: its figure is the table's, and the source says so
    assert "text_encode_s" in est["timing_from_table"] and "from the" in est["timing"]["source"]
    for key in ("source", "tokens", "seconds_per_step", "steps", "model_calls_per_step", "minutes_per_clip",
                "seconds_per_clip", "text_encode_s", "sampling_s", "decode_s", "canvas", "frames", "video_seconds"):
        assert key in est["time"], key
    for key in ("peak_rss_bytes", "peak_gpu_bytes", "gpu_total_bytes", "ram_total_bytes"):
        assert key in est["memory"], key
    # the calibrated mapping is one the settings check accepts (it goes to calibrated:)
    from h3kit.data import settings as settings_mod

    assert settings_mod._timing_check(est["timing"]) is None


def test_twice_the_block_rate_roughly_doubles_the_step(catobj, cpu_case):
    fp, plan = cpu_case
    arch = calibrate.arch.from_catalog(catobj)
    slow = est_mod.clip_estimate(catobj, plan, fp, h3_model(a=4e-4, b=2e-8, fixed=0.0), arch, day="d", device="cpu")
    fast = est_mod.clip_estimate(catobj, plan, fp, h3_model(a=2e-4, b=1e-8, fixed=0.0), arch, day="d", device="cpu")
    ratio = slow["time"]["seconds_per_step"] / fast["time"]["seconds_per_step"]
    assert ratio == pytest.approx(2.0, rel=0.01)  # only the small per-token fixed part does not double


def test_without_a_measurement_it_is_a_table_estimate_and_says_so(catobj, cpu_case):
    fp, plan = cpu_case
    arch = calibrate.arch.from_catalog(catobj)
    est = est_mod.clip_estimate(catobj, plan, fp, {"status": "skipped", "reason": "no ComfyUI folder was given"}, arch,
                           day="d", device="cpu")
    table = timing.rates_from_table(fp, catobj, "float32")
    assert est["kind"] == "table" and "table estimate" in est["note"] and "no ComfyUI folder" in est["note"]
    assert est["timing"]["source"].startswith("table:")
    assert est["timing"]["block_s_per_token"] == pytest.approx(table["block_s_per_token"])
    assert est["time"]["seconds_per_step"] > 0


HEADER_ARCH = {"hidden": 5376, "heads": 56, "head_dim": 128, "ffn": 14336, "blocks_total": 50,
               "block_params": 50 * 600_000_000, "other_params": 1_000_000_000, "file_bytes": 62 * GB,
               "block_file_bytes": 60 * GB, "other_file_bytes": 2 * GB, "from": "file header x"}


def _work(plan: Plan) -> dict:
    return {"canvas": list(plan.settings.max_canvas), "frames": plan.settings.max_frames}


def test_peak_rss_extrapolates_the_measured_bytes_to_the_full_depth(catobj, cpu_case):
    fp, plan = cpu_case
    plan = _held(plan)
    m = h3_model(per_block=2.4 * GB, act=2e5, baseline=1.5 * GB)
    tokens = 4000
    weights = {"dit": catobj.weight("h3-dit-full-bf16") or next(w for w in catobj.dit if w.format == "bf16"),
               "text_encoder": None, "vae": None, "audio_vae": None}
    mem = est_mod.clip_memory(m, HEADER_ARCH, plan, catobj, fp, _work(plan), tokens, "cpu", weights)
    parts, phases = mem["parts"], mem["phases"]
    assert parts["dit_weights_bytes"] == int(50 * 2.4 * GB + 1_000_000_000 * 4)
    assert parts["activation_bytes"] == int(2e5 * tokens) and parts["baseline_rss_bytes"] == int(1.5 * GB)
    # ComfyUI holds the whole DiT while it samples: the plan's sample phase, with what was measured
    assert phases["sample"]["ram_bytes"] == parts["baseline_rss_bytes"] + parts["dit_weights_bytes"] + int(2e5 * tokens)
    assert mem["peak_rss_bytes"] == max(p["ram_bytes"] for p in phases.values())
    deeper = est_mod.clip_memory(m, {**HEADER_ARCH, "blocks_total": 60}, plan, catobj, fp, _work(plan), tokens, "cpu",
                                 weights)
    assert deeper["peak_rss_bytes"] > mem["peak_rss_bytes"]
    held = est_mod.clip_memory(m, HEADER_ARCH, plan, catobj, fp, _work(plan), tokens, "cpu", weights,
                               held_parts={"text_encoder": GB, "vae": 2 * GB})
    assert held["phases"]["decode"]["ram_bytes"] == phases["decode"]["ram_bytes"] + 2 * GB
    assert held["phases"]["encode"]["ram_bytes"] == phases["encode"]["ram_bytes"] + GB


def test_with_nothing_measured_calibration_gives_the_plans_own_peak(catobj):
    """One memory model: calibration asks the planner's, so a plan that fits is not reported as not fitting
    (after an install on a 24 GB CPU box the report once said 27.6 GiB of 23.5 for the settings the plan fitted)."""
    raw = json.loads((FIXTURES / "cpu-only-16gb.json").read_text())
    raw["memory"]["total_bytes"] = 24 * 2**30
    fp = Fingerprint.from_json(raw)
    plan = make_plan(fp, catobj, catalog_mod.load_profiles(catobj))
    st = plan.settings.streaming
    assert plan.fits and st.enabled and st.streamed.page_cache == "bypass"
    arch = calibrate.arch.from_catalog(catobj, catobj.weight(plan.settings.dit_weights))
    mem = est_mod.clip_memory(None, arch, plan, catobj, fp, _work(plan), 1000, "cpu")
    assert mem["peak_rss_bytes"] == plan.estimates.peak_ram_bytes
    assert mem["phases"]["sample"]["ram_bytes"] == plan.estimates.phases["sample"].ram_bytes
    # the ring the loader reads past the page cache into is in both: the block computing and the one read ahead
    assert mem["parts"]["ring_bytes"] == 2 * st.block_bytes
    deployed = est_mod.clip_estimate(catobj, plan, fp, None, arch, day="d", device="cpu")
    assert deployed["peak_ram_bytes"] <= plan.estimates.peak_ram_bytes <= plan.budget.ram_bytes


def _with_streaming(plan: Plan, streaming: Streaming) -> Plan:
    return dataclasses.replace(plan, settings=dataclasses.replace(plan.settings, streaming=streaming))


def _held(plan: Plan) -> Plan:
    """The same plan with ComfyUI holding the whole DiT (h3kit's streamer off)."""
    return _with_streaming(plan, dataclasses.replace(plan.settings.streaming, enabled=False))


def test_a_measured_streaming_overhead_replaces_the_plans_share_in_the_clip_time(catobj, cpu_case):
    from h3kit.calibrate.decisions import prefetch_figures
    from h3kit.plan.prefetch import measured_pass_overhead

    fp, plan = cpu_case
    st = plan.settings.streaming
    assert st.enabled and st.streamed.pass_overhead > 0.5  # the 16 GB CPU box streams, at h3.c's +84% prior
    arch = calibrate.arch.from_catalog(catobj, catobj.weight(plan.settings.dit_weights))
    planned = est_mod.clip_estimate(catobj, plan, fp, h3_model(), arch, day="d", device="cpu")
    disk = {"status": "measured", "gb_per_s": 3.0, "cache_dropped": True, "direct_read_bytes_per_s": 8e9}
    fig = prefetch_figures(plan, planned, disk, cpu=True)
    assert fig["copy_s_per_block"] == pytest.approx(st.block_bytes / 8e9)
    share = (st.blocks - st.resident_blocks) / st.blocks
    assert fig["pass_overhead"] == measured_pass_overhead(fig, share, fig["copy_s_per_block"])
    assert fig["pass_overhead_planned"] == st.streamed.pass_overhead
    measured = est_mod.clip_estimate(catobj, plan, fp, h3_model(), arch, day="d", device="cpu",
                                pass_overhead=fig["pass_overhead"])
    assert measured["time"]["pass_overhead"] == fig["pass_overhead"]
    assert measured["time"]["pass_overhead_from"].startswith("measured")
    assert planned["time"]["pass_overhead_from"].startswith("the plan")
    calls = measured["time"]["sampling_s"] / planned["time"]["sampling_s"]
    assert calls == pytest.approx((1 + fig["pass_overhead"]) / (1 + st.streamed.pass_overhead), rel=1e-6)
    # on a CPU without the copy figure the waiting alone would understate it: the plan's share stays;
    # on a GPU (a helper thread overlaps the copy) the waiting is all there is
    no_copy = prefetch_figures(plan, planned, {**disk, "direct_read_bytes_per_s": None}, cpu=True)
    assert no_copy["pass_overhead"] is None and "not measured" in no_copy["pass_overhead_note"]
    gpu = prefetch_figures(plan, planned, disk, cpu=False)
    assert "copy_s_per_block" not in gpu and gpu["pass_overhead"] < fig["pass_overhead"]
    # a plan that ComfyUI holds has nothing to replace
    held = est_mod.clip_estimate(catobj, _held(plan), fp, h3_model(), arch, day="d", device="cpu", pass_overhead=0.5)
    assert held["time"]["pass_overhead"] == 0 and held["time"]["pass_overhead_from"] is None


def test_a_streamed_plan_holds_its_resident_blocks_and_the_ring_only_where_the_loader_reads_into_one(catobj, cpu_case):
    fp, plan = cpu_case
    m = h3_model(per_block=2.4 * GB, act=2e5, baseline=1.5 * GB)
    bf16 = next(w for w in catobj.dit if w.format == "bf16")
    weights = {"dit": bf16, "text_encoder": None, "vae": None, "audio_vae": None}
    block = catobj.block_bytes(bf16)

    def streamed(page_cache: str) -> Plan:
        return _with_streaming(plan, Streaming(enabled=True, resident_blocks=3, prefetch_blocks=1, block_bytes=block,
                                               streamed=StreamedRun(preload_bytes=3 * block, page_cache=page_cache)))

    def parts(page_cache: str) -> dict:
        return est_mod.clip_memory(m, HEADER_ARCH, streamed(page_cache), catobj, fp, _work(plan), 4000, "cpu",
                                   weights)["parts"]

    # 3 resident + 1 computing block cast to float32; reading in place through the page cache there is no ring:
    # each block is read into the computing one's buffers and the read-ahead waits in the page cache
    assert parts("use")["dit_weights_bytes"] == int(4 * 2.4 * GB)
    # past the page cache (nodes UncachedRead) the loader holds its ring: the block in use and one read ahead
    assert parts("bypass")["dit_weights_bytes"] == int(4 * 2.4 * GB) + 2 * block
    held = est_mod.clip_memory(m, HEADER_ARCH, _held(plan), catobj, fp, _work(plan), 4000, "cpu", weights)
    assert held["parts"]["dit_weights_bytes"] == int(50 * 2.4 * GB + 1_000_000_000 * 4) > 7 * parts("use")["dit_weights_bytes"]


def test_alternatives_are_faster_and_carry_their_minutes(catobj):
    fp = Fingerprint.from_json(json.loads((FIXTURES / "nvidia-rtx3060-12gb-32gb.json").read_text()))
    plan = make_plan(fp, catobj, catalog_mod.load_profiles(catobj))
    arch = calibrate.arch.from_catalog(catobj)
    gpu = {**h3_model(a=2e-6, b=1e-10, fixed=0.3), "device": "cuda", "dtype": "bfloat16"}
    est = est_mod.clip_estimate(catobj, plan, fp, gpu, arch, day="d", device="cuda")
    assert est["alternatives"]
    head = est["time"]["minutes_per_clip"]
    for alt in est["alternatives"]:
        assert set(alt) >= {"label", "why", "preset", "canvas", "frames", "steps", "quantization",
                            "minutes_per_clip", "peak_gpu_bytes", "peak_rss_bytes"}
        assert alt["minutes_per_clip"] > 0
        if alt["why"] in ("a smaller canvas", "a shorter clip") or alt["preset"] == "fast":
            assert alt["minutes_per_clip"] < head, alt


def test_the_native_kernel_figure_is_only_an_appendix(catobj, cpu_case):
    fp, plan = cpu_case
    appendix = calibrate.native_appendix(catobj, plan, {"native_gflops": 50.0}, 20 * GB)
    est = est_mod.clip_estimate(catobj, plan, fp, h3_model(), calibrate.arch.from_catalog(catobj), day="d",
                           device="cpu", native_appendix=appendix)
    assert est["native_appendix"]["label"].startswith("native-kernel")
    assert est["seconds_per_step"] != appendix["seconds_per_step"]


# -- the appendix itself: the old formula, unchanged in meaning ------------------------------------

def _plan(**settings) -> Plan:
    base = {"max_canvas": [608, 352], "max_frames": 73, "preload_bytes": 0, "shard_size_bytes": 278 * 10**6,
            "stream_from": "ram", "streaming": {"resident": False, "blocks": 50, "block_bytes": 400 * 10**6,
                                                "resident_blocks": 10}}
    base.update(settings)
    return Plan.from_json({"settings": base, "budget": {"ram_bytes": 64 * GB, "gpu_bytes": 12 * GB},
                           "estimates": {"peak_ram_bytes": 30 * GB, "activation_bytes": 2 * GB}})


def test_tokens_follow_the_catalog_rule(cat):
    px = cat.tokens.spatial_tokens_px
    tc = cat.tokens.temporal_compression
    assert calibrate.tokens_for(cat.tokens, 256, 256, 22) == (256 // px) ** 2 * -(-22 // tc)


def test_native_appendix_scales_with_the_measured_rate_and_is_labelled(cat):
    slow = calibrate.native_appendix(cat, _plan(), {"native_gflops": 10.0}, 20 * GB)
    fast = calibrate.native_appendix(cat, _plan(), {"native_gflops": 20.0}, 20 * GB)
    assert slow["label"] == "native-kernel estimate (appendix)"
    assert slow["compute_seconds_per_step"] == pytest.approx(2 * fast["compute_seconds_per_step"])
    assert slow["flops_per_pass"] == calibrate.flops_per_pass(cat.architecture.blocks, cat.architecture.hidden,
                                                              cat.architecture.ffn, slow["tokens"])
    for key in ("tokens", "flops_per_pass", "compute_seconds_per_step", "stream_seconds_per_step",
                "seconds_per_step", "peak_ram_bytes"):
        assert slow["formulas"][key]


def test_streaming_uses_the_plan_blocks_and_the_measured_link(cat):
    est = calibrate.native_appendix(cat, _plan(), {"device_tflops": 100.0, "h2d_gbps": 20.0}, 20 * GB)
    assert est["stream_seconds_per_step"] == pytest.approx(40 * 400 * 10**6 / 20e9)
    assert est["seconds_per_step"] == pytest.approx(est["compute_seconds_per_step"] + est["stream_seconds_per_step"])
    overlapped = calibrate.native_appendix(cat, _plan(preload_bytes=GB), {"device_tflops": 100.0, "h2d_gbps": 20.0}, 20 * GB)
    assert overlapped["seconds_per_step"] == pytest.approx(max(overlapped["compute_seconds_per_step"],
                                                               overlapped["stream_seconds_per_step"]))
    from_disk = calibrate.native_appendix(cat, _plan(stream_from="disk"), {"native_gflops": 10.0, "disk_gbps": 2.0}, 20 * GB)
    assert from_disk["stream_seconds_per_step"] == pytest.approx(40 * 400 * 10**6 / 2e9)
    resident = calibrate.native_appendix(cat, _plan(streaming={"resident": True}), {"device_tflops": 100.0, "h2d_gbps": 20.0}, 20 * GB)
    assert resident["stream_seconds_per_step"] == 0


def test_peak_ram_moves_with_the_measured_memory_growth(cat):
    plan = _plan(preload_bytes=GB)
    moving = 2 * GB + 278 * 10**6 + GB
    same = calibrate.native_appendix(cat, plan, {"native_gflops": 10.0, "memory_growth_ratio": 1.0}, 20 * GB)
    more = calibrate.native_appendix(cat, plan, {"native_gflops": 10.0, "memory_growth_ratio": 1.5}, 20 * GB)
    assert same["peak_ram_bytes"] == 30 * GB
    assert more["peak_ram_bytes"] == 30 * GB + moving // 2


def test_scaled_check_applies_the_same_formula(cat):
    cfg = {"hidden": 512, "ffn": 1376, "tokens": 384}
    check = calibrate.check_scaled(cfg, {"status": "measured", "seconds_per_block": 0.3}, 10.0)
    assert check["estimated_seconds_per_block"] == pytest.approx(calibrate.flops_per_pass(1, 512, 1376, 384) / 10e9)
    assert calibrate.check_scaled(cfg, {"status": "skipped"}, 10.0) == {}


def test_the_runner_times_up_to_the_plans_rows_when_affordable(catobj, cpu_case):
    fp, _plan_ = cpu_case
    table = timing.rates_from_table(fp, catobj, "float32")
    small = {"hidden": 1024, "heads": 8, "head_dim": 128, "ffn": 2720}
    # the fewest rows a call has (32: the fit's constant, fit.fit_anchored) and three points a factor 4 apart
    anchor = [est_mod.ANCHOR_POINT_ROWS]
    assert est_mod.measure_points(920, small, table, quick=True) == anchor + [230, 460, 920]
    assert est_mod.measure_points(920, small, table, quick=False) == anchor + [230, 460, 920]
    full = calibrate.arch.from_catalog(catobj)
    pts = est_mod.measure_points(15655, full, table, quick=True)
    assert max(pts) < 15655 and len(pts) == 4  # a call at 15k rows of the real width would take minutes here
    a = table["block_s_per_token"]
    # one block per timed call in --quick, within budget, but never below the rows where weight reads dominate
    assert a * max(pts) <= est_mod.POINT_BUDGET_S["quick"] or max(pts) == 2 * est_mod.MIN_POINT_ROWS
    assert max(pts) >= 2 * est_mod.MIN_POINT_ROWS and pts[1] == max(pts) // 4 and pts[0] == 32
    assert est_mod.measure_points(200, full, table, quick=True) == anchor + [50, 100, 200]  # a plan smaller than the floor


@pytest.mark.parametrize("name", sorted(p.stem for p in FIXTURES.glob("*.json")))
def test_every_golden_plans_peaks_are_what_calibration_computes_with_nothing_measured(catobj, name):
    """The one memory model, read back from each golden plan: calibration at the plan's own canvas and frames
    with nothing measured gives the plan's peaks (RAM and GPU), held or streamed, on a CPU, a Mac or a card."""
    fp = Fingerprint.from_json(json.loads((FIXTURES / f"{name}.json").read_text()))
    plan = Plan.from_json(json.loads((FIXTURES.parent / "plans" / f"{name}.json").read_text()))
    device = "cpu" if "--cpu" in plan.settings.comfyui_args or plan.budget.gpu_bytes is None else fp.backend
    arch = calibrate.arch.from_catalog(catobj, catobj.weight(plan.settings.dit_weights))
    mem = est_mod.clip_memory(None, arch, plan, catobj, fp, _work(plan), 1000, device)
    assert (mem["peak_rss_bytes"], mem["peak_gpu_bytes"]) == \
        (plan.estimates.peak_ram_bytes, plan.estimates.peak_gpu_bytes), name
