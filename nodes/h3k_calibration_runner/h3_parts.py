"""The H3 video VAE decoder and the Qwen3-VL-32B text encoder, timed at full width and reduced depth.

Both are transformers whose depth is a constructor argument, so each is
built from ComfyUI's own classes with one or two layers at the real width
(meta device, then cheap random values), timed with hooks on its layers
(per-layer and fixed time from the same call), and scaled to the real
depth:

- video VAE: `comfy.ldm.minimax.vae.ViT3DDecoder` (what `MiniMaxH3VideoVAE`
  decodes a tile with: 36 layers, 32 heads x 64) plus its `post_quant_conv`,
  on one tile as the VAE cuts it itself (256 px, 7 latent frames: 5 per
  17-frame clip plus 2 of overlap; the VAE ignores VAEDecodeTiled's tile
  arguments: ComfyUI 0.33 comfy/sd.py VAE.decode_tiled), in `model_management.vae_dtype`. The
  number of tiles and temporal chunks at the plan's canvas comes from the
  VAE's own `split_tiles` / `_decode_temporal_chunks`;
- text encoder: `comfy.text_encoders.llama.Llama2_` with
  `Qwen3VL_32BConfig` (50 layers of 5120 wide), stored in
  `text_encoder_dtype` with ComfyUI's manual-cast operations and fp32
  compute, as `comfy.sd.CLIP` sets it up, at the prompt's token count; plus
  H3's token refiner (run once per clip by `extra_conds`), estimated from
  the DiT block rates because a refiner block is a DiT block without AdaLN.
"""

from __future__ import annotations

import time
import traceback
import types

from . import comfy_env, fit

VAE_TILE = 256  # MiniMaxH3VideoVAE's own tile (px) and temporal chunk, whatever the workflow asks for
VAE_LAYERS = 36
QUICK_VAE_FLOPS = 50e9  # past this one full tile-chunk per layer is too slow for --quick: 2 latent frames, scaled
TE_LAYERS = 50  # Qwen3VL_32BConfig.num_hidden_layers (H3's truncated Qwen3-VL-32B)
TE_DIMS = ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads")


def guard(what: str, fn, *args) -> dict:
    try:
        return fn(*args)
    except Exception as exc:
        return {"status": "error", "reason": f"{what} failed: {type(exc).__name__}: {exc}",
                "traceback": traceback.format_exc(limit=4)}


