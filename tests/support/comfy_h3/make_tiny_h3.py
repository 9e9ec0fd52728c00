#!/usr/bin/env python3
"""Generate tiny random-weight MiniMax H3 files that ComfyUI (>= 0.31, checked on 0.33.0)
detects as H3 by their key names.

Needs only the standard library, torch and safetensors (no ComfyUI import).

Files written under --out (a ComfyUI "models" folder), names fixed:

  diffusion_models/h3tiny_dit_bf16.safetensors        H3 DiT (MiniMaxH3Model); shape-detected, loads in stock ComfyUI
  text_encoders/h3tiny_qwen3vl_te_bf16.safetensors    Qwen3-VL "32B" layout, 50 layers; tiny dims need the test node
  vae/h3tiny_taeh3_fp16.safetensors                   taeh3-shaped TAEHV (24 latent ch); fixed-size, loads in stock ComfyUI
  vae/h3tiny_video_vae_fp16.safetensors               MiniMaxH3VideoVAE layout, tiny dims; needs the test node
  vae/h3tiny_audio_vae_fp32.safetensors               MiniMaxH3AudioVAE layout, tiny dims; needs the test node
  vae/h3full_audio_vae_random_fp32.safetensors        (only with --full-audio-vae) real-size audio VAE, 605 MB,
                                                      loads in stock ComfyUI without the test node

Each file carries safetensors metadata "h3kit_tiny" (JSON of the dims used).
Usage: python make_tiny_h3.py --out /path/to/ComfyUI/models [--names JSON] [--dit JSON] [--seed 0]
Run it with ComfyUI's Python (it needs torch and safetensors); tests/support/comfy_h3/__init__.py drives it.
"""

import argparse
import json
import math
import os

import torch
from safetensors.torch import save_file

# ---------------------------------------------------------------- dims
DIT = dict(hidden_size=64, num_layers=2, token_refiner_num_layers=2, num_attention_heads=2,
           attention_head_dim=32, ffn_hidden_size=128, text_dim=48, timestep_input_dim=32,
           time_embed_hidden_size=64, time_embed_dim=32, rope_inv_freq_len=4,
           latents_dim=24, audio_latents_dim=32)
# head_dim of the Qwen3 LM is a class constant (128) in ComfyUI's config, so it stays 128.
TE = dict(hidden_size=48, intermediate_size=96, num_hidden_layers=50, num_attention_heads=1,
          num_key_value_heads=1, head_dim=128, vocab_size=151936,
          vision_hidden_size=32, vision_intermediate_size=64, vision_depth=3, vision_num_heads=2,
          vision_deepstack_visual_indexes=[0, 1, 2], vision_patch_size=16, vision_temporal_patch_size=2,
          vision_spatial_merge_size=2, vision_num_position_embeddings=2304)
VIDEO_VAE = dict(ch=32, ch_mult=[1, 1, 1, 1, 1, 1], num_res_blocks=2, z_channels=24, embed_dim=24,
                 dec_num_layers=1, dec_heads=2, dec_dim_head=32, patch_size=16, patch_size_t=4)
AUDIO_VAE = dict(encoder_dim=4, encoder_rates=[2, 4, 4, 5, 5], latent_dim=64, decoder_dim=128,
                 vae_latent_channels=32)
AUDIO_VAE_FULL = dict(encoder_dim=64, encoder_rates=[2, 4, 4, 5, 5], latent_dim=2048, decoder_dim=1024,
                      vae_latent_channels=32)


class KeyBuilder:
    """Collects (name -> tensor) with a simple deterministic init."""

    def __init__(self, seed, dtype):
        self.g = torch.Generator().manual_seed(seed)
        self.dtype = dtype
        self.sd = {}

    def w(self, name, *shape, fan_in=None, scale=1.0, dtype=None):
        if fan_in is None:
            fan_in = math.prod(shape[1:]) if len(shape) > 1 else shape[0]
        t = torch.randn(*shape, generator=self.g) * (scale / math.sqrt(max(1, fan_in)))
        self.sd[name] = t.to(dtype or self.dtype)

    def const(self, name, value, *shape, dtype=None):
        self.sd[name] = torch.full(shape, float(value)).to(dtype or self.dtype)

    def tensor(self, name, t, dtype=None):
        self.sd[name] = t.to(dtype or self.dtype).clone()  # no shared storage (safetensors refuses it)

    def linear(self, name, out_f, in_f, bias=True, dtype=None, scale=1.0):
        self.w(name + ".weight", out_f, in_f, dtype=dtype, scale=scale)
        if bias:
            self.const(name + ".bias", 0.0, out_f, dtype=dtype)

    def conv(self, name, out_c, in_c, *k, bias=True, dtype=None):
        self.w(name + ".weight", out_c, in_c, *k, dtype=dtype)
        if bias:
            self.const(name + ".bias", 0.0, out_c, dtype=dtype)

    def norm(self, name, n, bias=False, dtype=None):
        self.const(name + ".weight", 1.0, n, dtype=dtype)
        if bias:
            self.const(name + ".bias", 0.0, n, dtype=dtype)


