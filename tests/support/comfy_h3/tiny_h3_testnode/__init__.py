"""TEST-ONLY ComfyUI custom node: lets tiny random-weight MiniMax H3 files load.

ComfyUI builds three H3 parts at fixed size whatever the file holds:
  * text encoder: Qwen3VL_32BConfig (hidden 5120, 50 layers) + vision tower dims
    from comfy.text_encoders.qwen3vl.QWEN3VL_VISION["qwen3vl_32b"];
  * MiniMaxH3VideoVAE() and MiniMaxH3AudioVAE() are constructed with defaults.
(The DiT and a taeh3-shaped TAEHV need nothing: the DiT is shape-detected and TAEHV
is small at its fixed size.)

This node wraps comfy.sd.load_text_encoder_state_dicts and comfy.sd.VAE.__init__.
It only acts when the state dict has H3 keys AND non-default shapes: it infers
the dims from the tensor shapes, builds the model at that size for the duration of
that one constructor call, and restores the module globals afterwards. Real-size
files go through untouched. Install: copy this folder into ComfyUI/custom_nodes/.
It adds no nodes (NODE_CLASS_MAPPINGS is empty).
"""

import functools
import logging
import re

import comfy.sd
import comfy.text_encoders.qwen3vl as _qwen3vl
import comfy.ldm.minimax.vae as _h3vae
import comfy.ldm.minimax.audio_vae as _h3audio

NODE_CLASS_MAPPINGS = {}
NODE_DISPLAY_NAME_MAPPINGS = {}

_LOG = logging.getLogger("tiny_h3_testnode")
_QWEN_HEAD_DIM = 128  # class constant of ComfyUI's Qwen3 configs; cannot be overridden


def _count(sd, pattern):
    rx = re.compile(pattern)
    idx = {int(m.group(1)) for k in sd for m in [rx.match(k)] if m}
    return max(idx) + 1 if idx else 0


