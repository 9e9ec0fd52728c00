"""`h3kit calibrate --with-model`: the installed H3 workflow, run through ComfyUI's API.

What runs is what the user opens: the pack's text-to-video workflow in API
format (`workflows_api/`, written by deploy and apply from the same graph as
the UI file in `example_workflows/`), at the plan's canvas and frames, cut to
`MEASURE_STEPS` sampling steps so a measurement stays affordable on any
machine. Without an installed pack the same graph is generated from the plan
by the same code (h3kit.comfyui.workflows). Every node class and file name is
checked against the running server's /object_info first: a ComfyUI without
them gets "not run: ..." with the reason, never a guess.
"""

from __future__ import annotations

import copy
import json
import tempfile
from pathlib import Path

from h3kit.comfyui import client as comfy_api
from h3kit.comfyui import workflows

MEASURE_STEPS = 2
RUN_TIMEOUT = 3600.0  # a step of a 20-33B model on a CPU can take long; still bounded
WORKFLOW = workflows.NAMES["t2v"]

# Loader node -> (the input that takes the file name, the models/ folder it reads).
LOADER_FILES = {
    "UNETLoader": ("unet_name", "diffusion_models"),
    "UnetLoaderGGUF": ("unet_name", "diffusion_models"),
    "CLIPLoader": ("clip_name", "text_encoders"),
    "CLIPLoaderGGUF": ("clip_name", "text_encoders"),
    "VAELoader": ("vae_name", "vae"),
}


def not_run(reason: str, **extra) -> dict:
    return {"status": "not run", "reason": f"not run: {reason}", **extra}


def workflow_for(install, plan: dict, cat) -> tuple[dict, str]:
    """(API graph, where it came from): the installed pack's file, else the same graph made from the plan."""
    installed = Path(install.node_dir) / workflows.API_DIR / f"{WORKFLOW}.json" if getattr(install, "node_dir", None) \
        else None
    if installed is not None and installed.is_file():
        try:
            return json.loads(installed.read_text(encoding="utf-8")), str(installed)
        except (OSError, ValueError):
            pass  # unreadable: the generated graph is the same one
    files = workflows.pack_files(plan, cat, plan.get("profile", ""))
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


def run(install, plan: dict, fingerprint: dict, cat, *, cache_dir: Path, progress=None,
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
    args, dropped = comfy_api.launch_args((plan.get("settings") or {}).get("comfyui_args") or [], accepted,
                                          bool(fingerprint.get("gpus")))
    canvas = canvas_of(workflow)
    steps = MEASURE_STEPS if planned_steps is None else min(int(planned_steps), MEASURE_STEPS)
    base = {"workflow": source, "files": [f"{folder}/{name}" for folder, name in needed_files(workflow)],
            "canvas": canvas, "steps": steps,
            "workflow_steps": planned_steps, "comfyui_args": args, "dropped_args": dropped}
    say = progress or (lambda _msg: None)
    shown = f"{canvas[0]}x{canvas[1]}, {canvas[2]} frames" if canvas else "the workflow's canvas"
    with tempfile.TemporaryDirectory(prefix="h3kit-real-") as tmp:
        server = comfy_api.ComfyServer(install.path, python, args, Path(tmp), env=comfy_env(install))
        try:
            with server:
                say(f"calibrate --with-model: starting ComfyUI on {server.base} ...")
                started_s = server.start()
                reason = preflight(workflow, server.object_info(), cat.data["model"].get("comfyui_min_version"))
                if reason:
                    return not_run(reason, **base)
                say(f"calibrate --with-model: running the installed workflow at {shown}, {steps} steps ...")
                measured = comfy_api.run_workflow(server, workflow, timeout)
        except comfy_api.ComfyError as exc:
            return {"status": "error", "reason": f"the real workflow did not run: {exc}", **base}
    status = "measured" if measured["ran"] else "error"
    reason = (f"ran {WORKFLOW} at {shown}, {steps} steps in {measured['seconds']:.1f} s"
              if measured["ran"] else f"the real workflow failed: {measured['message']}")
    return {"status": status, "reason": reason, "startup_seconds": round(started_s, 2), **base, **measured}
