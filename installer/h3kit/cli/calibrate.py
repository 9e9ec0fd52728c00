"""`h3kit calibrate`: run the calibration inference, tune the profile, write the report."""

from __future__ import annotations

from h3kit.calibrate import report
from h3kit.cli.context import Context, Outcome, add_fresh_probe
from h3kit.steps import calibrate
from h3kit.steps.options import CalibrateOptions
from h3kit.steps.version_record import record_after_calibrate

HELP = "run the calibration inference, tune the profile, write the report"


def add_arguments(p) -> None:
    p.add_argument("--quick", action="store_true", help="a short run (at most a minute)")
    p.add_argument("--comfyui", metavar="PATH", help="run inside this ComfyUI's Python")
    p.add_argument("--with-model", action="store_true", help="also run the smallest real workflow when weights are present")
    add_fresh_probe(p)


def run(args, ctx: Context) -> Outcome:
    doc = calibrate.run(CalibrateOptions(comfyui=args.comfyui, quick=args.quick, with_model=args.with_model,
                                         fresh_probe=args.fresh_probe), ctx).doc
    record_after_calibrate(ctx, doc)
    lines = report.summary_lines(doc)
    for d in doc["decisions"]:
        mark = "changed" if d["changed"] else "kept"
        lines.append(f"  {d['setting']}: {report.fmt(d['value'])} ({mark}) -- {d['evidence']}")
    files = doc.get("report_files") or {}
    if files.get("html"):
        lines.append(f"report: {files['html']} (also .md, .json; latest.* beside them)")
    else:
        lines.append("dry run: no report or config written")
    if doc.get("config_written"):
        lines.append(f"calibrated values written to {doc['config_written']}: {doc['calibrated'] or 'none changed'}")
    return Outcome(doc, "\n".join(lines), warnings=[f"skipped {s}" for s in doc.get("skipped", [])])
