"""The three lines `h3kit install` ends with: how to start ComfyUI, what to open, how long a clip takes.

A person who just double-clicked the installer needs exactly that, in that
order; everything else is in the notes and the report. The time is the
calibration's estimate when one ran (it says so), else the line says how to
get one. A machine that cannot make a clip in useful time is told so plainly,
with what would make it work.
"""

from __future__ import annotations

import shlex
import sys

from h3kit.core.units import human_seconds
from h3kit.data.plan_doc import Plan, PlanSettings

UNUSABLE_SECONDS = 4 * 3600  # a clip that takes longer than an afternoon is not a setup anyone keeps
WHAT_WOULD_HELP = ("an NVIDIA card with 12 GB or more (RTX 3060 class), or an Apple Silicon Mac "
                   "with 64 GB or more of unified memory")


def seconds_per_clip(plan: Plan | None, calibration: dict | None) -> float | None:
    """Steps x the calibration's seconds per step (None without a calibration estimate)."""
    est = (calibration or {}).get("estimates") or {}
    per_step = est.get("seconds_per_step")
    if not isinstance(per_step, (int, float)) or per_step <= 0 or not plan:
        return None
    return per_step * int(plan.settings.steps or 20)


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


def lines(launcher: str | None, plan: Plan | None, calibration: dict | None, cpu_only: bool,
          app_start: str | None = None) -> list[str]:
    """`app_start`: app_start_line's sentence when an app, not h3kit's launcher, starts this ComfyUI."""
    s = plan.settings if plan is not None else PlanSettings()
    start = app_start or (f"Start ComfyUI: {shell_quoted(launcher)}" if launcher
                          else "Start ComfyUI as you usually do (the Desktop app starts it itself).")
    canvas, frames, steps = s.canvas or s.max_canvas, s.frames or s.max_frames, s.steps
    shape = f" ({canvas[0]}x{canvas[1]}, {frames} frames = {frames / 24:.1f} s of video, {steps} steps)" if canvas and frames else ""
    open_it = f"Then open Templates > ComfyUI-h3kit > h3kit_text_to_video{shape}."
    seconds = seconds_per_clip(plan, calibration)
    if seconds is None:
        took = "How long a clip takes here: run 'h3kit calibrate' (it estimates it; --with-model measures it)."
    elif seconds > UNUSABLE_SECONDS or cpu_only:
        took = (f"One clip would take about {human_seconds(seconds)} here{' on the CPU alone' if cpu_only else ''}: "
                f"too slow to be useful. What would make it work: {WHAT_WOULD_HELP}.")
    else:
        took = f"One clip takes about {human_seconds(seconds)} here (calibration estimate; --with-model measures it)."
    return [start, open_it, took]
