"""The report's words and numbers: cells, rows and sentences built from the calibration document.

Shared by the section model, the terminal summary (`h3kit calibrate`) and the
pack's summary node, so every place spells a figure the same way.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Mapping

from h3kit.calibrate.report import figures
from h3kit.core.units import human_bytes, human_rate, human_seconds
from h3kit.data.fingerprint import Fingerprint
from h3kit.data.plan_doc import Plan


# The document's parts by their type: a report of any age is read through `normalized`, so a part
# that is missing or of another type reads as empty instead of failing the whole report.
_DICTS = {(): ("fingerprint", "plan", "native", "inference", "device", "disk", "estimates", "real_model",
               "h3_model", "streaming", "runner"),
          ("plan",): ("settings", "budget", "estimates"), ("fingerprint",): ("os", "cpu", "memory"),
          ("estimates",): ("time", "memory", "check", "native_appendix", "timing", "formulas"),
          ("inference",): ("config",), ("real_model",): ("device", "compare"), ("native",): ("best",),
          ("h3_model",): ("arch", "fit", "memory", "vae", "text_encoder"),
          ("estimates", "native_appendix"): ("formulas", "check")}
_LISTS = {(): ("tiles", "decisions", "skipped"), ("fingerprint",): ("gpus",), ("native",): ("kernels", "scaling"),
          ("inference",): ("blocks", "timeline"), ("estimates",): ("alternatives",),
          ("h3_model",): ("points", "attention_points")}


def normalized(doc) -> dict:
    """A copy of the document whose known parts have their types: a wrong-typed part becomes empty."""
    out = dict(doc) if isinstance(doc, dict) else {}
    for path in sorted(set(_DICTS) | set(_LISTS), key=len):
        parent = out
        for key in path:
            parent = parent.get(key) if isinstance(parent, dict) else None
        if not isinstance(parent, dict):
            continue
        for key in _DICTS.get(path, ()):
            if key in parent:
                parent[key] = dict(parent[key]) if isinstance(parent[key], dict) else {}
        for key in _LISTS.get(path, ()):
            if key in parent:
                parent[key] = [x for x in parent[key] if isinstance(x, dict)] if isinstance(parent[key], list) else []
    return out


def _n(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def hb(n) -> str:
    """Bytes for people, `-` when unknown (a table cell, never "unknown size")."""
    return human_bytes(n, "-")


def fmt(x, digits: int = 3) -> str:
    """One table cell: `-` for None, yes/no for booleans, 3 significant digits for floats."""
    if x is None:
        return "-"
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, float):
        return f"{x:.{digits}g}"
    return str(x)


def when(created) -> str:
    """`2026-12-01 10:50 UTC` from the document's ISO stamp; the stamp as it is when it does not parse."""
    try:
        t = datetime.fromisoformat(str(created))
    except ValueError:
        return str(created or "")
    if t.utcoffset() is not None:
        t = t.astimezone(timezone.utc)
        return t.strftime("%Y-%m-%d %H:%M UTC")
    return t.strftime("%Y-%m-%d %H:%M")


