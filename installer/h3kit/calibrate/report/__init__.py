"""The calibration report: one `h3kit.calibration/1` document, written three ways.

- JSON: the document itself (the contract; other tools read it).
- Markdown: the same facts as short tables, for a terminal or an issue.
- HTML: one self-contained page (inline CSS, charts drawn as inline SVG by
  the small helpers below; no plotting library, no script, nothing fetched
  from the network), so it opens from a file on a machine with no network.

Every chart is an `<svg class="chart">` with a `<title>`; a chart with no
data draws a short sentence saying why (for example "no GPU: tile sweep
skipped"), so a reader never meets an empty box.
"""

from __future__ import annotations

import html
import json
import os
import tempfile
from datetime import datetime
from pathlib import Path

SCHEMA = "h3kit.calibration/1"

# Required keys of the contract, and the type each must have.
REQUIRED = {
    "schema": str,
    "fingerprint": dict,
    "plan": dict,
    "native": dict,
    "device": dict,
    "disk": dict,
    "tiles": list,
    "decisions": list,
    "duration_seconds": (int, float),
    "report_files": dict,
}
DECISION_KEYS = ("setting", "value", "previous", "changed", "evidence")


def validate(doc: object) -> list[str]:
    """Problems with a calibration document (empty list when it is valid)."""
    if not isinstance(doc, dict):
        return ["the document is not a JSON object"]
    problems = []
    for key, kind in REQUIRED.items():
        if key not in doc:
            problems.append(f"'{key}' is missing")
        elif not isinstance(doc[key], kind) or isinstance(doc[key], bool):
            problems.append(f"'{key}' has the wrong type ({type(doc[key]).__name__})")
    if doc.get("schema") not in (None, SCHEMA):
        problems.append(f"'schema' is {doc.get('schema')!r}, expected {SCHEMA!r}")
    for i, d in enumerate(doc.get("decisions") or []):
        missing = [k for k in DECISION_KEYS if not isinstance(d, dict) or k not in d]
        if missing:
            problems.append(f"'decisions[{i}]' lacks {', '.join(missing)}")
    files = doc.get("report_files")
    if isinstance(files, dict):
        for k in ("json", "md", "html"):
            if k not in files:
                problems.append(f"'report_files.{k}' is missing")
    return problems


# -- writing -------------------------------------------------------------------

def write(doc: dict, reports_dir: Path, stamp: datetime | None = None) -> dict:
    """Write calibration-<time>.{json,md,html} and latest.* ; returns the paths written.

    Files are written to a temporary name and renamed, so a reader never sees
    half a report; `latest.*` are copies (links are not portable to Windows).
    """
    reports_dir = Path(reports_dir)
    reports_dir.mkdir(parents=True, exist_ok=True)
    stamp = stamp or datetime.now()
    base = f"calibration-{stamp.strftime('%Y%m%d-%H%M%S')}"
    paths = {ext: reports_dir / f"{base}.{ext}" for ext in ("json", "md", "html")}
    doc["report_files"] = {k: str(v) for k, v in paths.items()}
    texts = {
        "json": json.dumps(doc, indent=2, ensure_ascii=False, default=str) + "\n",
        "md": to_markdown(doc),
        "html": to_html(doc),
    }
    for ext, text in texts.items():
        _atomic_write(paths[ext], text)
        _atomic_write(reports_dir / f"latest.{ext}", text)
    return doc["report_files"]


def _atomic_write(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}-", dir=path.parent)
    with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as f:
        f.write(text)
    os.replace(tmp, path)


