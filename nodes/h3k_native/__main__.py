"""`python -m h3k_native selftest|info [--dir FOLDER | --lib FILE]`: one JSON line on stdout."""

from __future__ import annotations

import json
import sys
from pathlib import Path

if __package__:
    from . import NativeError, load
else:  # run as a path (python .../h3k_native): import the package from its parent folder
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from h3k_native import NativeError, load


def main(argv: list[str] | None = None) -> int:
    """`python h3k_native selftest|info [--dir FOLDER | --lib FILE]`: one JSON line on stdout (the library the
    search order, a folder or a file gives: its self-test program's result, or its features)."""
    import argparse

    p = argparse.ArgumentParser(prog="h3k_native", description="h3kit native library bridge")
    p.add_argument("action", choices=("selftest", "info"))
    p.add_argument("--dir", help="a folder of libh3kit-<variant> builds")
    p.add_argument("--lib", help="one library file")
    args = p.parse_args(argv)
    try:
        if args.action == "selftest":
            lib = load(args.lib or args.dir)
            doc = {**lib.selftest(), "selected": lib.variant(), "library": str(lib.path)}
        else:
            doc = load(args.lib or args.dir).features()
    except NativeError as exc:
        doc = {"passed": False, "checks": 0, "selected": None, "message": str(exc)}
    print(json.dumps(doc))
    return 0 if doc.get("passed", True) else 1


if __name__ == "__main__":
    sys.exit(main())
