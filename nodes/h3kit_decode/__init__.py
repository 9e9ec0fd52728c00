"""The profile, the tiled VAE decode and the memory guard.

Node module: `node` (H3kitProfileInfo, H3kitTiledVAEDecode,
H3kitMemoryGuard); `logic` computes without ComfyUI or torch.
"""
