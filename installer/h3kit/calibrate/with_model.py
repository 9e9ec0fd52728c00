"""`h3kit calibrate --with-model`: the installed H3 workflow, run through ComfyUI's API.

What runs is what the user opens: the pack's text-to-video workflow in API
format (`workflows_api/`, written by deploy and apply from the same graph as
the UI file in `example_workflows/`), at the plan's canvas and frames, cut to
`MEASURE_STEPS` sampling steps so a measurement stays affordable on any
machine. Seconds per step come from two more runs once everything is loaded
(1 and 2 steps, new seeds so ComfyUI re-samples but keeps its loaded models):
their difference is one step with nothing else in it. `compare` puts that and
the server's peak RSS beside the calibration's estimate. Without an installed pack the same graph is generated from the plan
by the same code (h3kit.comfyui.workflows). Every node class and file name is
checked against the running server's /object_info first: a ComfyUI without
them gets "not run: ..." with the reason, never a guess.
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

# The sampler's own progress bar in ComfyUI's log: "2/2 [00:12<00:00,  6.08s/it]" (or "it/s" when fast).
BAR_START = re.compile(r"\b0/\d+ \[")
TQDM_DONE = re.compile(r"(\d+)/(\d+) \[[0-9:]+<[0-9:?]+,\s*([0-9.]+)(s/it|it/s)\]")

from h3kit.comfyui import client as comfy_api
from h3kit.comfyui import workflows
from h3kit.data.fingerprint import Fingerprint
from h3kit.data.plan_doc import Plan

MEASURE_STEPS = 2
RUN_TIMEOUT = 3600.0  # a step of a 20-33B model on a CPU can take long; still bounded
WORKFLOW = workflows.NAMES["t2v"]

# Loader node -> (the input that takes the file name, the models/ folder it reads).
LOADER_FILES = {
    "UNETLoader": ("unet_name", "diffusion_models"),
    "UnetLoaderGGUF": ("unet_name", "diffusion_models"),
    "CLIPLoader": ("clip_name", "text_encoders"),
    "CLIPLoaderGGUF": ("clip_name", "text_encoders"),
    "H3kitUnetLoaderGGUF": ("unet_name", "diffusion_models"),  # h3kit's own GGUF loaders (nodes/h3kit_gguf/node.py)
    "H3kitCLIPLoaderGGUF": ("clip_name", "text_encoders"),
    "H3kitStreamedDiTLoader": ("unet_name", "diffusion_models"),  # h3kit's streamed loaders read the same files
    "H3kitStreamedTextEncoderLoader": ("clip_name", "text_encoders"),
    "VAELoader": ("vae_name", "vae"),
}


def not_run(reason: str, **extra) -> dict:
    return {"status": "not run", "reason": f"not run: {reason}", **extra}


def workflow_for(install, plan: Plan, cat) -> tuple[dict, str]:
    """(API graph, where it came from): the installed pack's file, else the same graph made from the plan."""
    installed = Path(install.node_dir) / workflows.API_DIR / f"{WORKFLOW}.json" if getattr(install, "node_dir", None) \
        else None
    if installed is not None and installed.is_file():
        try:
            return json.loads(installed.read_text(encoding="utf-8")), str(installed)
        except (OSError, ValueError):
            pass  # unreadable: the generated graph is the same one
    files = workflows.pack_files(plan, cat, plan.profile or "")
    return json.loads(files[f"{workflows.API_DIR}/{WORKFLOW}.json"]), "generated from the plan"


def measured_copy(workflow: dict, steps: int = MEASURE_STEPS) -> tuple[dict, int | None]:
    """The graph with its sampling cut to `steps`; also the steps it had."""
    wf = copy.deepcopy(workflow)
    had = None
    for node in wf.values():
        if node.get("class_type") == "BasicScheduler":
            had = node["inputs"].get("steps")
            node["inputs"]["steps"] = min(int(had or steps), steps)
    return wf, had


def with_steps(workflow: dict, steps: int, seed: int) -> dict:
    """The graph sampling `steps` steps from `seed` (a changed seed makes ComfyUI sample again, loaders cached)."""
    wf = copy.deepcopy(workflow)
    for node in wf.values():
        inputs = node.get("inputs") or {}
        if node.get("class_type") in ("BasicScheduler", "KSampler", "KSamplerAdvanced") and "steps" in inputs:
            inputs["steps"] = steps
        if node.get("class_type") == "RandomNoise" and "noise_seed" in inputs:
            inputs["noise_seed"] = seed
        if node.get("class_type") in ("KSampler", "KSamplerAdvanced"):
            inputs["seed" if "seed" in inputs else "noise_seed"] = seed
    return wf


