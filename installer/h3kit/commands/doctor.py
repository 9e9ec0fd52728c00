"""`h3kit doctor`: check everything and print fixes (apply them with --fix)."""

from __future__ import annotations

from h3kit.command import Context, Outcome, not_built_yet

HELP = "check everything and print fixes (apply them with --fix)"


def add_arguments(p) -> None:
    p.add_argument("--comfyui", metavar="PATH", help="the ComfyUI folder to check")
    p.add_argument("--fix", action="store_true", help="apply the fixes")
    p.add_argument("--undo", action="store_true", help="restore what an earlier --fix replaced")


def run(args, ctx: Context) -> Outcome:
    return not_built_yet("doctor", 6)
