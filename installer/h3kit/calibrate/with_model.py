"""`h3kit calibrate --with-model`: the smallest real H3 workflow through ComfyUI's API.

The workflow: 256x256, 22 frames, 1 sampling step, the plan's DiT, text
encoder and video VAE, each loaded by the loader node the catalog names.

Where the node classes come from (read, not guessed):
- ComfyUI's own H3 support, Comfy-Org/ComfyUI comfy_extras/nodes_minimax_h3.py
  (commit 542de101, the 0.38 line): `MiniMaxH3ImageToVideo` takes clip, vae,
  prompt, width, height, length and returns (positive conditioning, the
  joint video+audio latent); the length snaps to the 17k+5 frame grid, so
  22 frames is one of H3's own lengths.
- Sampling with ComfyUI's core custom-sampler nodes (RandomNoise,
  BasicGuider, KSamplerSelect, BasicScheduler, SamplerCustomAdvanced), the
  way H3 graphs published by users drive it, and VAEDecode on the sampled
  latent (the video part; the audio VAE is not needed to measure the video).
- CLIPLoader's type "minimax": seen in users' H3 graphs, not in a ComfyUI
  source read here, so it is checked at run time against /object_info like
  every class and file name: a ComfyUI without them gets "not run: ..." with
  the reason, never a guess.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from h3kit.calibrate.estimates import CALIBRATION_CANVAS
from h3kit.comfy import client as comfy_api

CANVAS = CALIBRATION_CANVAS  # width, height, frames: the smallest H3 canvas, the one the scaled DiT is sized for
STEPS = 1
RUN_TIMEOUT = 3600.0  # one step of a 20-33B model on a CPU can take long; still bounded
PROMPT = "a red ball rolling across a wooden table"  # any short prompt: only time and memory are measured

# Loader node -> (the input that takes the file name, the other inputs it needs).
LOADER_INPUTS = {
    "UNETLoader": ("unet_name", {"weight_dtype": "default"}),
    "UnetLoaderGGUF": ("unet_name", {}),
    "CLIPLoader": ("clip_name", {"type": "minimax"}),
    "CLIPLoaderGGUF": ("clip_name", {"type": "minimax"}),
    "VAELoader": ("vae_name", {}),
}
PLAN_PARTS = (("dit", "dit_weights", "DiT"), ("text_encoder", "text_encoder_weights", "text encoder"),
              ("vae", "vae_weights", "video VAE"))


def not_run(reason: str, **extra) -> dict:
    return {"status": "not run", "reason": f"not run: {reason}", **extra}


def loader_node(weight) -> dict:
    """The ComfyUI loader node for one catalog weight (its `file.loader` and `file.name`)."""
    loader = weight.file.get("loader")
    if loader not in LOADER_INPUTS:
        raise ValueError(f"the catalog's loader {loader!r} for {weight.id} is not one h3kit can drive")
    name_input, fixed = LOADER_INPUTS[loader]
    return {"class_type": loader, "inputs": {name_input: weight.file["name"], **fixed}}


def h3_workflow(dit, text_encoder, vae, *, canvas=CANVAS, steps: int = STEPS, seed: int = 0) -> dict:
    """ComfyUI API-format workflow: load, encode the prompt, one sampling step, decode, preview."""
    w, h, frames = canvas
    return {
        "1": loader_node(dit),
        "2": loader_node(text_encoder),
        "3": loader_node(vae),
        "4": {"class_type": "MiniMaxH3ImageToVideo",
              "inputs": {"clip": ["2", 0], "vae": ["3", 0], "prompt": PROMPT, "width": w, "height": h,
                         "length": frames}},
        "5": {"class_type": "RandomNoise", "inputs": {"noise_seed": seed}},
        "6": {"class_type": "BasicGuider", "inputs": {"model": ["1", 0], "conditioning": ["4", 0]}},
        "7": {"class_type": "KSamplerSelect", "inputs": {"sampler_name": "euler"}},
        "8": {"class_type": "BasicScheduler", "inputs": {"model": ["1", 0], "scheduler": "simple",
                                                         "steps": steps, "denoise": 1.0}},
        "9": {"class_type": "SamplerCustomAdvanced",
              "inputs": {"noise": ["5", 0], "guider": ["6", 0], "sampler": ["7", 0], "sigmas": ["8", 0],
                         "latent_image": ["4", 1]}},
        "10": {"class_type": "VAEDecode", "inputs": {"samples": ["9", 0], "vae": ["3", 0]}},
        "11": {"class_type": "PreviewImage", "inputs": {"images": ["10", 0]}},
    }


def present_weights(cat, plan: dict, models_dir: Path) -> tuple[dict, list[str]]:
    """({part: weight}, missing sentences): the plan's choice when its file is there, else any present variant."""
    settings = plan.get("settings") or {}
    pools = {"dit": cat.dit, "text_encoder": cat.text_encoder, "vae": cat.vae}
    chosen, missing = {}, []
    for part, key, label in PLAN_PARTS:
        planned = cat.weight(settings.get(key) or "")
        pool = ([planned] if planned else []) + [w for w in pools[part] if w is not planned]
        here = [w for w in pool if w.file.get("name") and w.file.get("folder") and w.file.get("loader") in LOADER_INPUTS
                and (models_dir / w.file["folder"] / w.file["name"]).is_file()]
        if here:
            chosen[part] = here[0]
        else:
            want = planned or pool[0]
            missing.append(f"the {label} ({want.file.get('name')}) is not in {models_dir / want.file.get('folder', '')}")
    return chosen, missing


