"""`h3kit calibrate`: run the calibration inference, tune the profile, write the report."""

from __future__ import annotations

from h3kit.command import Context, Outcome, not_built_yet

HELP = "run the calibration inference, tune the profile, write the report"


def add_arguments(p) -> None:
    p.add_argument("--quick", action="store_true", help="a short run (at most a minute)")
    p.add_argument("--comfyui", metavar="PATH", help="run inside this ComfyUI's Python")
    p.add_argument("--with-model", action="store_true", help="also run the smallest real workflow when weights are present")


def run(args, ctx: Context) -> Outcome:
    return not_built_yet("calibrate", 7)
