"""`h3kit plan`: choose a profile and settings for this machine, with estimates and reasons."""

from __future__ import annotations

from h3kit.command import Context, Outcome, not_built_yet

HELP = "choose a profile and settings for this machine, with estimates and reasons"


def add_arguments(p) -> None:
    p.add_argument("--fingerprint", metavar="FILE", help="plan for a saved fingerprint JSON instead of this machine")
    p.add_argument("--profile", metavar="NAME", help="use this profile instead of the configured one")


def run(args, ctx: Context) -> Outcome:
    return not_built_yet("plan", 4)
