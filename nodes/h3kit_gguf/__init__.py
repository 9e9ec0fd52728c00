"""H3's GGUF files held in memory through ComfyUI-GGUF's ops.

Node module: `node` (H3kitUnetLoaderGGUF, H3kitCLIPLoaderGGUF). What it decides
on names and shapes (`h3kit_common.gguf_names`, standard library only) and its
bridge to the installed ComfyUI-GGUF (`h3kit_common.gguf_load`) live in
h3kit_common, since the streamed loaders use them too.
"""
