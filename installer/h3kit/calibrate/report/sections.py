"""The calibration document turned into the report's sections, once, for every format.

Order: first what a person came for (what this machine makes and how long
a clip takes, with the warnings; what calibration changed; the faster and
better options; the real workflow against the estimate; the streaming
split), then the measurements behind it (the model in ComfyUI's Python,
tiles, device, disk, machine, profile), and last, as appendices, h3kit's
native-kernel figures, which are not what the model runs on. A part that
did not run says why in a sentence where its table would be.
"""

from __future__ import annotations

from h3kit.calibrate.report import figures, front, measured
from h3kit.calibrate.report.figures import planned
from h3kit.data.plan_doc import MemoryBudget
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
    disk_rows,
    kv_rows,
    machine_rows,
    normalized,
    profile_rows,
    run_lines,
    summary_lines,
    when,
)

ESTIMATE_NOTE = ("Numbers for the real model below are ", Strong("estimates"), " computed from the native kernels' "
                 "measured rates with the formulas shown; they are not measurements of the real model, and an "
                 "older calibration's clip time came from them.")
APPENDIX_NOTE = ("h3kit's own C library (quantized matrix products and the weight streamer). ComfyUI computes "
                 "the model with torch, so these figures are ", Strong("not"), " what the clip time above is "
                 "based on; they tell whether the library is healthy on this machine.")
SCALED_TITLE = "Appendix B: scaled DiT through the native streamer"


def _nums(d: dict, *keys) -> bool:
    return all(isinstance(d.get(k), (int, float)) and not isinstance(d.get(k), bool) for k in keys)


def _native(native: dict) -> Section:
    kernels_all = [k for k in native.get("kernels") or [] if _nums(k, "seconds", "weight_gb_per_s", "gflop_per_s")]
    kernels = [k for k in kernels_all if k.get("threads") == native.get("threads_max")] or kernels_all
    why = native.get("reason", "not measured")
    blocks = [
        BarChart("native", "Native kernel throughput", tuple(f"{k.get('kind')} {k.get('op')}" for k in kernels),
                 {"GB/s of weights": [k["weight_gb_per_s"] for k in kernels],
                  "GFLOP/s": [k["gflop_per_s"] for k in kernels]}, "rate")
        if kernels else NoChart("native", "Native kernel throughput", why),
    ]
    scaling = [x for x in native.get("scaling") or [] if _nums(x, "threads", "gflop_per_s")]
    blocks.append(LineChart("threads", "Thread scaling (matmul GFLOP/s)",
                            {"GFLOP/s": [(x["threads"], x["gflop_per_s"]) for x in scaling]}, "threads", "GFLOP/s")
                  if scaling else NoChart("threads", "Thread scaling", why))
    if kernels_all:
        blocks.append(Table(("kind", "op", "shape", "threads", "ms", "GB/s weights", "GFLOP/s"),
                            tuple((k.get("kind"), k.get("op"), k.get("shape"), k.get("threads"), 1000 * k["seconds"],
                                   k["weight_gb_per_s"], k["gflop_per_s"]) for k in kernels_all)))
    else:
        blocks.append(Paragraph((f"Not measured: {native.get('reason', '-')}",)))
    return Section("Appendix A: native kernels", [Paragraph(APPENDIX_NOTE, "note")] + blocks, "appendix")


def _scaled_dit(inf: dict) -> Section:
    blocks = [Timeline("timeline", "Stream/compute timeline of the scaled DiT", tuple(inf.get("timeline") or []))]
    if inf.get("status") != "measured":
        return Section(SCALED_TITLE, blocks + [Paragraph((f"Not run: {inf.get('reason', '-')}",))], "appendix")
    blocks += [
        Table(("block", "seconds", "waiting s", "computing s", "bytes"),
              tuple((b.get("index"), b.get("seconds"), b.get("wait_seconds"), b.get("compute_seconds"), b.get("bytes"))
                    for b in inf.get("blocks") or [])),
        Paragraph((f"Shape: {describe_scaled(inf.get('config') or {})}.",), "note"),
        Paragraph((f"Computed by: {describe_path(inf)}.",), "note"),
        Paragraph((f"Relative error vs fp32 forward: {fmt(inf.get('relative_error'))} "
                   f"(kernels alone vs dequantized weights: {fmt(inf.get('kernel_relative_error'))}); "
                   f"peak RSS {hb(inf.get('peak_rss_bytes'))}; streamed {hb(inf.get('bytes_streamed'))}.",), "note"),
    ]
    return Section(SCALED_TITLE, blocks, "appendix")


