"""Issue 45 (8): calibration times the streamed pass as the installed workflow runs it, and the clip time counts
what that pass pays, instead of a share composed from the disk's rate and the in-place read (0.63 of the
measured step at 4 real-width blocks read past the page cache on the 2-core machine)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from h3kit import calibrate
from h3kit.bundled.h3k_calibration_runner.job import Job, Result
from h3kit.calibrate import estimates as est_mod
from h3kit.calibrate import orchestrate, streamed_pass
from h3kit.calibrate.report.front import _measured_whole
from h3kit.calibrate.runner_client import runner_limit
from h3kit.data import catalog as catalog_mod
from h3kit.data.fingerprint import Fingerprint
from h3kit.plan import make_plan

from test_calibrate_estimates import h3_model

FIXTURES = Path(__file__).parents[1] / "fixtures" / "fingerprints"


@pytest.fixture(scope="module")
def case():
    cat = catalog_mod.load()
    fp = Fingerprint.from_json(json.loads((FIXTURES / "cpu-only-16gb.json").read_text()))
    plan = make_plan(fp, cat, catalog_mod.load_profiles(cat))
    assert plan.streams_dit  # the 16 GB CPU box streams its DiT
    return cat, fp, plan, calibrate.arch.from_catalog(cat, cat.weight(plan.settings.dit_weights))


def _streamed(tokens: int, seconds: float) -> dict:
    return {"status": "measured", "tokens": tokens, "seconds_per_call": seconds, "cold_s": 2 * seconds,
            "warm_s": [seconds, seconds], "spread": 0.0, "inputs": {"page_cache": "bypass"}}


def test_the_clip_time_is_the_measured_pass_at_the_workflows_rows(case):
    cat, fp, plan, arch = case
    disk = {"status": "measured", "gb_per_s": 3.0, "cache_dropped": True, "direct_read_bytes_per_s": 8e9}
    composed, streaming = orchestrate._estimates(cat, plan, fp, {"h3_model": h3_model()}, arch, "cpu", {}, disk)
    tokens, held = composed["time"]["tokens"], None
    from h3kit.plan.timing import held_call_seconds

    held = held_call_seconds(arch, composed["timing"], tokens, cat)
    measured = {"h3_model": h3_model(), "streamed_pass": _streamed(tokens, 1.63 * held)}
    est, st = orchestrate._estimates(cat, plan, fp, measured, arch, "cpu", {}, disk)
    assert st["pass_overhead"] == pytest.approx(0.63, abs=1e-4)
    assert st["pass_overhead_composed"] == streaming["pass_overhead"]  # the composed share is kept beside it
    assert st["pass_measured"]["held_s"] == pytest.approx(held) and st["pass_measured"]["page_cache"] == "bypass"
    # per call: exactly the pass the runner timed (the held fit times the measured share)
    assert est["time"]["seconds_per_call"] == pytest.approx(1.63 * held, rel=1e-3)
    assert est["time"]["pass_overhead_from"].startswith("measured")


def test_a_pass_faster_than_the_held_fit_adds_nothing_and_a_missing_one_keeps_the_composed_share(case):
    cat, _fp, _plan, arch = case
    timing = {"block_s_per_token": 2e-4, "block_s_per_token2": 1e-8, "step_fixed_s": 3.0}
    assert streamed_pass.measured_share(_streamed(1000, 0.1), timing, arch, cat)["pass_overhead"] == 0.0
    assert streamed_pass.measured_share({"status": "skipped", "reason": "x"}, timing, arch, cat) is None
    assert streamed_pass.measured_share(_streamed(1000, 5.0), None, arch, cat) is None
    assert streamed_pass.measured_share(None, timing, arch, cat) is None


def _install(tmp_path: Path, cat, plan) -> SimpleNamespace:
    pack = tmp_path / "ComfyUI" / "custom_nodes" / "ComfyUI-h3kit"
    pack.mkdir(parents=True)
    f = cat.weight(plan.settings.dit_weights).file
    dit = tmp_path / "ComfyUI" / "models" / f.folder / f.name
    dit.parent.mkdir(parents=True)
    dit.write_bytes(b"\0" * 1000)
    return SimpleNamespace(path=tmp_path / "ComfyUI", node_dir=pack)


def test_the_job_names_the_installed_loader_with_the_workflows_own_inputs(case, tmp_path):
    cat, _fp, plan, _arch = case
    install = _install(tmp_path, cat, plan)
    graph = {"1": {"class_type": "H3kitStreamedDiTLoader",
                   "inputs": {"unet_name": "x.safetensors", "preload_bytes": 123, "prefetch_blocks": 2,
                              "page_cache": "bypass", "shard_size_bytes": ["9", 0]}},
             "2": {"class_type": "KSampler", "inputs": {}}}
    spec = streamed_pass.job_spec(install, plan, cat, graph)
    assert spec["node"] == "H3kitStreamedDiTLoader" and spec["pack"] == str(install.node_dir)
    assert Path(spec["dit_path"]).stat().st_size == 1000
    assert spec["inputs"] == {"unet_name": "x.safetensors", "preload_bytes": 123, "prefetch_blocks": 2,
                              "page_cache": "bypass"}  # a link is not a value
    # the job file carries it to the runner and the result back
    job = Job.from_json(Job(h3_streamed=spec).to_json())
    assert dict(job.h3_streamed)["inputs"]["page_cache"] == "bypass"
    res = Result.from_json({"streamed_pass": {"status": "measured", "seconds_per_call": 1.5}})
    assert res.to_json()["streamed_pass"]["seconds_per_call"] == 1.5
    # nothing to time: another loader, no file, a held plan
    assert streamed_pass.job_spec(install, plan, cat, {"1": {"class_type": "UNETLoader", "inputs": {}}}) is None
    held = plan.__class__.from_json({**plan.to_json(), "settings": {
        **plan.to_json()["settings"], "streaming": {**plan.to_json()["settings"]["streaming"], "enabled": False}}})
    assert streamed_pass.job_spec(install, held, cat, graph) is None
    Path(spec["dit_path"]).unlink()
    assert streamed_pass.job_spec(install, plan, cat, graph) is None


def test_the_runners_limit_counts_the_streamed_pass(tmp_path):
    dit = tmp_path / "dit.safetensors"
    dit.write_bytes(b"\0" * 2_000_000)
    job = Job.from_json({"h3_streamed": {"dit_path": str(dit), "expected_call_s": 10.0}})
    limit, basis = runner_limit(job, quick=True, comfyui=True)
    idle = 60 + 3 * 10.0 + 2_000_000 / 100e6  # setup + a cold and two warm calls + the file at a slow disk
    assert limit == 280 and "the streamed pass" in basis  # 3 x 90.02, rounded up to ten seconds
    assert idle == pytest.approx(90.02)
    assert runner_limit(job, quick=True, comfyui=False)[0] == 180  # no ComfyUI: nothing is built or streamed


def test_the_report_says_the_share_was_timed_whole():
    clause = _measured_whole({"streamed_s": 9.25, "held_s": 5.67, "tokens": 150})
    assert "timed whole" in clause and "150 rows" in clause and "9.25 s" in clause
    assert _measured_whole({}) == ""