# ---------------------------------------------------------------- DiT
def build_dit(seed, dims=None):
    c = dict(DIT, **(dims or {}))
    b = KeyBuilder(seed, torch.bfloat16)
    f32 = torch.float32
    H, heads, hd, ffn = c["hidden_size"], c["num_attention_heads"], c["attention_head_dim"], c["ffn_hidden_size"]
    inner = heads * hd
    t_dim = c["time_embed_dim"]
    b.linear("video_patch_proj", H, c["latents_dim"] * 4, dtype=f32)      # patch 1x2x2; fp32 island
    b.linear("audio_patch_proj", H, c["audio_latents_dim"], dtype=f32)
    b.linear("condition_proj", H, c["text_dim"])
    b.linear("time_embedder.proj_in", c["time_embed_hidden_size"], c["timestep_input_dim"], dtype=f32)
    b.linear("time_embedder.proj_out", t_dim, c["time_embed_hidden_size"], dtype=f32)
    n = c["rope_inv_freq_len"]
    b.tensor("rope.inv_freq", 1.0 / (10000.0 ** (torch.arange(n, dtype=torch.float64) / n)), dtype=f32)

    def attn_mlp(p):
        b.norm(p + ".norm1", H)
        b.norm(p + ".norm2", H)
        b.linear(p + ".attn.qkv_proj", inner * 3, H, bias=False)
        b.norm(p + ".attn.q_norm", hd)
        b.norm(p + ".attn.k_norm", hd)
        b.linear(p + ".attn.out_proj", H, inner, bias=False)
        b.linear(p + ".mlp.fc1", ffn * 2, H, bias=False)
        b.linear(p + ".mlp.fc2", H, ffn, bias=False)

    for i in range(c["token_refiner_num_layers"]):
        attn_mlp("token_refiner.blocks.%d" % i)
    b.norm("token_refiner.final_norm", H)
    for i in range(c["num_layers"]):
        attn_mlp("blocks.%d" % i)
        b.linear("blocks.%d.adaln_proj.linear" % i, 6 * H * 3, t_dim, scale=0.1)  # 6 mods x 3 modalities
    b.norm("final_layer.norm", H)
    b.linear("final_layer.adaln_proj.linear", 2 * H, t_dim, scale=0.1)
    b.linear("final_layer.video_out", c["latents_dim"] * 4, H, dtype=f32)
    b.linear("final_layer.audio_out", c["audio_latents_dim"], H, dtype=f32)
    return b.sd, c


# ---------------------------------------------------------------- text encoder (Qwen3-VL layout)
def build_te(seed):
    c = TE
    b = KeyBuilder(seed + 1, torch.bfloat16)
    H, I, hd = c["hidden_size"], c["intermediate_size"], c["head_dim"]
    q_out = c["num_attention_heads"] * hd
    kv_out = c["num_key_value_heads"] * hd
    b.w("model.embed_tokens.weight", c["vocab_size"], H, fan_in=1)  # std 1 rows
    for i in range(c["num_hidden_layers"]):
        p = "model.layers.%d" % i
        b.linear(p + ".self_attn.q_proj", q_out, H, bias=False)
        b.linear(p + ".self_attn.k_proj", kv_out, H, bias=False)
        b.linear(p + ".self_attn.v_proj", kv_out, H, bias=False)
        b.linear(p + ".self_attn.o_proj", H, q_out, bias=False, scale=0.5)
        b.norm(p + ".self_attn.q_norm", hd)
        b.norm(p + ".self_attn.k_norm", hd)
        b.linear(p + ".mlp.gate_proj", I, H, bias=False)
        b.linear(p + ".mlp.up_proj", I, H, bias=False)
        b.linear(p + ".mlp.down_proj", H, I, bias=False, scale=0.5)
        b.norm(p + ".input_layernorm", H)
        b.norm(p + ".post_attention_layernorm", H)
    # vision tower (Qwen3.5 vision + DeepStack)
    vh, vi = c["vision_hidden_size"], c["vision_intermediate_size"]
    merge = vh * c["vision_spatial_merge_size"] ** 2
    b.conv("visual.patch_embed.proj", vh, 3, c["vision_temporal_patch_size"], c["vision_patch_size"], c["vision_patch_size"])
    b.w("visual.pos_embed.weight", c["vision_num_position_embeddings"], vh, fan_in=1, scale=0.02)
    for i in range(c["vision_depth"]):
        p = "visual.blocks.%d" % i
        b.norm(p + ".norm1", vh, bias=True)
        b.norm(p + ".norm2", vh, bias=True)
        b.linear(p + ".attn.qkv", vh * 3, vh)
        b.linear(p + ".attn.proj", vh, vh)
        b.linear(p + ".mlp.linear_fc1", vi, vh)
        b.linear(p + ".mlp.linear_fc2", vh, vi)
    b.norm("visual.merger.norm", vh, bias=True)
    b.linear("visual.merger.linear_fc1", merge, merge)
    b.linear("visual.merger.linear_fc2", H, merge)
    for i in range(len(c["vision_deepstack_visual_indexes"])):
        p = "visual.deepstack_merger_list.%d" % i
        b.norm(p + ".norm", merge, bias=True)
        b.linear(p + ".linear_fc1", merge, merge)
        b.linear(p + ".linear_fc2", H, merge)
    return b.sd, c


