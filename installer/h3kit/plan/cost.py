"""The plan's cost model, handed to the node pack: what a graph costs at another canvas, frames and steps.

`cost_model` reads the chosen candidate's estimate at its own canvas and
splits each phase into what the plan decided (files, how the DiT is held, the
budgets) and the workload (activations, decoded video), whose rules and the
clip-time formula live in the pack's `h3k_cost` -- the planner's own arithmetic
calls them too. The plan document carries the model as `cost`, and
deploy writes it into the pack as `h3kit_cost.json`, so the panel, the routes
and the queue guard price a graph as the planner would.

`pinned_estimate` is the planner's memory model at another canvas with the
plan's loading decisions kept (preload, shard, page cache, read-ahead depth):
what the plan's `estimates.workflow` reports for the workflows' defaults, and
what tests/plan/test_cost_parity.py holds the pack's figure to.
"""

from __future__ import annotations

from dataclasses import replace

from h3kit.bundled import h3k_cost
from h3kit.data.catalog import Catalog
from h3kit.plan.budget import Estimate, memory_estimate
from h3kit.plan.timing import sequence_rule


def pinned_estimate(cat: Catalog, best, canvas: tuple, frames: int) -> Estimate:
    """`best`'s files and loading decisions (a search.Candidate) at `canvas` x `frames`, by the planner's memory model."""
    est, settings, budget = best.est, best.settings, best.budget
    discrete = budget.gpu_bytes is not None and not budget.unified
    if not est.streamed and discrete and best.stream.policy.dynamic_vram is not True:
        settings = settings.but(stream_from="ram")  # as search._space holds ComfyUI's own loading
    settings = settings.but(preload_bytes=est.preload, shard_size_bytes=est.shard,
                            page_cache=est.page_cache or settings.page_cache)
    depth = best.stream.policy.depth if est.streamed else None
    return memory_estimate(cat, budget, settings, replace(best.choice, canvas=tuple(canvas), frames=int(frames)), depth)


def _fixed(est: Estimate, act: int, video: int, on_gpu: bool, on_ram: bool) -> dict:
    """Each phase less the workload at the estimate's own canvas: [gpu | None, ram]."""
    fixed = {}
    for phase in h3k_cost.PHASES:
        gpu, ram = est.phases[phase]["gpu_bytes"], est.phases[phase]["ram_bytes"]
        if phase == "sample":
            gpu = None if gpu is None else gpu - act * on_gpu
            ram -= act * on_ram
        elif phase == "decode":
            ram -= video
        fixed[phase] = [gpu, ram]
    return fixed


def cost_model(cat: Catalog, best) -> h3k_cost.CostModel:
    """The pack's cost model for the plan `best` (a search.Candidate) makes."""
    est, budget, ch, d = best.est, best.budget, best.choice, best.defaults
    gpu = budget.gpu_bytes
    on_gpu, on_ram = gpu is not None, gpu is None or budget.unified
    mem = cat.memory
    video = h3k_cost.decoded_video_bytes(*ch.canvas, ch.frames, mem.decoded_video_bytes_per_pixel_frame)
    in_flight = None
    if gpu is not None and not est.resident and est.preload == 0:  # budget._shortfalls' check, beside the activations
        in_flight = (0 if budget.unified else 2 * est.shard) + cat.comfyui.inference_minimum
    rule = sequence_rule(cat)
    if rule is None:
        raise ValueError("the catalog has no `sequence:` section, which the pack's cost model needs")
    return h3k_cost.CostModel(
        budget_gpu_bytes=gpu, budget_ram_bytes=budget.ram_bytes, unified=budget.unified,
        fixed=_fixed(est, est.activations, video, on_gpu, on_ram), activation_on_gpu=on_gpu, activation_on_ram=on_ram,
        in_flight_fixed_bytes=in_flight, token_px=cat.tokens.spatial_tokens_px,
        temporal_compression=cat.tokens.temporal_compression, activation_per_token=mem.activation_bytes_per_token,
        activation_fixed=est.activations - est.tokens * mem.activation_bytes_per_token,
        video_bytes_per_pixel_frame=mem.decoded_video_bytes_per_pixel_frame, sequence=rule, blocks=cat.blocks,
        rates={k: float(best.clip_rates[k]) for k in h3k_cost.RATE_KEYS if best.clip_rates.get(k) is not None},
        pass_overhead=float(best.stream.pass_overhead if best.stream else 0.0), target_minutes=d.get("target_minutes"),
        canvas_ladder=tuple(tuple(c) for c in cat.canvas_ladder), frames_ladder=tuple(cat.frames_ladder),
        defaults=h3k_cost.Workload(*d["canvas"], d["frames"], d["steps"], float(d["cfg"])),
        max_canvas=tuple(ch.canvas), max_frames=ch.frames,
        files={w.part: w.file.name for w in (ch.dit, ch.te, ch.vae, ch.audio_vae)},
        source=str(best.timing.get("source", "")), machine=_machine(budget))


def _machine(budget) -> str:
    """The budgets' machine in words: "cuda, 8.0 GB GPU for ComfyUI of 8.6 GB, 13.2 GB RAM of 16.0 GB"."""
    ram = f"{h3k_cost.gb(budget.ram_bytes)} RAM of {h3k_cost.gb(budget.ram_total)}"
    if budget.gpu_bytes is None:
        return f"CPU only, {ram}"
    pool = "unified memory" if budget.unified else "GPU"
    return f"{budget.backend}, {h3k_cost.gb(budget.gpu_bytes)} {pool} for ComfyUI of {h3k_cost.gb(budget.gpu_total)}, {ram}"