def timed_layers(env, fn, layers, quick: bool, warm=None) -> dict:
    """Median call seconds and median per-layer seconds of `fn()` (one warm-up call first: `warm()` if given,
    a cheaper call that touches the same weights)."""
    torch = env["torch"]
    clock = comfy_env.ModuleClock(env, layers)
    runs = []

    def run():
        clock.times = []
        t0 = time.perf_counter()
        fn()
        comfy_env.sync(env)
        dt = time.perf_counter() - t0
        runs.append((dt, list(clock.times)))
        return dt

    try:
        with torch.inference_mode():
            if warm is not None:
                warm()
            stats = fit.repeat_until_stable(run, time.perf_counter, warmup=0 if warm is not None else 1,
                                            min_runs=2 if quick else 3, cap_s=2.0 if quick else 15.0)
    finally:
        clock.remove()
    tail = runs[-min(3, stats["runs"]):]
    per_layer = sorted(sum(ts) / max(1, len(ts)) for _, ts in tail)[len(tail) // 2]
    fixed = sorted(dt - sum(ts) for dt, ts in tail)[len(tail) // 2]
    return {"seconds": stats["seconds"], "spread": stats["spread"], "runs": stats["runs"],
            "layer_s": per_layer, "fixed_s": max(0.0, fixed)}


def vae_tiles(vae_cls, width: int, height: int, frames: int) -> dict:
    """Tiles and temporal chunks MiniMaxH3VideoVAE decodes for a canvas (its own methods on its own constants)."""
    ns = types.SimpleNamespace(tile_size=VAE_TILE, tile_overlap_min=64, vae_ratio=16, token_drop=3,
                               tokens_chunk_size=5)
    ys = vae_cls.split_tiles(ns, int(height))[0]
    xs = vae_cls.split_tiles(ns, int(width))[0]
    _pad, chunks = vae_cls._decode_temporal_chunks(ns, fit.latent_frames(frames))
    return {"tiles_y": len(ys), "tiles_x": len(xs), "temporal_chunks": chunks,
            "calls": len(ys) * len(xs) * chunks}


def measure_vae(env, job, canvas, quick, dit_fit=None, dit_arch=None) -> dict:
    torch, mm = env["torch"], env["mm"]
    import comfy.ldm.minimax.vae as vae_mod

    planned = job.settings.vae_tile_size
    layers = 1 if quick else 2
    dev = mm.vae_device()
    dtype = mm.vae_dtype(dev, [torch.float16, torch.float32])
    esize = torch.empty(0, dtype=dtype).element_size()
    vae_dims = job.h3_vae
    heads, dim_head = int(vae_dims.get("heads") or 32), int(vae_dims.get("dim_head") or 64)
    layers_total = int(vae_dims.get("layers") or VAE_LAYERS)
    layers = min(layers, layers_total)
    dim = heads * dim_head
    layer_bytes = (dim * 3 * dim + dim * dim + dim * 4 * dim * 2 + dim * 4 * dim) * esize
    lat_t = 5 + 2  # tokens_chunk_size + token_overlap: one chunk as decode_temporal slices it
    tokens = lat_t * (VAE_TILE // 16) ** 2 + 5  # + 4 register tokens + 1 pad row
    # --quick times 2 of the 7 latent frames and scales (linear part by tokens, attention by tokens^2
    # at the DiT's measured attention rate per head-dim); the full run times the whole chunk
    full_flops = 2 * layers * tokens * (layer_bytes / esize) + 4 * layers * tokens ** 2 * dim
    timed_t = 2 if quick and dit_fit and full_flops > QUICK_VAE_FLOPS else lat_t
    timed_tokens = timed_t * (VAE_TILE // 16) ** 2 + 5
    act_bytes = tokens * dim * 4 * 3 * esize * 2  # the gated FFN's widest activation, twice over
    need = layers * layer_bytes + act_bytes
    free = comfy_env.device_free(env)
    if free is not None and need > free * 0.6:
        return {"status": "skipped", "reason": f"one VAE tile needs about {need / 2**30:.1f} GiB "
                f"({layers} decoder layer(s) + activations); {free / 2**30:.1f} GiB is free", "tile": VAE_TILE}
    dec, post = _vae_decoder(env, vae_mod, layers, heads, dim_head, dev, dtype)
    z = torch.randn(1, 24, timed_t, VAE_TILE // 16, VAE_TILE // 16, device=dev, dtype=dtype)
    t = timed_layers(env, lambda: dec(post(z)), list(dec.transformer_blocks), quick)
    layer_s, fixed_s, scaled = t["layer_s"], t["fixed_s"], ""
    if timed_tokens != tokens:
        att = dit_fit["block_s_per_token2"] / (int(dit_arch["heads"]) * int(dit_arch["head_dim"])) * dim
        linear = max(0.0, layer_s - att * timed_tokens ** 2) / timed_tokens
        layer_s = linear * tokens + att * tokens ** 2
        fixed_s *= tokens / timed_tokens
        scaled = (f"; timed at {timed_t} latent frames ({timed_tokens} tokens) and scaled to {tokens} "
                  f"(attention at the DiT's measured rate per head-dim)")
    tile_s = fixed_s + layers_total * layer_s
    plan = vae_tiles(vae_mod.MiniMaxH3VideoVAE, canvas["width"], canvas["height"], canvas["frames"])
    decode_s = plan["calls"] * tile_s
    pixel_frames = canvas["width"] * canvas["height"] * fit.snap_frames(canvas["frames"])
    out = {"status": "measured", "tile": VAE_TILE, "temporal_tile_latents": lat_t, "dtype": str(dtype)[6:],
           "layers_built": layers, "layers_total": layers_total, "layer_s": layer_s, "fixed_s": fixed_s,
           "timed_latent_frames": timed_t,
           "spread": t["spread"], "runs": t["runs"], "seconds_per_tile": tile_s, "canvas_tiles": plan,
           "decode_s": decode_s, "decode_s_per_pixel_frame": decode_s / pixel_frames,
           "how": f"ViT3DDecoder with {layers} of its {layers_total} layers at full width ({heads}x{dim_head}) on "
                  f"one {VAE_TILE}px x {lat_t}-latent-frame tile, per-layer time x {layers_total} + the rest, "
                  f"x {plan['calls']} tile-chunks for the canvas{scaled}"}
    if planned and int(planned) != VAE_TILE:
        out["note"] = (f"the plan's vae_tile_size {planned} does not reach MiniMaxH3VideoVAE, which always "
                       f"decodes {VAE_TILE}px tiles (ComfyUI's MiniMaxH3VideoVAE tiles itself)")
    del dec, post, z
    return out


def _vae_decoder(env, vae_mod, layers: int, heads: int, dim_head: int, dev, dtype):
    """The video VAE's ViT decoder with `layers` of its layers and the conv before it, random weights, on `dev`."""
    torch = env["torch"]
    with torch.device("meta"):
        dec = vae_mod.ViT3DDecoder(patch_size=16, patch_size_t=4, in_channels=24, out_channels=3,
                                   num_layers=layers, heads=heads, dim_head=dim_head,
                                   operations=comfy_env_ops(env))
        post = vae_mod.ops.Conv3d(24, 24, 1)
    for module in (dec, post):
        module.to_empty(device=dev)
        comfy_env.fill_random_(module, torch)
        module.to(dtype)
    return dec, post


def comfy_env_ops(env):
    return env["ops"].disable_weight_init


def measure_text_encoder(env, job, canvas, quick, dit_fit, arch) -> dict:
    torch, mm = env["torch"], env["mm"]
    from comfy.text_encoders import llama

    dims = {k: int(v) for k, v in job.h3_text_encoder.items() if k in TE_DIMS}
    layers_total = dims.pop("num_hidden_layers", TE_LAYERS)
    layers = min(1 if quick else 2, layers_total)
    dev = mm.text_encoder_device()
    dtype = mm.text_encoder_dtype(dev)
    cfg = llama.Qwen3VL_32BConfig(**dims, num_hidden_layers=layers, vocab_size=16)
    esize = torch.empty(0, dtype=dtype).element_size()
    h, f = cfg.hidden_size, cfg.intermediate_size
    kv = cfg.num_key_value_heads * cfg.head_dim
    layer_bytes = (h * cfg.num_attention_heads * cfg.head_dim * 2 + h * kv * 2 + 3 * h * f) * esize
    free = comfy_env.device_free(env)
    text = int(canvas["text_tokens"])
    refiner = _refiner_estimate(dit_fit, arch, text)
    if free is not None and layers * layer_bytes * 3 > free * 0.6:  # stored + the fp32 cast of one layer
        return {"status": "skipped", "reason": f"one text-encoder layer needs about "
                f"{3 * layer_bytes / 2**30:.1f} GiB; {free / 2**30:.1f} GiB is free", **refiner}
    with torch.device("meta"):
        model = llama.Llama2_(cfg, device=torch.device("meta"), dtype=dtype, ops=env["ops"].manual_cast)
    model.to_empty(device=dev)
    comfy_env.fill_random_(model, torch)
    x = torch.randn(1, text, h, device=dev, dtype=torch.float32) * 0.5
    t = timed_layers(env, lambda: model(None, embeds=x, dtype=torch.float32), list(model.layers), quick,
                     warm=lambda: model(None, embeds=x[:, :8], dtype=torch.float32))
    te_s = t["fixed_s"] + layers_total * t["layer_s"]
    del model, x
    return {"status": "measured", "text_encode_s": te_s + refiner["refiner_s"], "te_s": te_s,
            "layer_s": t["layer_s"], "fixed_s": t["fixed_s"], "spread": t["spread"], "runs": t["runs"],
            "layers_built": layers, "layers_total": layers_total, "tokens": text, "dtype": str(dtype)[6:],
            "how": f"Qwen3-VL-32B text model: {layers} of its {layers_total} layers at full width "
                   f"({cfg.hidden_size}), stored {str(dtype)[6:]}, manual-cast to fp32, {text} tokens; "
                   f"per-layer time x {layers_total}; "
                   f"plus the token refiner (estimated from the DiT block rates)", **refiner}


def _refiner_estimate(dit_fit, arch, text: int) -> dict:
    n = int(arch.get("refiner_blocks") or 0)
    s = n * (dit_fit["block_s_per_token"] * text + dit_fit["block_s_per_token2"] * text * text)
    return {"refiner_s": s, "refiner_how": f"{n} refiner blocks x the DiT block rates at {text} tokens (estimate)"}