# ---------------------------------------------------------------- taeh3 (TAEHV, 24 latent channels, patch 2)
def build_taeh3(seed):
    b = KeyBuilder(seed + 2, torch.float16)
    lc, img = 24, 3 * 2 * 2

    def memblock(p, n_in, n_out):
        b.conv(p + ".conv.0", n_out, n_in * 2, 3, 3)
        b.conv(p + ".conv.2", n_out, n_out, 3, 3)
        b.conv(p + ".conv.4", n_out, n_out, 3, 3)
        if n_in != n_out:
            b.conv(p + ".skip", n_out, n_in, 1, 1, bias=False)

    # encoder: conv act TPool conv Mem Mem Mem  x3 ... conv
    b.conv("encoder.0", 64, img, 3, 3)
    idx = 2
    for stage, stride in enumerate((2, 2, 1)):          # encoder_time_downscale (True, True, False)
        b.conv("encoder.%d.conv" % idx, 64, 64 * stride, 1, 1, bias=False)  # TPool
        b.conv("encoder.%d" % (idx + 1), 64, 64, 3, 3, bias=False)          # stride-2 conv
        for j in range(3):
            memblock("encoder.%d" % (idx + 2 + j), 64, 64)
        idx += 5
    b.conv("encoder.%d" % idx, lc, 64, 3, 3)              # encoder.17
    # decoder: Clamp conv act | Mem Mem Mem Upsample TGrow conv | x3 | act conv
    n_f = [256, 128, 64, 64]
    b.conv("decoder.1", n_f[0], lc, 3, 3)
    idx = 3
    for stage, stride in enumerate((1, 2, 2)):           # decoder_time_upscale (False, True, True)
        for j in range(3):
            memblock("decoder.%d" % (idx + j), n_f[stage], n_f[stage])
        b.conv("decoder.%d.conv" % (idx + 4), n_f[stage] * stride, n_f[stage], 1, 1, bias=False)  # TGrow
        b.conv("decoder.%d" % (idx + 5), n_f[stage + 1], n_f[stage], 3, 3, bias=False)
        idx += 6
    b.conv("decoder.%d" % (idx + 1), img, n_f[3], 3, 3)  # decoder.22 (bias shape 12 => H3)
    return b.sd, {"latent_channels": lc, "note": "fixed TAEHV architecture, random weights"}


