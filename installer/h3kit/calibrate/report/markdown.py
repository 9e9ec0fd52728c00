"""The report's sections as Markdown: short tables, for a terminal or an issue (charts left out)."""

from __future__ import annotations

from h3kit.calibrate.report.model import CHARTS, Bullets, Details, Paragraph, Report, Strong, Table
from h3kit.calibrate.report.text import fmt


def _spans(p: Paragraph) -> str:
    return "".join(f"**{s.text}**" if isinstance(s, Strong) else str(s) for s in p.spans)


def _table(t: Table) -> str:
    out = ["| " + " | ".join(t.headers) + " |", "|" + "---|" * len(t.headers)]
    for r in t.rows:
        out.append("| " + " | ".join(fmt(c).replace("|", "\\|") for c in r) + " |")
    return "\n".join(out)


def _block(b) -> str | None:
    if isinstance(b, Table):
        return _table(b)
    if isinstance(b, Paragraph):
        return _spans(b)
    if isinstance(b, Bullets):
        if b.style == "warn":
            return "\n>\n".join(f"> **Warning:** {item}" for item in b.items)
        return "\n".join(f"- {item}" for item in b.items)
    if isinstance(b, Details):
        inner = [text for text in map(_block, b.blocks) if text is not None]
        return f"<details><summary>{b.summary}</summary>\n\n" + "\n\n".join(inner) + "\n\n</details>"
    if isinstance(b, CHARTS):
        return None  # a chart is a picture: the HTML page draws it
    raise TypeError(f"no Markdown for {b!r}")


def render(report: Report) -> str:
    """Title, then the sections in order: the first screen comes first, the appendices last."""
    parts = [f"# {report.title}"]
    for section in report.sections:
        parts += ["", f"## {section.title}"]
        parts += ["\n" + text for text in map(_block, section.blocks) if text is not None]
    return "\n".join(parts) + "\n"