def load_latest(reports_dir: Path) -> dict | None:
    """The latest report as a dict, or None when there is none (or it is unreadable)."""
    try:
        return json.loads((Path(reports_dir) / "latest.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


# -- numbers for people ----------------------------------------------------------

def human_bytes(n) -> str:
    if not isinstance(n, (int, float)) or isinstance(n, bool):
        return "-"
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(n) >= size:
            return f"{n / size:.2f} {unit}"
    return f"{int(n)} B"


def fmt(x, digits: int = 3) -> str:
    if x is None:
        return "-"
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, float):
        return f"{x:.{digits}g}"
    return str(x)


def real_model_rows(real: dict) -> list[list]:
    """The measured figures of the real-workflow run (--with-model), as item/value rows; [] when it did not run."""
    if "seconds" not in real:
        return []
    device = real.get("device") or {}
    rows = [["files", ", ".join(f"{k}: {v}" for k, v in (real.get("files") or {}).items())],
            ["canvas, steps", f"{'x'.join(str(x) for x in real.get('canvas') or [])}, {real.get('steps')}"],
            ["ComfyUI flags", " ".join(real.get("comfyui_args") or []) or "-"],
            ["start-up seconds", fmt(real.get("startup_seconds"))],
            ["workflow seconds (wall)", fmt(real.get("seconds"))],
            ["peak RSS of ComfyUI", human_bytes(real.get("peak_rss_bytes"))]]
    if device:
        rows += [["device", device.get("name")],
                 ["device memory before / peak / after",
                  " / ".join(human_bytes(device.get(k)) for k in ("used_before_bytes", "peak_used_bytes", "used_after_bytes"))]]
    return rows


def summary_lines(doc: dict) -> list[str]:
    """A few sentences that say what was measured and decided (terminal, Markdown, node)."""
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
        lines.append(f"scaled DiT ({inf['config']['blocks']} blocks, hidden {inf['config']['hidden']}, "
                     f"{inf['config']['tokens']} tokens, {inf['config']['quantization']}, {inf.get('path', 'numpy')}): "
                     f"{fmt(inf.get('seconds_per_block'))} s/block, relative error {fmt(inf.get('relative_error'))}, "
                     f"waiting {fmt(100 * (inf.get('wait_fraction') or 0), 2)}% of the time")
    elif inf:
        lines.append(f"scaled DiT: {inf.get('reason', 'not run')}")
    if disk.get("gb_per_s"):
        lines.append(f"disk: {fmt(disk['gb_per_s'])} GB/s sequential read at {disk.get('path')}")
    if est.get("seconds_per_step"):
        lines.append(f"estimate for the real model: {fmt(est['seconds_per_step'])} s per step, "
                     f"peak RAM {human_bytes(est.get('peak_ram_bytes'))}")
    real = doc.get("real_model") or {}
    if real.get("status") == "measured":
        lines.append(f"real model: {real.get('reason')}, peak RSS {human_bytes(real.get('peak_rss_bytes'))}"
                     + (f", device peak {human_bytes(real['device']['peak_used_bytes'])}" if real.get("device") else ""))
    changed = [d for d in doc.get("decisions", []) if d.get("changed")]
    lines.append(f"{len(doc.get('decisions', []))} decisions, {len(changed)} changed a setting")
    return lines


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
        text += f", streamed in {human_bytes(cfg['shard_size_bytes'])} shards with {human_bytes(cfg.get('preload_bytes'))} preload"
    return text


# -- Markdown ---------------------------------------------------------------------

def _md_table(headers: list[str], rows: list[list]) -> str:
    out = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    for r in rows:
        out.append("| " + " | ".join(fmt(c).replace("|", "\\|") for c in r) + " |")
    return "\n".join(out)


def to_markdown(doc: dict) -> str:
    fp = doc.get("fingerprint") or {}
    plan = doc.get("plan") or {}
    native = doc.get("native") or {}
    inf = doc.get("inference") or {}
    device = doc.get("device") or {}
    disk = doc.get("disk") or {}
    est = doc.get("estimates") or {}
    parts = [f"# h3kit calibration ({doc.get('created', '')})", ""]
    parts += [f"- {line}" for line in summary_lines(doc)]
    parts += ["", "## Machine", "", _md_table(["item", "value"], _machine_rows(fp)), ""]
    parts += ["## Profile", "", _md_table(["setting", "value"], _profile_rows(plan)), ""]
    parts += ["## Native kernels", ""]
    if native.get("kernels"):
        parts.append(_md_table(["kind", "op", "shape", "threads", "ms", "GB/s weights", "GFLOP/s"],
                               [[k["kind"], k["op"], k.get("shape"), k.get("threads"), 1000 * k["seconds"],
                                 k["weight_gb_per_s"], k["gflop_per_s"]] for k in native["kernels"]]))
    else:
        parts.append(f"Not measured: {native.get('reason', '-')}")
    parts += ["", "## Scaled DiT through the streamer", ""]
    if inf.get("status") == "measured":
        parts.append(_md_table(["block", "seconds", "waiting s", "computing s", "bytes"],
                               [[b["index"], b["seconds"], b["wait_seconds"], b["compute_seconds"], b["bytes"]]
                                for b in inf.get("blocks", [])]))
        parts.append("")
        parts.append(f"Shape: {describe_scaled(inf.get('config') or {})}.")
        parts.append("")
        parts.append(f"Computed by: {describe_path(inf)}.")
        parts.append("")
        parts.append(f"Relative error vs fp32 forward: {fmt(inf.get('relative_error'))} "
                     f"(kernels alone vs dequantized weights: {fmt(inf.get('kernel_relative_error'))}); "
                     f"peak RSS {human_bytes(inf.get('peak_rss_bytes'))}; streamed {human_bytes(inf.get('bytes_streamed'))}.")
    else:
        parts.append(f"Not run: {inf.get('reason', '-')}")
    parts += ["", "## Device", ""]
    if device.get("status") == "measured":
        parts.append(_md_table(["item", "value"], _kv_rows(device)))
    else:
        parts.append(f"Skipped: {device.get('reason', '-')}")
    parts += ["", "## Disk", "", _md_table(["item", "value"], _kv_rows(disk)), ""]
    parts += ["## Measured vs estimated", ""]
    if est:
        parts.append("These are **estimates** from the formulas below, not measurements of the real model.")
        parts.append("")
        parts.append(_md_table(["quantity", "value", "formula"],
                               [[k, v, est.get("formulas", {}).get(k, "")] for k, v in _kv_rows(est)]))
    parts += ["", "## Tile sweep", ""]
    if doc.get("tiles"):
        parts.append(_md_table(["tile", "seconds", "peak bytes", "within budget"],
                               [[t["tile"], t.get("seconds"), t.get("peak_bytes"), t.get("within_budget")]
                                for t in doc["tiles"]]))
    else:
        parts.append(f"Not run: {device.get('reason', 'no device')}")
    real = doc.get("real_model") or {}
    parts += ["", "## Real model", "", real.get("reason", "not run")]
    if real_model_rows(real):
        parts += ["", _md_table(["item", "value"], real_model_rows(real))]
    parts += ["", "## Decisions", "", _md_table(["setting", "value", "previous", "changed", "evidence"],
                                                  [[d["setting"], d["value"], d["previous"], d["changed"], d["evidence"]]
                                                   for d in doc.get("decisions", [])])]
    skipped = doc.get("skipped") or []
    if skipped:
        parts += ["", "## Skipped", ""] + [f"- {s}" for s in skipped]
    return "\n".join(parts) + "\n"


def _machine_rows(fp: dict) -> list[list]:
    cpu = fp.get("cpu") or {}
    mem = fp.get("memory") or {}
    gpus = fp.get("gpus") or []
    rows = [["os", f"{(fp.get('os') or {}).get('system', '?')} {(fp.get('os') or {}).get('release', '')}"],
            ["arch", fp.get("arch")],
            ["cpu", f"{cpu.get('model', '?')} ({cpu.get('physical_cores')} cores / {cpu.get('logical_cores')} threads)"],
            ["memory", human_bytes(mem.get("total_bytes"))]]
    for g in gpus:
        rows.append(["gpu", f"{g.get('name')} {human_bytes(g.get('memory_total_bytes'))} ({g.get('backend')})"])
    if not gpus:
        rows.append(["gpu", "none"])
    return rows


def _profile_rows(plan: dict) -> list[list]:
    s = plan.get("settings") or {}
    b = plan.get("budget") or {}
    rows = [["profile", plan.get("profile")], ["fits", plan.get("fits")]]
    for k in ("dit_weights", "quantization", "shard_size_bytes", "preload_bytes", "vae_tile_size",
              "max_canvas", "max_frames"):
        if k in s:
            v = s[k]
            rows.append([k, human_bytes(v) if k.endswith("_bytes") else v])
    for k, v in b.items():
        rows.append([f"budget {k}", human_bytes(v) if k.endswith("bytes") else v])
    return rows


# -- HTML + SVG -------------------------------------------------------------------

_W, _H, _PAD = 560, 240, 44
_COLORS = ("#3b6fb6", "#e08a2c", "#4a9a5b", "#b64a6f")


def _e(x) -> str:
    return html.escape(str(x), quote=True)


def _svg(title: str, body: str, height: int = _H) -> str:
    return (f'<svg class="chart" xmlns="http://www.w3.org/2000/svg" width="{_W}" height="{height}" '
            f'viewBox="0 0 {_W} {height}" role="img" aria-label="{_e(title)}"><title>{_e(title)}</title>'
            f'<rect x="0" y="0" width="{_W}" height="{height}" fill="#fafafa" stroke="#ddd"/>{body}</svg>')


def _empty_chart(title: str, reason: str) -> str:
    """A chart box that says, in a few centred lines, why there is nothing to draw."""
    lines, line = [], ""
    for word in str(reason).split():
        if line and len(line) + 1 + len(word) > 64:
            lines.append(line)
            line = word
        else:
            line = f"{line} {word}".strip()
    lines.append(line)
    top = _H / 2 - 9 * (len(lines) - 1)
    body = "".join(f'<text x="{_W / 2}" y="{top + 18 * i:.1f}" text-anchor="middle" font-size="13" fill="#666">'
                   f'{_e(text)}</text>' for i, text in enumerate(lines))
    return _svg(title, body)


def _axes(ymax: float, ylabel: str) -> str:
    out = [f'<line x1="{_PAD}" y1="{_H - _PAD}" x2="{_W - 10}" y2="{_H - _PAD}" stroke="#333"/>',
           f'<line x1="{_PAD}" y1="10" x2="{_PAD}" y2="{_H - _PAD}" stroke="#333"/>',
           f'<text x="12" y="{_H / 2}" font-size="11" transform="rotate(-90 12 {_H / 2})" '
           f'text-anchor="middle">{_e(ylabel)}</text>']
    for i in range(5):
        v = ymax * i / 4
        y = _H - _PAD - (_H - _PAD - 10) * i / 4
        out.append(f'<text x="{_PAD - 4}" y="{y + 4:.1f}" font-size="10" text-anchor="end">{fmt(v)}</text>')
    return "".join(out)


def bar_chart(title: str, labels: list[str], series: dict[str, list[float]], ylabel: str) -> str:
    """Grouped bars: one group per label, one bar per series."""
    values = [v for vs in series.values() for v in vs if isinstance(v, (int, float))]
    if not labels or not values or max(values) <= 0:
        return _empty_chart(title, "nothing measured")
    ymax = max(values) * 1.1
    plot_w, plot_h = _W - _PAD - 20, _H - _PAD - 10
    group_w = plot_w / len(labels)
    bar_w = group_w * 0.8 / len(series)
    out = [_axes(ymax, ylabel)]
    for gi, label in enumerate(labels):
        gx = _PAD + 5 + gi * group_w
        for si, (name, vs) in enumerate(series.items()):
            v = vs[gi] if gi < len(vs) and isinstance(vs[gi], (int, float)) else 0
            h = plot_h * v / ymax
            out.append(f'<rect x="{gx + si * bar_w:.1f}" y="{_H - _PAD - h:.1f}" width="{bar_w * 0.95:.1f}" '
                       f'height="{max(h, 0.5):.1f}" fill="{_COLORS[si % len(_COLORS)]}"><title>{_e(name)} '
                       f'{_e(label)}: {fmt(v)}</title></rect>')
        out.append(f'<text x="{gx + group_w * 0.4:.1f}" y="{_H - _PAD + 14}" font-size="10" '
                   f'text-anchor="middle">{_e(label)}</text>')
    out.append(_legend(list(series)))
    return _svg(title, "".join(out))


def _legend(names: list[str]) -> str:
    out = []
    for i, name in enumerate(names):
        x = _PAD + 10 + i * 130
        out.append(f'<rect x="{x}" y="{_H - 16}" width="10" height="10" fill="{_COLORS[i % len(_COLORS)]}"/>'
                   f'<text x="{x + 14}" y="{_H - 7}" font-size="10">{_e(name)}</text>')
    return "".join(out)


def line_chart(title: str, points: dict[str, list[tuple[float, float]]], xlabel: str, ylabel: str,
               limit: float | None = None) -> str:
    """Lines through (x, y) points, one per series; an optional dashed horizontal limit (a budget)."""
    xs = [p[0] for ps in points.values() for p in ps]
    ys = [p[1] for ps in points.values() for p in ps] + ([limit] if limit else [])
    if not xs or max(ys) <= 0:
        return _empty_chart(title, "nothing measured")
    x0, x1 = min(xs), max(xs)
    x1 = x1 if x1 > x0 else x0 + 1
    ymax = max(ys) * 1.1
    plot_w, plot_h = _W - _PAD - 20, _H - _PAD - 10

    def sx(x):
        return _PAD + 10 + plot_w * 0.95 * (x - x0) / (x1 - x0)

    def sy(y):
        return _H - _PAD - plot_h * y / ymax

    out = [_axes(ymax, ylabel)]
    for x in sorted(set(xs)):
        out.append(f'<text x="{sx(x):.1f}" y="{_H - _PAD + 14}" font-size="10" text-anchor="middle">{fmt(x)}</text>')
    out.append(f'<text x="{_W - 12}" y="{_H - _PAD + 28}" font-size="10" text-anchor="end">{_e(xlabel)}</text>')
    for si, (name, ps) in enumerate(points.items()):
        color = _COLORS[si % len(_COLORS)]
        pts = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in sorted(ps))
        out.append(f'<polyline points="{pts}" fill="none" stroke="{color}" stroke-width="2"/>')
        for x, y in ps:
            out.append(f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="3.5" fill="{color}">'
                       f'<title>{_e(name)} {fmt(x)}: {fmt(y)}</title></circle>')
    if limit:
        out.append(f'<line x1="{_PAD}" y1="{sy(limit):.1f}" x2="{_W - 10}" y2="{sy(limit):.1f}" stroke="#b00" '
                   f'stroke-dasharray="5,4"/><text x="{_W - 12}" y="{sy(limit) - 4:.1f}" font-size="10" '
                   f'text-anchor="end" fill="#b00">budget</text>')
    out.append(_legend(list(points)))
    return _svg(title, "".join(out))


