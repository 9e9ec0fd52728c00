"""`h3kit plan`: choose a profile and settings for this machine, with estimates and reasons."""

from __future__ import annotations

from pathlib import Path

from h3kit.cli.context import Context, Outcome
from h3kit.core.units import gb, human_seconds
from h3kit.data.plan_doc import Estimates, MemoryBudget, Plan, PlanSettings
from h3kit.steps.common import Fingerprinted, load_config
from h3kit.steps.planning import plan_for

HELP = "choose a profile and settings for this machine, with estimates and reasons"


def add_arguments(p) -> None:
    p.add_argument("--fingerprint", metavar="FILE", help="plan for a saved fingerprint JSON instead of this machine")
    p.add_argument("--profile", metavar="NAME", help="use this profile instead of the configured one")
    p.add_argument("--format-probe", metavar="FILE", help="plan with a saved h3kit.format_probe/1 document (which "
                   "weight formats ran on this machine's device); its measurements beat the catalog's reports")
    p.add_argument("--comfyui-version", metavar="X.Y.Z", help="plan for a ComfyUI of this version: the files it "
                   "can load and the flags it needs (install, apply and doctor use the found ComfyUI's own)")


def comfyui_version(text: str | None) -> str | None:
    """--comfyui-version, checked; BadInput (exit 2) when it is not a version."""
    if text is None:
        return None
    from h3kit.core.errors import BadInput
    from h3kit.data.comfy_versions import version_of

    if version_of(text) is None:
        raise BadInput(f"--comfyui-version {text!r} is not a ComfyUI version.",
                       "Give it as ComfyUI numbers its releases, like 0.35.0 (comfyui_version.py in its folder).")
    return text


def format_probe(path: str | None):
    """The probe document FILE, typed (h3kit.data.format_evidence), or None without one; BadInput when unreadable."""
    if not path:
        return None
    from h3kit.core.errors import BadInput
    from h3kit.data import format_evidence

    try:
        return format_evidence.parse(format_evidence.load(Path(path)), Path(path))
    except (OSError, ValueError) as exc:  # BadProbe is a ValueError: no JSON, or nested too deep
        raise BadInput(f"The format probe {path} cannot be read ({exc}).",
                       "Pass a file written by h3kit's format probe (schema h3kit.format_probe/1), or leave "
                       "--format-probe out.") from exc


def _workflow_line(s: PlanSettings, e: Estimates) -> str:
    """What the generated workflows open with, and how long one clip of it takes."""
    if s.canvas is None:
        return "workflows (no defaults in this plan)"
    lora = f", LoRA {s.lora}" if s.lora else ""
    line = (f"workflows {s.canvas[0]}x{s.canvas[1]}, {s.frames} frames, {s.steps} steps "
            f"(preset {s.preset or '?'}{lora})")
    clip = e.time.seconds_per_clip
    if clip is not None:
        line += f": about {human_seconds(clip)} per clip"
        if s.target_minutes is not None:
            line += f", target {s.target_minutes:g} min"
    return line


def _streaming_line(s: PlanSettings, b: MemoryBudget) -> str:
    streaming = s.streaming
    if streaming.enabled:
        line = (f"streaming on: h3kit's streamed loader keeps {'?' if streaming.resident_blocks is None else streaming.resident_blocks} of "
                f"{streaming.blocks or '?'} DiT blocks resident, {streaming.prefetch_blocks or 1} read ahead")
        run = streaming.streamed
        if run is not None and run.held_peak_ram_bytes is not None:
            line += f" (held whole it would peak at {gb(run.held_peak_ram_bytes)} of RAM)"
        if run is not None and run.pass_overhead:
            line += f"; about {run.pass_overhead:.0%} more time per model call (assumed)"
        return line
    if b.gpu_bytes is not None:
        return f"streaming preload {gb(s.preload_bytes)}, shard {gb(s.shard_size_bytes)} from {s.stream_from}"
    return "streaming none: the DiT is held in RAM"


def render(plan: Plan) -> str:
    s, e, b = plan.settings, plan.estimates, plan.budget
    lines = [
        f"profile   {plan.profile}   fits: {'yes' if plan.fits else 'NO'}",
        f"DiT       {s.dit_weights}   text encoder {s.text_encoder_weights}   VAE {s.vae_weights}",
        f"limits    {s.max_canvas[0]}x{s.max_canvas[1]}, up to {s.max_frames} frames (what fits in memory)",
        _workflow_line(s, e),
        _streaming_line(s, b),
        f"VAE tiles {s.vae_tile_size} px, overlap {s.vae_tile_overlap}, {s.vae_temporal_tile} frames",
        f"peaks     GPU {gb(e.peak_gpu_bytes)} of {gb(b.gpu_bytes)}, RAM {gb(e.peak_ram_bytes)} of "
        f"{gb(b.ram_bytes)}, disk {gb(e.disk_bytes)} of {gb(b.disk_bytes)}",
        f"ComfyUI   {' '.join(s.comfyui_args) or '(no flags)'}  env {dict(s.env) or '{}'}",
    ] + ([f"NOT READY {plan.blocked}"] if plan.blocked else []) + \
        ([f"fix       {plan.shortfall_fix}"] if plan.shortfall_fix else []) + ["why:"] + \
        [f"  - {r}" for r in plan.rationale]
    return "\n".join(lines)


def run(args, ctx: Context) -> Outcome:
    """The one plan maker's plan (h3kit.steps.planning) for no ComfyUI: with the probe and version named here."""
    config = load_config(ctx)
    machine = Fingerprinted.read(args.fingerprint)
    plan = plan_for(ctx, config, machine, [], profile=args.profile, progress=False,  # its answer is the plan
                    evidence=format_probe(getattr(args, "format_probe", None)),
                    comfyui_version=comfyui_version(getattr(args, "comfyui_version", None))).plan
    return Outcome(plan.to_json(), render(plan), 0, list(plan.warnings))
