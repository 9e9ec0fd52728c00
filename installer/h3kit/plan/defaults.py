"""What the generated workflows open with: preset, canvas, frames and steps that finish a clip in time.

The memory search (`search`) finds the largest canvas and frames that fit;
those are the limits (`max_canvas`, `max_frames`). Within them this module
picks what one clip can do in `target_minutes` (default 15) with the best
quality: the best preset (quality > balanced > fast, the catalog's
`presets:`) that meets the target at or above that preset's smallest canvas
and frames, then the largest canvas, then the most frames up to the video
node's default length. The time of each option is `timing.estimate_clip`
with the plan's rates (calibrated `timing`, else the throughput table).

A value a profile, calibration or the user (`overrides:`) names for
`canvas`, `frames`, `steps`, `cfg` or `preset` wins; one beyond the memory
limits gets a warning instead of being changed behind the user's back.
When nothing meets the target, the workflows open at the cheapest option,
and a clip that takes hours even then is said plainly in the warnings.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from h3kit.core.units import human_seconds
from h3kit.data.catalog import Catalog
from h3kit.data.settings import TARGET_MINUTES, Settings
from h3kit.data.speed import PRESET_ORDER, Preset
from h3kit.plan.timing import estimate_clip

SLOW_CLIP_MINUTES = 180.0  # beyond this even the cheapest clip is worth a plain warning


def _fits(canvas: tuple, max_canvas: tuple) -> bool:
    return canvas[0] * canvas[1] <= max_canvas[0] * max_canvas[1] and canvas[0] <= max_canvas[0] \
        and canvas[1] <= max_canvas[1]


def _presets(cat: Catalog) -> dict:
    if cat.presets:
        return cat.presets
    sampling = cat.sampling  # a catalog without presets: one, from its sampling defaults
    smallest = cat.canvas_ladder[-1]
    return {"balanced": Preset("balanced", int(sampling.steps), float(sampling.cfg), None, 1.0,
                               smallest, cat.frames_ladder[0], "the catalog's sampling defaults")}


def _when(source: dict, key: str) -> str:
    return source.get(key, "the settings")


def _options(cat: Catalog, settings: Settings, max_canvas: tuple, max_frames: int, preset: Preset, cap: int):
    """(canvas, frames) pairs to try for `preset`, best first: largest canvas, then most frames."""
    if settings.canvas is not None:
        canvases = [settings.canvas]
    else:
        canvases = [c for c in cat.canvas_ladder if _fits(c, max_canvas)] or [tuple(max_canvas)]
        canvases = [c for c in canvases if c[0] * c[1] >= preset.min_canvas[0] * preset.min_canvas[1]]
    if settings.frames is not None:
        frames = [settings.frames]
    else:
        top = min(max_frames, cap)
        frames = sorted({f for f in cat.frames_ladder if preset.min_frames <= f <= top}, reverse=True)
    return [(c, f) for c in canvases for f in frames]


def _doubtful_loras(cat: Catalog, presets: dict) -> dict:
    """preset name -> why its LoRA is not known to load in ComfyUI (a plan picks only files that load)."""
    out = {}
    for name, p in presets.items():
        w = cat.weight(p.lora) if p.lora else None
        if w is not None and (w.load_tier or w.file.unverified):
            out[name] = f"its LoRA {w.file.name or w.id} is not known to load in ComfyUI ({w.load_report})"
    return out


@dataclass(frozen=True)
class _Clock:
    """One clip's time at the plan's rates (`timing`) with the settings' steps and cfg over a preset's."""

    cat: Catalog
    settings: Settings
    timing: dict
    pass_overhead: float

    def run(self, p: Preset, canvas, frames) -> dict:
        steps = int(self.settings.steps or p.steps)
        cfg = self.settings.cfg if self.settings.cfg is not None else p.cfg
        return estimate_clip({"blocks": self.cat.blocks}, self.timing, canvas, frames, steps, cfg, self.cat,
                             pass_overhead=self.pass_overhead) | {"steps": steps, "cfg": cfg}


def _choose(clock: _Clock, presets: dict, order: list, max_canvas: tuple, max_frames: int,
            target: float) -> tuple[tuple, bool, list[str]]:
    """((preset, canvas, frames, time), whether it meets the target, why better presets did not): the best
    preset in `order` that meets the target at its largest option; else the cheapest option there is."""
    cat, settings = clock.cat, clock.settings
    skipped = []
    # The last try drops the fastest preset's minimums: a short or small clip in time beats none.
    relaxed = replace(presets[order[-1]], min_canvas=cat.canvas_ladder[-1], min_frames=min(cat.frames_ladder))
    for name, p in [(name, presets[name]) for name in order] + [(order[-1], relaxed)]:
        options = _options(cat, settings, max_canvas, max_frames, p, int(cat.sampling.frames))
        for canvas, frames in options:
            est = clock.run(p, canvas, frames)
            if est["minutes_per_clip"] <= target:
                return (p, canvas, frames, est), True, skipped
        if p is relaxed:
            continue
        if options:
            c, f = options[-1]
            skipped.append(f"{name} would take {human_seconds(clock.run(p, c, f)['seconds_per_clip'])} even at "
                           f"{c[0]}x{c[1]}, {f} frames")
        else:
            skipped.append(f"{name} needs at least {p.min_canvas[0]}x{p.min_canvas[1]} and {p.min_frames} frames, "
                           "more than fits in memory")
    # nothing meets the target: the cheapest option, said plainly in the warnings
    fitting = [c for c in cat.canvas_ladder if _fits(c, max_canvas)] or [tuple(max_canvas)]
    canvas = settings.canvas if settings.canvas is not None else min(fitting, key=lambda c: c[0] * c[1])
    frames = settings.frames if settings.frames is not None else \
        min([f for f in cat.frames_ladder if f <= max_frames] or [max_frames])
    return (relaxed, canvas, frames, clock.run(relaxed, canvas, frames)), False, skipped


def workflow_defaults(cat: Catalog, settings: Settings, source: dict, max_canvas: tuple, max_frames: int,
                      timing: dict, *, pass_overhead: float = 0.0) -> tuple[dict, dict, list[str], list[str]]:
    """({canvas, frames, steps, cfg, preset, lora, lora_strength, target_minutes}, the time estimate,
    rationale sentences, warnings). `pass_overhead`: the share h3kit's streamed loader adds to each model call."""
    fps = float(cat.sampling.fps)
    target = float(settings.target_minutes or TARGET_MINUTES)
    presets = _presets(cat)
    wanted = settings.preset
    doubtful = {} if wanted in presets else _doubtful_loras(cat, presets)
    order = [wanted] if wanted in presets else \
        ([p for p in PRESET_ORDER if p in presets and p not in doubtful] or [p for p in PRESET_ORDER if p in presets])
    (p, canvas, frames, est), met, skipped = _choose(_Clock(cat, settings, timing, pass_overhead), presets, order,
                                                     max_canvas, max_frames, target)
    why = [f"Preset {name} is not chosen by itself: {reason}; set preset: {name} to use it anyway."
           for name, reason in doubtful.items() if name not in order]
    if wanted in presets:
        why.append(f"Preset {p.name} ({p.why}), as {_when(source, 'preset')} says.")
    elif met:
        why.append(f"Preset {p.name} ({p.why}) is the best-quality preset that finishes one clip within "
                   f"target_minutes {target:g}" + (f"; {'; '.join(skipped)}." if skipped else "."))
    else:
        why.append(f"No preset finishes one clip within target_minutes {target:g} ({'; '.join(skipped)}); "
                   f"the workflows open with the fastest, {p.name} ({p.why}).")
    shape_why, warnings = _shape_sentences(cat, settings, source, p, canvas, frames, max_canvas, max_frames, met)
    steps_why, steps_warnings = _steps_sentences(settings, source, p, est, timing, canvas, frames, met, target)
    steps_why += _lora_schedule_sentence(cat, p)
    defaults = {"canvas": list(canvas), "frames": int(frames), "steps": est["steps"], "cfg": est["cfg"],
                "preset": p.name, "lora": p.lora, "lora_strength": p.lora_strength if p.lora else None,
                "target_minutes": target}
    time = {k: est[k] for k in ("tokens", "model_calls_per_step", "seconds_per_step", "sampling_s", "text_encode_s",
                                "decode_s", "seconds_per_clip", "minutes_per_clip", "source", "steps")}
    time.update({"canvas": list(canvas), "frames": int(frames), "video_seconds": round(frames / fps, 2),
                 "meets_target": met, "stream_pass_overhead": round(float(pass_overhead), 4)})
    return defaults, time, why + shape_why + steps_why, warnings + steps_warnings


