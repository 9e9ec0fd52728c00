"""`h3kit build`: compile the native library from payload/ and self-test it."""

from __future__ import annotations

from h3kit.cli.context import Context, Outcome
from h3kit.native import build, compilers

HELP = "compile the native library from payload/ and self-test it"


def add_arguments(p) -> None:
    p.add_argument("--force", action="store_true", help="rebuild even when a cached build matches")
    p.add_argument("--compiler", choices=compilers.FAMILIES,
                   help="use this compiler family instead of the search order ($CC, cc/clang/gcc, MSVC, zig)")


def run(args, ctx: Context) -> Outcome:
    doc = build.build(force=args.force, progress=ctx.progress, prefer=args.compiler)
    how = "reused the cached build" if doc["cached"] else f"built in {doc['seconds']:.1f} s"
    lines = [
        f"Native library: {doc['library']}",
        f"  variant {doc['variant']}, {how}",
        f"  compiler: {doc['compiler']}",
    ]
    if doc["compiler_fallback"]:
        lines.append(f"  note: {doc['compiler_fallback']}")
    lines.append(f"  self-test passed ({doc['selftest']['checks']} checks)")
    return Outcome(doc, "\n".join(lines))
