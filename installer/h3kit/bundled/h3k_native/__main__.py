"""`python -m h3k_native selftest --dir FOLDER | --lib FILE` or `info`: one JSON line on stdout."""

from __future__ import annotations

import json
import sys
from pathlib import Path

if __package__:
    from . import NativeError, load, selftest_folder
else:  # run as a path (python .../h3k_native): import the package from its parent folder
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from h3k_native import NativeError, load, selftest_folder


def main(argv: list[str] | None = None) -> int:
    """`python native.py selftest --dir FOLDER | --lib FILE` or `info`: one JSON line on stdout."""
    import argparse

    p = argparse.ArgumentParser(prog="h3k_native", description="h3kit native library bridge")
    p.add_argument("action", choices=("selftest", "info"))
    p.add_argument("--dir", help="a folder of libh3kit-<variant> builds")
    p.add_argument("--lib", help="one library file")
    args = p.parse_args(argv)
    try:
        if args.action == "selftest" and args.dir:
            doc = selftest_folder(args.dir)
        elif args.action == "selftest":
            lib = load(args.lib)
            doc = {**lib.selftest(), "selected": lib.variant(), "library": str(lib.path)}
        else:
            doc = load(args.lib or args.dir).features()
    except NativeError as exc:
        doc = {"passed": False, "checks": 0, "selected": None, "message": str(exc)}
    print(json.dumps(doc))
    return 0 if doc.get("passed", True) else 1


if __name__ == "__main__":
    sys.exit(main())
