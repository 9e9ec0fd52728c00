"""Charts drawn as inline SVG: no plotting library, no script, nothing fetched.

Every chart is an `<svg class="chart">` with a `<title>`; one with no data
draws a short sentence saying why, so a reader never meets an empty box.
"""

from __future__ import annotations

import html

from h3kit.calibrate.report.model import BarChart, HBars, LineChart, NoChart, Split, Timeline
from h3kit.calibrate.report.text import fmt

_W, _H, _PAD = 560, 240, 44
_COLORS = ("#3b6fb6", "#e08a2c", "#4a9a5b", "#b64a6f")


def _e(x) -> str:
    return html.escape(str(x), quote=True)


def _svg(title: str, body: str, height: int = _H, cls: str = "chart") -> str:
    return (f'<svg class="{cls}" xmlns="http://www.w3.org/2000/svg" width="{_W}" height="{height}" '
            f'viewBox="0 0 {_W} {height}" role="img" aria-label="{_e(title)}"><title>{_e(title)}</title>'
            f'<rect x="0" y="0" width="{_W}" height="{height}" fill="#fafafa" stroke="#ddd"/>{body}</svg>')


def empty(title: str, reason: str) -> str:
    """A chart box that says, in a few centred lines, why there is nothing to draw."""
    lines, line = [], ""
    for word in str(reason).split():
        if line and len(line) + 1 + len(word) > 64:
            lines.append(line)
            line = word
        else:
            line = f"{line} {word}".strip()
    lines.append(line)
    top = _H / 2 - 9 * (len(lines) - 1)
    body = "".join(f'<text x="{_W / 2}" y="{top + 18 * i:.1f}" text-anchor="middle" font-size="13" fill="#666">'
                   f'{_e(text)}</text>' for i, text in enumerate(lines))
    return _svg(title, body, cls="chart empty")


def _axes(ymax: float, ylabel: str) -> str:
    out = [f'<line x1="{_PAD}" y1="{_H - _PAD}" x2="{_W - 10}" y2="{_H - _PAD}" stroke="#333"/>',
           f'<line x1="{_PAD}" y1="10" x2="{_PAD}" y2="{_H - _PAD}" stroke="#333"/>',
           f'<text x="12" y="{_H / 2}" font-size="11" transform="rotate(-90 12 {_H / 2})" '
           f'text-anchor="middle">{_e(ylabel)}</text>']
    for i in range(5):
        v = ymax * i / 4
        y = _H - _PAD - (_H - _PAD - 10) * i / 4
        out.append(f'<text x="{_PAD - 4}" y="{y + 4:.1f}" font-size="10" text-anchor="end">{fmt(v)}</text>')
    return "".join(out)


def _legend(names: list[str]) -> str:
    out = []
    for i, name in enumerate(names):
        x = _PAD + 10 + i * 130
        out.append(f'<rect x="{x}" y="{_H - 16}" width="10" height="10" fill="{_COLORS[i % len(_COLORS)]}"/>'
                   f'<text x="{x + 14}" y="{_H - 7}" font-size="10">{_e(name)}</text>')
    return "".join(out)


def bar_chart(c: BarChart) -> str:
    values = [v for vs in c.series.values() for v in vs if isinstance(v, (int, float))]
    if not c.labels or not values or max(values) <= 0:
        return empty(c.title, "nothing measured")
    ymax = max(values) * 1.1
    plot_w, plot_h = _W - _PAD - 20, _H - _PAD - 10
    group_w = plot_w / len(c.labels)
    bar_w = group_w * 0.8 / len(c.series)
    out = [_axes(ymax, c.ylabel)]
    for gi, label in enumerate(c.labels):
        gx = _PAD + 5 + gi * group_w
        for si, (name, vs) in enumerate(c.series.items()):
            v = vs[gi] if gi < len(vs) and isinstance(vs[gi], (int, float)) else 0
            h = plot_h * v / ymax
            out.append(f'<rect x="{gx + si * bar_w:.1f}" y="{_H - _PAD - h:.1f}" width="{bar_w * 0.95:.1f}" '
                       f'height="{max(h, 0.5):.1f}" fill="{_COLORS[si % len(_COLORS)]}"><title>{_e(name)} '
                       f'{_e(label)}: {fmt(v)}</title></rect>')
        out.append(f'<text x="{gx + group_w * 0.4:.1f}" y="{_H - _PAD + 14}" font-size="10" '
                   f'text-anchor="middle">{_e(label)}</text>')
    out.append(_legend(list(c.series)))
    return _svg(c.title, "".join(out))


