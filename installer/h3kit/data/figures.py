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
# Bytes per element of the torch dtypes h3kit counts with: the one table (the planner, calibration, the catalog).
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2, "float8_e4m3fn": 1, "float8_e5m2": 1}
# What ComfyUI may compute H3 in (the catalog's comfyui.compute_dtype values).
COMPUTE_DTYPES = ("float32", "bfloat16", "float16")


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
    text_encoder_stream: "TextEncoderStream | None" = None  # memory.text_encoder_stream (None: not in the catalog)


@dataclass(frozen=True)
class TextEncoderStream:
    """memory.text_encoder_stream: what h3kit's streamed text encoder (H3kitStreamedTextEncoderLoader) holds while
    it encodes, in bytes, and the read rates a plan assumes before calibration measured the disk."""

    layers: int  # language-model layers read one at a time
    layer_held: int  # one layer once read, in the compute dtype
    ring_layer_sets: int  # layer sets held where the file comes through the ring (GGUF; any file off a CPU)
    in_place_layer_sets: int  # plain safetensors read in place on a CPU
    prefetch_layers: int  # the node's default read-ahead
    vision_tower: int  # loaded only while an image is encoded
    max_time_share: float  # of target_minutes, the most one read of the file per prompt may take
    disk_read: tuple = ()  # ((disk kind, bytes per second), ...): assumed until calibration measures the disk

    def read_rate(self, kind: str) -> int:
        table = dict(self.disk_read)
        return int(table.get(kind) or table.get("unknown") or min(table.values()))


@dataclass(frozen=True)
class ComfyMemory:
    """What ComfyUI keeps back on the GPU (the catalog's `comfyui:` section), in bytes."""

    reserve_default: int
    reserve_windows: int
    large_card_from: int  # cards at least this large keep large_card_extra more
    large_card_extra: int
    inference_minimum: int
    weights_share: float  # weights get at most total * share - (inference_minimum + reserve)
    compute_dtype: tuple = (("default", "bfloat16"),)  # ((backend, dtype), ...): what ComfyUI computes in
    cast_formats: tuple = ()  # ((format, bytes per weight in the file), ...): files cast to the compute dtype
    cast_parts: tuple = ()  # the parts (dit, vae, ...) ComfyUI casts that way

    def dtype_on(self, backend: str) -> str:
        table = dict(self.compute_dtype)
        return table.get(backend, table.get("default", "bfloat16"))

    def held_factor(self, part: str, fmt: str, backend: str) -> float:
        """Bytes in memory per byte of file once ComfyUI loaded a `part` file in `fmt` on `backend`:
        2.0 for a bf16 DiT on a CPU (held as float32), 1.0 where nothing is cast."""
        file_bytes = dict(self.cast_formats).get(fmt)
        if part not in self.cast_parts or not file_bytes:
            return 1.0
        return max(1.0, DTYPE_BYTES[self.dtype_on(backend)] / file_bytes)


TE_STREAM_SIZES = ("layer_held", "vision_tower")
TE_STREAM_COUNTS = ("layers", "ring_layer_sets", "in_place_layer_sets", "prefetch_layers")


def memory_model(section: dict) -> MemoryModel:
    return MemoryModel(**{k: parse_size(section[k]) for k in MEMORY_SIZES + MEMORY_RATES},
                       text_encoder_stream=_te_stream(section.get("text_encoder_stream")))


def _te_stream(doc) -> TextEncoderStream | None:
    if not isinstance(doc, dict):
        return None
    rates = tuple((k, parse_size(v)) for k, v in (doc.get("disk_read_per_s") or {}).items())
    return TextEncoderStream(**{k: parse_size(doc[k]) for k in TE_STREAM_SIZES},
                             **{k: int(doc[k]) for k in TE_STREAM_COUNTS},
                             max_time_share=float(doc["max_time_share"]), disk_read=rates)


def _check_te_stream(doc, problems: Problems) -> None:
    where = ("memory", "text_encoder_stream")
    if doc is None:
        return
    if not isinstance(doc, dict):
        problems.add(where, "must be a mapping")
        return
    known = set(TE_STREAM_SIZES + TE_STREAM_COUNTS) | {"max_time_share", "disk_read_per_s", "source", "assumption"}
    for k in doc:
        if k not in known:
            problems.add(where + (k,), f"is not a known key; allowed: {', '.join(sorted(known))}")
    for k in TE_STREAM_SIZES:
        if parse_size(doc.get(k)) is None:
            problems.add(where + (k,), "must be a size like \"0.5 GB\"")
    for k in TE_STREAM_COUNTS:
        if not _whole(doc.get(k)):
            problems.add(where + (k,), "must be a whole number above 0")
    share = doc.get("max_time_share")
    if isinstance(share, bool) or not isinstance(share, (int, float)) or not 0 < share <= 1:
        problems.add(where + ("max_time_share",), "must be a number above 0 and at most 1")
    rates = doc.get("disk_read_per_s")
    if not isinstance(rates, dict) or not rates or any(not parse_size(v) for v in rates.values()):
        problems.add(where + ("disk_read_per_s",), "must map disk kinds (ssd, hdd, unknown) to sizes read per second")


def comfy_memory(section: dict) -> ComfyMemory:
    r = section["reserve"]
    return ComfyMemory(parse_size(r["default"]), parse_size(r["windows"]), parse_size(r["large_card_from"]),
                       parse_size(r["large_card_extra"]), parse_size(section["inference_minimum"]),
                       float(section["weights_share"]), tuple((section.get("compute_dtype") or {}).items()),
                       tuple((section.get("cast_formats") or {}).items()), tuple(section.get("cast_parts") or ()))


def _whole(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v > 0


def check(data: dict, problems: Problems) -> None:
    """A problem for every figure the typed values above could not be built from (its section is a mapping)."""
    for k in MEMORY_SIZES:
        if parse_size(data["memory"].get(k)) is None:
            problems.add(("memory", k), "must be a size like \"0.5 GB\"")
    for k in MEMORY_RATES:
        if parse_size(data["memory"].get(k)) is None:
            problems.add(("memory", k), "must be a whole number of bytes")
    _check_te_stream(data["memory"].get("text_encoder_stream"), problems)
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
    dtypes = data["comfyui"].get("compute_dtype")
    if not isinstance(dtypes, dict) or "default" not in dtypes or any(v not in COMPUTE_DTYPES for v in dtypes.values()):
        problems.add(("comfyui", "compute_dtype"), f"is {dtypes!r}; allowed: {{default: DTYPE, cpu: DTYPE, ...}} with "
                                                   f"DTYPE one of {', '.join(COMPUTE_DTYPES)}")
    casts = data["comfyui"].get("cast_formats")
    if not isinstance(casts, dict) or not all(_whole(v) for v in casts.values()):
        problems.add(("comfyui", "cast_formats"), f"is {casts!r}; allowed: {{FORMAT: bytes per weight in the file}}")
    parts = data["comfyui"].get("cast_parts")
    if not isinstance(parts, list) or not all(p in ("dit", "text_encoder", "vae", "audio_vae") for p in parts):
        problems.add(("comfyui", "cast_parts"), f"is {parts!r}; allowed: a list of dit, text_encoder, vae, audio_vae")