def timeline_chart(title: str, spans: list[dict]) -> str:
    """Waiting-on-disk vs computing per block: one row per block, time on x."""
    spans = [s for s in spans if s.get("end", 0) > s.get("start", 0)]
    if not spans:
        return _empty_chart(title, "no streamed blocks recorded")
    blocks = sorted({s["block"] for s in spans})
    t_end = max(s["end"] for s in spans)
    row_h = max(8.0, min(24.0, 160 / len(blocks)))
    height = int(30 + row_h * len(blocks) + 40)
    plot_w = _W - _PAD - 30
    colors = {"wait": _COLORS[1], "compute": _COLORS[0]}
    out = []
    for i, b in enumerate(blocks):
        y = 20 + i * row_h
        out.append(f'<text x="{_PAD - 4}" y="{y + row_h * 0.7:.1f}" font-size="10" text-anchor="end">'
                   f'block {_e(b)}</text>')
    for s in spans:
        y = 20 + blocks.index(s["block"]) * row_h
        x = _PAD + plot_w * s["start"] / t_end
        w = max(plot_w * (s["end"] - s["start"]) / t_end, 0.8)
        out.append(f'<rect x="{x:.1f}" y="{y + 1:.1f}" width="{w:.1f}" height="{row_h - 2:.1f}" '
                   f'fill="{colors.get(s["kind"], "#888")}"><title>block {_e(s["block"])} {_e(s["kind"])}: '
                   f'{fmt(s["end"] - s["start"])} s</title></rect>')
    axis_y = 24 + row_h * len(blocks)
    out.append(f'<line x1="{_PAD}" y1="{axis_y:.1f}" x2="{_PAD + plot_w}" y2="{axis_y:.1f}" stroke="#333"/>'
               f'<text x="{_PAD}" y="{axis_y + 12:.1f}" font-size="10">0 s</text>'
               f'<text x="{_PAD + plot_w}" y="{axis_y + 12:.1f}" font-size="10" text-anchor="end">{fmt(t_end)} s</text>')
    for i, (name, label) in enumerate((("wait", "waiting on disk"), ("compute", "computing"))):
        x = _PAD + 60 + i * 150
        out.append(f'<rect x="{x}" y="{height - 14}" width="10" height="10" fill="{colors[name]}"/>'
                   f'<text x="{x + 14}" y="{height - 5}" font-size="10">{label}</text>')
    return _svg(title, "".join(out), height)