def line_chart(c: LineChart) -> str:
    xs = [p[0] for ps in c.points.values() for p in ps]
    ys = [p[1] for ps in c.points.values() for p in ps] + ([c.limit] if c.limit else [])
    if not xs or max(ys) <= 0:
        return empty(c.title, "nothing measured")
    x0, x1 = min(xs), max(xs)
    x1 = x1 if x1 > x0 else x0 + 1
    ymax = max(ys) * 1.1
    plot_w, plot_h = _W - _PAD - 20, _H - _PAD - 10

    def sx(x):
        return _PAD + 10 + plot_w * 0.95 * (x - x0) / (x1 - x0)

    def sy(y):
        return _H - _PAD - plot_h * y / ymax

    out = [_axes(ymax, c.ylabel)]
    for x in sorted(set(c.xticks or xs)):
        label = fmt(int(x)) if float(x).is_integer() else fmt(x)
        out.append(f'<text x="{sx(x):.1f}" y="{_H - _PAD + 14}" font-size="10" text-anchor="middle">{label}</text>')
    out.append(f'<text x="{_W - 12}" y="{_H - _PAD + 28}" font-size="10" text-anchor="end">{_e(c.xlabel)}</text>')
    for si, (name, ps) in enumerate(c.points.items()):
        color = _COLORS[si % len(_COLORS)]
        pts = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in sorted(ps))
        out.append(f'<polyline points="{pts}" fill="none" stroke="{color}" stroke-width="2"/>')
        for x, y in ([] if name in c.curves else ps):
            out.append(f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="3.5" fill="{color}">'
                       f'<title>{_e(name)} {fmt(x)}: {fmt(y)}</title></circle>')
    if c.limit:
        out.append(f'<line x1="{_PAD}" y1="{sy(c.limit):.1f}" x2="{_W - 10}" y2="{sy(c.limit):.1f}" stroke="#b00" '
                   f'stroke-dasharray="5,4"/><text x="{_W - 12}" y="{sy(c.limit) - 4:.1f}" font-size="10" '
                   f'text-anchor="end" fill="#b00">budget</text>')
    out.append(_legend(list(c.points)))
    return _svg(c.title, "".join(out))


def timeline_chart(c: Timeline) -> str:
    """Waiting-on-disk vs computing per block: one row per block, time on x."""
    spans = [s for s in c.spans if s.get("end", 0) > s.get("start", 0)]
    if not spans:
        return empty(c.title, "no streamed blocks recorded")
    blocks = sorted({s["block"] for s in spans})
    t_end = max(s["end"] for s in spans)
    row_h = max(8.0, min(24.0, 160 / len(blocks)))
    height = int(30 + row_h * len(blocks) + 40)
    plot_w = _W - _PAD - 30
    colors = {"wait": _COLORS[1], "compute": _COLORS[0]}
    out = []
    for i, b in enumerate(blocks):
        y = 20 + i * row_h
        out.append(f'<text x="{_PAD - 4}" y="{y + row_h * 0.7:.1f}" font-size="10" text-anchor="end">'
                   f'block {_e(b)}</text>')
    for s in spans:
        y = 20 + blocks.index(s["block"]) * row_h
        x = _PAD + plot_w * s["start"] / t_end
        w = max(plot_w * (s["end"] - s["start"]) / t_end, 0.8)
        out.append(f'<rect x="{x:.1f}" y="{y + 1:.1f}" width="{w:.1f}" height="{row_h - 2:.1f}" '
                   f'fill="{colors.get(s["kind"], "#888")}"><title>block {_e(s["block"])} {_e(s["kind"])}: '
                   f'{fmt(s["end"] - s["start"])} s</title></rect>')
    axis_y = 24 + row_h * len(blocks)
    out.append(f'<line x1="{_PAD}" y1="{axis_y:.1f}" x2="{_PAD + plot_w}" y2="{axis_y:.1f}" stroke="#333"/>'
               f'<text x="{_PAD}" y="{axis_y + 12:.1f}" font-size="10">0 s</text>'
               f'<text x="{_PAD + plot_w}" y="{axis_y + 12:.1f}" font-size="10" text-anchor="end">{fmt(t_end)} s</text>')
    for i, (name, label) in enumerate((("wait", "waiting on disk"), ("compute", "computing"))):
        x = _PAD + 60 + i * 150
        out.append(f'<rect x="{x}" y="{height - 14}" width="10" height="10" fill="{colors[name]}"/>'
                   f'<text x="{x + 14}" y="{height - 5}" font-size="10">{label}</text>')
    return _svg(c.title, "".join(out), height)