# ---------------------------------------------------------------- MiniMaxH3VideoVAE layout (tiny)
def build_video_vae(seed):
    c = VIDEO_VAE
    b = KeyBuilder(seed + 3, torch.float16)
    ch, mult, nrb = c["ch"], c["ch_mult"], c["num_res_blocks"]
    space_down, time_down = (2, 2, 2, 2, 1, 1), (1, 2, 2, 1, 1, 1)
    mid = [ch * m for m in mult]
    bin_ = [mid[0]] + mid[:-1]
    b.conv("encoder.conv_in", bin_[0], 3, 3, 3, 3)
    for i in range(len(mult)):
        for j in range(nrb):
            cin = bin_[i] if j == 0 else mid[i]
            cout = mid[i]
            p = "encoder.down.%d.block.%d" % (i, j)
            b.norm(p + ".norm1", cin, bias=True)
            b.norm(p + ".norm2", cout, bias=True)
            b.conv(p + ".conv1", cout, cin, 3, 3, 3)
            b.conv(p + ".conv2", cout, cout, 3, 3, 3)
            if cin != cout:
                b.conv(p + ".nin_shortcut", cout, cin, 1, 1, 1)
        if space_down[i] * time_down[i] > 1:
            b.conv("encoder.down.%d.downsample.conv" % i, mid[i], mid[i], 3, 3, 3)
    b.norm("encoder.norm_out", mid[-1], bias=True)
    b.conv("encoder.conv_out", 2 * c["z_channels"], mid[-1], 3, 3, 3)
    b.conv("quant_conv", 2 * c["embed_dim"], 2 * c["z_channels"], 1, 1, 1)
    b.conv("post_quant_conv", c["z_channels"], c["embed_dim"], 1, 1, 1)
    dim = c["dec_heads"] * c["dec_dim_head"]
    b.w("decoder.register_tokens", 1, 4, dim, fan_in=1, scale=0.02)
    b.const("decoder.mask_token", 0.0, 1, 1, dim)
    b.linear("decoder.x_embedder", dim, c["z_channels"])
    for i in range(c["dec_num_layers"]):
        p = "decoder.transformer_blocks.%d" % i
        b.const(p + ".scale1", 0.1, dim)
        b.const(p + ".scale2", 0.1, dim)
        b.norm(p + ".norm1", dim)
        b.norm(p + ".norm2", dim)
        b.linear(p + ".attn.to_qkv", dim * 3, dim)
        b.linear(p + ".attn.to_out", dim, dim)
        b.linear(p + ".ff.w1", dim * 4 * 2, dim)
        b.linear(p + ".ff.w2", dim, dim * 4)
    b.norm("decoder.norm_out", dim, bias=True)
    b.linear("decoder.proj_out", 3 * c["patch_size_t"] * c["patch_size"] ** 2, dim)
    b.const("latents_mean", 0.0, c["z_channels"])
    b.const("latents_std", 1.0, c["z_channels"])
    return b.sd, c


# ---------------------------------------------------------------- MiniMaxH3AudioVAE layout
def kaiser_sinc_filter1d(cutoff, half_width, kernel_size):
    # same as comfy/ldm/minimax/audio_vae.py (BigVGAN alias-free filter)
    even = kernel_size % 2 == 0
    half_size = kernel_size // 2
    delta_f = 4 * half_width
    A = 2.285 * (half_size - 1) * math.pi * delta_f + 7.95
    if A > 50.0:
        beta = 0.1102 * (A - 8.7)
    elif A >= 21.0:
        beta = 0.5842 * (A - 21) ** 0.4 + 0.07886 * (A - 21.0)
    else:
        beta = 0.0
    window = torch.kaiser_window(kernel_size, beta=beta, periodic=False)
    time = (torch.arange(-half_size, half_size) + 0.5) if even else (torch.arange(kernel_size) - half_size)
    f = 2 * cutoff * window * torch.sinc(2 * cutoff * time)
    f /= f.sum()
    return f.view(1, 1, kernel_size)


