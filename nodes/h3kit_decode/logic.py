"""What the profile and decode nodes compute, without importing ComfyUI or torch.

- `tile_values` gives the profile's tile sizes (h3k_profile.VaeTiles) as
  the four INTs the profile node outputs.
- `decode_tile_args` turns pixel tile sizes into the latent units
  `VAE.decode_tiled` takes, the same way ComfyUI's VAEDecodeTiled does.
- `plan_decode` decides how the profile's tiles reach a VAE: as
  `decode_tiled` arguments, or, for ComfyUI's MiniMax H3 video VAE (whose
  `decode_tiled` ignores its arguments and tiles itself from instance
  attributes), as `tile_size` / `tile_overlap_min` set on the model for the
  decode by `attributes_set` and restored afterwards.
- `chunked_decode` decodes a batch of frames chunk by chunk into one output
  allocated once, so memory beyond the output does not grow with frames.
"""

from __future__ import annotations

import contextlib
import math

from ..h3k_profile import VaeTiles

DEFAULT_CHUNK_FRAMES = 8


def tile_values(tiles: VaeTiles) -> dict:
    """The four INTs the nodes expose (pixels and frames)."""
    return {"tile_size": tiles.tile_size, "overlap": tiles.overlap, "temporal_tile": tiles.temporal_tile,
            "max_frames": tiles.max_frames}


def describe(profile: str, settings: dict, native_status: str, note: str | None = None) -> str:
    lines = [f"h3kit profile: {profile}"]
    for key in sorted(settings):
        if key in ("env",):
            continue
        lines.append(f"  {key}: {settings[key]}")
    if settings.get("env"):
        lines.append("  env: " + ", ".join(f"{k}={v}" for k, v in sorted(settings["env"].items())))
    lines.append(f"native library: {native_status}")
    if note:
        lines.append(f"note: {note}")
    lines.append("Launch flags change only when ComfyUI restarts (use run_h3kit).")
    return "\n".join(lines)


