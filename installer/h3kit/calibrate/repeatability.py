"""How well this calibration repeats: its figures beside the earlier reports of the same setup on this machine.

A single calibration cannot say how much of its estimate is the machine's
noise; the reports it kept can. Earlier reports count when they measured
the same thing: the same kind of run (quick or full), the same DiT width and
depth, the same rows per model call and the same device. The figures
compared are the ones the estimate is made of:

- seconds per step (the estimate itself);
- one block's compute at the workflow's rows (the fit's per-block cost);
- the per-step fixed cost (`step_fixed_s`: the call's own work plus the
  per-block constant for the file's depth).

The spread is (max - min) / median over this run and up to REPEAT_RUNS - 1
earlier ones, as scripts/validate_estimator.py takes it; above LIMIT_PCT
the report says which figure moved. Pure functions over report documents:
the caller reads the files (`earlier_reports`).
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

REPEAT_RUNS = 3  # this run and the two before it
LIMIT_PCT = 15.0  # what a figure may move between runs before the report calls it unsteady
FIGURES = (("seconds_per_step", "seconds per step"), ("block_seconds", "one block at the workflow's rows"),
           ("step_fixed_s", "the per-step fixed cost"))


def figures(doc: dict) -> dict | None:
    """The compared figures and the setup key of one calibration document; None when it has no fit."""
    est = doc.get("estimates") if isinstance(doc.get("estimates"), dict) else {}
    h3 = doc.get("h3_model") if isinstance(doc.get("h3_model"), dict) else {}
    fit = h3.get("fit") if isinstance(h3.get("fit"), dict) else {}
    arch = h3.get("arch") if isinstance(h3.get("arch"), dict) else {}
    rows = est.get("tokens")
    if not fit or not isinstance(rows, (int, float)) or not isinstance(est.get("seconds_per_step"), (int, float)):
        return None
    block = (float(fit.get("block_fixed_s") or 0.0) + float(fit.get("block_s_per_token") or 0.0) * rows
             + float(fit.get("block_s_per_token2") or 0.0) * rows ** 2)
    setup = (bool(doc.get("quick")), arch.get("hidden"), arch.get("blocks_total"), int(rows),
             (doc.get("device") or {}).get("kind") if isinstance(doc.get("device"), dict) else None)
    return {"created": doc.get("created"), "setup": setup, "seconds_per_step": float(est["seconds_per_step"]),
            "block_seconds": block, "step_fixed_s": float(fit.get("step_fixed_s") or 0.0)}


def spread_pct(values) -> float | None:
    vals = [float(v) for v in values]
    if len(vals) < 2 or statistics.median(vals) <= 0:
        return None
    return 100.0 * (max(vals) - min(vals)) / statistics.median(vals)


def compare(doc: dict, earlier: list[dict]) -> dict | None:
    """This run beside the newest earlier reports of the same setup (newest last); None without a fit."""
    now = figures(doc)
    if now is None:
        return None
    same = [f for f in (figures(d) for d in earlier) if f is not None and f["setup"] == now["setup"]]
    runs = same[-(REPEAT_RUNS - 1):] + [now]
    out = {"runs": [{k: v for k, v in r.items() if k != "setup"} for r in runs], "limit_pct": LIMIT_PCT,
           "spread_pct": {k: spread_pct(r[k] for r in runs) for k, _ in FIGURES}}
    out["sentence"] = sentence(out)
    return out


def sentence(rep: dict) -> str:
    n = len(rep["runs"])
    if n < 2:
        return ("No earlier calibration of this setup on this machine: run it again to see how well its figures "
                "repeat.")
    parts = [f"{name} {rep['spread_pct'][key]:.0f}%" for key, name in FIGURES if rep["spread_pct"][key] is not None]
    moved = [name for key, name in FIGURES if (rep["spread_pct"][key] or 0.0) > rep["limit_pct"]]
    head = f"Across this calibration and the {n - 1} before it of the same setup, the spread is " + ", ".join(parts)
    if not moved:
        return head + f": all within {rep['limit_pct']:.0f}%."
    return (head + f": {' and '.join(moved)} moved more than {rep['limit_pct']:.0f}%, so other work on this "
            "machine was likely running during one of them; calibrate again when it is idle.")


def earlier_reports(reports_dir: Path, limit: int = 20) -> list[dict]:
    """The kept calibration-*.json documents, oldest first (the newest `limit`); unreadable ones are skipped."""
    out = []
    try:
        files = sorted(Path(reports_dir).glob("calibration-*.json"))[-limit:]
    except OSError:
        return []
    for f in files:
        try:
            doc = json.loads(f.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(doc, dict):
            out.append(doc)
    return out
