"""The settings keys a profile, `calibrated:` or `overrides:` may set, and their checks.

One table serves all three places, so an override is checked exactly like
the profile value it replaces. Errors go into a `Problems` collector, which
names file:line and key; whether a valid value *fits* the machine is the
planner's question (a warning there, never an error here). `typed` turns
checked settings into the values the planner computes with: a `Settings`,
one field per key of the table, `given` naming the keys the layer sets.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal, Mapping

from h3kit.data.yamlio import (
    Problems,
    is_int_range,
    is_one_of,
    is_env_map,
    is_size,
    is_str_list,
    parse_size,
    shown,
)
from h3kit.core.units import human_bytes

AUTO = "auto"

# Keys every profile must set; the rest default to "auto" (the planner decides).
PROFILE_REQUIRED = ("formats", "stream_from", "vae_tile_size", "vae_tile_overlap", "vae_temporal_tile",
                    "max_canvas", "max_frames", "min_frames", "comfyui_args", "env", "os_ram_headroom")

DESCRIPTIONS = {
    "dit_weights": "catalog id of the DiT file, or auto",
    "quantization": "DiT weight format (bf16, q8_0, int8_convrot, fp8_scaled, q6_k, ...), or auto",
    "text_encoder_weights": "catalog id of the text encoder file, or auto",
    "vae_weights": "catalog id of the video VAE file, or auto",
    "shard_size_bytes": "DiT bytes moved per transfer (rounded down to whole blocks), or auto",
    "preload_bytes": "DiT bytes kept resident / prefetched on the GPU, or auto",
    "vae_tile_size": "VAE decode tile in pixels (multiple of 32)",
    "vae_tile_overlap": "VAE tile overlap in pixels",
    "vae_temporal_tile": "VAE decode tile in frames",
    "max_canvas": "largest [width, height] the planner may choose",
    "min_canvas": "smallest [width, height] worth planning",
    "max_frames": "largest frame count (5 + 17n)",
    "canvas": "[width, height] the generated workflows open with (default: max_canvas)",
    "frames": "frame count the generated workflows open with (5 + 17n; default: max_frames)",
    "steps": "sampling steps the generated workflows open with (default: the preset's)",
    "cfg": "classifier-free guidance the workflows open with (1.0: one model call per step; more: two)",
    "preset": "speed preset: fast, balanced or quality (steps, cfg, LoRA, canvas), or auto (best that meets target_minutes)",
    "target_minutes": "minutes one clip may take; the planner picks canvas, frames, steps and preset to meet it",
    "reference_to_video": "on: also set up the reference-to-video workflow (its own ref2va DiT, downloaded too); "
                          "off (default)",
    "queue_guard": "what the node pack does when a queued H3 graph cannot fit in memory by the plan's figures: "
                   "refuse (default: the graph stops before anything loads, with the figures and the fix) or warn "
                   "(a warning in ComfyUI's log, and it runs)",
    "timing": "seconds per DiT block, token and step (a mapping; written by calibration, else from profiles/throughput.yaml)",
    "stream_dit": "stream the DiT from disk with h3kit's loader: auto (planner decides), on, off",
    "prefetch_blocks": "DiT blocks read ahead while the current one computes (1 to 8)",
    "text_encoder_stream": "run the text encoder through h3kit's streamed loader (layer by layer from the file): auto "
                           "(when the stock load does not fit, or streaming lets a better format fit the time target), "
                           "on, off",
    "page_cache": "how h3kit's loaders read streamed blocks and text encoder layers: auto (by what the page cache can "
                  "keep next to the run), "
                  "use (through the OS's page cache) or bypass (past it)",
    "min_frames": "frame count a format must fit to be chosen (5 + 17n)",
    "formats": "DiT formats this profile may choose from",
    "stream_from": "where streamed DiT blocks wait: ram (offloaded copy) or disk (memory-mapped file)",
    "max_shard_blocks": "most whole DiT blocks per transfer",
    "comfyui_args": "ComfyUI launch flags (version-dependent; deploy keeps the accepted ones)",
    "env": "environment variables for ComfyUI",
    "os_ram_headroom": "RAM left to the operating system and other programs",
    "disk_read_bytes_per_s": "the models disk's sequential read rate, bytes (or a size like \"1.5 GB\") per second "
                             "(written by calibration's disk probe; times the streamed text encoder's read per prompt)",
}
KEYS = tuple(DESCRIPTIONS)
TARGET_MINUTES = 15.0  # target_minutes when nothing sets it (issue #14): the one home of the default
SIZE_KEYS = ("shard_size_bytes", "preload_bytes", "os_ram_headroom", "disk_read_bytes_per_s")
PRESETS = ("fast", "balanced", "quality")
# The `timing` mapping (docs/plan.md, "How long a clip takes"): required rates, optional ones, and the devices it may name.
TIMING_REQUIRED = ("block_s_per_token", "block_s_per_token2", "step_fixed_s")
TIMING_OPTIONAL = ("step_fixed_s_per_token", "text_encode_s", "decode_s_per_pixel_frame")
TIMING_TEXT = ("source", "device", "dtype")
TIMING_DEVICES = ("cpu", "cuda", "mps", "rocm", "xpu")
CANVAS_KEYS = ("max_canvas", "min_canvas", "canvas")

# The range of every number a profile, `calibrated:` or `overrides:` may set that the catalog does not bound (its
# `limits:` hold the VAE tiles): (lowest, highest, unit). Wider than any machine h3kit plans for, so only a slip or
# a hostile file meets them ("999...9 TB"), and narrow enough that every sum after the check stays a finite float
# (a 400-digit number was an OverflowError deep in the planner). docs/plan.md ("Config") lists them; a test checks.
TB = 10**12


@dataclass(frozen=True)
class Range:
    lo: float
    hi: float
    unit: str = ""  # "bytes" and "bytes/s" are written as sizes (1 MB/s)
    above: bool = False  # lo itself is not allowed


RANGES = MappingProxyType({
    "shard_size_bytes": Range(0, 100 * TB, "bytes"),
    "preload_bytes": Range(0, 100 * TB, "bytes"),
    "os_ram_headroom": Range(0, 100 * TB, "bytes"),
    "disk_read_bytes_per_s": Range(10**6, TB, "bytes/s"),
    "target_minutes": Range(0, 7 * 24 * 60, "minutes", above=True),
    "steps": Range(1, 200),
    "cfg": Range(1, 30),
    "prefetch_blocks": Range(1, 8),
    "timing": Range(0, 24 * 3600, "seconds"),  # each rate of the `timing:` mapping
})


def range_text(key: str) -> str:
    """'0 B to 100 TB', '1 MB/s to 1 TB/s', 'more than 0 and at most 10080 minutes': RANGES[key] in words."""
    r = RANGES[key]
    if r.unit.startswith("bytes"):
        per = r.unit[len("bytes"):]
        return f"{human_bytes(r.lo).replace('.00', '')}{per} to {human_bytes(r.hi).replace('.00', '')}{per}"
    unit = f" {r.unit}" if r.unit else ""
    return f"more than {r.lo:g} and at most {r.hi:g}{unit}" if r.above else f"{r.lo:g} to {r.hi:g}{unit}"


def _in_range(key: str, value: int | float) -> str | None:
    """None when `value` is inside RANGES[key]; ints are compared exactly, never turned into floats first."""
    r = RANGES[key]
    if value < r.lo or value > r.hi or (r.above and value == r.lo):
        return f"is {shown(value)}; allowed: {range_text(key)}"
    return None


def _is_size_in(key: str):
    """A size (123, "4 GB") within RANGES[key]; the range is checked on the exact integer, before any float."""
    def check(v: Any) -> str | None:
        msg = is_size(v)
        if msg:
            return msg
        n = parse_size(v)
        return None if _in_range(key, n) is None else f"is {shown(v)}; allowed: {range_text(key)}"
    return check


def _canvas_check(catalog, v: Any) -> str | None:
    mult = catalog.canvas.multiple_of
    max_w, max_h = catalog.canvas.max_area
    if (not isinstance(v, list) or len(v) != 2
            or not all(isinstance(x, int) and not isinstance(x, bool) for x in v)):
        return f"must be [WIDTH, HEIGHT] whole numbers, not {shown(v)}"
    w, h = v
    if w < mult or h < mult or w % mult or h % mult or w * h > max_w * max_h:
        return (f"is {shown(v)}; allowed: width and height multiples of {mult}, "
                f"area at most {max_w}x{max_h} ({max_w * max_h} pixels)")
    return None


def _frames_check(catalog, v: Any) -> str | None:
    base, step = catalog.frames.base, catalog.frames.step
    top = max(catalog.frames_ladder)
    if isinstance(v, bool) or not isinstance(v, int) or v < base + step or v > top or (v - base) % step:
        examples = ", ".join(str(base + step * n) for n in range(1, 5))
        return f"is {shown(v)}; allowed: {base} + {step}n up to {top} ({examples}, ...)"
    return None


def _is_number(key: str):
    """A number within RANGES[key]; an int is compared as it is (math.isfinite(10**400) is an OverflowError)."""
    def check(v: Any) -> str | None:
        if isinstance(v, bool) or not isinstance(v, (int, float)) or (isinstance(v, float) and not math.isfinite(v)):
            return f"must be a number ({range_text(key)}), not {shown(v)}"
        return _in_range(key, v)
    return check


def _is_whole(key: str):
    r = RANGES[key]
    return is_int_range(int(r.lo), int(r.hi))


def _seconds(x: Any) -> float | None:
    """A rate as a float; PyYAML reads 1e-5 (no dot) as a string, so numeric strings count too."""
    if isinstance(x, bool):
        return None
    try:
        f = float(x)
    except (TypeError, ValueError, OverflowError):
        return None
    return f if math.isfinite(f) and f >= 0 else None


def _timing_check(v: Any) -> str | None:
    """The calibrated (or table) rates: every number finite and >= 0, the three rates present, nothing unknown."""
    allowed = TIMING_TEXT + TIMING_REQUIRED + TIMING_OPTIONAL
    if not isinstance(v, dict):
        return f"must be a mapping ({', '.join(allowed)}), not {v!r}"
    for key, x in v.items():
        if key not in allowed:
            return f"has '{key}', which is not a timing field; allowed: {', '.join(allowed)}"
        if key == "device" and x not in TIMING_DEVICES:
            return f"has device {x!r}; allowed: {', '.join(TIMING_DEVICES)}"
        if key in ("source", "dtype") and not isinstance(x, str):
            return f"has {key} {x!r}; allowed: a string"
        if key in TIMING_REQUIRED + TIMING_OPTIONAL and (isinstance(x, (list, dict)) or _seconds(x) is None
                                                         or _in_range("timing", _seconds(x))):
            return f"has {key} {shown(x)}; allowed: {range_text('timing')}"
    missing = [k for k in TIMING_REQUIRED if k not in v]
    if missing:
        return f"is missing {', '.join(missing)} (seconds; see 'h3kit calibrate')"
    return None


def _on_off(v: Any) -> str | None:
    # YAML 1.1 reads a bare on/off as true/false; both spellings mean the same here (typed() turns them back).
    if isinstance(v, bool) or v in ("auto", "on", "off"):
        return None
    return f"is {v!r}; allowed: auto, on, off"


def _yes_no(v: Any) -> str | None:
    if isinstance(v, bool) or v in ("on", "off"):
        return None
    return f"is {v!r}; allowed: on, off"


def _auto_or(inner):
    def check(v: Any) -> str | None:
        if v == AUTO:
            return None
        msg = inner(v)
        return None if msg is None else msg + " (or auto)"
    return check


def _checks(catalog) -> dict:
    dit_formats = sorted({w.format for w in catalog.dit})
    limits = catalog.limits
    return {
        "dit_weights": _auto_or(is_one_of([w.id for w in catalog.dit])),
        "quantization": _auto_or(is_one_of(dit_formats)),
        "text_encoder_weights": _auto_or(is_one_of([w.id for w in catalog.text_encoder])),
        "vae_weights": _auto_or(is_one_of([w.id for w in catalog.vae])),
        "shard_size_bytes": _auto_or(_is_size_in("shard_size_bytes")),
        "preload_bytes": _auto_or(_is_size_in("preload_bytes")),
        "vae_tile_size": is_int_range(*limits.vae_tile_size),
        "vae_tile_overlap": is_int_range(*limits.vae_tile_overlap),
        "vae_temporal_tile": is_int_range(*limits.vae_temporal_tile),
        "max_canvas": lambda v: _canvas_check(catalog, v),
        "min_canvas": lambda v: _canvas_check(catalog, v),
        "max_frames": lambda v: _frames_check(catalog, v),
        "canvas": lambda v: _canvas_check(catalog, v),
        "frames": lambda v: _frames_check(catalog, v),
        "steps": _is_whole("steps"),
        "cfg": _is_number("cfg"),
        "preset": is_one_of((AUTO,) + PRESETS),
        "target_minutes": _is_number("target_minutes"),
        "reference_to_video": _yes_no,
        "queue_guard": is_one_of(["refuse", "warn"]),
        "timing": _timing_check,
        "stream_dit": _on_off,
        "prefetch_blocks": _is_whole("prefetch_blocks"),
        "text_encoder_stream": _on_off,
        "page_cache": is_one_of([AUTO, "use", "bypass"]),
        "min_frames": lambda v: _frames_check(catalog, v),
        "formats": lambda v: is_str_list(v) or next((f"contains {f!r}; allowed: {', '.join(dit_formats)}"
                                                     for f in v if f not in dit_formats), None),
        "stream_from": is_one_of(["ram", "disk"]),
        "max_shard_blocks": is_int_range(1, catalog.blocks),
        "comfyui_args": is_str_list,
        "env": is_env_map,
        "os_ram_headroom": _is_size_in("os_ram_headroom"),
        "disk_read_bytes_per_s": _is_size_in("disk_read_bytes_per_s"),
    }


def check(settings: Any, base: tuple, problems: Problems, catalog, *, complete: bool, source: str) -> None:
    """Add a problem for every unknown key or bad value in `settings` (a mapping)."""
    if settings is None:
        return
    if not isinstance(settings, dict):
        problems.add(base, f"must be a mapping of settings (keys: {', '.join(KEYS)})")
        return
    checks = _checks(catalog)
    for key, value in settings.items():
        kp = base + (key,)
        if key not in checks:
            problems.add(kp, f"is not a settings key; allowed: {', '.join(KEYS)}")
            continue
        msg = checks[key](value)
        if msg:
            problems.add(kp, msg)
    if complete:
        for key in PROFILE_REQUIRED:
            if key not in settings:
                problems.add(base, f"is missing '{key}' ({DESCRIPTIONS[key]})")
    tile, overlap = settings.get("vae_tile_size"), settings.get("vae_tile_overlap")
    if isinstance(tile, int) and isinstance(overlap, int) and not isinstance(overlap, bool) and overlap * 2 >= tile:
        problems.add(base + ("vae_tile_overlap",), f"is {overlap}; allowed: less than half of vae_tile_size ({tile})")
    if source == "profile":
        avoid = catalog.avoid_args
        for i, arg in enumerate(settings.get("comfyui_args") or []):
            if arg in avoid:
                problems.add(base + ("comfyui_args", i), f"is {arg!r}, which harms H3; not allowed: {', '.join(avoid)}")


def typed(settings: dict | None) -> Settings:
    """Checked settings as the planner uses them: sizes in bytes, canvases as (width, height); auto stays auto."""
    return Settings.from_checked(settings or {})


# The keys whose check accepts "auto": unset, they are auto (the planner decides).
AUTO_KEYS = ("dit_weights", "quantization", "text_encoder_weights", "vae_weights", "shard_size_bytes",
             "preload_bytes", "preset", "stream_dit", "page_cache", "text_encoder_stream")
Auto = Literal["auto"]


@dataclass(frozen=True)
class Settings:
    """One layer of settings (a profile's, `calibrated:` or `overrides:`), or their merge: one field per key
    of the table above, each typed as `typed` makes it. `given` names the keys the layer sets; a key it does
    not set reads as auto where auto is allowed (AUTO_KEYS), else None."""

    dit_weights: str | Auto = AUTO
    quantization: str | Auto = AUTO
    text_encoder_weights: str | Auto = AUTO
    vae_weights: str | Auto = AUTO
    shard_size_bytes: int | Auto = AUTO
    preload_bytes: int | Auto = AUTO
    vae_tile_size: int | None = None
    vae_tile_overlap: int | None = None
    vae_temporal_tile: int | None = None
    max_canvas: tuple[int, int] | None = None
    min_canvas: tuple[int, int] | None = None
    max_frames: int | None = None
    canvas: tuple[int, int] | None = None
    frames: int | None = None
    steps: int | None = None
    cfg: float | None = None
    preset: str | Auto = AUTO
    target_minutes: float | None = None
    reference_to_video: bool = False
    queue_guard: str | None = None  # refuse | warn (None: refuse)
    timing: Mapping[str, Any] | None = None
    stream_dit: str = AUTO  # auto | on | off
    prefetch_blocks: int | None = None
    text_encoder_stream: str = AUTO  # auto | on | off
    page_cache: str = AUTO  # auto | use | bypass
    min_frames: int | None = None
    formats: tuple[str, ...] | None = None
    stream_from: str | None = None  # ram | disk
    max_shard_blocks: int | None = None
    comfyui_args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    os_ram_headroom: int | None = None
    disk_read_bytes_per_s: int | None = None  # measured by calibration; else the catalog's rate by disk kind
    given: frozenset[str] = frozenset()

    @classmethod
    def from_checked(cls, settings: Mapping[str, Any]) -> Settings:
        """A layer from values `check` accepted (or already typed ones): sizes in bytes, tuples, on/off."""
        out = dict(settings)
        for key in SIZE_KEYS:
            if key in out and out[key] != AUTO:
                out[key] = parse_size(out[key])
        for key in CANVAS_KEYS:
            if key in out:
                out[key] = tuple(out[key])
        for key in ("cfg", "target_minutes"):
            if key in out:
                out[key] = float(out[key])
        if "reference_to_video" in out:
            out["reference_to_video"] = out["reference_to_video"] in (True, "on")
        for key in ("stream_dit", "text_encoder_stream"):
            if isinstance(out.get(key), bool):  # YAML reads a bare on/off as a bool
                out[key] = "on" if out[key] else "off"
        if "timing" in out:
            out["timing"] = MappingProxyType({k: (_seconds(x) if k in TIMING_REQUIRED + TIMING_OPTIONAL else x)
                                              for k, x in out["timing"].items()})
        for key in ("formats", "comfyui_args"):
            if key in out:
                out[key] = tuple(out[key] or ())
        if "env" in out:
            out["env"] = MappingProxyType(dict(out["env"] or {}))
        unknown = set(out) - set(KEYS)
        if unknown:
            raise ValueError(f"not settings keys: {', '.join(sorted(unknown))}")
        return cls(**out, given=frozenset(out))

    def items(self) -> list[tuple[str, Any]]:
        """(key, value) for the keys this layer sets, in the table's order."""
        return [(k, getattr(self, k)) for k in KEYS if k in self.given]

    def as_dict(self) -> dict[str, Any]:
        """The keys this layer sets and their typed values."""
        return dict(self.items())

    def over(self, layer: Settings) -> Settings:
        """These settings with every key `layer` sets taken from it (profile < calibrated < overrides)."""
        return dataclasses.replace(self, **dict(layer.items()), given=self.given | layer.given)

    def but(self, **values) -> Settings:
        """A copy with `values` set (and counted as given)."""
        return dataclasses.replace(self, **values, given=self.given | frozenset(values))
