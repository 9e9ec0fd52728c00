"""The model's shape as the catalog states it: the DiT's dimensions, the canvas and frame rules, the token rule.

Four catalog sections (`architecture`, `canvas`, `frames`, `tokens`) become
frozen values here, checked with file:line when the catalog loads, so the
planner and calibration compute with numbers and never look a key up. The
derived figures more than one caller needs (a block's FLOPs, the token count
of a canvas, the frame count ComfyUI snaps a length to) live beside them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from h3kit.bundled import h3k_cost
from h3kit.data.yamlio import Problems

# architecture: the whole numbers every DiT formula needs, and those only shown or used for a ratio.
ARCH_REQUIRED = ("blocks", "hidden", "heads", "head_dim", "ffn")
ARCH_COUNTS = ("text_refiner_blocks", "text_dim", "video_latent_channels", "audio_latent_channels", "batch_size")


def block_flops(hidden: int, heads: int, head_dim: int, ffn: int) -> tuple[float, float]:
    """(FLOPs per token, FLOPs per token pair) of one DiT block: qkv + out projection + SwiGLU; QK^T + AV."""
    inner = heads * head_dim
    linear = 2.0 * hidden * (3 * inner + inner + 2 * ffn + ffn)
    return linear, 4.0 * inner


@dataclass(frozen=True)
class Architecture:
    """The DiT's dimensions (comfy/ldm/minimax/model.py, as the catalog's `architecture:` states them)."""

    blocks: int
    hidden: int
    heads: int
    head_dim: int
    ffn: int
    text_refiner_blocks: int | None = None
    text_dim: int | None = None
    video_latent_channels: int | None = None
    audio_latent_channels: int | None = None
    patch: tuple = ()
    batch_size: int | None = None
    params_full: float | None = None
    params_pruned: float | None = None

    @property
    def block_flops(self) -> tuple[float, float]:
        return block_flops(self.hidden, self.heads, self.head_dim, self.ffn)


@dataclass(frozen=True)
class Canvas:
    """Which canvases the model takes: sides multiples of `multiple_of`, area at most `max_area`'s."""

    multiple_of: int
    max_area: tuple  # (width, height)


@dataclass(frozen=True)
class Frames:
    """Frame counts the model takes: base + step * n, at `fps`."""

    base: int
    step: int
    fps: float

    def snap_up(self, frames: int) -> int:
        """The length ComfyUI runs for `frames`: rounded up to base + step * n."""
        return self.base + -(-max(0, int(frames) - self.base) // self.step) * self.step


@dataclass(frozen=True)
class Tokens:
    """The memory model's token rule: (w / px) * (h / px) * ceil(frames / temporal_compression)."""

    spatial_tokens_px: int
    temporal_compression: int


def tokens_for(tokens: Tokens, width: int, height: int, frames: int) -> int:
    """The DiT's token count for a canvas by the catalog's `tokens:` rule: the one formula planning and calibration share."""
    return h3k_cost.memory_tokens(tokens.spatial_tokens_px, tokens.temporal_compression, width, height, frames)


def _whole(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v > 0


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0


def _count(v: Any) -> float | None:
    """A parameter count; PyYAML reads 33.0e9 (no sign after the e) as a string, so numeric strings count too."""
    try:
        f = float(v) if not isinstance(v, bool) else None
    except (TypeError, ValueError):
        return None
    return f if f is not None and math.isfinite(f) and f > 0 else None


def _pair(v: Any) -> bool:
    return isinstance(v, list) and len(v) == 2 and all(_whole(x) for x in v)


def parse_architecture(section: dict, problems: Problems) -> Architecture | None:
    bad = False
    for k in ARCH_REQUIRED:
        if not _whole(section.get(k)):
            problems.add(("architecture", k), f"is {section.get(k)!r}; allowed: a whole number > 0")
            bad = True
    for k in ARCH_COUNTS:
        if section.get(k) is not None and not _whole(section[k]):
            problems.add(("architecture", k), f"is {section[k]!r}; allowed: a whole number > 0 (or leave it out)")
            bad = True
    for k in ("params_full", "params_pruned"):
        if section.get(k) is not None and _count(section[k]) is None:
            problems.add(("architecture", k), f"is {section[k]!r}; allowed: a parameter count such as 33.0e9")
            bad = True
    patch = section.get("patch")
    if patch is not None and not (isinstance(patch, list) and patch and all(_whole(x) for x in patch)):
        problems.add(("architecture", "patch"), f"is {patch!r}; allowed: [T, H, W] whole numbers")
        bad = True
    if bad:
        return None
    fields = {k: section.get(k) for k in ARCH_REQUIRED + ARCH_COUNTS}
    return Architecture(**fields, patch=tuple(patch or ()),
                        params_full=_count(section.get("params_full")), params_pruned=_count(section.get("params_pruned")))


def _all_ok(problems: Problems, section: str, checks: list[tuple[str, bool, str]]) -> bool:
    """Every failed (key, passed, sentence) check added to `problems` -- all of them, so one run of
    `h3kit doctor` names every bad key -- and True when none failed."""
    failed = [(key, sentence) for key, passed, sentence in checks if not passed]
    for key, sentence in failed:
        problems.add((section, key), sentence)
    return not failed


def parse_canvas(section: dict, problems: Problems) -> tuple[Canvas | None, tuple]:
    """(the canvas rule, the ladder of canvases the planner tries, largest first)."""
    mult, area, ladder = section.get("multiple_of"), section.get("max_area"), section.get("ladder")
    if not _all_ok(problems, "canvas", [
            ("multiple_of", _whole(mult), f"is {mult!r}; allowed: a whole number of pixels > 0"),
            ("max_area", _pair(area), f"is {area!r}; allowed: [WIDTH, HEIGHT] whole numbers"),
            ("ladder", isinstance(ladder, list) and bool(ladder) and all(_pair(c) for c in ladder),
             "must be a list of [width, height] pairs")]):
        return None, ()
    return Canvas(mult, (area[0], area[1])), tuple((int(w), int(h)) for w, h in ladder)


def parse_frames(section: dict, problems: Problems) -> tuple[Frames | None, tuple]:
    """(the frame rule, the ladder of frame counts the planner tries)."""
    rule, fps, ladder = section.get("rule"), section.get("fps", 24), section.get("ladder")
    if not _all_ok(problems, "frames", [
            ("rule", isinstance(rule, dict) and all(_whole(rule.get(k)) for k in ("base", "step")),
             f"is {rule!r}; allowed: {{base: N, step: N}} whole numbers > 0 (5 + 17n)"),
            ("fps", _number(fps), f"is {fps!r}; allowed: frames per second > 0"),
            ("ladder", isinstance(ladder, list) and bool(ladder) and all(_whole(f) for f in ladder),
             "must be a list of frame counts (whole numbers > 0)")]):
        return None, ()
    return Frames(rule["base"], rule["step"], float(fps)), tuple(ladder)


def parse_tokens(section: dict, problems: Problems) -> Tokens | None:
    ok = True
    for k in ("spatial_tokens_px", "temporal_compression"):
        if not _whole(section.get(k)):
            problems.add(("tokens", k), f"is {section.get(k)!r}; allowed: a whole number > 0")
            ok = False
    return Tokens(section["spatial_tokens_px"], section["temporal_compression"]) if ok else None