def hbars(c: HBars) -> str:
    """One horizontal bar per option, its value written beside it: options compare at a glance."""
    rows = [r for r in c.rows if isinstance(r[1], (int, float)) and r[1] > 0]
    if not rows:
        return empty(c.title, "nothing to compare")
    vmax = max(r[1] for r in rows)
    label_w, row_h = 170, 22
    height = 30 + row_h * len(rows) + 10
    plot_w = _W - label_w - 90
    out = []
    for i, (label, value, text) in enumerate(rows):
        y = 24 + i * row_h
        w = max(plot_w * value / vmax, 1.0)
        short = str(label) if len(str(label)) <= 28 else str(label)[:27] + "…"
        out.append(f'<text x="{label_w - 6}" y="{y + 14}" font-size="11" text-anchor="end">{_e(short)}</text>'
                   f'<rect x="{label_w}" y="{y + 3}" width="{w:.1f}" height="{row_h - 6}" '
                   f'fill="{_COLORS[0] if i else _COLORS[2]}"><title>{_e(label)}: {_e(text)}</title></rect>'
                   f'<text x="{label_w + w + 5:.1f}" y="{y + 14}" font-size="11">{_e(text)}</text>')
    out.append(f'<text x="10" y="16" font-size="12">{_e(c.title)}</text>')
    return _svg(c.title, "".join(out), height)


def split(c: Split) -> str:
    """One bar cut into its parts (computing vs waiting for disk), each with its share written in it."""
    parts = [(str(label), float(v)) for label, v in c.parts if isinstance(v, (int, float)) and v >= 0]
    total = sum(v for _, v in parts)
    if not parts or total <= 0:
        return empty(c.title, "nothing measured")
    height, x0, bar_w = 120, 20, _W - 40
    out = [f'<text x="{x0}" y="22" font-size="12">{_e(c.title)}</text>']
    x = float(x0)
    for i, (label, v) in enumerate(parts):
        w = bar_w * v / total
        share = f"{100 * v / total:.0f}%" if v / total >= 0.01 else f"{100 * v / total:.1f}%"
        out.append(f'<rect x="{x:.1f}" y="36" width="{max(w, 1.0):.1f}" height="34" fill="{_COLORS[i % len(_COLORS)]}">'
                   f'<title>{_e(label)}: {share}</title></rect>')
        if w > 40:
            out.append(f'<text x="{x + w / 2:.1f}" y="58" font-size="12" text-anchor="middle" fill="#fff">{share}</text>')
        out.append(f'<rect x="{x0 + i * 200}" y="86" width="10" height="10" fill="{_COLORS[i % len(_COLORS)]}"/>'
                   f'<text x="{x0 + i * 200 + 14}" y="95" font-size="11">{_e(label)} {share}</text>')
        x += w
    return _svg(c.title, "".join(out), height)


def draw(chart) -> str:
    """The SVG text of one chart of the section model."""
    if isinstance(chart, BarChart):
        return bar_chart(chart)
    if isinstance(chart, LineChart):
        return line_chart(chart)
    if isinstance(chart, Timeline):
        return timeline_chart(chart)
    if isinstance(chart, HBars):
        return hbars(chart)
    if isinstance(chart, Split):
        return split(chart)
    if isinstance(chart, NoChart):
        return empty(chart.title, chart.reason)
    raise TypeError(f"not a chart: {chart!r}")
