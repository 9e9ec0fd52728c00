"""The GPU check's two files: the JSON document (h3kit.gpu_check/1) and a short markdown table of it."""

from __future__ import annotations

import time


def document(ctx, started: float, budget_s: int, env: dict | None, python: dict) -> dict:
    """Every check's record, in order, with the run's device, sizes, setup and notes."""
    return {"schema": "h3kit.gpu_check/1", "device": ctx.device, "started": time.strftime(
                "%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)), "seconds": round(time.time() - started, 1),
            "budget_s": budget_s, "comfyui": str(ctx.real), "comfyui_python": str(ctx.python), "runner": python,
            "sizes": ctx.sizes, "setup": env, "notes": ctx.notes, "checks": ctx.results}


def _gib(n) -> str:
    return "-" if n is None else f"{n / 2**30:.2f}"


def markdown(doc: dict) -> str:
    """One row per check (status, seconds, its line or reason), then the memory rows measured beside planned."""
    lines = [f"GPU check on {doc['device']}: {doc['seconds']} s of {doc['budget_s']} s "
             f"(ComfyUI {doc['comfyui']}; DiT {doc['sizes']['dit_blocks']} real-width blocks, text encoder "
             f"{doc['sizes']['te_layers']} real-width layers, canvas {'x'.join(map(str, doc['sizes']['canvas']))})", "",
             "| check | status | s (limit) | figures or reason |", "|---|---|---|---|"]
    for name, rec in doc["checks"].items():
        text = rec["line"] if rec["status"] == "ok" else rec["reason"]
        text = str(text).replace("|", "/").replace("\n", " ")
        lines.append(f"| {name} | {rec['status']} | {rec['seconds']} ({rec['limit_s']}) | {text} |")
    pvm = doc["checks"].get("plan_vs_measured") or {}
    if pvm.get("status") == "ok":
        lines += ["", f"| memory ({pvm['figures']['memory']}) | planned GiB | measured GiB | measured/planned |",
                  "|---|---|---|---|"]
        for tag, row in pvm["figures"]["rows"].items():
            lines.append(f"| {tag} | {_gib(row.get('planned_bytes'))} | {_gib(row.get('measured_bytes'))} | "
                         f"{row.get('measured_over_planned', row.get('why', '-'))} |")
    for note in doc.get("notes") or []:
        lines.append(f"\nNote: {note}")
    return "\n".join(lines) + "\n"
