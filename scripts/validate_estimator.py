"""Compare the planner's estimates with the measured points in the catalog (`measured:`).

    H3KIT_HOME=$(mktemp -d) python scripts/validate_estimator.py [--json]

For each report it builds a fingerprint of the reported machine, forces the
reported settings as overrides (format, canvas, frames) and prints the
estimate next to the report. The README's table (section plan) is this
script's output; the target is within 20%.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile

GIB = 2**30


def machine_fingerprint(m: dict) -> dict:
    from h3kit.data.yamlio import parse_size

    return {
        "schema": "h3kit.fingerprint/1",
        "os": {"system": "linux", "release": "", "wsl": False}, "arch": "x86_64", "rosetta": False,
        "cpu": {"model": "reported machine", "physical_cores": 8, "logical_cores": 16, "flags": ["avx2"]},
        "memory": {"total_bytes": parse_size(m["ram"]), "available_bytes": parse_size(m["ram"]), "swap_total_bytes": 0},
        "disks": [{"path": "/", "total_bytes": 2 * 10**12, "free_bytes": 10**12, "kind": "ssd"}],
        "gpus": [{"vendor": "nvidia", "name": m["gpu"], "memory_total_bytes": parse_size(m["gpu_memory"]),
                  "memory_free_bytes": None, "unified_memory": False, "driver_version": "580.82.07",
                  "cuda_driver_version": m.get("cuda_driver"), "compute_capability": m.get("compute_capability"),
                  "backend": m["backend"]}],
        "compilers": [], "probes": [],
    }


def rows() -> list[dict]:
    from h3kit.data import catalog as catalog_mod
    from h3kit.data.config import Config
    from h3kit.data.settings import typed
    from h3kit.data.yamlio import parse_size
    from h3kit.plan import make_plan

    cat = catalog_mod.load()
    profiles = catalog_mod.load_profiles(cat)
    out = []
    for point in cat.data["measured"]:
        config = Config(overrides=typed(point["settings"]))  # as config.yaml's overrides would be, once loaded
        plan = make_plan(machine_fingerprint(point["machine"]), cat, profiles, config=config)
        for what, reported in point["reported"].items():
            st = plan["settings"]
            # DiT bytes on the GPU at a time: the resident blocks plus the two shard buffers in flight.
            on_gpu = st["preload_bytes"] + (0 if st["streaming"]["resident"] else 2 * st["shard_size_bytes"])
            estimate = plan["estimates"]["peak_gpu_bytes"] if what == "peak_gpu" else on_gpu
            rep = parse_size(reported)
            out.append({"id": point["id"], "quantity": "peak GPU" if what == "peak_gpu" else "DiT on GPU",
                        "reported_gb": rep / 1e9, "estimate_gb": estimate / 1e9,
                        "error_pct": 100.0 * (estimate - rep) / rep, "profile": plan["profile"], "fits": plan["fits"]})
    return out


def main() -> int:
    os.environ.setdefault("H3KIT_HOME", tempfile.mkdtemp(prefix="h3kit-validate-"))
    table = rows()
    if "--json" in sys.argv:
        print(json.dumps(table, indent=2))
        return 0
    print("| report | quantity | reported | estimate | error |")
    print("|---|---|---|---|---|")
    for r in table:
        print(f"| {r['id']} | {r['quantity']} | {r['reported_gb']:.1f} GB | {r['estimate_gb']:.1f} GB | {r['error_pct']:+.0f}% |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
