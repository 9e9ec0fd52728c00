"""H3kitStreamedTextEncoderLoader: Load CLIP for MiniMax H3 with the encoder's layers streamed from disk.

The logic is in `te_load` (the model) and `te_logic` (the file's header)."""

from __future__ import annotations

from ..h3k_loader import MAX_PREFETCH, PAGE_CACHE_CHOICES, STREAMED_FILES
from ..h3kit_common.files import AUTO, gguf_files, stamp_of
from ..h3kit_common.pack import PACK_DIR
from ..h3kit_common.guard_inputs import Guarded, with_guard
from .te_logic import TE_STATS_FILE

STATS_PATH = PACK_DIR / TE_STATS_FILE


def _text_encoder_files() -> list[str]:
    import folder_paths

    # ComfyUI's list leaves .gguf out (ComfyUI-GGUF keeps its own): both, once each
    return sorted(set(folder_paths.get_filename_list("text_encoders")) | set(gguf_files("text_encoders")))


class H3kitStreamedTextEncoderLoader(Guarded):
    """Load CLIP (type minimax) that keeps the Qwen3-VL-32B layers on disk and reads each one as it runs."""

    @classmethod
    def INPUT_TYPES(cls):
        files = _text_encoder_files()
        return with_guard({"required": {"clip_name": (files,)},
                "optional": {
                    "mmproj_name": ([AUTO] + [n for n in files if "mmproj" in n.lower()],
                                    {"default": AUTO, "tooltip": "GGUF only: the vision tower's file; (auto): the one "
                                                                 "inside the file, else an mmproj*.gguf beside it."}),
                    "page_cache": (list(PAGE_CACHE_CHOICES), {
                        "default": PAGE_CACHE_CHOICES[0], "tooltip": "use: read the layers through the OS's page cache. bypass: "
                                                     "read them past it, for a file larger than the cache can keep."}),
                    "prefetch_layers": ("INT", {"default": 1, "min": 1, "max": MAX_PREFETCH,
                                                "tooltip": "Layers read ahead while the current one computes."}),
                }})

    RETURN_TYPES = ("CLIP",)
    FUNCTION = "load"
    CATEGORY = "h3kit"
    DESCRIPTION = (f"Loads MiniMax H3's text encoder (Qwen3-VL-32B: {STREAMED_FILES}, a GGUF with its mmproj) "
                   "like Load CLIP with type minimax, but keeps its 50 layers on disk: each is read when the "
                   "encoder reaches it and freed after, the embedding table is read by the rows a prompt needs, "
                   "and the vision tower only while an image is encoded. Nothing stays in memory after the "
                   "encode. Writes h3kit_te_streaming_stats.json in the pack folder.")

    @classmethod
    def IS_CHANGED(cls, clip_name, **kwargs):
        return stamp_of("text_encoders", clip_name)

    def load(self, clip_name, mmproj_name=AUTO, page_cache="use", prefetch_layers=1, h3kit_guard=None,
             h3kit_queue_anyway=None):
        import folder_paths

        from .te_load import load_streamed_text_encoder

        path = folder_paths.get_full_path_or_raise("text_encoders", clip_name)
        return (load_streamed_text_encoder(
            path, None if mmproj_name == AUTO else mmproj_name, page_cache, prefetch_layers, stats_path=STATS_PATH,
            folder_lookup=lambda name: folder_paths.get_full_path("text_encoders", name),
            embedding_directory=folder_paths.get_folder_paths("embeddings")),)


NODE_CLASS_MAPPINGS = {"H3kitStreamedTextEncoderLoader": H3kitStreamedTextEncoderLoader}
NODE_DISPLAY_NAME_MAPPINGS = {"H3kitStreamedTextEncoderLoader": "h3kit Streamed Text Encoder (MiniMax H3)"}
