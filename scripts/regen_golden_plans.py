"""Rewrite tests/fixtures/plans/<name>.json from tests/fixtures/fingerprints/<name>.json.

Run after a deliberate change to the catalog, a profile or the planner:

    H3KIT_HOME=$(mktemp -d) python scripts/regen_golden_plans.py
    git diff tests/fixtures/plans   # read every change before committing it

The plans are made with no config file (H3KIT_HOME points at an empty
folder), exactly as tests/plan/test_plan_golden.py compares them.

`--streaming-table` writes nothing and prints docs/plan.md's streaming table
(section "Streaming"): synthetic machines with their RAM changed, as
tests/plan/test_plan_streaming.py plans them.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


# (label, fingerprint, RAM in GiB or None, Apple GPU share of RAM or None)
STREAMING_ROWS = (("Mac 24 GB", "apple-m2pro-32gb", 24, 2 / 3), ("Mac 32 GB", "apple-m2pro-32gb", 32, 2 / 3),
                  ("Mac 48 GB", "apple-m2pro-32gb", 48, 3 / 4), ("Mac 64 GB (M2 Max)", "apple-m2max-64gb", None, None),
                  ("Mac 128 GB", "apple-m2pro-32gb", 128, 3 / 4), ("Mac 16 GB", "apple-m1-16gb", None, None),
                  ("CPU 16 GB", "cpu-only-16gb", None, None), ("CPU 24 GB", "cpu-only-16gb", 24, None),
                  ("CPU 64 GB", "cpu-only-16gb", 64, None), ("CPU 96 GB", "cpu-only-16gb", 96, None),
                  ("Arc B580 12 GB + 32 GB", "intel-arcb580-12gb-32gb", None, None))


def streaming_table(cat, profiles, make_plan) -> None:
    print("| machine | DiT | streams? | peak RAM (plan) | held by ComfyUI | workflows, minutes |")
    print("|---|---|---|---|---|---|")
    for label, name, ram, share in STREAMING_ROWS:
        fp = json.loads((REPO / "tests" / "fixtures" / "fingerprints" / f"{name}.json").read_text())
        if ram:
            fp["memory"]["total_bytes"] = ram * 2**30
            fp["memory"]["available_bytes"] = int(ram * 2**30 * 0.7)
            if share:
                fp["gpus"][0]["memory_total_bytes"] = int(ram * 2**30 * share)
        from h3kit.data.fingerprint import Fingerprint

        plan = make_plan(Fingerprint.from_json(fp), cat, profiles).to_json()
        s, st, e = plan["settings"], plan["settings"]["streaming"], plan["estimates"]
        held = st.get("held_peak_ram_bytes")
        print(f"| {label} | {s['quantization']} | "
              + (f"yes, {st['resident_blocks']} of {st['blocks']} resident" if st["enabled"] else "no")
              + f" | {e['peak_ram_bytes'] / 1e9:.1f} of {plan['budget']['ram_bytes'] / 1e9:.1f} GB"
              + ("" if plan["fits"] else " (does not fit)")
              + f" | {f'{held / 1e9:.1f} GB' if held else '-'} | {s['preset']} {s['canvas'][0]}x{s['canvas'][1]}x"
              f"{s['frames']}, {e['minutes_per_clip']:.1f} |")


def main() -> int:
    os.environ.setdefault("H3KIT_HOME", tempfile.mkdtemp(prefix="h3kit-golden-"))
    from h3kit.data import catalog
    from h3kit.fingerprint.schema import load_file
    from h3kit.plan import make_plan

    out_dir = REPO / "tests" / "fixtures" / "plans"
    out_dir.mkdir(parents=True, exist_ok=True)
    cat = catalog.load()
    profiles = catalog.load_profiles(cat)
    if "--streaming-table" in sys.argv[1:]:
        streaming_table(cat, profiles, make_plan)
        return 0
    for fp_path in sorted((REPO / "tests" / "fixtures" / "fingerprints").glob("*.json")):
        plan = make_plan(load_file(fp_path), cat, profiles).to_json()
        (out_dir / fp_path.name).write_text(json.dumps(plan, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        s = plan["settings"]
        held = "streamed" if s["streaming"].get("enabled") else "held"
        print(f"{fp_path.stem:32} {plan['profile']:24} fits={plan['fits']} {s['quantization']:12} {held:8} "
              f"{s['max_canvas']} x {s['max_frames']} -> {s['preset']} {s['canvas']} x {s['frames']}, "
              f"{s['steps']} steps: {plan['estimates']['minutes_per_clip']:.1f} min", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