def preflight(workflow: dict, object_info: dict, min_version: str | None) -> str | None:
    """Why this ComfyUI cannot run the workflow (as a 'not run' reason), or None."""
    absent = comfy_api.missing_nodes(workflow, object_info)
    if absent:
        since = f" (H3 support arrived in ComfyUI {min_version})" if min_version else ""
        return f"this ComfyUI has no node {', '.join(absent)}{since}; update ComfyUI"
    bad = comfy_api.combo_problems(workflow, object_info)
    if bad:
        return f"this ComfyUI cannot take the workflow: {bad[0]}"
    return None


def run(install, plan: dict, fingerprint: dict, cat, *, cache_dir: Path, progress=None,
        timeout: float = RUN_TIMEOUT) -> dict:
    """Start ComfyUI with the profile's flags, run the smallest H3 workflow once, measure it, stop it."""
    from h3kit.comfy.launcher import accepted_flags
    from h3kit.comfy.locate import comfy_env, require_python
    from h3kit.core.errors import NotReady

    models_dir = Path(install.path) / "models"
    chosen, missing = present_weights(cat, plan, models_dir)
    if missing:
        return not_run("; ".join(missing) + " (see 'h3kit models plan')")
    try:
        python = require_python(install)
    except NotReady as exc:
        return not_run(exc.message)
    workflow = h3_workflow(chosen["dit"], chosen["text_encoder"], chosen["vae"])
    files = {part: w.file["name"] for part, w in chosen.items()}
    accepted, _detail = accepted_flags(install, cache_dir)
    args, dropped = comfy_api.launch_args((plan.get("settings") or {}).get("comfyui_args") or [], accepted,
                                          bool(fingerprint.get("gpus")))
    base = {"files": files, "canvas": list(CANVAS), "steps": STEPS, "comfyui_args": args, "dropped_args": dropped}
    say = progress or (lambda _msg: None)
    with tempfile.TemporaryDirectory(prefix="h3kit-real-") as tmp:
        server = comfy_api.ComfyServer(install.path, python, args, Path(tmp), env=comfy_env(install))
        try:
            with server:
                say(f"calibrate --with-model: starting ComfyUI on {server.base} ...")
                started_s = server.start()
                reason = preflight(workflow, server.object_info(), cat.data["model"].get("comfyui_min_version"))
                if reason:
                    return not_run(reason, **base)
                say("calibrate --with-model: running 256x256x22, 1 step (this loads the real weights) ...")
                measured = comfy_api.run_workflow(server, workflow, timeout)
        except comfy_api.ComfyError as exc:
            return {"status": "error", "reason": f"the real workflow did not run: {exc}", **base}
    status = "measured" if measured["ran"] else "error"
    reason = (f"ran {files['dit']} at 256x256, 22 frames, 1 step in {measured['seconds']:.1f} s"
              if measured["ran"] else f"the real workflow failed: {measured['message']}")
    return {"status": status, "reason": reason, "startup_seconds": round(started_s, 2), **base, **measured}
