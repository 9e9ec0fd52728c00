"""`h3kit models`: the weight files the plan needs: plan | status | fetch | verify | remove."""

from __future__ import annotations

from h3kit.command import Context, Outcome, not_built_yet

HELP = "the weight files the plan needs: plan | status | fetch | verify | remove"


def add_arguments(p) -> None:
    p.add_argument("action", choices=["plan", "status", "fetch", "verify", "remove"], help="what to do")
    p.add_argument("--fingerprint", metavar="FILE", help="plan for a saved fingerprint JSON instead of this machine")
    p.add_argument("--comfyui", metavar="PATH", help="the ComfyUI folder whose models folder to use")
    p.add_argument("--from", dest="from_dir", metavar="DIR", help="take files from a local folder instead of downloading")
    p.add_argument("--with-loaders", action="store_true", help="also install custom node packs the chosen weights need")


def run(args, ctx: Context) -> Outcome:
    return not_built_yet("models", 8)