def decode_tile_args(tile_size: int, overlap: int, temporal_size: int, temporal_overlap: int,
                     spatial_compression: int, temporal_compression: int | None) -> dict:
    """Keyword arguments for VAE.decode_tiled, in latent units (mirrors ComfyUI's VAEDecodeTiled)."""
    if tile_size < overlap * 4:
        overlap = tile_size // 4
    if temporal_size < temporal_overlap * 2:
        temporal_overlap = temporal_overlap // 2
    if temporal_compression:
        tile_t = max(2, temporal_size // temporal_compression)
        overlap_t = max(1, min(tile_t // 2, temporal_overlap // temporal_compression))
    else:
        tile_t = overlap_t = None
    spatial = max(1, int(spatial_compression))
    return {"tile_x": tile_size // spatial, "tile_y": tile_size // spatial, "overlap": overlap // spatial,
            "tile_t": tile_t, "overlap_t": overlap_t}


# ComfyUI's MiniMax H3 video VAE (comfy/ldm/minimax/vae.py, >= 0.31): it tiles itself in `split_tiles` from
# `tile_size` / `tile_overlap_min` (pixels, read at decode time) and chunks time in 17-frame clips fixed at
# construction; its decode_tiled(z, **kwargs) drops the arguments.
H3_VAE_CLASS = "MiniMaxH3VideoVAE"
H3_TILE_ATTRS = ("tile_size", "tile_overlap_min")
H3_OWN_TILES = {"tile_size": 256, "tile_overlap_min": 64}
H3_CLIP_FRAMES = 17


def is_h3_video_vae(model, handles_tiling: bool = False) -> bool:
    """Whether a VAE's first_stage_model is ComfyUI's H3 video VAE, by duck typing.

    It must carry the attributes its own tiler reads (`tile_size`,
    `tile_overlap_min`, `vae_ratio`, `split_tiles`, `decode_tiled`) and either
    be (a subclass of) `MiniMaxH3VideoVAE` or sit in a ComfyUI VAE wrapper with
    `handles_tiling`, i.e. one whose decode_tiled does its own tiling.
    """
    if model is None:
        return False
    for name in H3_TILE_ATTRS + ("vae_ratio",):
        value = getattr(model, name, None)
        if not isinstance(value, int) or isinstance(value, bool):
            return False
    if not (callable(getattr(model, "split_tiles", None)) and callable(getattr(model, "decode_tiled", None))):
        return False
    named = any(cls.__name__ == H3_VAE_CLASS for cls in type(model).__mro__)
    return named or bool(handles_tiling)


def h3_tile_values(tile_px: int, overlap_px: int, ratio: int = 16) -> tuple[dict, list[str]]:
    """`tile_size` / `tile_overlap_min` (pixels) for the H3 VAE's split_tiles, and what was adjusted.

    split_tiles slices latents at pixel // ratio, so both are multiples of the
    VAE's spatial ratio (nearest one); it finds a tile count only when
    tile > overlap and slices tails with `-overlap`, so the overlap is at least
    one ratio; and, as the profile's own rule, the tile is at least twice the
    overlap (the overlap is lowered to fit).
    """
    ratio = max(1, int(ratio))
    notes = []

    def nearest(value: int, least: int) -> int:
        return max(least, int(math.floor(int(value) / ratio + 0.5)) * ratio)

    tile = nearest(tile_px, 2 * ratio)
    overlap = nearest(overlap_px, ratio)
    if 2 * overlap > tile:
        overlap = max(ratio, (tile // 2) // ratio * ratio)
    if tile != tile_px:
        notes.append(f"tile {tile_px} px -> {tile} px (a multiple of {ratio}, at least {2 * ratio})")
    if overlap != overlap_px:
        notes.append(f"overlap {overlap_px} px -> {overlap} px (a multiple of {ratio}, at least {ratio}, "
                     "at most half the tile)")
    return {"tile_size": tile, "tile_overlap_min": overlap}, notes


def plan_decode(model, handles_tiling: bool, tile_size: int, overlap: int, temporal_size: int,
                temporal_overlap: int, spatial_compression: int, temporal_compression: int | None) -> dict:
    """How the profile's tiles reach this VAE.

    Returns {"h3": bool, "attrs": {name: value} to set on `model` for the
    decode, "args": keyword arguments for the wrapper's decode_tiled,
    "notes": [str]}. Other VAEs get ComfyUI VAEDecodeTiled's arguments and no
    attributes. The H3 video VAE gets `tile_size` / `tile_overlap_min`; its
    decode_tiled arguments are then only ComfyUI's memory estimate, so they
    describe the tile really used, without a temporal tile (the VAE decodes
    whole 17-frame clips: the temporal tile does not apply to it).
    """
    if not is_h3_video_vae(model, handles_tiling):
        return {"h3": False, "attrs": {},
                "args": decode_tile_args(tile_size, overlap, temporal_size, temporal_overlap,
                                         spatial_compression, temporal_compression), "notes": []}
    ratio = int(getattr(model, "vae_ratio", 0) or spatial_compression or 16)
    attrs, notes = h3_tile_values(tile_size, overlap, ratio)
    latent_tile = attrs["tile_size"] // ratio
    notes.append(f"vae_temporal_tile {temporal_size} not applied: the H3 video VAE decodes "
                 f"{getattr(model, 'clip_length', H3_CLIP_FRAMES)}-frame clips itself")
    return {"h3": True, "attrs": attrs,
            "args": {"tile_x": latent_tile, "tile_y": latent_tile, "overlap": attrs["tile_overlap_min"] // ratio},
            "notes": notes}


@contextlib.contextmanager
def attributes_set(obj, values: dict):
    """Set attributes on `obj` for the duration of a with-block; the old values come back in `finally`."""
    saved = {name: getattr(obj, name) for name in values}
    try:
        for name, value in values.items():
            setattr(obj, name, value)
        yield saved
    finally:
        for name, value in saved.items():
            setattr(obj, name, value)


def frame_chunks(total: int, chunk: int) -> list[tuple[int, int]]:
    chunk = max(1, int(chunk))
    return [(start, min(total, start + chunk)) for start in range(0, total, chunk)]


def chunked_decode(latent, chunk: int, decode, allocate, on_chunk=None):
    """Decode `latent` (batch first) in chunks into one output made by `allocate(shape, like)`.

    `decode(part)` returns images for that part, batch first; the output is
    allocated from the first chunk's shape, and each chunk is copied in and
    dropped before the next one is decoded.
    """
    total = int(latent.shape[0])
    output = None
    per_item = None
    for start, stop in frame_chunks(total, chunk):
        images = decode(latent[start:stop])
        n = int(images.shape[0])
        if output is None:
            per_item = max(1, n // (stop - start))  # video VAEs return several frames per latent item
            output = allocate((total * per_item,) + tuple(images.shape[1:]), images)
        output[start * per_item:start * per_item + n] = images
        del images
        if on_chunk is not None:
            on_chunk(stop - start)
    return output


def format_bytes(n: float) -> str:
    sign = "-" if n < 0 else ""
    n = abs(float(n))
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{sign}{n:.0f} {unit}" if unit == "B" else f"{sign}{n:.2f} {unit}"
        n /= 1024
    return f"{sign}{n:.2f} GiB"


def memory_report(before: dict, after: dict) -> str:
    """One line per memory pool: free before -> after (freed)."""
    parts = []
    for pool in sorted(set(before) & set(after)):
        b, a = before[pool], after[pool]
        if b is None or a is None:
            continue
        parts.append(f"{pool}: {format_bytes(b)} free -> {format_bytes(a)} free (freed {format_bytes(a - b)})")
    return "h3kit memory guard: " + ("; ".join(parts) if parts else "no memory figures available")
