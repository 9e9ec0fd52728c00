"""`h3kit apply`: re-apply the config and profile to the installed node pack and its launcher."""

from __future__ import annotations

from h3kit.command import Context, Outcome, not_built_yet

HELP = "re-apply the config and profile to the installed node pack and its launcher"


def add_arguments(p) -> None:
    p.add_argument("--comfyui", metavar="PATH", help="the ComfyUI folder h3kit was installed into")


def run(args, ctx: Context) -> Outcome:
    return not_built_yet("apply", 6)
