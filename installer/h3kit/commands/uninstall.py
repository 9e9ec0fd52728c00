"""`h3kit uninstall`: remove exactly what h3kit installed, nothing else."""

from __future__ import annotations

from h3kit.command import Context, Outcome, not_built_yet

HELP = "remove exactly what h3kit installed, nothing else"


def add_arguments(p) -> None:
    p.add_argument("--comfyui", metavar="PATH", help="the ComfyUI folder h3kit was installed into")
    p.add_argument("--purge", action="store_true", help="also remove config, cache, reports and h3kit's own venv")


def run(args, ctx: Context) -> Outcome:
    return not_built_yet("uninstall", 6)
