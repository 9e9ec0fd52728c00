"""The latest calibration summary, as text for the H3kitCalibrationReport node (no ComfyUI, no torch).

`h3kit calibrate` writes `h3kit_calibration.json` into this pack (schema
h3kit.calibration-summary/1: summary lines, decisions, the HTML report's
path); the node shows it and re-reads it whenever the file changes.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from ..h3kit_common.pack import SUMMARY_FILE  # noqa: F401 - the node module names it from here
NO_SUMMARY = "No calibration yet: run 'h3kit calibrate' (add --comfyui PATH for this ComfyUI) and re-run this node."


def summary_stamp(path: str | os.PathLike):
    """Changes whenever the summary file does (ComfyUI's IS_CHANGED)."""
    try:
        st = Path(path).stat()
        return (st.st_mtime_ns, st.st_size)
    except OSError:
        return None


def summary_text(path: str | os.PathLike) -> str:
    """The summary as a few readable lines; a sentence saying what to do when there is none."""
    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return NO_SUMMARY
    except (OSError, ValueError) as exc:
        return f"{Path(path).name} is unreadable ({exc}); run 'h3kit calibrate' again."
    if not isinstance(doc, dict):
        return f"{Path(path).name} is not a calibration summary; run 'h3kit calibrate' again."
    lines = [f"h3kit calibration {doc.get('created', '?')} (profile {doc.get('profile', '?')})"]
    lines += [f"- {line}" for line in doc.get("lines") or []]
    decisions = doc.get("decisions") or []
    if decisions:
        lines.append("decisions:")
        for d in decisions:
            state = "changed" if d.get("changed") else "kept"
            lines.append(f"- {d.get('setting')}: {d.get('value')} ({state}) -- {d.get('evidence')}")
    if doc.get("report_html"):
        lines.append(f"full report: {doc['report_html']}")
    return "\n".join(lines)
