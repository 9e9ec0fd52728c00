"""H3kitUnetLoaderGGUF and H3kitCLIPLoaderGGUF: H3's GGUF files through ComfyUI-GGUF's ops (the loading in `load`)."""

from __future__ import annotations

from ..h3kit_common.files import AUTO, gguf_files
from ..h3kit_common.guard_inputs import Guarded, with_guard

DTYPES = ["default", "target", "float32", "float16", "bfloat16"]  # UnetLoaderGGUFAdvanced's choices


class H3kitUnetLoaderGGUF(Guarded):
    """Unet Loader (GGUF) that also takes MiniMax H3 GGUFs without metadata (stable-diffusion.cpp's)."""

    @classmethod
    def INPUT_TYPES(cls):
        return with_guard({"required": {"unet_name": (gguf_files("diffusion_models"),)},
                           "optional": {"dequant_dtype": (DTYPES, {"default": "default", "advanced": True}),
                                        "patch_dtype": (DTYPES, {"default": "default", "advanced": True}),
                                        "patch_on_device": ("BOOLEAN", {"default": False, "advanced": True})}})

    RETURN_TYPES = ("MODEL",)
    FUNCTION = "load"
    CATEGORY = "h3kit"
    DESCRIPTION = ("Loads a GGUF diffusion model with ComfyUI-GGUF's dequantizing ops, like Unet Loader (GGUF), "
                   "and also MiniMax H3 GGUFs that carry no metadata (stable-diffusion.cpp's files, which the "
                   "stock loader refuses as 'Unknown model architecture'): detected by ComfyUI's own H3 keys. "
                   "Needs ComfyUI-GGUF installed ('h3kit models fetch --with-loaders').")

    def load(self, unet_name, dequant_dtype="default", patch_dtype="default", patch_on_device=False,
             h3kit_guard=None, h3kit_queue_anyway=None):
        import folder_paths

        from ..h3kit_common.gguf_load import load_dit

        path = folder_paths.get_full_path_or_raise("diffusion_models", unet_name)
        return (load_dit(path, dequant_dtype, patch_dtype, patch_on_device),)


class H3kitCLIPLoaderGGUF(Guarded):
    """CLIPLoader (GGUF) for MiniMax H3's Qwen3-VL-32B text encoder, with its vision tower (mmproj)."""

    @classmethod
    def INPUT_TYPES(cls):
        mmprojs = [AUTO] + [n for n in gguf_files("text_encoders") if "mmproj" in n.lower()]
        return with_guard({"required": {"clip_name": (gguf_files("text_encoders"),)},
                           "optional": {"mmproj_name": (mmprojs, {
                               "default": AUTO, "tooltip": "The vision tower's GGUF; (auto): the one inside the file, "
                                                          "else an mmproj*.gguf named after it beside it."}),
                               "type": (["minimax"], {"default": "minimax", "advanced": True})}})

    RETURN_TYPES = ("CLIP",)
    FUNCTION = "load"
    CATEGORY = "h3kit"
    DESCRIPTION = ("Loads MiniMax H3's Qwen3-VL-32B text encoder from GGUF (llama.cpp or ComfyUI tensor names, "
                   "with or without metadata) plus its vision tower, from the same file or an mmproj GGUF, "
                   "through ComfyUI-GGUF's dequantizing ops; as CLIPLoader type minimax. Needs ComfyUI-GGUF "
                   "installed ('h3kit models fetch --with-loaders').")

    def load(self, clip_name, mmproj_name=AUTO, type="minimax", h3kit_guard=None, h3kit_queue_anyway=None):
        import folder_paths

        from ..h3kit_common.gguf_load import load_text_encoder

        path = folder_paths.get_full_path_or_raise("text_encoders", clip_name)
        return (load_text_encoder(path, None if mmproj_name == AUTO else mmproj_name, type,
                                  folder_lookup=lambda n: folder_paths.get_full_path("text_encoders", n)),)


NODE_CLASS_MAPPINGS = {"H3kitUnetLoaderGGUF": H3kitUnetLoaderGGUF, "H3kitCLIPLoaderGGUF": H3kitCLIPLoaderGGUF}
NODE_DISPLAY_NAME_MAPPINGS = {"H3kitUnetLoaderGGUF": "h3kit Unet Loader (GGUF, H3)",
                              "H3kitCLIPLoaderGGUF": "h3kit CLIP Loader (GGUF, H3 Qwen3-VL)"}
