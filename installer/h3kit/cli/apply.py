"""`h3kit apply`: re-apply the config and profile to the installed node pack and its launcher (h3kit.steps.apply)."""

from __future__ import annotations

from h3kit.cli.context import Context, Outcome, add_comfyui_target, comfyui_target
from h3kit.steps import apply
from h3kit.steps.options import ApplyOptions

HELP = "re-apply the config and profile to the installed node pack and its launcher"


def add_arguments(p) -> None:
    add_comfyui_target(p, "the ComfyUI folder h3kit was installed into")
    p.add_argument("--profile", metavar="NAME", help="apply this profile instead of the config's")
    p.add_argument("--preset", metavar="NAME", help="switch the speed preset first (auto, fast, balanced, quality): "
                   "written to config.yaml's overrides, as the pack's panel does")


def run(args, ctx: Context) -> Outcome:
    return apply.run(ApplyOptions(comfyui_target(args), args.profile, args.preset), ctx)
