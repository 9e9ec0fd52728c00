"""Rewrite tests/fixtures/plans/<name>.json from tests/fixtures/fingerprints/<name>.json.

Run after a deliberate change to the catalog, a profile or the planner:

    H3KIT_HOME=$(mktemp -d) python scripts/regen_golden_plans.py
    git diff tests/fixtures/plans   # read every change before committing it

The plans are made with no config file (H3KIT_HOME points at an empty
folder), exactly as tests/test_plan_golden.py compares them.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def main() -> int:
    os.environ.setdefault("H3KIT_HOME", tempfile.mkdtemp(prefix="h3kit-golden-"))
    from h3kit.data import catalog
    from h3kit.fingerprint.schema import load_file
    from h3kit.plan import make_plan

    out_dir = REPO / "tests" / "fixtures" / "plans"
    out_dir.mkdir(parents=True, exist_ok=True)
    cat = catalog.load()
    profiles = catalog.load_profiles(cat)
    for fp_path in sorted((REPO / "tests" / "fixtures" / "fingerprints").glob("*.json")):
        plan = make_plan(load_file(fp_path), cat, profiles)
        (out_dir / fp_path.name).write_text(json.dumps(plan, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        print(f"{fp_path.stem:32} {plan['profile']:24} fits={plan['fits']} {plan['settings']['quantization']:12} "
              f"{plan['settings']['max_canvas']} x {plan['settings']['max_frames']}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
