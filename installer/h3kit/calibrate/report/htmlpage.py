"""The report's sections as one self-contained HTML page.

Inline CSS, charts as inline SVG (`svg`), no script and nothing fetched from
the network (a Content-Security-Policy says so to the browser), so the page
opens from a file on a machine with no network.
"""

from __future__ import annotations

import html

from h3kit.calibrate.report import svg
from h3kit.calibrate.report.model import CHARTS, Bullets, Details, Paragraph, Report, Strong, Table
from h3kit.calibrate.report.text import fmt

CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;margin:2rem auto;max-width:1180px;color:#222;padding:0 1rem}
h1{font-size:1.5rem}h2{font-size:1.15rem;margin-top:2rem;border-bottom:1px solid #ddd}
table{border-collapse:collapse;margin:.5rem 0}td,th{border:1px solid #ddd;padding:3px 8px;text-align:left;vertical-align:top}
th{background:#f0f0f0}.grid{display:flex;flex-wrap:wrap;gap:1rem}.note{color:#555}
.estimate{background:#fff7e6;border-left:4px solid #e08a2c;padding:.4rem .8rem}
.changed{font-weight:bold;color:#1a5d1a}code{font-size:12px}
.first{background:#f4f8fd;border:1px solid #c9dbf0;border-radius:6px;padding:.2rem 1.2rem 1rem;margin-top:1rem}
.first h2{border:0;margin-top:.8rem}.headline{font-size:1.35rem;line-height:1.35;margin:.4rem 0 .8rem}
ul.warn{list-style:none;padding:0}ul.warn li{background:#fdecea;border-left:4px solid #c0392b;padding:.4rem .8rem;margin:.3rem 0}
ul.warn li::before{content:"Warning: ";font-weight:bold}
details{margin:.5rem 0}summary{cursor:pointer;color:#3b6fb6}
.appendix h2{color:#555}
"""


def _e(x) -> str:
    return html.escape(str(x), quote=True)


def _table(t: Table) -> str:
    head = "".join(f"<th>{_e(h)}</th>" for h in t.headers)
    body = []
    for i, r in enumerate(t.rows):
        cls = ' class="changed"' if i < len(t.marked) and t.marked[i] else ""
        body.append(f"<tr{cls}>" + "".join(f"<td>{_e(fmt(c))}</td>" for c in r) + "</tr>")
    return f"<table><tr>{head}</tr>{''.join(body)}</table>"


def _paragraph(p: Paragraph) -> str:
    text = "".join(f"<b>{_e(s.text)}</b>" if isinstance(s, Strong) else _e(s) for s in p.spans)
    return f"<p class='{p.style}'>{text}</p>" if p.style else f"<p>{text}</p>"


def _blocks(blocks: list) -> list[str]:
    """Each block as HTML; charts next to each other share one grid row."""
    out, charts = [], []
    for b in blocks + [None]:
        if isinstance(b, CHARTS):
            charts.append(svg.draw(b))
            continue
        if charts:
            out.append("<div class='grid'>" + "".join(charts) + "</div>")
            charts = []
        if b is None:
            break
        if isinstance(b, Table):
            out.append(_table(b))
        elif isinstance(b, Paragraph):
            out.append(_paragraph(b))
        elif isinstance(b, Bullets):
            cls = f" class='{b.style}'" if b.style else ""
            out.append(f"<ul{cls}>" + "".join(f"<li>{_e(s)}</li>" for s in b.items) + "</ul>")
        elif isinstance(b, Details):
            out.append(f"<details><summary>{_e(b.summary)}</summary>" + "".join(_blocks(list(b.blocks))) + "</details>")
        else:
            raise TypeError(f"no HTML for {b!r}")
    return out


def render(report: Report) -> str:
    """The page: the first screen in its own box at the top, every other section after it, appendices last."""
    body = [f"<h1>{_e(report.title)}</h1>"]
    for section in report.sections:
        inner = f"<h2>{_e(section.title)}</h2>" + "".join(_blocks(section.blocks))
        body.append(f"<section class='{section.style}'>{inner}</section>" if section.style else inner)
    return ("<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>"
            "<meta http-equiv='Content-Security-Policy' content=\"default-src 'none'; style-src 'unsafe-inline'\">"
            f"<title>{_e(report.title)}</title><style>{CSS}</style></head><body>"
            + "\n".join(body) + "</body></html>\n")
