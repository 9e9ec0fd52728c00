"""The calibration document turned into the report's sections, once, for every format.

Order: what the machine and the plan are, what was measured (native
kernels, the scaled DiT, the device and its tile sweep, the disk), what that
predicts for the real model, the real workflow when it ran, and what was
decided. A part that did not run says why in a sentence where its table
would be.
"""

from __future__ import annotations

from h3kit.calibrate.report.model import (
    BarChart,
    Bullets,
    LineChart,
    NoChart,
    Paragraph,
    Report,
    Section,
    Strong,
    Table,
    Timeline,
)
from h3kit.calibrate.report.text import (
    describe_path,
    describe_scaled,
    fmt,
    hb,
    kv_rows,
    machine_rows,
    profile_rows,
    real_model_rows,
    summary_lines,
)

ESTIMATE_NOTE = ("Numbers for the real model below are ", Strong("estimates"), " computed from the measured rates "
                 "with the formulas shown; they are not measurements of the real model.")


def _native(native: dict) -> Section:
    kernels_all = native.get("kernels") or []
    kernels = [k for k in kernels_all if k.get("threads") == native.get("threads_max")] or kernels_all
    why = native.get("reason", "not measured")
    blocks = [
        BarChart("native", "Native kernel throughput", tuple(f"{k['kind']} {k['op']}" for k in kernels),
                 {"GB/s of weights": [k["weight_gb_per_s"] for k in kernels],
                  "GFLOP/s": [k["gflop_per_s"] for k in kernels]}, "rate")
        if kernels else NoChart("native", "Native kernel throughput", why),
    ]
    scaling = native.get("scaling") or []
    blocks.append(LineChart("threads", "Thread scaling (matmul GFLOP/s)",
                            {"GFLOP/s": [(s["threads"], s["gflop_per_s"]) for s in scaling]}, "threads", "GFLOP/s")
                  if scaling else NoChart("threads", "Thread scaling", why))
    if kernels_all:
        blocks.append(Table(("kind", "op", "shape", "threads", "ms", "GB/s weights", "GFLOP/s"),
                            tuple((k["kind"], k["op"], k.get("shape"), k.get("threads"), 1000 * k["seconds"],
                                   k["weight_gb_per_s"], k["gflop_per_s"]) for k in kernels_all)))
    else:
        blocks.append(Paragraph((f"Not measured: {native.get('reason', '-')}",)))
    return Section("Native kernels", blocks)


def _scaled_dit(inf: dict) -> Section:
    blocks = [Timeline("timeline", "Stream/compute timeline of the scaled DiT", tuple(inf.get("timeline") or []))]
    if inf.get("status") != "measured":
        return Section("Scaled DiT through the streamer", blocks + [Paragraph((f"Not run: {inf.get('reason', '-')}",))])
    blocks += [
        Table(("block", "seconds", "waiting s", "computing s", "bytes"),
              tuple((b["index"], b["seconds"], b["wait_seconds"], b["compute_seconds"], b["bytes"])
                    for b in inf.get("blocks", []))),
        Paragraph((f"Shape: {describe_scaled(inf.get('config') or {})}.",), "note"),
        Paragraph((f"Computed by: {describe_path(inf)}.",), "note"),
        Paragraph((f"Relative error vs fp32 forward: {fmt(inf.get('relative_error'))} "
                   f"(kernels alone vs dequantized weights: {fmt(inf.get('kernel_relative_error'))}); "
                   f"peak RSS {hb(inf.get('peak_rss_bytes'))}; streamed {hb(inf.get('bytes_streamed'))}.",), "note"),
    ]
    return Section("Scaled DiT through the streamer", blocks)


def _device(device: dict) -> Section:
    if device.get("status") == "measured":
        return Section("Device", [Table(("item", "value"), tuple(kv_rows(device)))])
    blocks = [Paragraph((f"Skipped: {device.get('reason', '-')}",))]
    rest = [r for r in kv_rows(device) if r[0] not in ("status", "reason")]
    if rest:
        blocks.append(Table(("item", "value"), tuple(rest)))
    return Section("Device", blocks)


