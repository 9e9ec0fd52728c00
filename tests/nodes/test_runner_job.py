"""The calibration runner's typed job and result (nodes/h3k_calibration_runner/job.py): what h3kit writes is what
the runner reads, an older h3kit's job and a bare plan still read, and the result round-trips."""

from __future__ import annotations

import json

from h3kit.bundled.h3k_calibration_runner.job import Job, JobSettings, Result
from h3kit.calibrate.runner_client import h3_job
from h3kit.data import catalog
from h3kit.data.plan_doc import Plan, PlanSettings


def test_the_job_h3kit_writes_is_the_job_the_runner_reads():
    plan = Plan(settings=PlanSettings(comfyui_args=("--cpu",), shard_size_bytes=1 << 20, canvas=(256, 256), frames=22,
                                      steps=4, cfg=1.0, max_canvas=(512, 288), max_frames=73))
    job = h3_job(catalog.load(), plan, {"hidden": 512, "heads": 4, "from": "catalog"}, "cpu", [32, 160])
    assert job.settings == JobSettings(comfyui_args=("--cpu",), shard_size_bytes=1 << 20, canvas=(256, 256),
                                       max_canvas=(512, 288), frames=22, max_frames=73)
    wire = json.loads(json.dumps(job.to_json()))
    assert wire["plan"]["settings"]["comfyui_args"] == ["--cpu"] and wire["h3_points"] == [32, 160]
    assert Job.from_json(wire) == job and job.device() == "cpu"


def test_an_older_job_and_a_bare_plan_still_read():
    older = {"plan": {"settings": {"comfyui_args": ["--lowvram"], "preload_bytes": 4096}, "budget": {"gpu_bytes": 7}},
             "device": "mps", "catalog": {"architecture": {"hidden": 64}}, "h3_parts": []}
    job = Job.from_json(older)
    assert job.settings.preload_bytes == 4096 and job.gpu_budget_bytes == 7 and job.device() == "mps"
    assert dict(job.catalog_architecture) == {"hidden": 64} and job.h3_parts == ()
    bare = Job.from_json({"schema": "h3kit.plan/1", "settings": {"comfyui_args": ["--cpu"]}, "budget": {}})
    assert bare.device() == "cpu" and bare.scaled_dit is None


def test_the_result_round_trips_and_says_when_the_runner_did_not_finish():
    doc = {"schema": "h3kit.calibration-run/1", "runner": {"python": "p"}, "native": {"status": "measured"},
           "tiles": [{"tile": 128}], "h3_model": {"status": "skipped", "reason": "r"}, "skipped": ["x"], "seconds": 1.5}
    result = Result.from_json(doc)
    assert result.finished and Result.from_json(result.to_json()) == result
    assert result.to_json()["tiles"] == [{"tile": 128}]
    failed = Result.failed("the runner did not finish (timeout)")
    assert not failed.finished and failed.to_json()["status"] == "error"
    assert Result.not_run("no library").to_json()["native"] == {"status": "skipped", "reason": "no library"}
