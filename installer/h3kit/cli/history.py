"""`h3kit history`: the recorded states of a ComfyUI, the working ones marked (h3kit.steps.versions)."""

from __future__ import annotations

from h3kit.cli.context import Context, Outcome, add_comfyui_target, comfyui_target
from h3kit.steps import versions

HELP = "list the recorded states of ComfyUI, the working ones marked with their evidence"


def add_arguments(p) -> None:
    add_comfyui_target(p, "the ComfyUI folder")


def run(args, ctx: Context) -> Outcome:
    return versions.history(comfyui_target(args), ctx)
