"""The three lines install ends with."""

from __future__ import annotations

import json

import pytest

from fixtures.comfyui import comfy_tree
from h3kit.data.plan_doc import ClipTime, Estimates, Plan, PlanSettings
from h3kit.steps import next_steps

pytestmark = pytest.mark.native  # installs: the session's native library, not a compile per test

PLAN = Plan(settings=PlanSettings(canvas=(864, 480), frames=124, steps=20))


def _timed(seconds: float, source: str) -> Plan:
    return Plan(settings=PLAN.settings, estimates=Estimates(time=ClipTime(seconds_per_clip=seconds, source=source)))


MEASURED = "calibrated 2026-12-06 in ComfyUI's Python (cuda, bfloat16)"
TABLE = "table: cpu (2 cores x 64 FLOP/cycle)"


def test_three_lines_start_open_and_time():
    start, open_it, took = next_steps.lines("/home/zoë/Comfy UI/run_h3kit.sh", _timed(600.0, MEASURED), cpu_only=False)
    assert start == 'Start ComfyUI: "/home/zoë/Comfy UI/run_h3kit.sh"'
    assert "h3kit_text_to_video (864x480, 124 frames = 5.2 s of video, 20 steps)" in open_it
    assert took.startswith("One clip takes about 10 min here (calibration's measured estimate: " + MEASURED)


def test_the_one_figure_names_the_table_when_nothing_was_measured():
    took = next_steps.lines(None, _timed(600.0, TABLE), cpu_only=False)[2]
    assert took.startswith("One clip takes about 10 min here (the plan's estimate from the throughput table")
    assert "'h3kit calibrate' measures" in took


def test_cpu_only_or_hours_per_clip_says_so_and_what_would_help():
    for seconds, cpu in ((60000.0, False), (600.0, True)):
        took = next_steps.lines("x", _timed(seconds, MEASURED), cpu_only=cpu)[2]
        assert "too slow to be useful" in took and "12 GB or more" in took and "measured estimate" in took


def test_without_a_time_the_line_says_how_to_get_one():
    assert "run 'h3kit calibrate'" in next_steps.lines(None, PLAN, cpu_only=False)[2]
    assert "Desktop app" in next_steps.lines(None, PLAN, cpu_only=False)[0]


@pytest.mark.slow
def test_install_ends_with_the_three_lines(tmp_path, run_cli):
    comfy = comfy_tree.make_comfyui(tmp_path / "Mein Comfy ü")
    code, out, err = run_cli("install", "--comfyui", str(comfy), "--yes", "--no-models")
    assert code == 0, err
    last = out.strip().splitlines()[-3:]
    assert last[0] == f'Start ComfyUI: "{comfy / "run_h3kit.sh"}"'
    assert last[1].startswith("Then open Templates > ComfyUI-h3kit > h3kit_text_to_video")
    assert "clip" in last[2]
    code, out, err = run_cli("install", "--comfyui", str(comfy), "--yes", "--no-models", "--skip-calibrate", "--json")
    doc = json.loads(out)
    assert doc["next_steps"][2].startswith("One clip ") and "the plan's estimate from the throughput table" in \
        doc["next_steps"][2] and doc["clip_time"]["measured"] is False