def sampler_rates(log_text: str) -> list[tuple[int, float]]:
    """(steps, seconds per step) of every finished sampling bar in ComfyUI's log (its tqdm), in order.

    Each bar starts at "0/N [" and tqdm prints its end twice (last update, close): the close counts."""
    bars = []
    for chunk in BAR_START.split(log_text or "")[1:]:
        done = [m for m in TQDM_DONE.finditer(chunk) if int(m[1]) == int(m[2]) > 0 and float(m[3]) > 0]
        if done:
            m = done[-1]
            bars.append((int(m[2]), float(m[3]) if m[4] == "s/it" else 1.0 / float(m[3])))
    return bars


def sampler_seconds_per_step(log_text: str, steps: int) -> float | None:
    """Seconds per step of the last finished `steps`-step sampling in ComfyUI's log (its tqdm bar), or None."""
    done = [r for n, r in sampler_rates(log_text) if n == int(steps)]
    return done[-1] if done else None


def step_seconds(run_one, workflow: dict, log_text=None) -> dict:
    """Seconds per step of a warm 2-step run (loaders and text encoding cached).

    From the sampler's own progress bar in ComfyUI's log when `log_text()` gives it (the decode and
    saving are outside it); else the warm 2-step run minus a warm 1-step run, whose difference is one
    step with nothing else in it. `run_one(graph)` returns timed_run's dict."""
    one = run_one(with_steps(workflow, 1, 101))
    if not one.get("ran"):
        return {"status": "error", "reason": f"the 1-step run failed: {one.get('message')}"}
    two = run_one(with_steps(workflow, 2, 102))
    if not two.get("ran"):
        return {"status": "error", "reason": f"the 2-step run failed: {two.get('message')}"}
    difference = two["seconds"] - one["seconds"]
    bars = [r for _n, r in sampler_rates(log_text())] if log_text is not None else []
    # The fastest of every sampling of this server (cold, 1-step, 2-step): other work on the machine only
    # ever slows a run down, so the fastest bar is the closest to what the model itself costs.
    sampler = min(bars) if bars else None
    per_step = sampler if sampler else (difference if difference > 0 else None)
    return {"status": "measured", "seconds_per_step": round(per_step, 4) if per_step else None,
            "sampler_seconds_per_step": [round(b, 4) for b in bars],
            "difference_seconds_per_step": round(difference, 4), "one_step_seconds": one["seconds"],
            "two_step_seconds": two["seconds"],
            "how": (f"the fastest of ComfyUI's sampler progress bars over its {len(bars)} samplings (cold, warm "
                    "1 and 2 steps)" if sampler else
                    "a warm 2-step run minus a warm 1-step run (loaders and text encoding cached)")}


def execution_seconds(entry: dict) -> float | None:
    """Start to success of one prompt from ComfyUI's own history timestamps (ms), finer than polling."""
    stamps = {}
    for item in (entry.get("status") or {}).get("messages") or []:
        if isinstance(item, (list, tuple)) and len(item) == 2 and isinstance(item[1], dict):
            stamps[item[0]] = item[1].get("timestamp")
    start, end = stamps.get("execution_start"), stamps.get("execution_success")
    if isinstance(start, (int, float)) and isinstance(end, (int, float)) and end >= start:
        return (end - start) / 1000.0
    return None


def timed_run(server, graph: dict, timeout: float) -> dict:
    """Queue one graph and wait for it: {"ran", "message", "seconds"} (ComfyUI's timestamps when it sends them)."""
    import time

    t0 = time.monotonic()
    entry = server.wait(server.queue(graph), timeout)
    wall = time.monotonic() - t0
    ran, sentence = comfy_api.history_outcome(entry)
    return {"ran": ran, "message": sentence, "seconds": execution_seconds(entry) or wall, "wall_seconds": wall}


def _pct(measured, estimated):
    if not measured or estimated is None:
        return None
    return round(100.0 * (estimated - measured) / measured, 1)


def compare(real: dict, est: dict) -> dict:
    """real_model.compare: measured beside estimated seconds per step and peak RSS, difference in percent."""
    t = est.get("time") or {}
    m = est.get("memory") or {}
    measured_step = (real.get("steps_timing") or {}).get("seconds_per_step")
    out = {"seconds_per_step": {"measured": measured_step, "estimated": t.get("seconds_per_step"),
                                "difference_pct": _pct(measured_step, t.get("seconds_per_step"))},
           "peak_rss_bytes": {"measured": real.get("peak_rss_bytes"), "estimated": m.get("peak_rss_bytes"),
                              "difference_pct": _pct(real.get("peak_rss_bytes"), m.get("peak_rss_bytes"))},
           "estimate_kind": est.get("kind"), "canvas": real.get("canvas"), "estimated_canvas": est.get("canvas")}
    peak_gpu = (real.get("device") or {}).get("peak_used_bytes")
    if peak_gpu:
        out["peak_gpu_bytes"] = {"measured": peak_gpu, "estimated": m.get("peak_gpu_bytes"),
                                 "difference_pct": _pct(peak_gpu, m.get("peak_gpu_bytes"))}
    return out


