"""plan.page_cache: the share of a streamed DiT the page cache keeps between steps, and the cost built on it,
as the planner (plan.streaming.pass_overhead) and calibration (calibrate.decisions.prefetch_figures) use it."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from h3kit.calibrate.decisions import prefetch_figures
from h3kit.data.fingerprint import Fingerprint
from h3kit.data.plan_doc import Plan
from h3kit.plan import page_cache, prefetch, streaming
from h3kit.plan.budget import cache_share

GB = 10**9


def test_a_file_within_the_room_fits_and_is_served_from_memory():
    cs = page_cache.cache_share(3 * GB, 23 * GB, 6 * GB, 4 * GB)  # room 13 GB
    assert (cs.case, cs.share, cs.room_bytes) == (page_cache.FITS, 1.0, 13 * GB)
    assert "holds" in page_cache.sentence(cs) and "13.0 GB" in page_cache.sentence(cs)


def test_a_file_larger_than_what_the_run_leaves_misses_every_time_not_the_ratio():
    # 24.8 GB streamed, 23 GB RAM, 5 GB peak: the cache could hold 14 GB of it, yet a cyclic scan larger than
    # the cache evicts each page before its next use, so nothing is counted as cached (not 14 / 24.8)
    cs = page_cache.cache_share(int(24.8 * GB), 23 * GB, 5 * GB, 4 * GB)
    assert (cs.case, cs.share) == (page_cache.DOES_NOT_FIT, 0.0)
    assert "every step reads them from the disk" in page_cache.sentence(cs)


def test_between_the_room_and_what_the_run_leaves_it_is_partly_cached():
    # room 14 GB without the OS's 4 GB, 18 GB with it: a 15 GB file sits in the band, 3/4 of the way to fitting
    cs = page_cache.cache_share(15 * GB, 23 * GB, 5 * GB, 4 * GB)
    assert cs.case == page_cache.PARTLY and cs.share == pytest.approx(0.75)
    assert "about 75%" in page_cache.sentence(cs)
    edges = [page_cache.cache_share(s * GB, 23 * GB, 5 * GB, 4 * GB).share for s in (14, 18)]
    assert edges == [1.0, 0.0]  # continuous at both ends of the band


def test_the_os_keeps_its_headroom_or_what_it_uses_now_when_more():
    fp = Fingerprint.from_json({"memory": {"total_bytes": 23 * GB, "available_bytes": 15 * GB}})
    assert page_cache.os_keep(fp, 3 * GB) == 8 * GB
    assert page_cache.os_keep(Fingerprint.from_json({"memory": {"total_bytes": 23 * GB, "available_bytes": 22 * GB}}), 3 * GB) == 3 * GB
    assert page_cache.os_keep(None, 3 * GB) == 3 * GB


def test_the_overhead_mixes_the_cached_and_the_disk_cost_over_the_streamed_blocks():
    assert page_cache.stream_overhead(1.0, 5.0, 0.3, 28, 30) == pytest.approx(0.3 * 28 / 30)
    assert page_cache.stream_overhead(0.0, 5.0, 0.3, 28, 30) == pytest.approx(5.0 * 28 / 30)
    assert page_cache.stream_overhead(0.5, 5.0, 0.3) == pytest.approx(2.65)
    assert page_cache.stream_overhead(0.5, 5.0, 0.3, 0, 30) == 0.0


def _catalog(disk=0.84, cached=0.26):
    return SimpleNamespace(blocks=50, throughput=SimpleNamespace(stream_overhead=disk, stream_cached_overhead=cached))


def _est(peak_ram, resident=2, block=int(0.8 * GB), budget=None):
    """A streamed estimate whose page-cache share the memory model worked out against `budget` (cache_share)."""
    return SimpleNamespace(streamed=True, resident_blocks=resident, block=block, peak_ram=peak_ram,
                           cache=cache_share(_catalog(), budget, resident, block, peak_ram))


def _budget(ram_total, headroom=4 * GB):
    return SimpleNamespace(ram_total=ram_total, headroom=headroom)


def test_the_planner_counts_the_disk_figure_when_the_file_does_not_fit():
    cat = _catalog()
    # 48 blocks x 0.8 GB = 38.4 GB streamed
    assert streaming.pass_overhead(cat, _est(6 * GB, budget=_budget(24 * GB))) == pytest.approx(0.84 * 48 / 50)
    assert streaming.pass_overhead(cat, _est(6 * GB)) == pytest.approx(0.84 * 48 / 50)  # no budget: from the disk


def test_the_planner_counts_the_cached_figure_when_the_file_fits():
    cat = _catalog()
    est = _est(10 * GB, budget=_budget(64 * GB))  # 38.4 GB streamed; 64 GB - 10 GB - 4 GB = 50 GB of room
    assert streaming.pass_overhead(cat, est) == pytest.approx(0.26 * 48 / 50)
    assert streaming.pass_overhead(cat, SimpleNamespace(streamed=False, cache=None)) == 0.0


def _plan(blocks=30, resident=0):
    # a plan carries no OS headroom: calibration counts what the OS uses now (the fingerprint's 1 GB)
    return Plan.from_json({"settings": {"streaming": {
        "enabled": True, "blocks": blocks, "resident_blocks": resident, "block_bytes": int(0.8 * GB)}}})


def _estimates(peak, blocks, block_bytes):
    return {"timing": {"block_s_per_token": 0.005, "block_s_per_token2": 0.0}, "time": {"tokens": 100},
            "memory": {"peak_rss_bytes": peak},
            "arch": {"blocks_total": blocks, "block_file_bytes": blocks * block_bytes}}


DISK = {"status": "measured", "gb_per_s": 0.9, "cache_dropped": True, "direct_read_bytes_per_s": 4e9}
FP = Fingerprint.from_json({"memory": {"total_bytes": 23 * GB, "available_bytes": 22 * GB}})


def test_calibration_reads_a_file_that_fits_from_memory_every_step():
    # 4 blocks of 0.77 GB read from the file's header (not the plan's 0.8 GB): 3.1 GB, room 23 - 6 - 1 = 16 GB
    out = prefetch_figures(_plan(), _estimates(6 * GB, 4, int(0.77 * GB)), DISK, cpu=True, fingerprint=FP)
    assert out["page_cache"]["case"] == "fits" and out["block_bytes"] == int(0.77 * GB)
    copy = int(0.77 * GB) / 4e9 / 0.5  # the in-place read over one block's 0.5 s of compute
    assert out["pass_overhead"] == pytest.approx(copy, abs=1e-4)
    assert out["disk_bound"] and out["pass_overhead_disk"] > out["pass_overhead"] + 0.3  # 0.86 s reads


def test_calibration_reads_a_file_that_does_not_fit_from_the_disk_every_step():
    out = prefetch_figures(_plan(), _estimates(5 * GB, 30, int(0.81 * GB)), DISK, cpu=True, fingerprint=FP)
    assert out["page_cache"]["case"] == "does not fit" and out["page_cache"]["share"] == 0.0
    assert out["pass_overhead"] == pytest.approx(out["pass_overhead_disk"], abs=1e-4)
    assert out["pass_overhead"] > out["pass_overhead_cached"] + 0.3


def test_calibration_without_the_in_place_read_keeps_the_plans_share():
    out = prefetch_figures(_plan(), _estimates(5 * GB, 4, GB), {**DISK, "direct_read_bytes_per_s": None}, cpu=True,
                           fingerprint=FP)
    assert out["pass_overhead"] is None and "in-place read" in out["pass_overhead_note"]


def test_the_estimate_counts_the_rows_of_the_workflows_prompt_when_the_runner_tokenized_it():
    from h3kit.calibrate.orchestrate import with_text_rows
    from h3kit.data import catalog as catalog_mod

    cat = catalog_mod.load()
    counted = {"canvas": {"text_tokens": 40, "text_tokens_from": "the workflow's prompt, ComfyUI's H3 tokenizer"}}
    assert with_text_rows(cat, counted).sequence.text_tokens == 40
    assert cat.sequence.text_tokens != 40  # the catalog itself is left as it was
    assert with_text_rows(cat, {"canvas": {"text_tokens": 40}}) is cat  # not counted: the catalog's assumption
    assert with_text_rows(cat, None) is cat


def test_the_block_compute_counts_the_fits_per_block_constant():
    # a full-width block on a CPU at 142 rows: 0.67 s of row work and 0.57 s that does not grow with rows
    est = _estimates(5 * GB, 30, int(0.77 * GB))
    est["timing"]["block_s_per_token"] = 0.0067
    bare = prefetch_figures(_plan(), est, DISK, cpu=True, fingerprint=FP)
    full = prefetch_figures(_plan(), est, DISK, cpu=True, fingerprint=FP, block_fixed_s=0.57)
    assert full["compute_s_per_block"] == pytest.approx(0.67 + 0.57)
    assert full["pass_overhead_cached"] == pytest.approx(bare["pass_overhead_cached"] * 0.67 / 1.24, rel=1e-3)


def test_a_file_read_past_the_cache_counts_the_widening_in_the_compute_the_disk_reads_beside():
    # page_cache bypass: the C thread reads ahead the whole time; the model computes (0.5 s) and widens (0.2 s)
    # each block as it arrives, so with the disk faster than that (0.6 s a block read) nothing else is waited for
    fast = prefetch.prefetch_for(0.8 * GB / 0.6, int(0.8 * GB), 0.5 + 0.2)
    assert page_cache.bypassed_overhead(fast, 0.5, 0.2) == pytest.approx(0.2 / 0.5, abs=2e-3)
    # a disk slower than compute + widening: the step is the disk's, (read / compute) - 1 over the compute
    slow = prefetch.prefetch_for(0.8 * GB / 1.4, int(0.8 * GB), 0.7, blocks=30)
    over = page_cache.bypassed_overhead(slow, 0.5, 0.2)
    assert over == pytest.approx(1.4 / 0.5 - 1, rel=0.05)
    assert page_cache.bypassed_overhead(slow, 0.0, 0.2) == 0.0


def test_calibration_of_a_file_that_does_not_fit_counts_the_loaders_bypass():
    out = prefetch_figures(_plan(), _estimates(5 * GB, 30, int(0.81 * GB)), DISK, cpu=True, fingerprint=FP)
    assert out["read_path"] == "bypass"
    widen = int(0.81 * GB) / 4e9
    res = prefetch.prefetch_for(0.9e9, int(0.81 * GB), 0.5 + widen)
    assert out["pass_overhead_disk"] == page_cache.bypassed_overhead(res, 0.5, widen)
    fits = prefetch_figures(_plan(), _estimates(6 * GB, 4, int(0.77 * GB)), DISK, cpu=True, fingerprint=FP)
    assert "read_path" not in fits


def test_calibration_sets_the_loaders_page_cache_by_the_measured_case():
    from h3kit.calibrate.decisions import decide_page_cache

    plan = Plan.from_json({"settings": {"streaming": {"enabled": True, "blocks": 30, "block_bytes": int(0.8 * GB),
                                                      "page_cache": "bypass"}}})
    fits = prefetch_figures(plan, _estimates(6 * GB, 4, int(0.77 * GB)), DISK, cpu=True, fingerprint=FP)
    d = decide_page_cache(plan, fits)
    assert (d["setting"], d["value"], d["previous"], d["changed"]) == ("page_cache", "use", "bypass", True)
    assert d["evidence"].startswith("The page cache holds") and d["evidence"].endswith("through the cache.")
    nofit = prefetch_figures(plan, _estimates(5 * GB, 30, int(0.81 * GB)), DISK, cpu=True, fingerprint=FP)
    assert decide_page_cache(plan, nofit)["value"] == "bypass" and not decide_page_cache(plan, nofit)["changed"]
    assert decide_page_cache(plan, None)["evidence"].startswith("no disk rate")
    assert decide_page_cache(Plan.from_json({"settings": {}}), fits) is None  # the plan does not stream

