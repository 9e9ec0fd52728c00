"""calibrate/repeatability.py: a calibration's figures beside the earlier reports of the same setup."""

from __future__ import annotations

import json

from h3kit.calibrate import repeatability as rp
from h3kit.calibrate import report


def _doc(created: str, s_per_step: float, a: float, c: float, fixed: float, *, quick=True, hidden=5376, rows=142):
    return {"created": created, "quick": quick, "device": {"kind": "cpu"},
            "estimates": {"tokens": rows, "seconds_per_step": s_per_step},
            "h3_model": {"status": "measured", "arch": {"hidden": hidden, "blocks_total": 4},
                         "fit": {"block_s_per_token": a, "block_fixed_s": c, "block_s_per_token2": 0.0,
                                 "step_fixed_s": fixed}}}


def test_the_figures_are_the_estimate_the_block_at_the_workflows_rows_and_the_fixed_cost():
    f = rp.figures(_doc("t", 2.2, 0.0025, 0.09, 0.36))
    assert f["seconds_per_step"] == 2.2 and f["step_fixed_s"] == 0.36
    assert abs(f["block_seconds"] - (0.09 + 0.0025 * 142)) < 1e-12
    assert rp.figures({"estimates": {}}) is None


def test_only_earlier_runs_of_the_same_setup_count_and_only_the_newest_two():
    earlier = [_doc("1", 9.0, 0.01, 0.5, 2.0),  # older than the two kept
               _doc("2", 2.3, 0.0026, 0.09, 0.37), _doc("3", 2.1, 0.0024, 0.09, 0.35),
               _doc("4", 5.0, 0.0024, 0.09, 0.35, quick=False),  # a full calibration
               _doc("5", 5.0, 0.0024, 0.09, 0.35, hidden=2048)]  # another DiT
    rep = rp.compare(_doc("6", 2.2, 0.0025, 0.09, 0.36), earlier)
    assert [r["created"] for r in rep["runs"]] == ["2", "3", "6"]
    assert abs(rep["spread_pct"]["seconds_per_step"] - 100 * 0.2 / 2.2) < 1e-9
    assert rep["sentence"].endswith("all within 15%.")


def test_a_figure_that_moved_is_named():
    rep = rp.compare(_doc("b", 2.2, 0.0025, 0.09, 0.60), [_doc("a", 2.2, 0.0025, 0.09, 0.30)])
    assert "the per-step fixed cost moved more than 15%" in rep["sentence"]
    assert "seconds per step 0%" in rep["sentence"]


def test_a_first_calibration_says_how_to_see_the_spread():
    rep = rp.compare(_doc("a", 2.2, 0.0025, 0.09, 0.3), [])
    assert rep["spread_pct"]["seconds_per_step"] is None and "run it again" in rep["sentence"]


def test_kept_reports_are_read_oldest_first_and_junk_is_skipped(tmp_path):
    for i, name in enumerate(("calibration-20261201-100000.json", "calibration-20261202-090000.json")):
        (tmp_path / name).write_text(json.dumps(_doc(str(i), 2.0 + i, 0.0025, 0.09, 0.3)), encoding="utf-8")
    (tmp_path / "calibration-20261202-100000.json").write_text("{not json", encoding="utf-8")
    (tmp_path / "latest.json").write_text(json.dumps(_doc("latest", 1, 1, 1, 1)), encoding="utf-8")
    assert [d["created"] for d in rp.earlier_reports(tmp_path)] == ["0", "1"]
    assert rp.earlier_reports(tmp_path / "missing") == []


def test_the_report_shows_the_runs_and_their_spread():
    doc = _doc("2026-12-02T14:00:00+00:00", 2.2, 0.0025, 0.09, 0.36)
    doc["repeatability"] = rp.compare(doc, [_doc("2026-12-02T13:58:00+00:00", 2.3, 0.0026, 0.09, 0.37)])
    md = report.to_markdown(doc)
    assert doc["repeatability"]["sentence"] in md
    assert "2026-12-02T13:58:00+00:00" in md and "| spread |" in md
