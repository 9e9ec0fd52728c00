"""The calibration report: one `h3kit.calibration/1` document, written three ways.

- JSON: the document itself (the contract; other tools read it).
- Markdown: the same sections as short tables, for a terminal or an issue.
- HTML: one self-contained page with the same sections and its charts as
  inline SVG (no plotting library, no script, nothing fetched from the
  network), so it opens from a file on a machine with no network.

The sections are built once from the document (`sections.build`, a model in
`model`) and laid out by two small renderers (`markdown`, `htmlpage`), so the
two formats cannot drift apart. The first screen's figures are read in
`figures` (newest keys first, an older report's after), the sections a person
reads first are built in `front`, the measurement in ComfyUI's Python in
`measured`; cell and sentence wording lives in `text`.
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

from h3kit.calibrate.report import htmlpage, markdown, sections, svg
from h3kit.calibrate.report.text import (
    describe_path,
    describe_scaled,
    fmt,
    real_model_rows,
    summary_lines,
)
from h3kit.core.files import atomic_write

__all__ = ["DECISION_KEYS", "REQUIRED", "SCHEMA", "charts", "describe_path", "describe_scaled", "fmt",
           "load_latest", "real_model_rows", "summary_lines", "to_html", "to_markdown", "validate", "write"]

SCHEMA = "h3kit.calibration/1"

# Required keys of the contract, and the type each must have.
REQUIRED = {
    "schema": str,
    "fingerprint": dict,
    "plan": dict,
    "native": dict,
    "device": dict,
    "disk": dict,
    "tiles": list,
    "decisions": list,
    "duration_seconds": (int, float),
    "report_files": dict,
}
DECISION_KEYS = ("setting", "value", "previous", "changed", "evidence")


def validate(doc: object) -> list[str]:
    """Problems with a calibration document (empty list when it is valid)."""
    if not isinstance(doc, dict):
        return ["the document is not a JSON object"]
    problems = []
    for key, kind in REQUIRED.items():
        if key not in doc:
            problems.append(f"'{key}' is missing")
        elif not isinstance(doc[key], kind) or isinstance(doc[key], bool):
            problems.append(f"'{key}' has the wrong type ({type(doc[key]).__name__})")
    if doc.get("schema") not in (None, SCHEMA):
        problems.append(f"'schema' is {doc.get('schema')!r}, expected {SCHEMA!r}")
    for i, d in enumerate(doc.get("decisions") or []):
        missing = [k for k in DECISION_KEYS if not isinstance(d, dict) or k not in d]
        if missing:
            problems.append(f"'decisions[{i}]' lacks {', '.join(missing)}")
    files = doc.get("report_files")
    if isinstance(files, dict):
        for k in ("json", "md", "html"):
            if k not in files:
                problems.append(f"'report_files.{k}' is missing")
    return problems


def to_markdown(doc: dict) -> str:
    return markdown.render(sections.build(doc))


def to_html(doc: dict) -> str:
    return htmlpage.render(sections.build(doc))


def charts(doc: dict) -> dict[str, str]:
    """The report's charts, by id, as SVG text (a chart id may hold more than one drawing)."""
    out: dict[str, str] = {}
    for chart in sections.build(doc).charts():
        out[chart.id] = out.get(chart.id, "") + svg.draw(chart)
    return out


def write(doc: dict, reports_dir: Path, stamp: datetime | None = None) -> dict:
    """Write calibration-<time>.{json,md,html} and latest.* ; returns the paths written.

    Every file is written atomically, so a reader never sees half a report;
    `latest.*` are copies (links are not portable to Windows).
    """
    reports_dir = Path(reports_dir)
    reports_dir.mkdir(parents=True, exist_ok=True)
    stamp = stamp or datetime.now()
    base = f"calibration-{stamp.strftime('%Y%m%d-%H%M%S')}"
    paths = {ext: reports_dir / f"{base}.{ext}" for ext in ("json", "md", "html")}
    doc["report_files"] = {k: str(v) for k, v in paths.items()}
    model = sections.build(doc)
    texts = {
        "json": json.dumps(doc, indent=2, ensure_ascii=False, default=str) + "\n",
        "md": markdown.render(model),
        "html": htmlpage.render(model),
    }
    for ext, text in texts.items():
        atomic_write(paths[ext], text)
        atomic_write(reports_dir / f"latest.{ext}", text)
    return doc["report_files"]


def load_latest(reports_dir: Path) -> dict | None:
    """The latest report as a dict, or None when there is none (or it is unreadable)."""
    try:
        return json.loads((Path(reports_dir) / "latest.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
