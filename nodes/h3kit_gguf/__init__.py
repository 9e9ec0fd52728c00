"""H3's GGUF files held in memory through ComfyUI-GGUF's ops.

Node module: `node` (H3kitUnetLoaderGGUF, H3kitCLIPLoaderGGUF). `logic`
(standard library only: names, checks, the mmproj search) and `load` (the
bridge to the installed ComfyUI-GGUF) serve the streamed loaders too.
"""
