"""The MPS sequence cap: MPSGraph fails past INT_MAX-sized tensors, so a plan on a Mac keeps canvas x frames within
the largest shape reported running there (the catalog's sequence_caps), and says so in its rationale."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from h3kit.data import catalog as catalog_mod
from h3kit.fingerprint.schema import load_file
from h3kit.plan import make_plan
from h3kit.plan.search import sequence_cap
from h3kit.plan.timing import sequence_tokens

FPS = Path(__file__).parents[1] / "fixtures" / "fingerprints"
CAT = catalog_mod.load()
PROFILES = catalog_mod.load_profiles(CAT)
MACS = ("apple-m2pro-32gb.json", "apple-m2max-64gb.json", "apple-m3ultra-192gb.json")


def _rows(plan) -> int:
    (w, h), f = plan.settings.max_canvas, plan.settings.max_frames
    return sequence_tokens(CAT, w, h, f)


def test_the_catalog_caps_mps_below_the_failing_shapes_it_cites():
    rows, cap = sequence_cap(CAT, "mps")
    assert cap is not None and "INT_MAX" in cap.failing and "#15315" in cap.failing and cap.source
    # the failing report: 1 MP (1376x768) for 20 s (481 frames) -- about 150,568 tokens
    assert rows < sequence_tokens(CAT, 1376, 768, 481) / 4
    # the other failing report: 1.0 MP 3:4 (896x1184) at the template's 124 frames
    assert rows < sequence_tokens(CAT, 896, 1184, 124)
    assert sequence_cap(CAT, "cuda") == (None, None)


@pytest.mark.parametrize("fp", MACS)
def test_a_mac_plan_stays_within_the_cap_and_says_why(fp):
    plan = make_plan(load_file(FPS / fp), CAT, PROFILES)
    rows, _ = sequence_cap(CAT, "mps")
    assert _rows(plan) <= rows
    said = [r for r in plan.rationale if "sequence rows" in r]
    assert len(said) == 1 and "INT_MAX" in said[0] and f"{rows:,}" in said[0]


def test_the_cap_is_what_holds_a_roomy_mac_back():
    fp = load_file(FPS / "apple-m3ultra-192gb.json")
    capped = make_plan(fp, CAT, PROFILES)
    free = make_plan(fp, replace(CAT, sequence_caps=()), PROFILES)
    assert _rows(free) > _rows(capped)
    assert not any("sequence rows" in r for r in free.rationale)


def test_no_cap_on_cuda():
    plan = make_plan(load_file(FPS / "nvidia-rtx6000ada-48gb-128gb.json"), CAT, PROFILES)
    assert not any("sequence rows" in r for r in plan.rationale)
