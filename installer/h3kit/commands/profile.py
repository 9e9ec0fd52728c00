"""`h3kit profile`: list, explain or select optimization profiles (list | show NAME | use NAME)."""

from __future__ import annotations

from h3kit.command import Context, Outcome, not_built_yet

HELP = "list, explain or select optimization profiles (list | show NAME | use NAME)"


def add_arguments(p) -> None:
    p.add_argument("action", choices=["list", "show", "use"], help="list profiles, explain one, or select one")
    p.add_argument("name", nargs="?", metavar="NAME", help="profile name (for show and use)")


def run(args, ctx: Context) -> Outcome:
    return not_built_yet("profile", 4)
