"""`h3kit rollback [STATE]`: back to a recorded state of ComfyUI (h3kit.steps.versions)."""

from __future__ import annotations

from h3kit.cli.context import Context, Outcome, add_comfyui_target, comfyui_target
from h3kit.steps import versions

HELP = "go back to a recorded state of ComfyUI (default: the last working one before now): its commit, packages and profile"


def add_arguments(p) -> None:
    p.add_argument("state", nargs="?", metavar="STATE", help="the state's number in 'h3kit history'")
    add_comfyui_target(p, "the ComfyUI folder to roll back")


def run(args, ctx: Context) -> Outcome:
    return versions.rollback(versions.RollbackOptions(comfyui_target(args), args.state), ctx)
