"""The profile, tiled-decode and memory-guard nodes: declare inputs, delegate to `logic`.

ComfyUI and torch are imported only when a node runs."""

from __future__ import annotations

import gc
import logging

from ..h3kit_common.pack import PROFILE, profile_stamp
from ..h3kit_common.guard_inputs import Guarded, with_guard
from .logic import (DEFAULT_CHUNK_FRAMES, attributes_set, chunked_decode, describe, frame_chunks, memory_report,
                    plan_decode, tile_values)

CATEGORY = "h3kit"


class _AnyType(str):
    """ComfyUI's usual wildcard: a type string equal to every other type."""

    def __ne__(self, other):
        return False


ANY = _AnyType("*")


def native_status() -> str:
    """Whether h3kit's native library loads here; a sentence, never an exception."""
    try:
        from .. import h3k_native
    except Exception as exc:  # the bridge is optional: the pack must import without it
        return f"not available ({type(exc).__name__}: {exc})"
    try:
        h3k_native.load()
        version = h3k_native.version() if hasattr(h3k_native, "version") else "?"
        return f"loaded (version {version})"
    except Exception as exc:
        return f"not loaded ({exc}); run 'h3kit build' and 'h3kit apply'"


class H3kitProfileInfo:
    """The active h3kit profile as text, plus its tile sizes to wire into other nodes."""

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {}}

    RETURN_TYPES = ("STRING", "INT", "INT", "INT", "INT")
    RETURN_NAMES = ("settings", "tile_size", "overlap", "temporal_tile", "max_frames")
    FUNCTION = "info"
    CATEGORY = CATEGORY
    DESCRIPTION = "Shows the h3kit profile in use; re-reads h3kit_profile.json after 'h3kit apply'."

    @classmethod
    def IS_CHANGED(cls, **kwargs):
        return str(profile_stamp())

    def info(self):
        profile = PROFILE.current()
        t = tile_values(profile.tiles())
        text = describe(profile.name, profile.shown_settings(), native_status(), PROFILE.error)
        return (text, t["tile_size"], t["overlap"], t["temporal_tile"], t["max_frames"])


class H3kitTiledVAEDecode(Guarded):
    """VAE decode with the profile's tile sizes, chunk by chunk into one preallocated output.

    ComfyUI's MiniMax H3 video VAE ignores decode_tiled's arguments and tiles
    itself from `tile_size` / `tile_overlap_min`: for it the profile's tile and
    overlap are set on the model for this decode and restored afterwards; its
    17-frame clips stay its own, so the temporal tile does not apply to it.
    """

    @classmethod
    def INPUT_TYPES(cls):
        return with_guard({"required": {"samples": ("LATENT",), "vae": ("VAE",)},
                           "optional": {"frames_per_chunk": ("INT", {
                               "default": DEFAULT_CHUNK_FRAMES, "min": 1, "max": 4096,
                               "tooltip": "Latent frames (images) decoded at a time."})}})

    RETURN_TYPES = ("IMAGE",)
    FUNCTION = "decode"
    CATEGORY = CATEGORY
    DESCRIPTION = ("Tiled VAE decode using the h3kit profile's tile size, overlap and temporal tile. "
                   "MiniMax H3 video VAE: the tile size and overlap are set on the VAE for this decode "
                   "(it ignores decode_tiled's arguments); it decodes 17-frame clips itself, so the "
                   "temporal tile is not applied to it.")

    @classmethod
    def IS_CHANGED(cls, **kwargs):
        return str(profile_stamp())

    def decode(self, samples, vae, frames_per_chunk=DEFAULT_CHUNK_FRAMES, h3kit_guard=None, h3kit_queue_anyway=None):
        import torch
        import comfy.utils

        latent = samples["samples"]
        if getattr(latent, "is_nested", False):
            latent = latent.unbind()[0]
        if latent.ndim == 5 and getattr(vae, "latent_dim", 3) == 2:
            latent = latent[:, :, 0]
        t = tile_values(PROFILE.current().tiles())
        model = getattr(vae, "first_stage_model", None)
        plan = plan_decode(model, getattr(vae, "handles_tiling", False), t["tile_size"], t["overlap"],
                           t["temporal_tile"], 8, vae.spacial_compression_decode(), vae.temporal_compression_decode())
        if plan["h3"]:
            logging.getLogger("h3kit").info(
                "h3kit tiled decode: H3 video VAE tiles %d px, overlap %d px (set on the VAE for this decode)%s",
                plan["attrs"]["tile_size"], plan["attrs"]["tile_overlap_min"],
                "".join("; " + note for note in plan["notes"]))
        if latent.ndim == 5:
            frames_per_chunk = 1  # a video latent: whole clips, temporal tiles inside decode_tiled
        chunks = len(frame_chunks(int(latent.shape[0]), frames_per_chunk))
        bar = comfy.utils.ProgressBar(chunks)
        with attributes_set(model, plan["attrs"]):  # restored in finally, also when the decode raises
            images = chunked_decode(
                latent, frames_per_chunk,
                decode=lambda part: vae.decode_tiled(part, **plan["args"]),
                allocate=lambda shape, like: torch.empty(shape, dtype=like.dtype, device=like.device),
                on_chunk=lambda n: bar.update(1),
            )
        if images.ndim == 5:
            images = images.reshape(-1, images.shape[-3], images.shape[-2], images.shape[-1])
        if images.shape[0] > t["max_frames"] > 0:
            logging.getLogger("h3kit").warning("decoded %d frames, above this profile's max_frames %d", images.shape[0], t["max_frames"])
        return (images,)


class H3kitMemoryGuard(Guarded):
    """Pass anything through after unloading models and emptying caches; reports memory freed."""

    @classmethod
    def INPUT_TYPES(cls):
        return with_guard({"required": {"value": (ANY,)}})

    RETURN_TYPES = (ANY, "STRING")
    RETURN_NAMES = ("value", "report")
    FUNCTION = "guard"
    CATEGORY = CATEGORY
    DESCRIPTION = "Unloads models and empties caches between heavy steps, then passes its input on."

    @classmethod
    def IS_CHANGED(cls, **kwargs):
        return float("nan")  # always run: freeing memory is the point

    def guard(self, value, h3kit_guard=None, h3kit_queue_anyway=None):
        import comfy.model_management as mm

        def free() -> dict:
            figures = {"device": None, "ram": None}
            try:
                figures["device"] = mm.get_free_memory(mm.get_torch_device())
            except Exception:
                pass
            try:
                import psutil
                figures["ram"] = psutil.virtual_memory().available
            except Exception:
                pass
            return figures

        before = free()
        mm.unload_all_models()
        gc.collect()
        mm.soft_empty_cache(True)
        report = memory_report(before, free())
        logging.getLogger("h3kit").info(report)  # ComfyUI logs to its console and log file
        return (value, report)


NODE_CLASS_MAPPINGS = {
    "H3kitProfileInfo": H3kitProfileInfo,
    "H3kitTiledVAEDecode": H3kitTiledVAEDecode,
    "H3kitMemoryGuard": H3kitMemoryGuard,
}
NODE_DISPLAY_NAME_MAPPINGS = {
    "H3kitProfileInfo": "h3kit Profile Info",
    "H3kitTiledVAEDecode": "h3kit Tiled VAE Decode",
    "H3kitMemoryGuard": "h3kit Memory Guard",
}