def _tiles(tiles: list[dict], device: dict, budget: dict) -> Section:
    if not tiles:
        reason = device.get("reason", "no device")
        return Section("Tile sweep", [NoChart("tiles", "Tile sweep", f"tile sweep skipped: {reason}"),
                                      Paragraph((f"Not run: {reason}",))])
    return Section("Tile sweep", [
        LineChart("tiles", "Tile sweep: decode time and peak memory",
                  {"seconds": [(t["tile"], t["seconds"]) for t in tiles if t.get("seconds")]}, "tile (pixels)",
                  "seconds"),
        LineChart("tiles", "Tile sweep: peak memory (bytes)",
                  {"peak bytes": [(t["tile"], t["peak_bytes"]) for t in tiles if t.get("peak_bytes")]},
                  "tile (pixels)", "bytes", limit=budget.get("gpu_bytes")),
        Table(("tile", "seconds", "peak bytes", "within budget"),
              tuple((t["tile"], t.get("seconds"), t.get("peak_bytes"), t.get("within_budget")) for t in tiles)),
    ])


def _estimates(est: dict, inf: dict) -> Section:
    check = est.get("check") or {}
    blocks = [Paragraph(ESTIMATE_NOTE, "estimate")] if est else []
    if check.get("measured_seconds_per_block") and check.get("estimated_seconds_per_block"):
        blocks.append(BarChart("measured_vs_estimated", "Scaled DiT: measured vs estimated seconds per block",
                               ("seconds per block",), {"measured": [check["measured_seconds_per_block"]],
                                                        "estimated": [check["estimated_seconds_per_block"]]},
                               "seconds"))
    else:
        blocks.append(NoChart("measured_vs_estimated", "Measured vs estimated", inf.get("reason", "nothing to compare")))
    base = inf.get("baseline_rss_bytes")
    if inf.get("peak_rss_bytes") and inf.get("predicted_peak_rss_bytes") and base is not None:
        blocks.append(BarChart("memory", "Scaled DiT: measured vs predicted memory growth while streaming (MB)",
                               ("RSS growth",), {"measured": [(inf["peak_rss_bytes"] - base) / 1e6],
                                                 "predicted": [(inf["predicted_peak_rss_bytes"] - base) / 1e6]}, "MB"))
    else:
        blocks.append(NoChart("memory", "Measured vs predicted memory", inf.get("reason", "nothing to compare")))
    if est:
        formulas = est.get("formulas", {})
        blocks.append(Table(("quantity", "value", "formula"),
                            tuple((k, v, formulas.get(k, "")) for k, v in kv_rows(est))))
    return Section("Measured vs estimated", blocks)


def _real_model(real: dict) -> Section:
    blocks = [Paragraph((real.get("reason", "not run"),))]
    rows = real_model_rows(real)
    if rows:
        blocks.append(Table(("item", "value"), tuple(rows)))
    return Section("Real model", blocks)


def _decisions(decisions: list[dict]) -> Section:
    return Section("Decisions", [Table(("setting", "value", "previous", "changed", "evidence"),
                                       tuple((d["setting"], d["value"], d["previous"], d["changed"], d["evidence"])
                                             for d in decisions),
                                       marked=tuple(bool(d["changed"]) for d in decisions))])


def build(doc: dict) -> Report:
    """The report's sections for one calibration document."""
    inf = doc.get("inference") or {}
    device = doc.get("device") or {}
    sections = [
        Section("Machine", [Table(("item", "value"), tuple(machine_rows(doc.get("fingerprint") or {})))]),
        Section("Profile", [Table(("setting", "value"), tuple(profile_rows(doc.get("plan") or {})))]),
        _native(doc.get("native") or {}),
        _scaled_dit(inf),
        _device(device),
        _tiles(doc.get("tiles") or [], device, (doc.get("plan") or {}).get("budget") or {}),
        Section("Disk", [Table(("item", "value"), tuple(kv_rows(doc.get("disk") or {})))]),
        _estimates(doc.get("estimates") or {}, inf),
        _real_model(doc.get("real_model") or {}),
        _decisions(doc.get("decisions", [])),
    ]
    if doc.get("skipped"):
        sections.append(Section("Skipped", [Bullets(tuple(doc["skipped"]))]))
    return Report(f"h3kit calibration ({doc.get('created', '')})", summary_lines(doc), sections)
