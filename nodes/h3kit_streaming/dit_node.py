"""H3kitStreamedDiTLoader: UNETLoader for MiniMax H3 with the blocks streamed from disk (the model: `load`, `blocks`)."""

from __future__ import annotations

from ..h3k_loader import MAX_PREFETCH, PAGE_CACHE_CHOICES
from ..h3kit_common.files import gguf_files, stamp_of
from ..h3kit_common.pack import PACK_DIR, PROFILE
from ..h3kit_common.guard_inputs import Guarded, with_guard
from .logic import STATS_FILE, profile_defaults

STATS_PATH = PACK_DIR / STATS_FILE
WEIGHT_DTYPES = ["default", "fp8_e4m3fn", "fp8_e4m3fn_fast", "fp8_e5m2"]  # UNETLoader's choices
BYTES_MAX = 1 << 50


class H3kitStreamedDiTLoader(Guarded):
    """Load an H3 DiT like Load Diffusion Model, but read its transformer blocks from the file as they run."""

    @classmethod
    def INPUT_TYPES(cls):
        import folder_paths

        d = profile_defaults(PROFILE.current().dit_loader())
        return with_guard({"required": {
            # ComfyUI's list leaves .gguf out (ComfyUI-GGUF keeps its own): both, once each
            "unet_name": (sorted(set(folder_paths.get_filename_list("diffusion_models"))
                                 | set(gguf_files("diffusion_models"))),),
            "weight_dtype": (WEIGHT_DTYPES, {"advanced": True}),
            "preload_bytes": ("INT", {"default": d["preload_bytes"], "min": 0, "max": BYTES_MAX, "step": 1 << 20,
                                      "tooltip": "Bytes of blocks (file size) kept in memory once read; 0 streams all."}),
            "shard_size_bytes": ("INT", {"default": d["shard_size_bytes"], "min": 0, "max": BYTES_MAX,
                                         "step": 1 << 20,
                                         "tooltip": "Size of one read buffer; 0 means one block."}),
            "prefetch_blocks": ("INT", {"default": d["prefetch_blocks"], "min": 1, "max": MAX_PREFETCH,
                                        "tooltip": "Blocks read ahead while the current one computes."}),
        }, "optional": {  # optional: a prompt saved before it existed still validates (and reads through the cache)
            "page_cache": (list(PAGE_CACHE_CHOICES), {"default": d["page_cache"],
                           "tooltip": "use: read the blocks through the OS's page cache (a file that fits it is "
                                      "read from memory after the first step). bypass: read them past it, for a "
                                      "file larger than the cache can keep, which every step reads from the disk."}),
        }})

    RETURN_TYPES = ("MODEL",)
    FUNCTION = "load"
    CATEGORY = "h3kit"
    DESCRIPTION = ("Loads a MiniMax H3 DiT (safetensors, or GGUF: dequantized per block with ComfyUI-GGUF's code) "
                   "like Load Diffusion Model, but keeps its transformer blocks on disk: each block is read when "
                   "the model reaches it (the next ones while it computes) and freed after, through h3kit's "
                   "native streamer. LoRA and model patches apply per block. Writes h3kit_streaming_stats.json "
                   "in the pack folder after each run.")

    @classmethod
    def IS_CHANGED(cls, unet_name, **kwargs):
        return stamp_of("diffusion_models", unet_name)

    def load(self, unet_name, weight_dtype="default", preload_bytes=0, shard_size_bytes=0, prefetch_blocks=1,
             page_cache="use", h3kit_guard=None, h3kit_queue_anyway=None):
        import folder_paths

        from .load import load_streamed

        path = folder_paths.get_full_path_or_raise("diffusion_models", unet_name)
        return (load_streamed(path, weight_dtype, preload_bytes, shard_size_bytes, prefetch_blocks,
                              stats_path=STATS_PATH, page_cache=page_cache),)


NODE_CLASS_MAPPINGS = {"H3kitStreamedDiTLoader": H3kitStreamedDiTLoader}
NODE_DISPLAY_NAME_MAPPINGS = {"H3kitStreamedDiTLoader": "h3kit Streamed DiT Loader"}
