"""The catalog's figures for time: the DiT's sequence, the work outside the DiT, and the speed presets.

Three optional catalog sections, checked with file:line and typed here so the
time estimate (h3kit.plan.timing) does arithmetic only:

- `sequence`: how many rows ComfyUI's H3 transformer attends over for a
  canvas -- text, then audio, then video (comfy/ldm/minimax/model.py
  PackedLayout); attention grows with the square of it.
- `work`: FLOPs outside the 50 blocks (text encoder once per clip, VAE decode
  per pixel-frame, token refiner per model call).
- `presets`: fast / balanced / quality -- steps, cfg, LoRA and the smallest
  canvas and frames each is worth running at, and (`reference`) the steps and
  LoRA of the reference-to-video workflow where they differ.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from h3kit.data.yamlio import Problems

PRESET_ORDER = ("quality", "balanced", "fast")  # best quality first: auto takes the first that meets the target


@dataclass(frozen=True)
class Sequence:
    first_latent_frames: int  # latent frames for the first `base` pixel frames
    latent_frames_per_step: int  # latent frames added per `step` pixel frames (frames rule 5 + 17n)
    audio_rows_per_second: float
    text_tokens: int
    fps: float


@dataclass(frozen=True)
class Work:
    text_encoder_params: float
    decode_flops_per_pixel_frame: float
    refiner_blocks: int


@dataclass(frozen=True)
class ReferenceSteps:
    """presets.<name>.reference: what the reference-to-video workflow runs with this preset."""

    steps: int
    lora: str | None  # catalog id of a LoRA made for the ref2va DiT, or None
    lora_strength: float = 1.0


@dataclass(frozen=True)
class Preset:
    name: str
    steps: int
    cfg: float
    lora: str | None  # catalog id of a LoRA file, or None
    lora_strength: float
    min_canvas: tuple  # (w, h): smaller canvases are not worth this preset
    min_frames: int
    why: str
    reference: ReferenceSteps | None = None  # None: the reference workflow runs at `steps`, with no LoRA


REFERENCE_KEYS = ("steps", "lora", "lora_strength")


def _num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0


def _whole(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v > 0


def check(data: dict, problems: Problems, lora_ids: list) -> None:
    """A problem for each bad figure in the three sections (each is optional)."""
    seq = data.get("sequence")
    if seq is not None:
        lf = seq.get("latent_frames") if isinstance(seq, dict) else None
        if not isinstance(lf, dict) or not all(_whole(lf.get(k)) for k in ("first", "per_step")):
            problems.add(("sequence", "latent_frames"), "must be {first: N, per_step: N} whole numbers > 0")
        for k in ("audio_rows_per_second", "text_tokens"):
            if not isinstance(seq, dict) or not _num(seq.get(k)):
                problems.add(("sequence", k), f"is {seq.get(k) if isinstance(seq, dict) else None!r}; allowed: a number > 0")
    work = data.get("work")
    if work is not None:
        for k in ("text_encoder_params", "decode_flops_per_pixel_frame"):
            if not isinstance(work, dict) or not _num(work.get(k)):
                problems.add(("work", k), "must be a number > 0")
        if isinstance(work, dict) and not (isinstance(work.get("refiner_blocks"), int) and work["refiner_blocks"] >= 0):
            problems.add(("work", "refiner_blocks"), "must be a whole number >= 0")
    for name, spec in (data.get("formats") or {}).items():
        if isinstance(spec, dict) and spec.get("compute") not in (None, "int8", "fp8", "fp4"):
            problems.add(("formats", name, "compute"), f"is {spec.get('compute')!r}; allowed: int8, fp8, fp4")
    presets = data.get("presets")
    if presets is None:
        return
    if not isinstance(presets, dict) or set(presets) - {"source"} != set(PRESET_ORDER):
        problems.add(("presets",), f"must set exactly {', '.join(PRESET_ORDER)} (and a source)")
        return
    for name in PRESET_ORDER:
        p, kp = presets[name], ("presets", name)
        if not isinstance(p, dict):
            problems.add(kp, "must be a mapping (steps, cfg, lora, min_canvas, min_frames, why)")
            continue
        if not (_whole(p.get("steps")) and p["steps"] <= 200):
            problems.add(kp + ("steps",), f"is {p.get('steps')!r}; allowed: 1 to 200")
        if not (_num(p.get("cfg")) and 1.0 <= p["cfg"] <= 30.0):
            problems.add(kp + ("cfg",), f"is {p.get('cfg')!r}; allowed: 1.0 to 30.0")
        if p.get("lora") is not None and p.get("lora") not in lora_ids:
            problems.add(kp + ("lora",), f"is {p.get('lora')!r}; allowed: null or a lora id ({', '.join(lora_ids) or 'none'})")
        if p.get("lora") is not None and not _num(p.get("lora_strength", 1.0)):
            problems.add(kp + ("lora_strength",), "must be a number > 0")
        mc = p.get("min_canvas")
        if not (isinstance(mc, list) and len(mc) == 2 and all(_whole(x) for x in mc)):
            problems.add(kp + ("min_canvas",), f"must be [WIDTH, HEIGHT], not {mc!r}")
        if not _whole(p.get("min_frames")):
            problems.add(kp + ("min_frames",), f"is {p.get('min_frames')!r}; allowed: a frame count (5 + 17n)")
        if not isinstance(p.get("why"), str):
            problems.add(kp + ("why",), "must be a sentence with the preset's source")
        if "reference" in p:
            _check_reference(p["reference"], kp + ("reference",), problems, lora_ids)


def _check_reference(r: Any, kp: tuple, problems: Problems, lora_ids: list) -> None:
    if not isinstance(r, dict) or set(r) - set(REFERENCE_KEYS):
        problems.add(kp, f"must be a mapping of {', '.join(REFERENCE_KEYS)}, not {r!r}")
        return
    if not (_whole(r.get("steps")) and r["steps"] <= 200):
        problems.add(kp + ("steps",), f"is {r.get('steps')!r}; allowed: 1 to 200")
    if r.get("lora") is not None and r["lora"] not in lora_ids:
        problems.add(kp + ("lora",), f"is {r['lora']!r}; allowed: null or a lora id ({', '.join(lora_ids) or 'none'})")
    if not _num(r.get("lora_strength", 1.0)):
        problems.add(kp + ("lora_strength",), "must be a number > 0")


def sequence(data: dict) -> Sequence | None:
    seq = data.get("sequence")
    if not isinstance(seq, dict):
        return None
    lf = seq["latent_frames"]
    return Sequence(int(lf["first"]), int(lf["per_step"]), float(seq["audio_rows_per_second"]),
                    int(seq["text_tokens"]), float((data.get("frames") or {}).get("fps", 24)))


def work(data: dict) -> Work | None:
    w = data.get("work")
    if not isinstance(w, dict):
        return None
    return Work(float(w["text_encoder_params"]), float(w["decode_flops_per_pixel_frame"]), int(w["refiner_blocks"]))


def presets(data: dict) -> dict:
    """name -> Preset (empty when the catalog has no presets section)."""
    ps = data.get("presets")
    if not isinstance(ps, dict):
        return {}
    def reference(r):
        return ReferenceSteps(int(r["steps"]), r.get("lora"), float(r.get("lora_strength", 1.0))) if r else None
    return {name: Preset(name, int(p["steps"]), float(p["cfg"]), p.get("lora"), float(p.get("lora_strength", 1.0)),
                         (int(p["min_canvas"][0]), int(p["min_canvas"][1])), int(p["min_frames"]), str(p["why"]),
                         reference(p.get("reference")))
            for name, p in ps.items() if name in PRESET_ORDER}
