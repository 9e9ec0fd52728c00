"""The report's words and numbers: cells, rows and sentences built from the calibration document.

Shared by the section model, the terminal summary (`h3kit calibrate`) and the
pack's summary node, so every place spells a figure the same way.
"""

from __future__ import annotations

from h3kit.core.units import human_bytes


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


def kv_rows(mapping: dict) -> list[list]:
    """[key, value] rows of a flat mapping; byte counts shown with units, nested values left out."""
    return [[k, hb(v) if k.endswith("bytes") and isinstance(v, (int, float)) and not isinstance(v, bool) else v]
            for k, v in mapping.items() if not isinstance(v, (dict, list))]


def machine_rows(fp: dict) -> list[list]:
    cpu = fp.get("cpu") or {}
    mem = fp.get("memory") or {}
    gpus = fp.get("gpus") or []
    rows = [["os", f"{(fp.get('os') or {}).get('system', '?')} {(fp.get('os') or {}).get('release', '')}"],
            ["arch", fp.get("arch")],
            ["cpu", f"{cpu.get('model', '?')} ({cpu.get('physical_cores')} cores / {cpu.get('logical_cores')} threads)"],
            ["memory", hb(mem.get("total_bytes"))]]
    for g in gpus:
        rows.append(["gpu", f"{g.get('name')} {hb(g.get('memory_total_bytes'))} ({g.get('backend')})"])
    if not gpus:
        rows.append(["gpu", "none"])
    return rows


def profile_rows(plan: dict) -> list[list]:
    s = plan.get("settings") or {}
    rows = [["profile", plan.get("profile")], ["fits", plan.get("fits")]]
    for k in ("dit_weights", "quantization", "shard_size_bytes", "preload_bytes", "vae_tile_size",
              "max_canvas", "max_frames"):
        if k in s:
            rows.append([k, hb(s[k]) if k.endswith("_bytes") else s[k]])
    for k, v in (plan.get("budget") or {}).items():
        rows.append([f"budget {k}", hb(v) if k.endswith("bytes") else v])
    return rows


def real_model_rows(real: dict) -> list[list]:
    """The measured figures of the real-workflow run (--with-model), as item/value rows; [] when it did not run."""
    if "seconds" not in real:
        return []
    device = real.get("device") or {}
    files = real.get("files") or []
    shown = ", ".join(f"{k}: {v}" for k, v in files.items()) if isinstance(files, dict) else ", ".join(files)
    rows = [["workflow", real.get("workflow") or "-"],
            ["files", shown],
            ["canvas, steps", f"{'x'.join(str(x) for x in real.get('canvas') or [])}, {real.get('steps')}"],
            ["ComfyUI flags", " ".join(real.get("comfyui_args") or []) or "-"],
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
    canvas = "x".join(str(v) for v in cfg.get("canvas") or [])
    text = (f"{cfg.get('blocks')} blocks, hidden {cfg.get('hidden')} ({cfg.get('heads')} heads x {cfg.get('head_dim')}), "
            f"SwiGLU FFN {cfg.get('ffn')}, {cfg.get('tokens')} tokens" + (f" ({canvas} canvas)" if canvas else "")
            + f", linear layers in {cfg.get('quantization')}")
    if cfg.get("plan_quantization") and cfg.get("plan_quantization") != cfg.get("quantization"):
        text += f" (the plan's {cfg['plan_quantization']} has no native kernel)"
    if "shard_size_bytes" in cfg:
        text += f", streamed in {hb(cfg['shard_size_bytes'])} shards with {hb(cfg.get('preload_bytes'))} preload"
    return text


def summary_lines(doc: dict) -> list[str]:
    """A few sentences that say what was measured and decided (terminal, Markdown, HTML, node)."""
    native = doc.get("native") or {}
    inf = doc.get("inference") or {}
    disk = doc.get("disk") or {}
    est = doc.get("estimates") or {}
    lines = [f"profile {doc.get('plan', {}).get('profile', '?')}, {'quick' if doc.get('quick') else 'full'} run "
             f"in {fmt(doc.get('duration_seconds'))} s"]
    best = native.get("best") or {}
    if best:
        lines.append(f"native {best.get('kind')} matmul: {fmt(best.get('gflop_per_s'))} GFLOP/s, "
                     f"{fmt(best.get('weight_gb_per_s'))} GB/s of weights ({best.get('threads')} threads)")
    elif native.get("status") != "measured":
        lines.append(f"native: {native.get('reason', 'not measured')}")
    if inf.get("status") == "measured":
        cfg = inf["config"]
        lines.append(f"scaled DiT ({cfg['blocks']} blocks, hidden {cfg['hidden']}, {cfg['tokens']} tokens, "
                     f"{cfg['quantization']}, {inf.get('path', 'numpy')}): "
                     f"{fmt(inf.get('seconds_per_block'))} s/block, relative error {fmt(inf.get('relative_error'))}, "
                     f"waiting {fmt(100 * (inf.get('wait_fraction') or 0), 2)}% of the time")
    elif inf:
        lines.append(f"scaled DiT: {inf.get('reason', 'not run')}")
    if disk.get("gb_per_s"):
        lines.append(f"disk: {fmt(disk['gb_per_s'])} GB/s sequential read at {disk.get('path')}")
    if est.get("seconds_per_step"):
        lines.append(f"estimate for the real model: {fmt(est['seconds_per_step'])} s per step, "
                     f"peak RAM {hb(est.get('peak_ram_bytes'))}")
    real = doc.get("real_model") or {}
    if real.get("status") == "measured":
        lines.append(f"real model: {real.get('reason')}, peak RSS {hb(real.get('peak_rss_bytes'))}"
                     + (f", device peak {hb(real['device']['peak_used_bytes'])}" if real.get("device") else ""))
    changed = [d for d in doc.get("decisions", []) if d.get("changed")]
    lines.append(f"{len(doc.get('decisions', []))} decisions, {len(changed)} changed a setting")
    return lines