def _shape_sentences(cat: Catalog, settings: Settings, source: dict, p: Preset, canvas, frames: int,
                     max_canvas: tuple, max_frames: int, met: bool) -> tuple[list[str], list[str]]:
    """Why the workflows open at this canvas and frame count, and warnings for user values beyond memory."""
    why, warnings = [], []
    fps, cap = float(cat.sampling.fps), int(cat.sampling.frames)
    limits = f"the memory limit is {max_canvas[0]}x{max_canvas[1]}, {max_frames} frames"
    if settings.canvas is not None:
        why.append(f"The workflows open at {canvas[0]}x{canvas[1]}, as {_when(source, 'canvas')} says ({limits}).")
        if not _fits(canvas, max_canvas):
            warnings.append(f"canvas {canvas[0]}x{canvas[1]} is beyond the largest canvas that fits in memory "
                            f"({max_canvas[0]}x{max_canvas[1]}); a run at it may run out of memory.")
    else:
        why.append(f"The workflows open at {canvas[0]}x{canvas[1]}, "
                   + (f"the largest canvas that meets the target with preset {p.name}" if met else
                      "the smallest canvas, since none meets the target") + f" ({limits}).")
    if settings.frames is not None:
        why.append(f"They open with {frames} frames ({frames / fps:.1f} s of video), as {_when(source, 'frames')} says.")
        if frames > max_frames:
            warnings.append(f"frames {frames} is beyond the most frames that fit in memory ({max_frames}); "
                            "a run with them may run out of memory.")
    else:
        why.append(f"They open with {frames} frames ({frames / fps:.1f} s of video), "
                   + ("the most within the target at that canvas" if met else "the fewest there are")
                   + f" (at most {min(max_frames, cap)}: the video node's default length {cap} or the memory limit).")
    return why, warnings