def charts(doc: dict) -> dict[str, str]:
    """The report's charts, by id, as SVG text."""
    native = doc.get("native") or {}
    inf = doc.get("inference") or {}
    est = doc.get("estimates") or {}
    device = doc.get("device") or {}
    kernels = [k for k in native.get("kernels", []) if k.get("threads") == native.get("threads_max")] or \
        native.get("kernels", [])
    out = {}
    labels = [f"{k['kind']} {k['op']}" for k in kernels]
    out["native"] = bar_chart("Native kernel throughput", labels,
                              {"GB/s of weights": [k["weight_gb_per_s"] for k in kernels],
                               "GFLOP/s": [k["gflop_per_s"] for k in kernels]}, "rate") \
        if kernels else _empty_chart("Native kernel throughput", native.get("reason", "not measured"))
    scaling = native.get("scaling") or []
    out["threads"] = line_chart("Thread scaling (matmul GFLOP/s)",
                                {"GFLOP/s": [(s["threads"], s["gflop_per_s"]) for s in scaling]},
                                "threads", "GFLOP/s") \
        if scaling else _empty_chart("Thread scaling", native.get("reason", "not measured"))
    check = est.get("check") or {}
    if check.get("measured_seconds_per_block") and check.get("estimated_seconds_per_block"):
        out["measured_vs_estimated"] = bar_chart(
            "Scaled DiT: measured vs estimated seconds per block", ["seconds per block"],
            {"measured": [check["measured_seconds_per_block"]], "estimated": [check["estimated_seconds_per_block"]]},
            "seconds")
    else:
        out["measured_vs_estimated"] = _empty_chart("Measured vs estimated", inf.get("reason", "nothing to compare"))
    base = inf.get("baseline_rss_bytes")
    if inf.get("peak_rss_bytes") and inf.get("predicted_peak_rss_bytes") and base is not None:
        out["memory"] = bar_chart(
            "Scaled DiT: measured vs predicted memory growth while streaming (MB)", ["RSS growth"],
            {"measured": [(inf["peak_rss_bytes"] - base) / 1e6],
             "predicted": [(inf["predicted_peak_rss_bytes"] - base) / 1e6]}, "MB")
    else:
        out["memory"] = _empty_chart("Measured vs predicted memory", inf.get("reason", "nothing to compare"))
    tiles = doc.get("tiles") or []
    budget = (doc.get("plan") or {}).get("budget") or {}
    if tiles:
        out["tiles"] = line_chart("Tile sweep: decode time and peak memory",
                                  {"seconds": [(t["tile"], t["seconds"]) for t in tiles if t.get("seconds")]},
                                  "tile (pixels)", "seconds") + \
            line_chart("Tile sweep: peak memory (bytes)",
                       {"peak bytes": [(t["tile"], t["peak_bytes"]) for t in tiles if t.get("peak_bytes")]},
                       "tile (pixels)", "bytes", limit=budget.get("gpu_bytes"))
    else:
        out["tiles"] = _empty_chart("Tile sweep", f"tile sweep skipped: {device.get('reason', 'no device')}")
    out["timeline"] = timeline_chart("Stream/compute timeline of the scaled DiT", inf.get("timeline") or [])
    return out


_CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;margin:2rem auto;max-width:1180px;color:#222;padding:0 1rem}
h1{font-size:1.5rem}h2{font-size:1.15rem;margin-top:2rem;border-bottom:1px solid #ddd}
table{border-collapse:collapse;margin:.5rem 0}td,th{border:1px solid #ddd;padding:3px 8px;text-align:left;vertical-align:top}
th{background:#f0f0f0}.grid{display:flex;flex-wrap:wrap;gap:1rem}.note{color:#555}
.estimate{background:#fff7e6;border-left:4px solid #e08a2c;padding:.4rem .8rem}
.changed{font-weight:bold;color:#1a5d1a}code{font-size:12px}
"""


def _kv_rows(mapping: dict) -> list[list]:
    """[key, value] rows of a flat mapping; byte counts shown with units, nested values left out."""
    return [[k, human_bytes(v) if k.endswith("bytes") and isinstance(v, (int, float)) and not isinstance(v, bool) else v]
            for k, v in mapping.items() if not isinstance(v, (dict, list))]


def _html_table(headers: list[str], rows: list[list], row_class=None) -> str:
    head = "".join(f"<th>{_e(h)}</th>" for h in headers)
    body = []
    for r in rows:
        cls = f' class="{row_class(r)}"' if row_class and row_class(r) else ""
        body.append(f"<tr{cls}>" + "".join(f"<td>{_e(fmt(c))}</td>" for c in r) + "</tr>")
    return f"<table><tr>{head}</tr>{''.join(body)}</table>"


def to_html(doc: dict) -> str:
    ch = charts(doc)
    est = doc.get("estimates") or {}
    native = doc.get("native") or {}
    inf = doc.get("inference") or {}
    sections = [
        f"<h1>h3kit calibration &mdash; {_e(doc.get('created', ''))}</h1>",
        "<ul>" + "".join(f"<li>{_e(s)}</li>" for s in summary_lines(doc)) + "</ul>",
        "<h2>Machine</h2>" + _html_table(["item", "value"], _machine_rows(doc.get("fingerprint") or {})),
        "<h2>Profile</h2>" + _html_table(["setting", "value"], _profile_rows(doc.get("plan") or {})),
        "<h2>Native kernels</h2><div class='grid'>" + ch["native"] + ch["threads"] + "</div>",
    ]
    if native.get("kernels"):
        sections.append(_html_table(["kind", "op", "shape", "threads", "seconds", "GB/s weights", "GFLOP/s"],
                                    [[k["kind"], k["op"], k.get("shape"), k.get("threads"), k["seconds"],
                                      k["weight_gb_per_s"], k["gflop_per_s"]] for k in native["kernels"]]))
    sections.append("<h2>Measured vs estimated</h2>")
    sections.append("<p class='estimate'>Numbers for the real model below are <b>estimates</b> computed from the "
                    "measured rates with the formulas shown; they are not measurements.</p>")
    sections.append("<div class='grid'>" + ch["measured_vs_estimated"] + ch["memory"] + "</div>")
    if est:
        sections.append(_html_table(["quantity", "value", "formula"],
                                    [[k, v, est.get("formulas", {}).get(k, "")] for k, v in _kv_rows(est)]))
    sections.append("<h2>Tile sweep</h2><div class='grid'>" + ch["tiles"] + "</div>")
    sections.append("<h2>Stream/compute timeline</h2>")
    if inf.get("status") == "measured":
        sections.append(f"<p class='note'>Scaled H3-shaped DiT: {_e(describe_scaled(inf['config']))}; computed by {_e(describe_path(inf))}. Relative error vs a plain "
                        f"fp32 forward: {_e(fmt(inf.get('relative_error')))}; peak RSS "
                        f"{_e(human_bytes(inf.get('peak_rss_bytes')))}.</p>")
    sections.append("<div class='grid'>" + ch["timeline"] + "</div>")
    sections.append("<h2>Disk</h2>" + _html_table(["item", "value"], _kv_rows(doc.get("disk") or {})))
    device = doc.get("device") or {}
    sections.append("<h2>Device</h2>" + _html_table(["item", "value"], _kv_rows(device)))
    real = doc.get("real_model") or {}
    sections.append(f"<h2>Real model</h2><p>{_e(real.get('reason', 'not run'))}</p>"
                    + (_html_table(["item", "value"], real_model_rows(real)) if real_model_rows(real) else ""))
    sections.append("<h2>Decisions</h2>" + _html_table(
        ["setting", "value", "previous", "changed", "evidence"],
        [[d["setting"], d["value"], d["previous"], d["changed"], d["evidence"]] for d in doc.get("decisions", [])],
        row_class=lambda r: "changed" if r[3] else ""))
    if doc.get("skipped"):
        sections.append("<h2>Skipped</h2><ul>" + "".join(f"<li>{_e(s)}</li>" for s in doc["skipped"]) + "</ul>")
    return ("<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>"
            "<meta http-equiv='Content-Security-Policy' content=\"default-src 'none'; style-src 'unsafe-inline'\">"
            f"<title>h3kit calibration {_e(doc.get('created', ''))}</title><style>{_CSS}</style></head><body>"
            + "\n".join(sections) + "</body></html>\n")
