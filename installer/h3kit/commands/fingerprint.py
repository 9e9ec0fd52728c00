"""`h3kit fingerprint`: probe the machine (GPUs, driver, RAM, disk, CPU, OS) and print the fingerprint."""

from __future__ import annotations

from h3kit.command import Context, Outcome, not_built_yet

HELP = "probe the machine (GPUs, driver, RAM, disk, CPU, OS) and print the fingerprint"


def add_arguments(p) -> None:
    p.add_argument("--timeout", type=float, default=None, metavar="SECONDS",
                   help="per-probe timeout (default 5 s, or probe_timeout in config)")


def run(args, ctx: Context) -> Outcome:
    return not_built_yet("fingerprint", 3)
