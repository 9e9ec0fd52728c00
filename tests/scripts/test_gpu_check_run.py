"""scripts/gpu_check/run.py's bookkeeping, with no ComfyUI: a check past its limit is stopped and recorded as a
timeout, one that cannot run keeps its reason, one the budget leaves no time for is recorded as not run, and the
markdown table has a row per check with its figure or its reason."""

from __future__ import annotations

import importlib.util
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("gpu_check_run", REPO / "scripts" / "gpu_check" / "run.py")
run = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(run)
checks, report = run.checks, run.report


def _ctx(tmp_path: Path) -> "checks.Ctx":
    return checks.Ctx(device="cpu", real=tmp_path, python=tmp_path / "python", work=tmp_path, home=tmp_path,
                      gguf_pack=None, sizes=dict(run.SIZES["cpu"]))


def test_a_check_past_its_limit_is_stopped_and_one_that_cannot_run_keeps_its_reason(tmp_path, monkeypatch):
    def slow(ctx):
        time.sleep(30)
        return "never", {}

    def refused(ctx):
        raise checks.Skip("ComfyUI-GGUF is not there")

    def broken(ctx):
        return {}["missing"]

    for name, fn in (("slow", slow), ("refused", refused), ("broken", broken)):
        monkeypatch.setattr(checks, name, fn, raising=False)
    ctx = _ctx(tmp_path)
    t0 = time.monotonic()
    rec = run.run_one(ctx, "slow", 1.0)
    assert time.monotonic() - t0 < 5 and rec["status"] == "timeout" and rec["reason"] == "it ran past its limit of 1 s"
    assert run.run_one(ctx, "refused", 5) | {"seconds": 0} == {
        "status": "failed", "limit_s": 5, "line": "", "figures": None, "reason": "ComfyUI-GGUF is not there",
        "seconds": 0}
    rec = run.run_one(ctx, "broken", 5)
    assert rec["status"] == "failed" and rec["reason"].startswith("KeyError: 'missing'")


def test_checks_the_budget_leaves_no_time_for_are_recorded_as_not_run(tmp_path, monkeypatch):
    monkeypatch.setattr(checks, "fingerprint", lambda ctx: ("one GPU", {"gpus": []}))
    ctx = _ctx(tmp_path)
    run.run_all(ctx, time.monotonic() + run.MIN_START_S + 30, ["fingerprint"])
    run.run_all(ctx, time.monotonic() + run.MIN_START_S - 1, ["plan"])
    assert ctx.results["fingerprint"]["status"] == "ok" and ctx.results["fingerprint"]["figures"] == {"gpus": []}
    assert ctx.results["plan"]["status"] == "not_run" and "budget was spent" in ctx.results["plan"]["reason"]


def test_the_table_has_every_check_with_its_figure_or_reason(tmp_path):
    ctx = _ctx(tmp_path)
    ctx.results = {name: {"status": "failed", "seconds": 1.0, "limit_s": 60, "line": "", "figures": None,
                          "reason": f"{name} could not | run"} for name in run.ORDER}
    ctx.results["plan_vs_measured"] = {"status": "ok", "seconds": 0.1, "limit_s": 30, "line": "measured/planned",
                                       "figures": {"memory": "gpu_bytes", "rows": {
                                           "dit_held": {"planned_bytes": 2**31, "measured_bytes": 2**30,
                                                        "measured_over_planned": 0.5},
                                           "te_held": {"planned_bytes": None, "measured_bytes": None, "why": "no te"}}}}
    doc = report.document(ctx, time.time() - 5, 480, None, {"python": "3.12"})
    assert list(doc["checks"]) == run.ORDER and doc["schema"] == "h3kit.gpu_check/1"
    md = report.markdown(doc)
    for name in run.ORDER[:-1]:
        assert f"| {name} | failed | 1.0 (60) | {name} could not / run |" in md
    assert "| dit_held | 2.00 | 1.00 | 0.5 |" in md and "| te_held | - | - | no te |" in md