def value_text(setting: str, value) -> str:
    """A setting's value for people: bytes with units, a canvas as 864x480, a mapping by its source."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and str(setting).endswith("bytes"):
        return hb(value)
    if isinstance(value, (list, tuple)) and value and all(isinstance(v, (int, float)) for v in value):
        return "x".join(fmt(v) for v in value)
    if isinstance(value, Mapping):
        if value.get("source"):
            return str(value["source"])
        return ", ".join(f"{k} {fmt(v)}" for k, v in value.items() if not isinstance(v, (dict, list)))
    if isinstance(value, (list, tuple)):
        return ", ".join(fmt(v) for v in value)
    return fmt(value)


def kv_rows(mapping: dict) -> list[list]:
    """[key, value] rows of a flat mapping; byte counts shown with units, nested values left out."""
    return [[k, hb(v) if k.endswith("bytes") and isinstance(v, (int, float)) and not isinstance(v, bool) else v]
            for k, v in mapping.items() if not isinstance(v, (dict, list))]


def disk_rows(disk: dict) -> list[list]:
    """The disk probe in people's units; an older report's extra keys follow as they are."""
    rows, shown = [], {"gb_per_s", "write_gb_per_s", "bytes", "seconds", "cache_dropped"}
    if isinstance(disk.get("gb_per_s"), (int, float)):
        rows.append(["read speed", human_rate(disk["gb_per_s"] * 1e9)
                     + (" (page cache dropped first)" if disk.get("cache_dropped") else " (page cache not dropped)")])
    if isinstance(disk.get("write_gb_per_s"), (int, float)):
        rows.append(["write speed", human_rate(disk["write_gb_per_s"] * 1e9)])
    if disk.get("bytes"):
        rows.append(["probe", f"{hb(disk['bytes'])} in {human_seconds(disk.get('seconds'), '?')}"])
    return rows + [r for r in kv_rows(disk) if r[0] not in shown]


def machine_rows(fingerprint: Fingerprint) -> list[list]:
    cpu, gpus = fingerprint.cpu, fingerprint.gpus
    rows = [["os", f"{fingerprint.os.system or '?'} {fingerprint.os.release}"],
            ["arch", fingerprint.arch or None],
            ["cpu", f"{cpu.model or '?'} ({cpu.physical_cores} cores / {cpu.logical_cores} threads)"],
            ["memory", hb(fingerprint.memory.total_bytes)]]
    for g in gpus:
        rows.append(["gpu", f"{g.name} {hb(g.memory_total_bytes)} ({g.backend})"])
    if not gpus:
        rows.append(["gpu", "none"])
    return rows


PROFILE_KEYS = ("preset", "canvas", "frames", "steps", "cfg", "lora", "target_minutes", "dit_weights", "quantization",
                "shard_size_bytes", "preload_bytes", "prefetch_blocks", "stream_dit", "vae_tile_size", "max_canvas",
                "max_frames")


def profile_rows(plan: Plan) -> list[list]:
    """The plan's settings worth showing and its budget, as setting/value rows."""
    s = plan.settings
    rows = [["profile", plan.profile], ["fits", plan.fits]]
    for k in PROFILE_KEYS:
        if hasattr(s, k):  # prefetch_blocks and stream_dit are the config's; a plan resolves them into streaming
            rows.append([k, value_text(k, getattr(s, k))])
    for k, v in plan.budget.to_json().items():
        rows.append([f"budget {k}", hb(v) if k.endswith("bytes") else v])
    return rows


def real_model_rows(real: dict) -> list[list]:
    """The measured figures of the real-workflow run (--with-model), as item/value rows; [] when it did not run."""
    if "seconds" not in real:
        return []
    device = real.get("device") or {}
    files = real.get("files") or []
    if isinstance(files, dict):
        shown = ", ".join(f"{k}: {v}" for k, v in files.items())
    else:
        shown = ", ".join(str(f) for f in files) if isinstance(files, list) else str(files)

    def listed(key: str, sep: str) -> str:
        value = real.get(key)
        return sep.join(str(v) for v in value) if isinstance(value, list) else ""

    rows = [["workflow", real.get("workflow") or "-"],
            ["files", shown],
            ["canvas, steps", f"{listed('canvas', 'x')}, {real.get('steps')}"],
            ["ComfyUI flags", listed("comfyui_args", " ") or "-"],
            ["start-up seconds", fmt(real.get("startup_seconds"))],
            ["workflow seconds (wall)", fmt(real.get("seconds"))],
            ["peak RSS of ComfyUI", hb(real.get("peak_rss_bytes"))]]
    if device:
        rows += [["device", device.get("name")],
                 ["device memory before / peak / after",
                  " / ".join(hb(device.get(k)) for k in ("used_before_bytes", "peak_used_bytes", "used_after_bytes"))]]
    return rows


def describe_path(inf: dict) -> str:
    """Which of the runner's two ways ran the scaled DiT, in words."""
    if inf.get("path") == "native+python":
        return ("the native+python path (no numpy in the runner's Python: products in the native library, "
                "norms, softmax and SwiGLU in plain Python, at a smaller shape than the numpy path's)")
    return "the numpy path"


