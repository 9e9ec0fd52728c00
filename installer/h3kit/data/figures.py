"""The catalog's figures the planner computes with, checked and typed once when the catalog is read.

The YAML spells sizes the way their sources do ("0.5 GB", "400 MB") and
canvases as [w, h] lists; the planner wants bytes and tuples. Parsing them
here, at the boundary, means a bad figure is reported with its file:line
when the catalog loads, and the arithmetic never meets a string.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from h3kit.data.yamlio import Problems, parse_size

# memory: figures written as sizes ("0.5 GB"), and those that are bytes per token, voxel or pixel-frame.
MEMORY_SIZES = ("activation_fixed", "text_encoder_activation", "comfyui_process_ram", "gpu_resident_overhead")
MEMORY_RATES = ("activation_bytes_per_token", "vae_decode_bytes_per_voxel", "decoded_video_bytes_per_pixel_frame")
RESERVE_KEYS = ("default", "windows", "large_card_from", "large_card_extra")


@dataclass(frozen=True)
class MemoryModel:
    """The catalog's `memory:` section, in bytes."""

    activation_bytes_per_token: int
    activation_fixed: int
    text_encoder_activation: int
    vae_decode_bytes_per_voxel: int
    decoded_video_bytes_per_pixel_frame: int
    comfyui_process_ram: int
    gpu_resident_overhead: int


@dataclass(frozen=True)
class ComfyMemory:
    """What ComfyUI keeps back on the GPU (the catalog's `comfyui:` section), in bytes."""

    reserve_default: int
    reserve_windows: int
    large_card_from: int  # cards at least this large keep large_card_extra more
    large_card_extra: int
    inference_minimum: int
    weights_share: float  # weights get at most total * share - (inference_minimum + reserve)


def memory_model(section: dict) -> MemoryModel:
    return MemoryModel(**{k: parse_size(section[k]) for k in MEMORY_SIZES + MEMORY_RATES})


def comfy_memory(section: dict) -> ComfyMemory:
    r = section["reserve"]
    return ComfyMemory(parse_size(r["default"]), parse_size(r["windows"]), parse_size(r["large_card_from"]),
                       parse_size(r["large_card_extra"]), parse_size(section["inference_minimum"]),
                       float(section["weights_share"]))


def _whole(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v > 0


def check(data: dict, problems: Problems) -> None:
    """A problem for every figure the typed values above could not be built from (its section is a mapping)."""
    if not isinstance(data["model"].get("id"), str):
        problems.add(("model", "id"), "must be the model's id (a string)")
    for k in MEMORY_SIZES:
        if parse_size(data["memory"].get(k)) is None:
            problems.add(("memory", k), "must be a size like \"0.5 GB\"")
    for k in MEMORY_RATES:
        if parse_size(data["memory"].get(k)) is None:
            problems.add(("memory", k), "must be a whole number of bytes")
    reserve = data["comfyui"].get("reserve")
    if not isinstance(reserve, dict):
        problems.add(("comfyui", "reserve"), f"must be a mapping of sizes ({', '.join(RESERVE_KEYS)})")
    else:
        for k in RESERVE_KEYS:
            if parse_size(reserve.get(k)) is None:
                problems.add(("comfyui", "reserve", k), "must be a size like \"400 MB\"")
    if parse_size(data["comfyui"].get("inference_minimum")) is None:
        problems.add(("comfyui", "inference_minimum"), "must be a size like \"0.8 GB\"")
    share = data["comfyui"].get("weights_share")
    if isinstance(share, bool) or not isinstance(share, (int, float)) or not 0 < share <= 1:
        problems.add(("comfyui", "weights_share"), f"is {share!r}; allowed: a fraction above 0 and at most 1")
    for k in ("spatial_tokens_px", "temporal_compression"):
        if not _whole(data["tokens"].get(k)):
            problems.add(("tokens", k), f"is {data['tokens'].get(k)!r}; allowed: a whole number > 0")
    ladder = data["canvas"].get("ladder")
    if not isinstance(ladder, list) or not ladder or not all(
            isinstance(c, list) and len(c) == 2 and all(_whole(x) for x in c) for c in ladder):
        problems.add(("canvas", "ladder"), "must be a list of [width, height] pairs")
    frames = data["frames"].get("ladder")
    if not isinstance(frames, list) or not frames or not all(_whole(f) for f in frames):
        problems.add(("frames", "ladder"), "must be a list of frame counts (whole numbers > 0)")
