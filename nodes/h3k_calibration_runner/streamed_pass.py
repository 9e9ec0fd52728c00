"""The installed workflow's streamed DiT pass, timed whole: what a sampling step pays when the DiT streams.

`measure_streamed_pass(job, comfyui, quick, progress)` returns the runner's
`streamed_pass` block. The held fit (h3_model.py) times ComfyUI's H3 with its
weights in memory; what streaming adds to a call was composed from separate
parts (the disk's rate, the in-place read, the wait behind the read-ahead),
and on a 2-core CPU reading past the page cache it missed a third of the
step: the reads, the ring, the widening to the compute dtype and the compute
all share the same cores and memory bus, and no part measured alone sees
that. So this part runs the pass exactly as the installed workflow does:

1. ComfyUI's own `nodes.load_custom_node` loads the pack from the ComfyUI's
   `custom_nodes` (the node a workflow names, not a copy of its code), and
   the job's `h3_streamed.node` (H3kitStreamedDiTLoader) loads the plan's
   DiT file with the installed workflow's own inputs (preload, shard,
   prefetch, page_cache);
2. `apply_model` runs at the workflow's sequence (the canvas, frames and
   prompt rows h3_model timed at), once cold and then warm, sampler-shaped
   inputs from h3_model.inputs_for;
3. the result is seconds per call (the median of the warm calls) with the
   exact token count, so h3kit divides it by the held fit's call at the same
   tokens: the measured share streaming adds (h3kit.calibrate.decisions).

The file's folder is added to ComfyUI's `diffusion_models` list with
`folder_paths.add_model_folder_path`, as an extra_model_paths.yaml would, so
a file in a shared folder loads the same.
"""

from __future__ import annotations

import asyncio
import inspect
import os
import statistics
import sys
import time

from . import comfy_env
from .comfy_env import Skip
from .h3_model import canvas_of, inputs_for, prompt_rows, resolve_arch
from .job import Job
from .measure import PeakSampler, Progress, current_rss

LOADER_INPUTS = ("weight_dtype", "preload_bytes", "shard_size_bytes", "prefetch_blocks", "page_cache")
WARM_CALLS = {True: 2, False: 3}  # --quick, full
ONE_WARM_AFTER_S = 120.0  # a cold call longer than this: one warm call is enough (each reads the whole file)


def _await(value):
    return asyncio.run(value) if inspect.iscoroutine(value) else value


def loader_node(comfyui: str, pack: str, node: str):
    """ComfyUI's `nodes` with the pack loaded by ComfyUI's own loader; the loader node's class (Skip without it)."""
    try:
        import nodes  # ComfyUI's nodes.py, importable once comfy_env put the ComfyUI on sys.path
    except Exception as exc:
        raise Skip(f"ComfyUI's nodes module did not import ({type(exc).__name__}: {exc})") from None
    if node not in nodes.NODE_CLASS_MAPPINGS:
        if not os.path.isdir(pack):
            raise Skip(f"the pack is not installed at {pack}")
        loaded = _await(nodes.load_custom_node(pack))
        if not loaded or node not in nodes.NODE_CLASS_MAPPINGS:
            raise Skip(f"ComfyUI loaded the pack at {pack} without the node {node}")
    return nodes.NODE_CLASS_MAPPINGS[node]


def load_streamed(env: dict, loader_cls, dit_path: str, inputs: dict):
    """The DiT through the pack's loader node, as the workflow's node runs it: its MODEL output (a patcher)."""
    import folder_paths

    folder, name = os.path.split(os.path.abspath(dit_path))
    if not os.path.isfile(dit_path):
        raise Skip(f"the plan's DiT file is not at {dit_path}")
    folder_paths.add_model_folder_path("diffusion_models", folder)
    kwargs = {k: inputs[k] for k in LOADER_INPUTS if k in inputs}
    loader = loader_cls()
    (patcher,) = getattr(loader, loader_cls.FUNCTION)(unet_name=name, **kwargs)
    env["mm"].load_models_gpu([patcher])
    return patcher


def time_pass(env: dict, model, tokens: int, text_tokens: int, hidden: int, quick: bool,
              progress: Progress) -> dict:
    """apply_model at `tokens`: one cold call, then the warm ones (ONE_WARM_AFTER_S caps them)."""
    torch = env["torch"]
    kwargs, exact = inputs_for(env, model, tokens, text_tokens, hidden)
    calls: list[float] = []
    with torch.inference_mode(), PeakSampler() as peak:
        want = 1 + WARM_CALLS[bool(quick)]
        while len(calls) < want:
            t0 = time.perf_counter()
            model.apply_model(**kwargs)
            comfy_env.sync(env)
            calls.append(time.perf_counter() - t0)
            progress("streamed pass", len(calls), want)
            if len(calls) == 1 and calls[0] > ONE_WARM_AFTER_S:
                want = 2
    warm = calls[1:]
    return {"tokens": exact, "cold_s": calls[0], "warm_s": warm, "seconds_per_call": statistics.median(warm),
            "spread": (max(warm) - min(warm)) / statistics.median(warm) if len(warm) > 1 else None,
            "peak_rss_bytes": peak.peak, "peak_device_bytes": comfy_env.device_peak(env)}


def measure_streamed_pass(job: Job, comfyui: str | None, quick: bool, progress: Progress,
                          canvas: dict | None = None) -> dict:
    """The `streamed_pass` block; `canvas`: h3_model's (its rows already counted), else counted here."""
    spec = dict(job.h3_streamed or {})
    if not spec:
        return {"status": "skipped", "reason": "the plan does not stream the DiT"}
    started = time.perf_counter()
    try:
        env = comfy_env.import_comfy(comfyui, job)
        loader_cls = loader_node(str(comfyui), str(spec.get("pack") or ""), str(spec.get("node") or ""))
        patcher = load_streamed(env, loader_cls, str(spec.get("dit_path") or ""), dict(spec.get("inputs") or {}))
    except Skip as why:
        return {"status": "skipped", "reason": str(why)}
    arch = resolve_arch(job)
    canvas = canvas if canvas and canvas.get("tokens") else prompt_rows(canvas_of(job), job.h3_prompt)
    progress("streamed pass", 0, 1 + WARM_CALLS[bool(quick)])
    rss = current_rss() or 0
    timed = time_pass(env, patcher.model, int(canvas["tokens"]), int(canvas["text_tokens"]), int(arch["hidden"]),
                      quick, progress)
    out = {"status": "measured", "node": spec.get("node"), "dit_path": spec.get("dit_path"),
           "inputs": {k: spec["inputs"][k] for k in LOADER_INPUTS if k in (spec.get("inputs") or {})},
           "blocks": len(patcher.model.diffusion_model.blocks), "dtype": str(patcher.model.get_dtype_inference())
           .replace("torch.", ""), "cpu_count": os.cpu_count(), "rss_before_bytes": rss, **timed}
    del patcher
    if hasattr(env["mm"], "unload_all_models"):
        env["mm"].unload_all_models()
    env["mm"].soft_empty_cache()
    out["seconds"] = time.perf_counter() - started
    sys.stdout.flush()
    return out
