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
    items: tuple


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
    """Lines through (x, y) points, one per series; an optional dashed horizontal `limit` (a budget)."""

    id: str
    title: str
    points: dict
    xlabel: str
    ylabel: str
    limit: float | None = None


@dataclass(frozen=True)
class Timeline:
    """Spans {"block", "kind": wait|compute, "start", "end"} of the scaled DiT's streamed blocks."""

    id: str
    title: str
    spans: tuple


@dataclass(frozen=True)
class NoChart:
    """A chart with nothing to draw, and the reason, so a reader never meets an empty box."""

    id: str
    title: str
    reason: str


CHARTS = (BarChart, LineChart, Timeline, NoChart)


@dataclass
class Section:
    title: str
    blocks: list = field(default_factory=list)


@dataclass
class Report:
    title: str
    summary: list[str]
    sections: list[Section]

    def charts(self) -> list:
        return [b for s in self.sections for b in s.blocks if isinstance(b, CHARTS)]
