"""`h3kit build`: compile the native library from payload/ and self-test it."""

from __future__ import annotations

from h3kit.command import Context, Outcome, not_built_yet

HELP = "compile the native library from payload/ and self-test it"


def add_arguments(p) -> None:
    p.add_argument("--force", action="store_true", help="rebuild even when a cached build matches")


def run(args, ctx: Context) -> Outcome:
    return not_built_yet("build", 5)
