"""The first screen's figures, picked out of a calibration document of any age.

What the machine makes (canvas, frames, steps, preset), how long a clip
takes, where that time comes from, and the peak memory against what the
machine has. Each figure is read from the newest place first (the
calibration's `estimates.time` / `estimates.memory`), then the plan's
settings and estimates, then an older report's keys, so a report written
before these fields existed still renders; a figure found nowhere is None
and the sentence leaves it out instead of guessing.
"""

from __future__ import annotations

from h3kit.core.errors import H3kitError
from h3kit.core.units import gib_of, human_seconds
from h3kit.data import catalog
from h3kit.data.fingerprint import Fingerprint
from h3kit.data.plan_doc import Estimates, Plan, PlanSettings

LONG_CLIP_S = 3 * 3600  # past this a clip is an overnight job: the first screen says so as a warning


def _num(x) -> float | None:
    return x if isinstance(x, (int, float)) and not isinstance(x, bool) and x == x else None


def _first(*values):
    for v in values:
        if v is not None:
            return v
    return None


def _dict(x) -> dict:
    return x if isinstance(x, dict) else {}


def machine(doc: dict) -> Fingerprint:
    """The machine the calibration ran on (its fingerprint, parsed; empty when the document has none)."""
    return Fingerprint.from_json(_dict(doc.get("fingerprint")))


def _fps() -> float | None:
    """H3's frame rate from the catalog (`sampling.fps`); None when the catalog cannot be read."""
    try:
        return _num(catalog.load().sampling.fps)
    except (H3kitError, OSError, ValueError):
        return None


def planned(doc: dict) -> Plan:
    """The report's plan, read back (a report of an older h3kit may lack parts of it)."""
    return Plan.from_json(doc.get("plan"))


def parts(doc: dict) -> tuple[dict, dict, dict, PlanSettings, Estimates]:
    """(estimates, estimates.time, estimates.memory: dicts; the plan's settings and estimates)."""
    est = _dict(doc.get("estimates"))
    plan = planned(doc)
    return est, _dict(est.get("time")), _dict(est.get("memory")), plan.settings, plan.estimates


def canvas_text(canvas) -> str | None:
    """`864x480` from [w, h] (or [w, h, frames]); None when it is not a pair of numbers."""
    if isinstance(canvas, (list, tuple)) and len(canvas) >= 2 and all(_num(v) for v in canvas[:2]):
        return f"{int(canvas[0])}x{int(canvas[1])}"
    return None


def clip(doc: dict) -> dict:
    """What one clip is and how long it takes: canvas, frames, video seconds, steps, preset, seconds."""
    est, t, _, s, pe = parts(doc)
    pt = pe.time
    old_canvas = est.get("canvas") if isinstance(est.get("canvas"), list) else []
    canvas = _first(canvas_text(t.get("canvas")), canvas_text(s.canvas), canvas_text(s.max_canvas),
                    canvas_text(old_canvas))
    frames = _first(_num(t.get("frames")), _num(s.frames), _num(s.max_frames),
                    _num(old_canvas[2]) if len(old_canvas) > 2 else None)
    video_s = _num(t.get("video_seconds"))
    if video_s is None and frames:
        fps = _fps()
        video_s = frames / fps if fps else None
    steps = _first(_num(t.get("steps")), _num(s.steps), _num(pt.steps))
    cfg = _num(s.cfg)
    calls = _first(_num(t.get("model_calls_per_step")), _num(pt.model_calls_per_step),
                   (1 if cfg is None or cfg == 1.0 else 2) if steps else None)
    per_step = _first(_num(t.get("seconds_per_step")), _num(pt.seconds_per_step), _num(pe.seconds_per_step))
    one_pass = per_step is None  # an older report's estimate is one model pass: CFG runs it twice a step
    per_step = _first(per_step, _num(est.get("seconds_per_step")))
    minutes = _first(_num(t.get("minutes_per_clip")), _num(pe.minutes_per_clip), _num(pt.minutes_per_clip))
    per_clip = _first(_num(t.get("seconds_per_clip")), _num(pt.seconds_per_clip),
                      minutes * 60 if minutes is not None else None)
    sampling_only = False
    if per_clip is None and per_step is not None and steps:
        per_clip = per_step * steps * ((calls or 1) if one_pass else 1)
        sampling_only = True
    return {"canvas": canvas, "frames": int(frames) if frames else None, "video_seconds": video_s,
            "steps": int(steps) if steps else None, "preset": t.get("preset") or s.preset,
            "seconds_per_step": per_step, "seconds_per_clip": per_clip, "sampling_only": sampling_only,
            "model_calls_per_step": calls,
            "text_encode_s": _num(_first(t.get("text_encode_s"), pt.text_encode_s)),
            "sampling_s": _num(_first(t.get("sampling_s"), pt.sampling_s)),
            "decode_s": _num(_first(t.get("decode_s"), pt.decode_s)),
            "tokens": _num(_first(t.get("tokens"), est.get("tokens"), pe.tokens))}