# ------------------------------------------------------------------ text encoder
def _te_dims(sd):
    if "visual.deepstack_merger_list.0.norm.weight" not in sd or "model.layers.0.self_attn.q_proj.weight" not in sd:
        return None
    hidden = sd["model.embed_tokens.weight"].shape[1]
    if hidden == 5120 and _count(sd, r"model\.layers\.(\d+)\.") == 50:
        return None  # real size: stock path (a real-width file with fewer layers is built at its depth)
    lm = {
        "hidden_size": hidden,
        "intermediate_size": sd["model.layers.0.mlp.gate_proj.weight"].shape[0],
        "num_hidden_layers": _count(sd, r"model\.layers\.(\d+)\."),
        "num_attention_heads": sd["model.layers.0.self_attn.q_proj.weight"].shape[0] // _QWEN_HEAD_DIM,
        "num_key_value_heads": sd["model.layers.0.self_attn.k_proj.weight"].shape[0] // _QWEN_HEAD_DIM,
        "vocab_size": sd["model.embed_tokens.weight"].shape[0],
    }
    vh = sd["visual.patch_embed.proj.weight"].shape[0]
    depth = _count(sd, r"visual\.blocks\.(\d+)\.")
    n_ds = _count(sd, r"visual\.deepstack_merger_list\.(\d+)\.")
    vision = {
        "hidden_size": vh,
        "intermediate_size": sd["visual.blocks.0.mlp.linear_fc1.weight"].shape[0],
        "depth": depth,
        # which layers feed DeepStack is not visible in the weights: spread them evenly
        "deepstack_visual_indexes": [min(depth - 1, (i * depth) // n_ds) for i in range(n_ds)],
    }
    common = {"num_heads": max(1, vh // 16), "num_position_embeddings": sd["visual.pos_embed.weight"].shape[0]}
    return lm, vision, common


_orig_load_te = comfy.sd.load_text_encoder_state_dicts


@functools.wraps(_orig_load_te)
def _load_te(state_dicts=[], embedding_directory=None, clip_type=comfy.sd.CLIPType.STABLE_DIFFUSION, model_options={}, disable_dynamic=False):
    dims = _te_dims(state_dicts[0]) if len(state_dicts) == 1 else None
    if dims is None:
        return _orig_load_te(state_dicts, embedding_directory=embedding_directory, clip_type=clip_type,
                             model_options=model_options, disable_dynamic=disable_dynamic)
    lm, vision, common = dims
    _LOG.warning("tiny_h3_testnode: building tiny Qwen3-VL text encoder %s vision %s", lm, vision)
    detect = "model.layers.49.self_attn.q_proj.weight"  # what ComfyUI's detect_te_model looks for
    if detect not in state_dicts[0]:  # a shallower file: the key stands in for the depth it lacks (unused)
        state_dicts = [dict(state_dicts[0], **{detect: state_dicts[0]["model.layers.0.self_attn.q_proj.weight"]})]
    model_options = dict(model_options)
    # SDClipModel merges model_options["<model_name>_model_config"] into the config dict
    model_options["qwen3vl_32b_model_config"] = {**model_options.get("qwen3vl_32b_model_config", {}), **lm}
    saved_v = _qwen3vl.QWEN3VL_VISION["qwen3vl_32b"]
    saved_c = dict(_qwen3vl.QWEN3VL_VISION_COMMON)
    _qwen3vl.QWEN3VL_VISION["qwen3vl_32b"] = vision
    _qwen3vl.QWEN3VL_VISION_COMMON.update(common)
    try:
        return _orig_load_te(state_dicts, embedding_directory=embedding_directory, clip_type=clip_type,
                             model_options=model_options, disable_dynamic=disable_dynamic)
    finally:
        _qwen3vl.QWEN3VL_VISION["qwen3vl_32b"] = saved_v
        _qwen3vl.QWEN3VL_VISION_COMMON.clear()
        _qwen3vl.QWEN3VL_VISION_COMMON.update(saved_c)


comfy.sd.load_text_encoder_state_dicts = _load_te


# ------------------------------------------------------------------ VAEs
def _video_vae_dims(sd):
    if "decoder.transformer_blocks.0.scale1" not in sd or "encoder.down.5.block.0.conv1.weight" not in sd:
        return None
    ch = sd["encoder.conv_in.weight"].shape[0]
    levels = _count(sd, r"encoder\.down\.(\d+)\.")
    mult = tuple(sd["encoder.down.%d.block.0.conv1.weight" % i].shape[0] // ch for i in range(levels))
    dim = sd["decoder.x_embedder.weight"].shape[0]
    n_layers = _count(sd, r"decoder\.transformer_blocks\.(\d+)\.")
    if ch == 128 and mult == (1, 2, 2, 4, 4, 8) and dim == 2048 and n_layers == 36:
        return None
    vae = {"ch": ch, "ch_mult": mult, "num_res_blocks": _count(sd, r"encoder\.down\.0\.block\.(\d+)\.")}
    dim_head = 32 if dim % 32 == 0 else dim
    dec = {"num_layers": n_layers, "heads": dim // dim_head, "dim_head": dim_head}
    return vae, dec


def _audio_vae_dims(sd):
    if "pre_block.attn.zero_k_bias" not in sd:
        return None
    d = {
        "encoder_dim": sd["encoder.block.0.weight"].shape[0],
        "latent_dim": sd["dec_in_proj.weight"].shape[0],
        "decoder_dim": sd["decoder.conv_pre.weight"].shape[0],
    }
    if d == {"encoder_dim": 64, "latent_dim": 2048, "decoder_dim": 1024}:
        return None
    return d


_orig_vae_init = comfy.sd.VAE.__init__


@functools.wraps(_orig_vae_init)
def _vae_init(self, sd=None, device=None, config=None, dtype=None, metadata=None):
    if sd is None or config is not None:
        return _orig_vae_init(self, sd=sd, device=device, config=config, dtype=dtype, metadata=metadata)
    vdims = _video_vae_dims(sd)
    adims = _audio_vae_dims(sd)
    saved = (_h3vae.MiniMaxH3VideoVAE, _h3vae.ViT3DDecoder, _h3audio.MiniMaxH3AudioVAE)
    try:
        if vdims is not None:
            vae_kw, dec_kw = vdims
            _LOG.warning("tiny_h3_testnode: building tiny MiniMaxH3VideoVAE %s decoder %s", vae_kw, dec_kw)
            _h3vae.ViT3DDecoder = functools.partial(saved[1], **dec_kw)
            _h3vae.MiniMaxH3VideoVAE = functools.partial(saved[0], **vae_kw)
        if adims is not None:
            _LOG.warning("tiny_h3_testnode: building tiny MiniMaxH3AudioVAE %s", adims)
            _h3audio.MiniMaxH3AudioVAE = functools.partial(saved[2], **adims)
        return _orig_vae_init(self, sd=sd, device=device, config=config, dtype=dtype, metadata=metadata)
    finally:
        _h3vae.MiniMaxH3VideoVAE, _h3vae.ViT3DDecoder, _h3audio.MiniMaxH3AudioVAE = saved


comfy.sd.VAE.__init__ = _vae_init
_LOG.info("tiny_h3_testnode: H3 tiny-dims loader patches installed")