def needed_files(workflow: dict) -> list[tuple[str, str]]:
    """(models/ folder, file name) of every file the graph's loaders read."""
    out = []
    for node in workflow.values():
        spec = LOADER_FILES.get(node.get("class_type"))
        if spec and isinstance(node["inputs"].get(spec[0]), str):
            out.append((spec[1], node["inputs"][spec[0]]))
    return out


def missing_files(workflow: dict, models_dir: Path) -> list[str]:
    return [f"{name} is not in {models_dir / folder}" for folder, name in needed_files(workflow)
            if not (models_dir / folder / name).is_file()]


def canvas_of(workflow: dict) -> list | None:
    node = next((n for n in workflow.values() if n.get("class_type") == "MiniMaxH3ImageToVideo"), None)
    return [node["inputs"][k] for k in ("width", "height", "length")] if node else None


def preflight(workflow: dict, object_info: dict, min_version: str | None) -> str | None:
    """Why this ComfyUI cannot run the workflow (as a 'not run' reason), or None."""
    absent = comfy_api.missing_nodes(workflow, object_info)
    ours = [n for n in absent if n.startswith("H3kit")]
    theirs = [n for n in absent if not n.startswith("H3kit")]
    if theirs:
        since = f" (H3 support arrived in ComfyUI {min_version})" if min_version else ""
        return f"this ComfyUI has no node {', '.join(theirs)}{since}; update ComfyUI"
    if ours:
        return f"this ComfyUI has no node {', '.join(ours)}: the h3kit node pack is not installed here; run h3kit install"
    bad = comfy_api.combo_problems(workflow, object_info)
    if bad:
        return f"this ComfyUI cannot take the workflow: {bad[0]}"
    return None


def run(install, plan: Plan, fingerprint: Fingerprint, cat, *, cache_dir: Path, progress=None,
        timeout: float = RUN_TIMEOUT) -> dict:
    """Start ComfyUI with the profile's flags, run the installed workflow for a few steps, measure it, stop it."""
    from h3kit.comfyui.launcher import accepted_flags
    from h3kit.comfyui.locate import comfy_env, require_python
    from h3kit.core.errors import NotReady

    full, source = workflow_for(install, plan, cat)
    workflow, planned_steps = measured_copy(full)
    missing = missing_files(workflow, Path(install.path) / "models")
    if missing:
        return not_run("; ".join(missing) + " (see 'h3kit models plan')", workflow=source)
    try:
        python = require_python(install)
    except NotReady as exc:
        return not_run(exc.message)
    accepted, _detail = accepted_flags(install, cache_dir)
    args, dropped = comfy_api.launch_args(list(plan.settings.comfyui_args), accepted,
                                          bool(fingerprint.gpus))
    canvas = canvas_of(workflow)
    steps = MEASURE_STEPS if planned_steps is None else min(int(planned_steps), MEASURE_STEPS)
    base = {"workflow": source, "files": [f"{folder}/{name}" for folder, name in needed_files(workflow)],
            "canvas": canvas, "steps": steps,
            "workflow_steps": planned_steps, "comfyui_args": args, "dropped_args": dropped}
    say = progress or (lambda _msg: None)
    shown = f"{canvas[0]}x{canvas[1]}, {canvas[2]} frames" if canvas else "the workflow's canvas"
    from h3kit.calibrate.workdir import work_folder

    with work_folder(cache_dir, "real") as tmp:
        server = comfy_api.ComfyServer(install.path, python, args, Path(tmp), env=comfy_env(install))
        try:
            with server:
                say(f"calibrate --with-model: starting ComfyUI on {server.base} ...")
                started_s = server.start()
                reason = preflight(workflow, server.object_info(), cat.model.comfyui_min_version)
                if reason:
                    return not_run(reason, **base)
                say(f"calibrate --with-model: running the installed workflow at {shown}, {steps} steps ...")
                measured = comfy_api.run_workflow(server, workflow, timeout)
                if measured["ran"]:
                    say("calibrate --with-model: timing one step (a warm 1-step and 2-step run) ...")
                    measured["steps_timing"] = step_seconds(lambda graph: timed_run(server, graph, timeout), workflow,
                                                            lambda: server.log_tail(200_000))
                    measured["peak_rss_bytes"] = server.peak_rss_bytes
        except comfy_api.ComfyError as exc:
            return {"status": "error", "reason": f"the real workflow did not run: {exc}", **base}
    status = "measured" if measured["ran"] else "error"
    reason = (f"ran {WORKFLOW} at {shown}, {steps} steps in {measured['seconds']:.1f} s"
              if measured["ran"] else f"the real workflow failed: {measured['message']}")
    return {"status": status, "reason": reason, "startup_seconds": round(started_s, 2), **base, **measured}