def build_audio_vae(seed, c):
    b = KeyBuilder(seed + 4, torch.float32)
    L, D, C = c["latent_dim"], c["decoder_dim"], c["vae_latent_channels"]
    filt = kaiser_sinc_filter1d(0.25, 0.3, 12)  # ratio 2, kernel 12 (up and down are the same)

    def act1d(p, ch):
        b.const(p + ".act.alpha", 0.0, ch)   # log scale -> exp = 1
        b.const(p + ".act.beta", 0.0, ch)
        b.tensor(p + ".upsample.filter", filt)
        b.tensor(p + ".downsample.lowpass.filter", filt)

    # DAC encoder
    d = c["encoder_dim"]
    b.conv("encoder.block.0", d, 1, 7)
    for i, stride in enumerate(c["encoder_rates"]):
        d *= 2
        p = "encoder.block.%d.block" % (i + 1)
        for r in range(3):
            b.const(p + ".%d.block.0.alpha" % r, 1.0, 1, d // 2, 1)
            b.conv(p + ".%d.block.1" % r, d // 2, d // 2, 7)
            b.const(p + ".%d.block.2.alpha" % r, 1.0, 1, d // 2, 1)
            b.conv(p + ".%d.block.3" % r, d // 2, d // 2, 1)
        b.const(p + ".3.alpha", 1.0, 1, d // 2, 1)
        b.conv(p + ".4", d, d // 2, 2 * stride)
    n = len(c["encoder_rates"])
    b.const("encoder.block.%d.alpha" % (n + 1), 1.0, 1, d, 1)
    b.conv("encoder.block.%d" % (n + 2), L, d, 3)
    # attention posterior head
    b.norm("pre_block.norm1", L, bias=True)
    b.linear("pre_block.attn.qkv", 3 * L, L, bias=False)
    b.const("pre_block.attn.q_bias", 0.0, L)
    b.const("pre_block.attn.v_bias", 0.0, L)
    b.const("pre_block.attn.zero_k_bias", 0.0, L)       # detection key
    b.linear("pre_block.attn.proj", C, C)
    b.linear("pre_block.proj", C, L)
    b.norm("pre_block.norm3", L, bias=True)
    b.norm("pre_block.norm2", C, bias=True)
    b.norm("pre_block.mlp.norm", C, bias=True)
    b.linear("pre_block.mlp.w0", C * 2, C)
    b.linear("pre_block.mlp.w1", C * 2, C)
    b.linear("pre_block.mlp.w2", C, C * 2)
    b.conv("mean_proj", C, C, 1)
    b.conv("logs_proj", C, C, 1)
    b.conv("dec_in_proj", L, C, 1)
    # BigVGAN decoder
    ups, kernels = (5, 5, 2, 2, 2, 2, 2), (9, 9, 4, 4, 4, 4, 4)
    b.conv("decoder.conv_pre", D, L, 7)
    for i, (u, k) in enumerate(zip(ups, kernels)):
        cin, cout = D // 2 ** i, D // 2 ** (i + 1)
        b.w("decoder.ups.%d.0.weight" % i, cin, cout, k, fan_in=cin * k // u)
        b.const("decoder.ups.%d.0.bias" % i, 0.0, cout)
    r = 0
    for i in range(len(ups)):
        ch = D // 2 ** (i + 1)
        for k in (3, 7, 11):
            p = "decoder.resblocks.%d" % r
            for j in range(3):
                b.conv(p + ".convs1.%d" % j, ch, ch, k)
                b.conv(p + ".convs2.%d" % j, ch, ch, k)
            for j in range(6):
                act1d(p + ".activations.%d" % j, ch)
            r += 1
    ch = D // 2 ** len(ups)
    act1d("decoder.activation_post", ch)
    b.conv("decoder.conv_post", 1, ch, 7, bias=False)
    b.const("latents_mean", 0.0, C)
    b.const("latents_std", 1.0, C)
    return b.sd, c


def save(sd, cfg, path, kind):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    meta = {"h3kit_tiny": json.dumps({"kind": kind, "config": cfg})}
    save_file({k: v.contiguous() for k, v in sd.items()}, path, metadata=meta)
    n = sum(v.numel() for v in sd.values())
    print("%-60s %5d tensors %11d params %9.1f MB" % (path, len(sd), n, os.path.getsize(path) / 1e6))


DEFAULT_NAMES = {"dit": "diffusion_models/h3tiny_dit_bf16.safetensors",
                 "text_encoder": "text_encoders/h3tiny_qwen3vl_te_bf16.safetensors",
                 "taeh3": "vae/h3tiny_taeh3_fp16.safetensors",
                 "video_vae": "vae/h3tiny_video_vae_fp16.safetensors",
                 "audio_vae": "vae/h3tiny_audio_vae_fp32.safetensors"}
BUILDERS = {"dit": None, "text_encoder": build_te, "taeh3": build_taeh3, "video_vae": build_video_vae,
            "audio_vae": lambda seed: build_audio_vae(seed, AUDIO_VAE)}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="ComfyUI models folder")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--names", help="JSON {part: path under --out} to write under other names (parts: "
                    + ", ".join(DEFAULT_NAMES) + "); a part mapped to null is skipped")
    ap.add_argument("--dit", help="JSON of DiT dims to override (hidden_size, num_layers, num_attention_heads, "
                    "attention_head_dim, ffn_hidden_size, text_dim)")
    ap.add_argument("--full-audio-vae", action="store_true", help="also write a real-size random audio VAE (605 MB)")
    a = ap.parse_args()
    names = dict(DEFAULT_NAMES, **(json.loads(a.names) if a.names else {}))
    dims = json.loads(a.dit) if a.dit else None
    for part, rel in names.items():
        if not rel:
            continue
        sd, cfg = build_dit(a.seed, dims) if part == "dit" else BUILDERS[part](a.seed)
        save(sd, cfg, os.path.join(a.out, rel), part)
    if a.full_audio_vae:
        sd, cfg = build_audio_vae(a.seed, AUDIO_VAE_FULL)
        save(sd, cfg, os.path.join(a.out, "vae", "h3full_audio_vae_random_fp32.safetensors"), "audio_vae")


if __name__ == "__main__":
    main()
