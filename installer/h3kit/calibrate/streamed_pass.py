"""What streaming adds to a model call, measured whole: the installed loader's pass against the held fit.

The runner's `streamed_pass` (nodes/h3k_calibration_runner/streamed_pass.py)
runs the installed workflow's streamed DiT loader on the plan's file and
times `apply_model` at the workflow's sequence. Divided by the held fit's
call at the same rows (plan.timing.held_call_seconds, the formula every
estimate uses), that is the share streaming adds, as this machine pays it:
its reads, the ring, the widening to the compute dtype and the compute
sharing these cores. It replaces the share composed from the disk's rate and
the in-place read (decisions.prefetch_figures), which is kept beside it.
"""

from __future__ import annotations

from h3kit.calibrate.arch import dit_path
from h3kit.data.plan_doc import Plan

LOADER_NODE = "H3kitStreamedDiTLoader"


def job_spec(install, plan: Plan, cat, graph: dict | None) -> dict | None:
    """The runner's `h3_streamed` for the installed workflow `graph` (API format), or None: the plan does not
    stream, no pack or file is there, or the workflow loads its DiT another way."""
    if install is None or not plan.streams_dit or not graph or not getattr(install, "node_dir", None):
        return None
    node = next((n for n in graph.values() if isinstance(n, dict) and n.get("class_type") == LOADER_NODE), None)
    path = dit_path(install.path, cat.weight(plan.settings.dit_weights or ""))
    if node is None or path is None or not path.is_file():
        return None
    inputs = {k: v for k, v in (node.get("inputs") or {}).items() if not isinstance(v, list)}  # links are not values
    return {"pack": str(install.node_dir), "node": LOADER_NODE, "dit_path": str(path), "inputs": inputs}


def measured_share(streamed: dict | None, timing: dict | None, arch: dict, cat) -> dict | None:
    """{"pass_overhead", "streamed_s", "held_s", "tokens"}: the measured pass over the held call at its rows;
    None when the runner did not measure it or the held rates are missing."""
    from h3kit.plan.timing import held_call_seconds

    if not streamed or streamed.get("status") != "measured" or not timing or "block_s_per_token" not in timing:
        return None
    tokens, seconds = int(streamed.get("tokens") or 0), float(streamed.get("seconds_per_call") or 0.0)
    held = held_call_seconds(arch, timing, tokens, cat) if tokens else 0.0
    if held <= 0 or seconds <= 0:
        return None
    return {"pass_overhead": round(max(0.0, seconds / held - 1.0), 4), "streamed_s": seconds, "held_s": held,
            "tokens": tokens, "cold_s": streamed.get("cold_s"), "spread": streamed.get("spread"),
            "page_cache": (streamed.get("inputs") or {}).get("page_cache")}
