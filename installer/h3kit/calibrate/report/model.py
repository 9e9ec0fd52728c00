"""The report as data: a title, summary lines and sections of paragraphs, tables and charts.

`sections.build` makes one `Report` from a calibration document; the
Markdown and HTML renderers only lay it out, so both formats always carry
the same tables and sentences. Charts are data too (what to draw, not SVG);
the HTML renderer draws them (`svg`), Markdown leaves them out.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Strong:
    """A word or phrase set in bold."""

    text: str


@dataclass(frozen=True)
class Paragraph:
    """Running text: plain strings and `Strong` spans; `style` is a hint for HTML (note, estimate)."""

    spans: tuple
    style: str = ""


@dataclass(frozen=True)
class Bullets:
    """A list; `style` "warn" makes each item a warning (a quoted line in Markdown, a red box in HTML)."""

    items: tuple
    style: str = ""


@dataclass(frozen=True)
class Table:
    """Rows of raw values (the renderers format each cell); `marked` rows are highlighted (changed decisions)."""

    headers: tuple
    rows: tuple
    marked: tuple = ()


@dataclass(frozen=True)
class BarChart:
    """Grouped bars: one group per label, one bar per series (`series`: name -> one value per label)."""

    id: str
    title: str
    labels: tuple
    series: dict
    ylabel: str


@dataclass(frozen=True)
class LineChart:
    """Lines through (x, y) points, one per series; an optional dashed horizontal `limit` (a budget).

    `xticks`: the x values labelled (default: every point's); `curves`: series drawn as a line without
    dots (a fitted curve, as opposed to measured points)."""

    id: str
    title: str
    points: dict
    xlabel: str
    ylabel: str
    limit: float | None = None
    xticks: tuple = ()
    curves: tuple = ()


@dataclass(frozen=True)
class Timeline:
    """Spans {"block", "kind": wait|compute, "start", "end"} of the scaled DiT's streamed blocks."""

    id: str
    title: str
    spans: tuple


@dataclass(frozen=True)
class HBars:
    """Horizontal bars, one row per option: `rows` are (label, value, text shown beside the bar)."""

    id: str
    title: str
    rows: tuple
    unit: str


@dataclass(frozen=True)
class Split:
    """One bar cut into parts that add up to the whole: `parts` are (label, value) in drawing order."""

    id: str
    title: str
    parts: tuple


@dataclass(frozen=True)
class NoChart:
    """A chart with nothing to draw, and the reason, so a reader never meets an empty box."""

    id: str
    title: str
    reason: str


CHARTS = (BarChart, LineChart, Timeline, HBars, Split, NoChart)


@dataclass(frozen=True)
class Details:
    """Blocks a reader opens on demand (kept settings, raw figures): `<details>` in both formats."""

    summary: str
    blocks: tuple


@dataclass
class Section:
    """`style` "first" marks the first screen (HTML sets it apart); "appendix" the figures after the rest."""

    title: str
    blocks: list = field(default_factory=list)
    style: str = ""


@dataclass
class Report:
    title: str
    summary: list[str]
    sections: list[Section]

    def charts(self) -> list:
        out = []
        for s in self.sections:
            for b in s.blocks:
                inner = b.blocks if isinstance(b, Details) else (b,)
                out += [c for c in inner if isinstance(c, CHARTS)]
        return out
