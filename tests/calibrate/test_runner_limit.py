"""Issue 35 (5): the calibration runner's time limit follows the work of its job, and the message says what
the limit was based on (a fixed 90 s cut quick runs off on a busy machine)."""

from __future__ import annotations

import pytest

from h3kit.bundled.h3k_calibration_runner.job import Job
from h3kit.calibrate import estimates, runner_client
from h3kit.calibrate.runner_client import runner_limit
from h3kit.core.session import Session
from h3kit.core.subproc import ToolResult

H3 = {"hidden": 5376, "heads": 56, "head_dim": 128, "ffn": 14336}


def test_a_quick_run_with_timed_points_waits_three_times_its_idle_estimate():
    job = {"h3_points": [32, 80, 160, 320], "h3_point_seconds": [0.1, 0.3, 0.6, 1.5]}
    limit, basis = runner_limit(Job.from_json(job), quick=True, comfyui=True)
    idle = 60 + 4 * 4.0 + 2 * (0.1 + 0.3 + 0.6 + 1.5)  # setup + each point's cap + its warm-up and last call
    assert idle == 81.0 and limit == 250  # 3 x 81 = 243, rounded up to ten seconds
    assert basis == ("3x the 81 s a quick run of this job takes on an idle machine (60 s of setup and measuring "
                     "and 4 timed points of ComfyUI's H3), for a busy one")


def test_without_comfyui_the_points_are_not_run_and_a_full_run_waits_longer():
    job = {"h3_points": [32, 80, 160, 320], "h3_point_seconds": [1.0] * 4}
    assert runner_limit(Job.from_json(job), quick=True, comfyui=False)[0] == 180  # 3 x 60: no H3 is built without ComfyUI
    assert runner_limit(Job(), quick=False, comfyui=True)[0] == 900
    assert runner_limit(Job.from_json(job), quick=False, comfyui=True)[0] == 1110  # 3 x (300 + 4 x (15 + 2)) = 1104, up to ten
    assert runner_limit(Job(h3_points=(32, 64)), quick=True, comfyui=True)[0] == 210  # no table: the caps, 3 x 68 = 204


def test_a_limit_is_never_under_the_floor(monkeypatch):
    monkeypatch.setattr(runner_client, "QUICK_SECONDS", 5)
    assert runner_limit(Job(), quick=True, comfyui=False)[0] == runner_client.FLOOR_S == 90


def test_the_call_seconds_are_the_tables_for_the_built_blocks():
    table = {"block_s_per_token": 1e-3, "block_s_per_token2": 1e-6}
    assert estimates.call_seconds(100, H3, table, 1) == pytest.approx(0.1 + 0.01)
    assert estimates.call_seconds(100, H3, table, 2) == pytest.approx(2 * 0.11)
    assert estimates.points_blocks(True) == 1 and estimates.points_blocks(False) == 2


def test_the_timeout_message_says_what_the_limit_was_based_on(tmp_path, monkeypatch):
    seen = {}

    def hung(argv, timeout, env):
        seen["timeout"] = timeout
        return ToolResult(list(argv), "timeout", None, "", "", timeout, f"no answer within {timeout:g} s")

    monkeypatch.setattr(runner_client, "run_process", hung)
    job = {"plan": {}, "h3_points": [32, 80, 160, 320], "h3_point_seconds": [0.1, 0.3, 0.6, 1.5]}
    doc = runner_client.run_runner(Session(), "python", tmp_path, None, Job.from_json(job), True, tmp_path,
                                   comfyui=str(tmp_path)).to_json()
    assert seen["timeout"] == 250
    assert doc["reason"].startswith("the runner did not finish (no answer within 250 s; the limit was 250 s, "
                                    "3x the 81 s a quick run of this job takes on an idle machine"), doc["reason"]
