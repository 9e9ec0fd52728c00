"""The short summary calibration leaves in an installed node pack, for its H3kitCalibrationReport node.

Written only into a pack h3kit installed (its install record knows the
folder), and recorded there, so uninstall removes it with the rest.
"""

from __future__ import annotations

import json

from h3kit.calibrate import report
from h3kit.comfyui import manifest as mf
from h3kit.comfyui.journal import Journal
from h3kit.core.session import Session

SUMMARY_FILE = "h3kit_calibration.json"  # read by the pack's H3kitCalibrationReport node
SUMMARY_SCHEMA = "h3kit.calibration-summary/1"


def summary_document(doc: dict) -> dict:
    """What the ComfyUI node shows: the summary sentences, the decisions and where the full report is."""
    return {"schema": SUMMARY_SCHEMA, "created": doc.get("created"), "profile": doc.get("profile"),
            "lines": report.summary_lines(doc),
            "decisions": [{k: d[k] for k in report.DECISION_KEYS} for d in doc.get("decisions", [])],
            "report_html": (doc.get("report_files") or {}).get("html")}


def write_pack_summary(ctx: Session, install, doc: dict) -> str | None:
    """Put the summary into an installed node pack (recorded in its install record), or None."""
    if install is None or not getattr(install, "node_dir", None) or not install.node_dir.is_dir():
        return None
    record = mf.load_or_new(ctx.locations.state_dir, install.path)
    if record.find(install.node_dir) is None:
        return None  # a pack h3kit did not install: leave it alone
    path = install.node_dir / SUMMARY_FILE
    # Record before write: a crash mid-write leaves a pending entry that uninstall settles as ours.
    entry = record.find(path)
    if (path.exists() or path.is_symlink()) and (entry is None or not record.still_ours(entry)):
        return None  # the user's own (or edited) summary: left as it is
    Journal(record).write(path, json.dumps(summary_document(doc), indent=2, ensure_ascii=False) + "\n", "node-pack")
    record.save()
    return str(path)
