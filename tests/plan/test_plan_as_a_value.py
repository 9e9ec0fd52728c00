"""The typed plan (h3kit.data.plan_doc): make_plan's Plan writes the golden h3kit.plan/1 bytes, and a saved
plan.json reads back into the same Plan -- older or partial documents included."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from h3kit.data import catalog as catalog_mod
from h3kit.data.plan_doc import SCHEMA, ClipTime, Plan, PlanSettings, Streaming, StreamedRun
from h3kit.fingerprint.schema import load_file
from h3kit.plan import make_plan

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
GOLDEN = sorted((FIXTURES / "plans").glob("*.json"))
CAT = catalog_mod.load()
PROFILES = catalog_mod.load_profiles(CAT)


def _text(plan: Plan) -> str:
    """The plan as the golden files hold it (scripts/regen_golden_plans.py writes them this way)."""
    return json.dumps(plan.to_json(), indent=2, ensure_ascii=False) + "\n"


@pytest.mark.parametrize("path", GOLDEN, ids=lambda p: p.stem)
def test_make_plan_writes_the_golden_bytes(path):
    plan = make_plan(load_file(FIXTURES / "fingerprints" / path.name), CAT, PROFILES)
    assert isinstance(plan, Plan) and isinstance(plan.settings, PlanSettings)
    assert _text(plan) == path.read_text(encoding="utf-8")


@pytest.mark.parametrize("path", GOLDEN, ids=lambda p: p.stem)
def test_a_saved_plan_reads_back_into_the_plan_that_wrote_it(path):
    doc = json.loads(path.read_text(encoding="utf-8"))
    back = Plan.from_json(doc)
    assert _text(back) == path.read_text(encoding="utf-8")
    assert back == make_plan(load_file(FIXTURES / "fingerprints" / path.name), CAT, PROFILES)
    s = back.settings
    assert (s.dit_weights, s.max_canvas, s.comfyui_args) == (doc["settings"]["dit_weights"],
                                                           tuple(doc["settings"]["max_canvas"]),
                                                           tuple(doc["settings"]["comfyui_args"]))
    assert back.estimates.time.minutes_per_clip == doc["estimates"]["time"]["minutes_per_clip"]
    assert back.streams_dit == doc["settings"]["streaming"]["enabled"]


def test_the_streamed_run_is_there_exactly_when_the_document_has_its_figures():
    docs = [json.loads(p.read_text(encoding="utf-8")) for p in GOLDEN]
    streamed = [d for d in docs if d["settings"]["streaming"]["enabled"]]
    held = [d for d in docs if not d["settings"]["streaming"]["enabled"]]
    assert streamed and held  # the goldens hold both kinds
    for doc in streamed:
        run = Plan.from_json(doc).settings.streaming.streamed
        assert isinstance(run, StreamedRun)
        assert run.held_peak_ram_bytes == doc["settings"]["streaming"]["held_peak_ram_bytes"]
    for doc in held:
        st = Plan.from_json(doc).settings.streaming
        assert st.streamed is None and "preload_bytes" not in st.to_json()


def test_an_older_or_partial_plan_reads_with_defaults_and_ignores_what_it_does_not_know():
    plan = Plan.from_json({"schema": SCHEMA, "profile": "nvidia-12gb",
                           "settings": {"quantization": "q8_0", "max_canvas": [864, 480], "retired_key": 1,
                                        "streaming": {"enabled": True, "pass_overhead": 0.3}},
                           "budget": {"ram_bytes": 32 * 10**9}})
    s = plan.settings
    assert (plan.profile, s.quantization, s.max_canvas, s.dit_weights, s.comfyui_args) == \
        ("nvidia-12gb", "q8_0", (864, 480), None, ())
    assert s.streaming.enabled and s.streaming.streamed.pass_overhead == 0.3
    assert (plan.budget.ram_bytes, plan.budget.gpu_bytes, plan.fits, plan.blocked) == (32 * 10**9, None, None, None)
    assert plan.estimates.time == ClipTime() and plan.warnings == () and dict(s.timing) == {}
    assert "retired_key" not in s.to_json()
    assert Plan.from_json(None) == Plan() and Plan.from_json({"settings": "not a mapping"}).settings == PlanSettings()


def test_a_plan_is_frozen_and_changes_only_by_replacing_a_part():
    plan = Plan.from_json(json.loads(GOLDEN[0].read_text(encoding="utf-8")))
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.settings.steps = 1  # type: ignore[misc]
    with pytest.raises(TypeError):
        plan.settings.env["X"] = "1"  # type: ignore[index]
    faster = dataclasses.replace(plan, settings=dataclasses.replace(plan.settings, steps=4,
                                                                    streaming=Streaming(enabled=False)))
    assert faster.to_json()["settings"]["steps"] == 4 and plan.settings.steps != 4