def _device(device: dict) -> Section:
    if device.get("status") == "measured":
        return Section("Device", [Table(("item", "value"), tuple(kv_rows(device)))])
    blocks = [Paragraph((f"Skipped: {device.get('reason', '-')}",))]
    rest = [r for r in kv_rows(device) if r[0] not in ("status", "reason")]
    if rest:
        blocks.append(Table(("item", "value"), tuple(rest)))
    return Section("Device", blocks)


def _tiles(tiles: list[dict], device: dict, budget: MemoryBudget) -> Section:
    tiles = [t for t in tiles if _nums(t, "tile")]
    if not tiles:
        reason = device.get("reason", "no device")
        return Section("Tile sweep", [NoChart("tiles", "Tile sweep", f"tile sweep skipped: {reason}"),
                                      Paragraph((f"Not run: {reason}",))])
    return Section("Tile sweep", [
        LineChart("tiles", "Tile sweep: decode time and peak memory",
                  {"seconds": [(t["tile"], t["seconds"]) for t in tiles if _nums(t, "seconds")]}, "tile (pixels)",
                  "seconds"),
        LineChart("tiles", "Tile sweep: peak memory (bytes)",
                  {"peak bytes": [(t["tile"], t["peak_bytes"]) for t in tiles if _nums(t, "peak_bytes")]},
                  "tile (pixels)", "bytes", limit=budget.gpu_bytes),
        Table(("tile", "seconds", "peak bytes", "within budget"),
              tuple((t["tile"], t.get("seconds"), t.get("peak_bytes"), t.get("within_budget")) for t in tiles)),
    ])


def _estimates(est: dict, inf: dict) -> Section:
    """The native-kernel estimate: a newer document keeps it under `native_appendix`, an older one at the top."""
    check = est.get("check") or (est.get("native_appendix") or {}).get("check") or {}
    if isinstance(est.get("native_appendix"), dict):
        est = est["native_appendix"]
    blocks = [Paragraph(ESTIMATE_NOTE, "estimate")] if est else []
    if _nums(check, "measured_seconds_per_block", "estimated_seconds_per_block"):
        blocks.append(BarChart("measured_vs_estimated", "Scaled DiT: measured vs estimated seconds per block",
                               ("seconds per block",), {"measured": [check["measured_seconds_per_block"]],
                                                        "estimated": [check["estimated_seconds_per_block"]]},
                               "seconds"))
    else:
        blocks.append(NoChart("measured_vs_estimated", "Measured vs estimated", inf.get("reason", "nothing to compare")))
    base = inf.get("baseline_rss_bytes")
    if _nums(inf, "peak_rss_bytes", "predicted_peak_rss_bytes", "baseline_rss_bytes"):
        blocks.append(BarChart("memory", "Scaled DiT: measured vs predicted memory growth while streaming (MB)",
                               ("RSS growth",), {"measured": [(inf["peak_rss_bytes"] - base) / 1e6],
                                                 "predicted": [(inf["predicted_peak_rss_bytes"] - base) / 1e6]}, "MB"))
    else:
        blocks.append(NoChart("memory", "Measured vs predicted memory", inf.get("reason", "nothing to compare")))
    if est:
        formulas = est.get("formulas") or {}
        blocks.append(Table(("quantity", "value", "formula"),
                            tuple((k, v, formulas.get(k, "")) for k, v in kv_rows(est))))
    return Section("Appendix C: the native-kernel estimate", blocks, "appendix")


def build(doc: dict) -> Report:
    """The report's sections for one calibration document (of any age: absent parts are left out or say why)."""
    doc = normalized(doc)
    inf = doc.get("inference") or {}
    device = doc.get("device") or {}
    sections = [front.first_screen(doc), front.decisions(doc), front.alternatives(doc), front.real_workflow(doc),
                front.streaming(doc), measured.h3_model(doc), measured.timing_rates(doc), measured.memory_parts(doc),
                _tiles(doc.get("tiles") or [], device, planned(doc).budget),
                _device(device),
                Section("Disk", [Table(("item", "value"), tuple(disk_rows(doc.get("disk") or {})))]),
                Section("Machine", [Table(("item", "value"), tuple(machine_rows(figures.machine(doc))))]),
                Section("Profile", [Table(("setting", "value"), tuple(profile_rows(planned(doc))))]),
                Section("About this run", [Bullets(tuple(run_lines(doc)))]
                        + ([Paragraph(("Not measured this time:",)), Bullets(tuple(doc["skipped"]))]
                           if doc.get("skipped") else [])),
                _native(doc.get("native") or {}),
                _scaled_dit(inf),
                _estimates(doc.get("estimates") or {}, inf)]
    title = f"h3kit calibration, {when(doc['created'])}" if doc.get("created") else "h3kit calibration"
    return Report(title, summary_lines(doc), [s for s in sections if s])
