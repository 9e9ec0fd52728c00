"""The pack's cost model (nodes/h3k_cost) gives the planner's figures, on every reference plan.

The plan hands its cost model to the pack as `plan.cost`; the panel, the routes and the queue guard price a graph
with it. At the plan's own canvas its peaks are the plan's peaks and its minutes the plan's minutes; at any other
canvas and frames its phases equal the planner's memory model with the plan's loading decisions kept
(plan/cost.py `pinned_estimate`), and its time the planner's `estimate_clip`. The candidate the planner chose is
caught on its way into `cost_model` (the real function still runs), so the planner is asked exactly what it decided.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from h3kit.bundled import h3k_cost
from h3kit.data import catalog as catalog_mod
from h3kit.fingerprint.schema import load_file
from h3kit.plan import cost as cost_mod
from h3kit.plan import make_plan
from h3kit.plan.timing import estimate_clip

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
FINGERPRINTS = sorted((FIXTURES / "fingerprints").glob("*.json"))
CAT = catalog_mod.load()
PROFILES = catalog_mod.load_profiles(CAT)
ELSEWHERE = [((512, 288), 22), ((864, 480), 73), ((1280, 720), 121), ((1920, 1080), 241), ((544, 960), 56)]


def _planned(monkeypatch, path: Path):
    caught = []
    real = cost_mod.cost_model

    def catch(cat, best):
        caught.append(best)
        return real(cat, best)

    monkeypatch.setattr("h3kit.plan.cost_model", catch)
    plan = make_plan(load_file(path), CAT, PROFILES)
    assert len(caught) == 1
    return plan, caught[0], h3k_cost.CostModel.from_json(dict(plan.cost))


def _phases(est) -> dict:
    return {p: (v["gpu_bytes"], v["ram_bytes"]) for p, v in est.phases.items()}


@pytest.mark.parametrize("path", FINGERPRINTS, ids=[p.stem for p in FINGERPRINTS])
def test_at_the_plans_own_canvas_the_pack_gives_the_plans_figures(monkeypatch, path):
    plan, best, model = _planned(monkeypatch, path)
    e, s = plan.estimates, plan.settings
    at_max = model.estimate(h3k_cost.Workload(*s.max_canvas, s.max_frames, s.steps, s.cfg))
    assert (at_max.peak_gpu_bytes, at_max.peak_ram_bytes) == (e.peak_gpu_bytes, e.peak_ram_bytes)
    assert _phases(at_max) == {p: (v.gpu_bytes, v.ram_bytes) for p, v in e.phases.items()}
    assert at_max.fits == best.est.fits
    at_defaults = model.estimate(h3k_cost.Workload(*s.canvas, s.frames, s.steps, s.cfg))
    assert at_defaults.minutes == pytest.approx(e.minutes_per_clip, rel=1e-12)
    w = e.workflow
    assert (at_defaults.peak_gpu_bytes, at_defaults.peak_ram_bytes, at_defaults.fits) == \
        (w.peak_gpu_bytes, w.peak_ram_bytes, w.fits)


@pytest.mark.parametrize("path", FINGERPRINTS, ids=[p.stem for p in FINGERPRINTS])
def test_elsewhere_the_pack_gives_the_planners_memory_model_and_time(monkeypatch, path):
    plan, best, model = _planned(monkeypatch, path)
    s = plan.settings
    for canvas, frames in ELSEWHERE:
        for steps, cfg in ((s.steps, s.cfg), (4, 3.5)):
            pack = model.estimate(h3k_cost.Workload(*canvas, frames, steps, cfg))
            planner = cost_mod.pinned_estimate(CAT, best, canvas, frames)
            assert _phases(pack) == _phases(planner), (canvas, frames)
            assert (pack.peak_gpu_bytes, pack.peak_ram_bytes, pack.fits) == \
                (planner.peak_gpu, planner.peak_ram, planner.fits), (canvas, frames)
            clip = estimate_clip({"blocks": CAT.blocks}, best.clip_rates, canvas, frames, steps, cfg, CAT,
                                 pass_overhead=model.pass_overhead)
            assert pack.minutes == pytest.approx(clip["minutes_per_clip"], rel=1e-12)


@pytest.mark.parametrize("path", FINGERPRINTS, ids=[p.stem for p in FINGERPRINTS])
def test_the_fix_for_an_oversized_graph_fits_and_is_no_larger(monkeypatch, path):
    plan, _, model = _planned(monkeypatch, path)
    asked = h3k_cost.Workload(1920, 1080, 241, plan.settings.steps, plan.settings.cfg)
    fix = model.nearest_fit(asked)
    if not plan.fits:
        return  # a plan that does not fit at its own defaults may have no fix
    assert fix is not None
    est = model.estimate(fix)
    assert est.fits
    assert fix.width * fix.height <= asked.width * asked.height and fix.frames <= asked.frames


def test_the_cost_document_reads_back_and_refuses_a_broken_one():
    plan = make_plan(load_file(FINGERPRINTS[0]), CAT, PROFILES)
    doc = dict(plan.cost)
    assert h3k_cost.CostModel.from_json(doc).to_json() == doc
    with pytest.raises(h3k_cost.CostUnavailable, match="'blocks'"):
        h3k_cost.CostModel.from_json({k: v for k, v in doc.items() if k != "blocks"})
    with pytest.raises(h3k_cost.CostUnavailable, match="not a number"):
        h3k_cost.CostModel.from_json({**doc, "budget_ram_bytes": "lots"})
    with pytest.raises(h3k_cost.CostUnavailable, match="h3kit.cost/1"):
        h3k_cost.CostModel.from_json({**doc, "schema": "other"})
