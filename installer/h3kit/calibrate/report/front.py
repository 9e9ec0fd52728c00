"""The report's front: what the machine makes and how long it takes, what calibration changed,
the faster and better options, the real workflow against the estimate, and the streaming split.

These are the sections a person reads; the measurements behind them come
after (`measured`, `sections`). Every figure is in human units (minutes,
GiB, percent) and every section tolerates a document that lacks its keys:
an older report renders with fewer sections, never with an error.
"""

from __future__ import annotations

from h3kit.calibrate.report import figures
from h3kit.calibrate.report.model import (
    BarChart,
    Bullets,
    Details,
    HBars,
    NoChart,
    Paragraph,
    Section,
    Split,
    Strong,
    Table,
)
from h3kit.calibrate.report.text import fmt, real_model_rows, value_text, when
from h3kit.core.units import gib_of, human_bytes, human_rate, human_seconds, percent, precise_seconds


def _num(x) -> float | None:
    return x if isinstance(x, (int, float)) and not isinstance(x, bool) and x == x else None


def _dict(x) -> dict:
    return x if isinstance(x, dict) else {}


def _hs(s) -> str:
    return human_seconds(s, "-")


def _breakdown(c: dict) -> Table | None:
    """Where one clip's time goes: text encode once, the sampling steps, the VAE decode."""
    rows = []
    if c["text_encode_s"] is not None:
        rows.append(("encode the prompt (once)", _hs(c["text_encode_s"])))
    if c["seconds_per_step"] is not None:
        sampling = c["sampling_s"]
        if sampling is None:
            sampling = c["seconds_per_clip"] if c["sampling_only"] else \
                (c["seconds_per_step"] * c["steps"] if c["steps"] else None)
        calls = c["model_calls_per_step"]
        per = f"{_hs(c['seconds_per_step'])} per step" + (f", {calls} model calls each" if calls and calls > 1 else "")
        label = f"sampling ({c['steps']} steps; {per})" if c["steps"] else f"sampling ({per})"
        rows.append((label, _hs(sampling)))
    if c["decode_s"] is not None:
        rows.append(("VAE decode", _hs(c["decode_s"])))
    if c["seconds_per_clip"] is not None:
        rows.append(("one clip", _hs(c["seconds_per_clip"])))
    return Table(("part", "time"), tuple(rows)) if len(rows) > 1 else None


def first_screen(doc: dict) -> Section:
    """The headline, the warnings, where the time comes from and where it goes."""
    blocks: list = [Paragraph((Strong(figures.headline(doc)),), "headline")]
    warns = figures.warnings(doc)
    if warns:
        blocks.append(Bullets(tuple(warns), "warn"))
    _, source = figures.time_source(doc)
    blocks.append(Paragraph(("Where the time comes from: ", Strong(source), "."), "note"))
    table = _breakdown(figures.clip(doc))
    if table:
        blocks.append(table)
    plan = figures.planned(doc)
    s = plan.settings
    run = f"{'quick' if doc.get('quick') else 'full'} calibration in {_hs(_num(doc.get('duration_seconds')))}"
    model = ", ".join(str(x) for x in (s.dit_weights, s.quantization) if x)
    blocks.append(Paragraph((f"Profile {plan.profile or '?'}" + (f" ({model})" if model else "")
                             + f"; {run}" + (f", {when(doc['created'])}" if doc.get("created") else "") + ".",), "note"))
    return Section("What this machine can make", blocks, "first")


def decisions(doc: dict) -> Section:
    """Changed settings with their evidence; the kept ones folded away."""
    ds = [d for d in doc.get("decisions") or [] if isinstance(d, dict)]
    changed = [d for d in ds if d.get("changed")]
    kept = [d for d in ds if not d.get("changed")]
    blocks: list = []
    if changed:
        blocks.append(Table(("setting", "now", "was", "why"),
                            tuple((d.get("setting", "?"), value_text(d.get("setting", ""), d.get("value")),
                                   value_text(d.get("setting", ""), d.get("previous")), d.get("evidence", ""))
                                  for d in changed), marked=tuple(True for _ in changed)))
    else:
        blocks.append(Paragraph(("Calibration changed nothing: every setting it checked held up against "
                                 "the measurements.",) if ds else ("This calibration made no decisions.",)))
    if kept:
        blocks.append(Details(f"{len(kept)} setting{'s' if len(kept) != 1 else ''} kept as planned",
                              (Table(("setting", "value", "why kept"),
                                     tuple((d.get("setting", "?"), value_text(d.get("setting", ""), d.get("value")),
                                            d.get("evidence", "")) for d in kept)),)))
    return Section("What calibration changed", blocks)


