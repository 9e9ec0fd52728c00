"""A graph's cost on this machine, as the panel shows it and the guard says it: figures, a fix, one sentence.

Pure: the pack's `CostModel` (h3k_cost, the planner's own arithmetic) and a
`GraphReading` (graph.py) in, the estimate route's JSON out. The sentence
carries the figures a user acts on -- the peak against the budget and the
phase it happens in, or the minutes against the plan's target -- and the
nearest setting that fits (`CostModel.nearest_fit`), so both the panel and
the guard's refusal say what to change, not only that something is wrong.
"""

from __future__ import annotations

from ..h3k_cost import FAR_PAST_TARGET, GB, CostModel, Estimate, Workload, gb
from .graph import GraphReading

SCHEMA = "h3kit.estimate/1"
PARTS = {"dit": "DiT", "text_encoder": "text encoder"}


def estimate_for(model: CostModel, graph: GraphReading) -> dict:
    """The estimate route's document for a graph that holds an H3 video node."""
    work, notes = workload_of(model, graph)
    est = model.estimate(work)
    fix = None if est.fits and not est.slow else _fix(model, work)
    fix_est = model.estimate(fix) if fix is not None else None
    figures = est.to_json()
    return {"schema": SCHEMA, "available": True, **{k: figures[k] for k in (
                "fits", "slow", "minutes", "target_minutes", "canvas", "frames", "steps", "cfg", "peak_gpu_bytes",
                "peak_ram_bytes", "budget", "phases", "short")},
            **_graph_part(graph), "fix": _fix_json(fix_est), "message": message(est, fix_est),
            "notes": notes + _file_notes(model, graph)}


def unavailable(graph: GraphReading, problem: str) -> dict:
    """What the route answers when the pack has no usable cost model: the graph's reading and why."""
    return {"schema": SCHEMA, "available": False, "message": problem,
            "canvas": [graph.width, graph.height], "frames": graph.frames, "steps": graph.steps, "cfg": graph.cfg,
            **_graph_part(graph), "notes": list(graph.notes)}


def workload_of(model: CostModel, graph: GraphReading) -> tuple[Workload, list[str]]:
    """The graph's workload; the plan's steps / cfg where no node of the graph sets them (said in a note)."""
    notes = list(graph.notes)
    steps, cfg = graph.steps, graph.cfg
    if steps is None:
        steps = model.defaults.steps
        notes.append(f"no sampler in the graph sets the steps; the figures use the plan's {steps}")
    if cfg is None:
        cfg = model.defaults.cfg
        notes.append(f"no guider in the graph sets cfg; the figures use the plan's {cfg:g}")
    return Workload(graph.width, graph.height, graph.frames, steps, cfg), notes


def message(est: Estimate, fix: Estimate | None) -> str:
    """One sentence: the figures when the run fits in time, else what is short or slow and the fix."""
    if not est.fits:
        needs = ", and ".join(f"{gb(need)} {what} at its {phase} peak, the budget is {gb(have)}"
                              for what, need, have, phase in est.short)
        text = f"{run_words(est.workload)} needs {needs}"
        if fix is None:
            return text + "; nothing on this plan's canvas and frame ladders fits, so run 'h3kit apply' to plan again"
        return text + f"; {run_words(fix.workload, est.workload)} fits ({_fix_figures(est, fix)})"
    if est.slow:
        text = (f"{run_words(est.workload)} fits but takes {minutes_words(est.minutes)} a clip, more than "
                f"{FAR_PAST_TARGET:g} times this plan's {est.target_minutes:g} min target")
        if fix is None:
            return text + "; nothing smaller on this plan's ladders comes within that"
        return text + f"; {run_words(fix.workload, est.workload)} takes {minutes_words(fix.minutes)}"
    return f"{minutes_words(est.minutes)} a clip, peaks at {peaks_words(est)}"


def run_words(work: Workload, asked: Workload | None = None) -> str:
    """"864x480 with 56 frames", with the steps when they differ from what was asked."""
    text = f"{work.width}x{work.height} with {work.frames} frames"
    return text + (f" at {work.steps} steps" if asked is not None and asked.steps != work.steps else "")


def minutes_words(minutes: float) -> str:
    """A clip's time as the panel shows it too (h3kit_panel.js `duration`): "about 11 min", "about 2 h 50 min"."""
    if minutes < 1:
        return "under a minute"
    if minutes < 10:
        return f"about {minutes:.1f} min".replace(".0 min", " min")
    if minutes < 60:
        return f"about {round(minutes)} min"
    if minutes < 48 * 60:
        whole = round(minutes)
        return f"about {whole // 60} h {whole % 60} min"
    return f"about {round(minutes / (24 * 60))} days"


def peaks_words(est: Estimate) -> str:
    """"12.1 of 13.2 GB RAM and 7.1 of 8.0 GB GPU" (RAM alone on a machine without a GPU budget)."""
    ram = f"{est.peak_ram_bytes / GB:.1f} of {gb(est.budget_ram_bytes)} RAM"
    if est.budget_gpu_bytes is None:
        return ram
    return f"{ram} and {est.peak_gpu_bytes / GB:.1f} of {gb(est.budget_gpu_bytes)} GPU"


def _fix_figures(est: Estimate, fix: Estimate) -> str:
    """The fix's peak of each pool the run was short of, and its minutes: "(12.1 GB, about 11 min)"."""
    short = list(dict.fromkeys(what for what, *_ in est.short))
    peaks = {"RAM": fix.peak_ram_bytes, "GPU": fix.peak_gpu_bytes}
    if len(short) == 1:
        shown = [gb(peaks[short[0]])]
    else:
        shown = [f"{gb(peaks[what])} {what}" for what in short]
    return ", ".join(shown + [minutes_words(fix.minutes)])


def _fix(model: CostModel, work: Workload) -> Workload | None:
    fix = model.nearest_fit(work)
    same = fix is not None and (fix.width, fix.height, fix.frames, fix.steps) == \
        (work.width, work.height, work.frames, work.steps)
    return None if same else fix  # the plan's own setting, asked already, is no fix


def _fix_json(fix: Estimate | None) -> dict | None:
    if fix is None:
        return None
    w = fix.workload
    return {"canvas": [w.width, w.height], "frames": w.frames, "steps": w.steps, "minutes": fix.minutes,
            "peak_gpu_bytes": fix.peak_gpu_bytes, "peak_ram_bytes": fix.peak_ram_bytes, "fits": fix.fits}


def _graph_part(graph: GraphReading) -> dict:
    return {"h3_nodes": [n.to_json() for n in graph.h3_nodes], "targets": dict(graph.targets),
            "target_inputs": dict(graph.inputs), "guard_node": graph.guard_node}


def _file_notes(model: CostModel, graph: GraphReading) -> list[str]:
    """A note for each weight file the graph loads that is not the plan's: the figures are the plan's files'."""
    notes = []
    for part, label in PARTS.items():
        loaded, planned = graph.files.get(part), model.files.get(part)
        if loaded and planned and _base(loaded) != _base(planned):
            notes.append(f"the graph loads {loaded} as its {label} and the plan {planned}: the figures are for "
                         "the plan's files")
    return notes


def _base(name: str) -> str:
    return name.replace("\\", "/").rsplit("/", 1)[-1]
