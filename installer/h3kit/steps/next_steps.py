"""The three lines `h3kit install` ends with: how to start ComfyUI, what to open, how long a clip takes.

A person who just double-clicked the installer needs exactly that, in that
order; everything else is in the notes and the report. The time is one
figure, and the line names its source: the time of the plan the pack holds at
the end, which after a calibration is the re-applied plan timed with the rates
calibration measured here, else the plan's estimate from the throughput table
(and the plan's warnings printed after it quote the same plan). A machine
that cannot make a clip in useful time is told so plainly, with what would
make it work.
"""

from __future__ import annotations

import shlex
import sys
from dataclasses import dataclass

from h3kit.core.units import human_seconds
from h3kit.data.plan_doc import Plan, PlanSettings

UNUSABLE_SECONDS = 4 * 3600  # a clip that takes longer than an afternoon is not a setup anyone keeps
WHAT_WOULD_HELP = ("an NVIDIA card with 12 GB or more (RTX 3060 class), or an Apple Silicon Mac "
                   "with 64 GB or more of unified memory")


@dataclass(frozen=True)
class ClipFigure:
    """How long one clip at the workflow's defaults takes here, and where that figure comes from."""

    seconds: float
    measured: bool  # the rates were measured here by a calibration; else the throughput table's
    source: str  # the rates' own source sentence (plan.estimates.time.source)

    @property
    def says(self) -> str:
        if self.measured:
            return f"calibration's measured estimate: {self.source}; --with-model times a real run"
        return "the plan's estimate from the throughput table; 'h3kit calibrate' measures this machine"

    def to_json(self) -> dict:
        return {"seconds": self.seconds, "measured": self.measured, "source": self.source}


def clip_figure(plan: Plan | None) -> ClipFigure | None:
    """The time of `plan` (the one the pack holds), or None when it has none."""
    time = plan.estimates.time if plan is not None else None
    if time is None or not isinstance(time.seconds_per_clip, (int, float)) or time.seconds_per_clip <= 0:
        return None
    source = time.source or ""
    return ClipFigure(float(time.seconds_per_clip), source.startswith("calibrated"), source)


def shell_quoted(path: str, windows: bool | None = None) -> str:
    """`path` as one word for the platform's shell, pasteable as it is: in double quotes (what people expect,
    and all cmd.exe knows), or in POSIX single quotes when double ones would let the shell expand something."""
    windows = sys.platform == "win32" if windows is None else windows
    if windows or not any(c in path for c in '$`"\\!'):
        return f'"{path}"'
    return shlex.quote(path)


def app_start_line(app: str, flags: list[str], how: str) -> str:
    """The first line for a ComfyUI an app starts itself: the app by name, the exact flags to add and where."""
    if not flags:
        return f"Start ComfyUI from {app} as you usually do (this profile needs no extra launch flags there)."
    return f"Start ComfyUI from {app} with these launch flags added: {' '.join(flags)} ({how})."


def lines(launcher: str | None, plan: Plan | None, cpu_only: bool, app_start: str | None = None) -> list[str]:
    """`plan`: the one the pack holds now; `app_start`: app_start_line's sentence when an app, not h3kit's
    launcher, starts this ComfyUI."""
    s = plan.settings if plan is not None else PlanSettings()
    start = app_start or (f"Start ComfyUI: {shell_quoted(launcher)}" if launcher
                          else "Start ComfyUI as you usually do (the Desktop app starts it itself).")
    canvas, frames, steps = s.canvas or s.max_canvas, s.frames or s.max_frames, s.steps
    shape = f" ({canvas[0]}x{canvas[1]}, {frames} frames = {frames / 24:.1f} s of video, {steps} steps)" if canvas and frames else ""
    open_it = f"Then open Templates > ComfyUI-h3kit > h3kit_text_to_video{shape}."
    return [start, open_it, clip_line(clip_figure(plan), cpu_only)]


def clip_line(figure: ClipFigure | None, cpu_only: bool) -> str:
    """The last line: the one clip-time figure with its source, and plainly when it is too slow to be useful."""
    if figure is None:
        return "How long a clip takes here: run 'h3kit calibrate' (it estimates it; --with-model measures it)."
    took = human_seconds(figure.seconds)
    if figure.seconds > UNUSABLE_SECONDS or cpu_only:
        return (f"One clip would take about {took} here{' on the CPU alone' if cpu_only else ''} ({figure.says}): "
                f"too slow to be useful. What would make it work: {WHAT_WOULD_HELP}.")
    return f"One clip takes about {took} here ({figure.says})."