def _settings_text(a: dict) -> str:
    """`864x480, 124 frames, 6 steps, fast preset, bf16`: an option's settings, those it names."""
    canvas = a["canvas"] if isinstance(a.get("canvas"), str) else figures.canvas_text(a.get("canvas"))
    out = [canvas] if canvas else []
    if _num(a.get("frames")):
        out.append(f"{int(a['frames'])} frames")
    if _num(a.get("steps")):
        out.append(f"{int(a['steps'])} steps")
    out += [f"{a['preset']} preset"] if a.get("preset") else []
    out += [str(a["quantization"])] if a.get("quantization") else []
    return ", ".join(out) or "-"


def _peak_text(peak_gpu, peak_ram, mem: dict) -> str:
    if mem["kind"] == "GPU" and _num(peak_gpu) is not None:
        return "GPU " + gib_of(peak_gpu, mem["total"])
    if _num(peak_ram) is not None:
        return "RAM " + gib_of(peak_ram, mem["ram_total"])
    return "-"


def alternatives(doc: dict) -> Section | None:
    """Faster and better options, each with its time, beside what the plan chose; None in an older report."""
    est = _dict(doc.get("estimates"))
    alts = [a for a in est.get("alternatives") or [] if isinstance(a, dict)]
    if not alts:
        return None
    c, mem = figures.clip(doc), figures.memory(doc)
    chosen = {"canvas": c["canvas"], "frames": c["frames"], "steps": c["steps"], "preset": c["preset"],
              "quantization": figures.planned(doc).settings.quantization}
    rows = [("this plan", _settings_text(chosen), _hs(c["seconds_per_clip"]),
             _peak_text(mem["peak"] if mem["kind"] == "GPU" else None, mem["ram_peak"], mem),
             "what the workflows open with")]
    bars = [("this plan", c["seconds_per_clip"], _hs(c["seconds_per_clip"]))] if c["seconds_per_clip"] else []
    for a in alts:
        minutes = _num(a.get("minutes_per_clip"))
        seconds = minutes * 60 if minutes is not None else None
        label = str(a.get("label") or "option")
        rows.append((label, _settings_text(a), _hs(seconds), _peak_text(a.get("peak_gpu_bytes"), a.get("peak_rss_bytes"), mem),
                     a.get("why") or ""))
        if seconds:
            bars.append((label, seconds, _hs(seconds)))
    blocks: list = [Table(("option", "settings", "time per clip", "peak memory", "why"), tuple(rows),
                          marked=(True,) + tuple(False for _ in alts))]
    blocks.append(HBars("alternatives", "Time per clip, by option", tuple(bars), "seconds") if len(bars) > 1 else
                  NoChart("alternatives", "Time per clip, by option", "the options carry no times to compare"))
    return Section("Faster or better", blocks)


_COMPARE = {"seconds_per_step": "seconds per step", "peak_rss_bytes": "peak RAM (RSS)",
            "peak_gpu_bytes": "peak GPU memory", "peak_device_bytes": "peak GPU memory",
            "seconds_per_clip": "seconds per clip"}


def _quantity(key: str, v) -> str:
    if _num(v) is None:
        return "-"
    return gib_of(v, None) if key.endswith("bytes") else precise_seconds(v) if key.startswith("seconds") else fmt(v)


def real_workflow(doc: dict) -> Section:
    """--with-model: the real workflow's figures beside the estimate, the difference in percent."""
    real = _dict(doc.get("real_model"))
    compare = _dict(real.get("compare"))
    blocks: list = []
    rows = []
    for key, pair in compare.items():
        if not isinstance(pair, dict):
            continue
        measured, estimated = _num(pair.get("measured")), _num(pair.get("estimated"))
        diff = _num(pair.get("difference_pct"))
        if diff is None and measured and estimated is not None:
            diff = 100.0 * (estimated - measured) / measured
        rows.append((_COMPARE.get(key, key.replace("_", " ")), _quantity(key, measured), _quantity(key, estimated),
                     percent(diff / 100.0 if diff is not None else None, signed=True)))
    if rows:
        ran, est_at = figures.canvas_text(compare.get("canvas")), figures.canvas_text(compare.get("estimated_canvas"))
        where = f" at {ran}" if ran else " at the plan's canvas"
        if ran and est_at and ran != est_at:
            where += f" (the estimate is for {est_at}: compare with care)"
        kind = f" The estimate is a {compare['estimate_kind']} estimate." if compare.get("estimate_kind") else ""
        blocks.append(Paragraph((f"The installed workflow ran for a few steps{where}; difference = (estimated - "
                                 f"measured) / measured.{kind}",), "note"))
        blocks.append(Table(("quantity", "measured", "estimated", "difference"), tuple(rows)))
        bars = [r for r in compare.items() if isinstance(r[1], dict) and str(r[0]).startswith("seconds")
                and _num(r[1].get("measured")) and _num(r[1].get("estimated"))]
        if bars:
            key, pair = bars[0]
            blocks.append(BarChart("real_vs_estimated", f"Real workflow: measured vs estimated {_COMPARE.get(key, key)}",
                                   (_COMPARE.get(key, key),), {"measured": [pair["measured"]],
                                                              "estimated": [pair["estimated"]]}, "seconds"))
    else:
        blocks.append(Paragraph((str(real.get("reason") or "not run: pass --with-model"),)))
    detail = real_model_rows(real)
    if detail:
        blocks.append(Details("the run itself", (Table(("item", "value"), tuple(detail)),)))
    return Section("Real workflow vs estimate", blocks)


