"""`h3kit update`: move a git ComfyUI to another release, checked before and proven after (h3kit.steps.versions)."""

from __future__ import annotations

from h3kit.cli.context import Context, Outcome, add_comfyui_target, comfyui_target
from h3kit.steps import versions

HELP = "move ComfyUI to another release: checked before it moves, self-tested after, back by itself on failure"


def add_arguments(p) -> None:
    add_comfyui_target(p, "the ComfyUI folder to update")
    p.add_argument("--to", default="tested", metavar="VERSION",
                   help="tested (default: the newest release h3kit's tests passed), newest, a version such as "
                        "0.33.0, or a git ref")
    p.add_argument("--force", action="store_true",
                   help="move past the known-bad and comfy.* checks (the self-test still decides)")
    p.add_argument("--fingerprint", metavar="FILE", help="judge known-bad releases for this saved fingerprint")


def run(args, ctx: Context) -> Outcome:
    return versions.update(versions.UpdateOptions(comfyui_target(args), args.to, args.force, args.fingerprint), ctx)