def _lora_schedule_sentence(cat: Catalog, p: Preset) -> list[str]:
    """Why the workflows that load the preset's LoRA sample with its own sampler and shifts, when it has them."""
    lora = cat.weight(p.lora) if p.lora else None
    own = lora.sampling if lora is not None else None
    if own is None:
        return []
    return [f"With the LoRA {p.lora} they sample with {own.sampler}, scheduler {own.scheduler}, flow shifts "
            f"{own.shift_video:g} (video) / {own.shift_audio:g} (audio), the setting its publisher gives for it "
            f"({own.source.split(';')[0]})."]


def _steps_sentences(settings: Settings, source: dict, p: Preset, est: dict, timing: dict, canvas, frames: int,
                     met: bool, target: float) -> tuple[list[str], list[str]]:
    """The steps, cfg and time sentence, and warnings for a cfg other than 1 and a clip beyond the target."""
    warnings = []
    took = f"{human_seconds(est['seconds_per_clip'])} per clip ({human_seconds(est['seconds_per_step'])} per step)"
    steps_from = f", as {_when(source, 'steps')} says," if settings.steps is not None else f" (preset {p.name})"
    calls = "one model call per step" if est["model_calls_per_step"] == 1 else "two model calls per step (cfg is not 1.0)"
    why = [f"They sample {est['steps']} steps{steps_from} at cfg {est['cfg']:g}, {calls}"
           + (f", with the LoRA {p.lora}" if p.lora else "") + f": about {took}, by {est['source']}."]
    if settings.cfg is not None and abs(est["cfg"] - 1.0) > 1e-9:
        warnings.append(f"cfg {est['cfg']:g} ({_when(source, 'cfg')}) doubles the model calls per step, and H3 is "
                        "reported to give wrong results silently with any cfg but 1.0.")
    if met:
        return why, warnings
    cheapest = est["seconds_per_clip"]
    if cheapest > SLOW_CLIP_MINUTES * 60:
        warnings.append(f"One clip at {canvas[0]}x{canvas[1]}, {frames} frames takes about {human_seconds(cheapest)} "
                        f"on this {timing.get('device', 'machine')} even with preset {p.name} ({est['steps']} steps); "
                        "it fits in memory, but expect hours per clip. A GPU, or a calibration "
                        "('h3kit calibrate') if this estimate looks wrong, is the way forward.")
    else:
        warnings.append(f"One clip takes about {human_seconds(cheapest)} at the smallest option ({canvas[0]}x{canvas[1]}, "
                        f"{frames} frames, preset {p.name}), more than target_minutes {target:g}.")
    return why, warnings