def streaming(doc: dict) -> Section | None:
    """When the plan streams the DiT from disk: compute vs waiting for disk; None when it does not stream."""
    st = _dict(doc.get("streaming"))
    planned = figures.planned(doc).settings.streaming
    if not (st.get("enabled") or (not st and planned.enabled)):
        return None
    wait = _num(st.get("io_wait_fraction"))
    compute, read, copy = (_num(st.get(k)) for k in ("compute_s_per_block", "read_s_per_block", "copy_s_per_block"))
    ahead = st.get("prefetch_blocks") or planned.prefetch_blocks
    measured_split = _num(st.get("wait_s")) is not None and _num(st.get("compute_s")) is not None
    blocks: list = []
    if compute is not None and read is not None:
        text = (f"Each block of the DiT is read from disk while the one before it computes: computing a block takes "
                f"{precise_seconds(compute)}, reading one {precise_seconds(read)} at {human_rate(_num(st.get('disk_bytes_per_s')))}")
        text += f", {ahead} block{'s' if ahead != 1 else ''} read ahead" if ahead else ""
        if wait is not None:
            text += f"; about {percent(wait)} of the sampling time waits for the disk"
        if copy is not None:
            text += (f". On the CPU each block is then read into its fp32 buffers while the model waits: "
                     f"{precise_seconds(copy)} a block at {human_rate(_num(st.get('direct_read_bytes_per_s')))}")
        if _num(st.get("pass_overhead")) is not None:
            text += (f"; in all, streaming makes each model call about {percent(_num(st['pass_overhead']))} longer"
                     + _measured_whole(_dict(st.get("pass_measured"))))
        if st.get("disk_bound") and _dict(st.get("page_cache")).get("case") != "fits":
            text += (". The disk is the limit here: reading a block takes longer than computing one, so a faster "
                     "disk or more blocks kept resident would shorten every step")
        blocks.append(Paragraph((text + ".",)))
        if _dict(st.get("page_cache")).get("sentence"):
            blocks.append(Paragraph((st["page_cache"]["sentence"],)))
    elif not st:
        blocks.append(Paragraph(("The plan streams the DiT from disk, but this calibration did not measure the "
                                 "disk against the compute (an older report, or no disk measurement).",)))
    if measured_split:
        blocks.append(Split("streaming_split", "Sampling time: computing vs waiting for disk (measured)",
                            (("computing", st["compute_s"]), ("waiting for disk", st["wait_s"]))))
    elif wait is not None and copy is not None and compute:
        waited = wait / max(1e-9, 1.0 - wait) * compute  # per block, beside its compute and its copy
        blocks.append(Split("streaming_split", "Sampling time: computing vs waiting for disk vs reading into buffers",
                            (("computing", compute), ("waiting for disk", waited), ("reading into buffers", copy))))
    elif wait is not None:
        blocks.append(Split("streaming_split", "Sampling time: computing vs waiting for disk",
                            (("computing", max(0.0, 1.0 - wait)), ("waiting for disk", wait))))
    else:
        blocks.append(NoChart("streaming_split", "Computing vs waiting for disk", "no split was measured"))
    if compute is not None and read is not None:
        blocks.append(BarChart("streaming_block", "One block: reading vs computing", ("one block",),
                               {"read from disk": [read], "compute": [compute]}, "seconds"))
    rows = [("disk read speed", human_rate(_num(st.get("disk_bytes_per_s")), "-")),
            ("page cache dropped for the measurement", fmt(st.get("cache_dropped"))),
            ("blocks read ahead", fmt(ahead)),
            ("in-place read into fp32 buffers (CPU)", human_rate(_num(st.get("direct_read_bytes_per_s")), "-")),
            ("added to each model call", percent(_num(st["pass_overhead"])) if _num(st.get("pass_overhead"))
             is not None else "-"),
            ("blocks kept resident", fmt(st.get("resident_blocks") or planned.resident_blocks)),
            ("bytes per block", human_bytes(_num(planned.block_bytes), "-")),
            ("disk bound", fmt(st.get("disk_bound")))]
    rows = [r for r in rows if r[1] != "-"]
    if rows:
        blocks.append(Details("streaming figures", (Table(("item", "value"), tuple(rows)),)))
    return Section("Streaming: computing vs waiting for disk", blocks)


def _measured_whole(whole: dict) -> str:
    """The clause for a share timed whole (calibrate.streamed_pass), else nothing."""
    if _num(whole.get("streamed_s")) is None or _num(whole.get("held_s")) is None:
        return ""
    return (f" (timed whole: the installed loader's pass took {precise_seconds(whole['streamed_s'])} a call at "
            f"{whole.get('tokens')} rows, against {precise_seconds(whole['held_s'])} with the weights held)")