def memory(doc: dict) -> dict:
    """Peak memory and the machine's total: {kind: "GPU"|"RAM", peak, total, unified, ram_peak, ram_total}."""
    est, _, mem, _, pe = parts(doc)
    fingerprint = machine(doc)
    gpus = fingerprint.gpus
    unified = bool(planned(doc).budget.unified_memory)
    gpu_peak = _num(mem.get("peak_gpu_bytes")) if "peak_gpu_bytes" in mem else \
        _num(_first(est.get("peak_gpu_bytes"), pe.peak_gpu_bytes))
    gpu_total = _num(_first(mem.get("gpu_total_bytes"), gpus[0].memory_total_bytes if gpus else None))
    ram_peak = _num(_first(mem.get("peak_rss_bytes"), est.get("peak_ram_bytes"), pe.peak_ram_bytes))
    ram_total = _num(_first(mem.get("ram_total_bytes"), fingerprint.memory.total_bytes))
    if gpu_peak is not None and not unified:
        return {"kind": "GPU", "peak": gpu_peak, "total": gpu_total, "unified": False,
                "ram_peak": ram_peak, "ram_total": ram_total}
    if unified and gpu_peak is not None and (ram_peak is None or gpu_peak > ram_peak):
        ram_peak = gpu_peak  # one memory: what Metal holds need not show in the process's RSS, both count
    return {"kind": "RAM", "peak": ram_peak, "total": ram_total, "unified": unified,
            "ram_peak": ram_peak, "ram_total": ram_total}


def memory_text(doc: dict) -> str | None:
    """`peak GPU 14.2 of 16.0 GiB` / `peak RAM 21.6 of 25.3 GiB (unified memory)`; None when unknown."""
    m = memory(doc)
    if m["peak"] is None:
        return None
    text = f"peak {m['kind']} {gib_of(m['peak'], m['total'])}"
    if m["kind"] == "GPU" and m["ram_peak"] is not None:
        text += f" (RAM {gib_of(m['ram_peak'], m['ram_total'])})"
    return text + (" (unified memory)" if m["unified"] else "")


def headline(doc: dict) -> str:
    """The first screen's sentence: "864x480, 124 frames (5.2 s of video), 20 steps: about 11 min per clip; peak ..."."""
    c = clip(doc)
    what = [x for x in (c["canvas"],) if x]
    if c["frames"]:
        what.append(f"{c['frames']} frames" + (f" ({c['video_seconds']:.1f} s of video)" if c["video_seconds"] else ""))
    if c["steps"]:
        what.append(f"{c['steps']} steps" + (f" ({c['preset']} preset)" if c["preset"] else ""))
    if c["seconds_per_clip"] is not None:
        when = f"about {human_seconds(c['seconds_per_clip'])} per clip" + \
               (" (sampling only)" if c["sampling_only"] else "")
    elif c["seconds_per_step"] is not None:
        when = f"about {human_seconds(c['seconds_per_step'])} per step (this report has no step count)"
    else:
        when = "no time estimate (nothing was measured to base one on)"
    mem = memory_text(doc)
    return (", ".join(what) or "the plan's canvas") + ": " + when + (f"; {mem}" if mem else "")


def time_source(doc: dict) -> tuple[str, str]:
    """(kind, sentence): where the time per clip comes from. kind: measured | table | native | other | none."""
    est, t, _, _, pe = parts(doc)
    h3 = _dict(doc.get("h3_model"))
    timing = _dict(est.get("timing"))
    src = str(t.get("source") or timing.get("source") or pe.time.source or "")
    kind = est.get("kind")
    if kind == "measured" or (kind is None and (h3.get("status") == "measured" or src.startswith("calibrated"))):
        how = ", ".join(str(x) for x in (f"ComfyUI {h3['comfyui_version']}" if h3.get("comfyui_version") else None,
                                         h3.get("device"), h3.get("dtype"), h3.get("attention")) if x)
        arch = _dict(h3.get("arch"))
        if arch.get("blocks_built") and arch.get("blocks_total"):
            how += f"; {arch['blocks_built']} of {arch['blocks_total']} blocks at full width"
        residual = _num(_dict(h3.get("fit")).get("residual_pct"))
        if residual is not None:
            how += f", fit within {residual:.1f}%"
        return "measured", "measured in ComfyUI's Python" + (f" ({how})" if how else f" ({src})" if src else "")
    why = h3.get("reason") if h3.get("status") in ("skipped", "error") else None
    if kind == "table" or src.startswith("table"):
        row = src.split(":", 1)[1].strip() if src.startswith("table") and ":" in src else src
        return "table", ("table estimate: no ComfyUI was measured" + (f" (throughput table: {row})" if row else "")
                         + (f"; {why}" if why else ""))
    if t or kind:
        return "other", src or str(est.get("note") or kind)
    if _num(est.get("seconds_per_step")) is not None:
        return "native", ("formula estimate from h3kit's own native-kernel rate: the model was not measured in "
                          "ComfyUI's Python, so treat it as rough")
    return "none", "no time figure: " + (why or "this calibration measured nothing the time could come from")


def warnings(doc: dict) -> list[str]:
    """Warnings for the first screen: the plan's, the calibration's own, and a clip that takes hours."""
    est, t, _, _, _ = parts(doc)
    out = []
    for group in (planned(doc).warnings, doc.get("warnings"), est.get("warnings"), t.get("warnings")):
        if isinstance(group, (list, tuple)):
            out += [str(w) for w in group if w and str(w) not in out]
    m = memory(doc)
    if m["peak"] is not None and m["total"] and m["peak"] > m["total"]:
        where = "GPU memory" if m["kind"] == "GPU" else "memory"
        out.insert(0, f"The estimated peak ({gib_of(m['peak'], None)}) is more than this machine's {where} "
                      f"({gib_of(m['total'], None)}): a run at these settings would swap or fail.")
    c = clip(doc)
    if c["seconds_per_clip"] is not None and c["seconds_per_clip"] > LONG_CLIP_S \
            and not any("clip" in w.lower() and ("take" in w.lower() or "hour" in w.lower()) for w in out):
        out.insert(0, f"One clip takes about {human_seconds(c['seconds_per_clip'])} on this machine at these "
                      "settings: see the faster options below, or run H3 on a GPU.")
    return out