def describe_scaled(cfg: dict) -> str:
    """The scaled DiT's shape in words."""
    canvas = "x".join(str(v) for v in cfg.get("canvas") or []) if isinstance(cfg.get("canvas"), list) else ""
    text = (f"{cfg.get('blocks')} blocks, hidden {cfg.get('hidden')} ({cfg.get('heads')} heads x {cfg.get('head_dim')}), "
            f"SwiGLU FFN {cfg.get('ffn')}, {cfg.get('tokens')} tokens" + (f" ({canvas} canvas)" if canvas else "")
            + f", linear layers in {cfg.get('quantization')}")
    if cfg.get("plan_quantization") and cfg.get("plan_quantization") != cfg.get("quantization"):
        text += f" (the plan's {cfg['plan_quantization']} has no native kernel)"
    if "shard_size_bytes" in cfg:
        text += f", streamed in {hb(cfg['shard_size_bytes'])} shards with {hb(cfg.get('preload_bytes'))} preload"
    return text


def summary_lines(doc: dict) -> list[str]:
    """A few sentences: what the machine makes and how long it takes first, then what was measured and decided
    (the terminal after `h3kit calibrate`, the pack's report node)."""
    doc = normalized(doc)
    lines = [figures.headline(doc), f"time: {figures.time_source(doc)[1]}"]
    return lines + [f"warning: {w}" for w in figures.warnings(doc)] + run_lines(doc)


def run_lines(doc: dict) -> list[str]:
    """What this run measured and decided, one sentence each (the report's "About this run")."""
    native = doc.get("native") or {}
    inf = doc.get("inference") or {}
    disk = doc.get("disk") or {}
    est = doc.get("estimates") or {}
    lines = [f"profile {(doc.get('plan') or {}).get('profile', '?')}, {'quick' if doc.get('quick') else 'full'} "
             f"run in {human_seconds(doc.get('duration_seconds'), '?')}"]
    best = native.get("best") or {}
    if best:
        lines.append(f"native {best.get('kind')} matmul: {fmt(best.get('gflop_per_s'))} GFLOP/s, "
                     f"{fmt(best.get('weight_gb_per_s'))} GB/s of weights ({best.get('threads')} threads)")
    elif native.get("status") != "measured":
        lines.append(f"native: {native.get('reason', 'not measured')}")
    if inf.get("status") == "measured":
        cfg = inf.get("config") or {}
        lines.append(f"scaled DiT ({cfg.get('blocks')} blocks, hidden {cfg.get('hidden')}, {cfg.get('tokens')} tokens, "
                     f"{cfg.get('quantization')}, {inf.get('path', 'numpy')}): "
                     f"{fmt(inf.get('seconds_per_block'))} s/block, relative error {fmt(inf.get('relative_error'))}, "
                     f"waiting {fmt(100 * (inf.get('wait_fraction') if _n(inf.get('wait_fraction')) else 0), 2)}% "
                     "of the time")
    elif inf:
        lines.append(f"scaled DiT: {inf.get('reason', 'not run')}")
    if _n(disk.get("gb_per_s")):
        lines.append(f"disk: {human_rate(disk['gb_per_s'] * 1e9)} sequential read at {disk.get('path')}")
    if est.get("seconds_per_step") and not (est.get("time") or {}).get("seconds_per_step"):
        lines.append(f"native-kernel estimate for the real model: {human_seconds(est['seconds_per_step'])} per step, "
                     f"peak RAM {hb(est.get('peak_ram_bytes'))}")
    real = doc.get("real_model") or {}
    if real.get("status") == "measured":
        lines.append(f"real model: {real.get('reason')}, peak RSS {hb(real.get('peak_rss_bytes'))}"
                     + (f", device peak {hb((real.get('device') or {}).get('peak_used_bytes'))}" if real.get("device") else ""))
    ds = [d for d in doc.get("decisions") or [] if isinstance(d, dict)]
    lines.append(f"{len(ds)} decisions, {len([d for d in ds if d.get('changed')])} changed a setting")
    return lines
