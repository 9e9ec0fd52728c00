#!/usr/bin/env python3
"""Tiny random-weight H3 GGUF files the way stable-diffusion.cpp writes them, plus safetensors of the same weights.

Run with ComfyUI's Python and gguf-py importable (the tests put a `pip install --target` folder on
PYTHONPATH). The GGUF container is written here (gguf-py's writer always adds general.architecture, and
stable-diffusion.cpp's files carry no KV field at all); the blocks are quantized by gguf-py's own
`gguf.quants.quantize`. A 2-D `.weight` whose rows are whole blocks is quantized, every other tensor is
kept as F32 (fp32 and 1-D ones) or F16, as stable-diffusion.cpp does with what cannot be quantized.
K types (Q2_K..Q6_K), which gguf-py cannot quantize, get random blocks (see K_FIELDS).

  dit  --qtype Q8_0 --out DIR --name STEM [--dit JSON]
       DIR/STEM.gguf (no KV), DIR/STEM_deq.safetensors (the GGUF's values, dequantized, fp32),
       DIR/STEM_orig.safetensors (the bf16/fp32 weights the GGUF was made from)
  te   --qtype Q8_0 --out DIR --name STEM
       DIR/STEM.gguf (llama.cpp names blk.N.*, no KV), DIR/mmproj-STEM-f16.gguf (llama.cpp vision names
       v.blk.N.*, v.deepstack.K.*, mm.0/2, the patch embedding as two temporal slices; KV general.architecture
       'clip'), DIR/STEM_hf.gguf (ComfyUI names, vision inside, no KV), DIR/STEM_deq.safetensors and
       DIR/STEM_orig.safetensors (ComfyUI names)
Prints one JSON line: the files and the tensor type counts.
"""

import argparse
import importlib.util
import json
import os
import sys

import numpy as np
import torch
from safetensors.torch import save_file

import gguf
from gguf import quants

HERE = os.path.dirname(os.path.abspath(__file__))
_spec = importlib.util.spec_from_file_location("make_tiny_h3", os.path.join(HERE, "make_tiny_h3.py"))
mk = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(mk)
sys.path.insert(0, HERE)
from gguf_container import write_gguf  # noqa: E402

Q = gguf.GGMLQuantizationType


# gguf-py has no quantizer for the K types: their blocks are random bytes with the fp16 scale (d) and min
# (dmin) fields set so the weights come out around 0.1 (byte offset in the block, value; gguf-py quants.py
# layouts). Their values are then not the bf16 weights' but what the block holds, dequantized by gguf-py.
K_FIELDS = {"Q2_K": ((80, 2e-3), (82, 2e-3)), "Q3_K": ((108, 1e-3),), "Q4_K": ((0, 2e-4), (2, 2e-4)),
            "Q5_K": ((0, 1e-4), (2, 1e-4)), "Q6_K": ((208, 1e-4),)}
RNG = np.random.default_rng(0)


def random_blocks(shape, qtype):
    block, size = gguf.GGML_QUANT_SIZES[qtype]
    raw = RNG.integers(0, 256, (shape[0] * shape[1] // block, size), dtype=np.uint8)
    for offset, value in K_FIELDS[qtype.name]:
        raw[:, offset:offset + 2] = np.frombuffer(np.float16(value).tobytes(), dtype=np.uint8)
    return raw.reshape(shape[0], -1)


def encode(name: str, t: torch.Tensor, qtype) -> tuple:
    """(ggml type, shape, raw bytes, the values the file holds as fp32)."""
    x = t.float().numpy()
    block = gguf.GGML_QUANT_SIZES[qtype][0]
    if name.endswith(".weight") and t.ndim == 2 and t.shape[1] % block == 0 and t.dtype != torch.float32:
        raw = random_blocks(t.shape, qtype) if qtype.name in K_FIELDS else quants.quantize(x, qtype)
        back = quants.dequantize(raw, qtype).reshape(x.shape)
        return qtype, list(t.shape), raw.tobytes(), torch.from_numpy(back.astype(np.float32))
    if t.dtype == torch.float32 or t.ndim <= 1:
        return Q.F32, list(t.shape), x.astype(np.float32).tobytes(), torch.from_numpy(x.astype(np.float32))
    h = x.astype(np.float16)
    return Q.F16, list(t.shape), h.tobytes(), torch.from_numpy(h.astype(np.float32))


def gguf_of(sd: dict, qtype, rename=lambda n: n) -> tuple[dict, dict, dict]:
    """({gguf name: (type, shape, raw)}, {original name: fp32 values held}, {type name: count})."""
    out, held, counts = {}, {}, {}
    for name, t in sd.items():
        kind, shape, raw, back = encode(name, t, qtype)
        out[rename(name)] = (kind, shape, raw)
        held[name] = back
        counts[kind.name] = counts.get(kind.name, 0) + 1
    return out, held, counts


def save(sd: dict, path: str) -> None:
    save_file({k: v.contiguous() for k, v in sd.items()}, path)


# llama.cpp's names for ComfyUI's Qwen3-VL ones (what h3kit's loader maps back)
LLM = {"self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
       "self_attn.o_proj": "attn_output", "self_attn.q_norm": "attn_q_norm", "self_attn.k_norm": "attn_k_norm",
       "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down",
       "input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm"}
VIS = {"attn.qkv": "attn_qkv", "attn.proj": "attn_out", "mlp.linear_fc1": "ffn_up", "mlp.linear_fc2": "ffn_down",
       "norm1": "ln1", "norm2": "ln2"}
TOP = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
       "visual.merger.linear_fc1.weight": "mm.0.weight", "visual.merger.linear_fc1.bias": "mm.0.bias",
       "visual.merger.linear_fc2.weight": "mm.2.weight", "visual.merger.linear_fc2.bias": "mm.2.bias",
       "visual.merger.norm.weight": "v.post_ln.weight", "visual.merger.norm.bias": "v.post_ln.bias",
       "visual.pos_embed.weight": "v.position_embd.weight", "visual.patch_embed.proj.bias": "v.patch_embd.bias"}


def llama_name(n: str, deepstack_layers) -> str:
    if n in TOP:
        return TOP[n]
    p = n.split(".")
    if n.startswith("model.layers."):
        return f"blk.{p[2]}.{LLM['.'.join(p[3:-1])]}.{p[-1]}"
    if n.startswith("visual.blocks."):
        return f"v.blk.{p[2]}.{VIS['.'.join(p[3:-1])]}.{p[-1]}"
    if n.startswith("visual.deepstack_merger_list."):  # numbered by the vision layer it reads in llama.cpp
        part = {"norm": "norm", "linear_fc1": "fc1", "linear_fc2": "fc2"}[p[3]]
        return f"v.deepstack.{deepstack_layers[int(p[2])]}.{part}.{p[-1]}"
    raise KeyError(n)


def make_dit(a) -> dict:
    sd, _ = mk.build_dit(a.seed, json.loads(a.dit) if a.dit else None)
    tensors, held, counts = gguf_of(sd, getattr(Q, a.qtype))
    files = {"gguf": os.path.join(a.out, a.name + ".gguf"), "deq": os.path.join(a.out, a.name + "_deq.safetensors"),
             "orig": os.path.join(a.out, a.name + "_orig.safetensors")}
    write_gguf(files["gguf"], tensors)
    save(held, files["deq"])
    save(sd, files["orig"])
    return {"files": files, "types": counts}


def make_te(a) -> dict:
    sd, cfg = mk.build_te(a.seed)
    qtype = getattr(Q, a.qtype)
    layers = [8 * (i + 1) for i in range(len(cfg["vision_deepstack_visual_indexes"]))]  # 8/16/24 as in the 32B
    lm = {k: v for k, v in sd.items() if not k.startswith("visual.")}
    vis = {k: v for k, v in sd.items() if k.startswith("visual.")}
    lm_t, held_lm, counts = gguf_of(lm, qtype, lambda n: llama_name(n, layers))
    vis_rest = {k: v for k, v in vis.items() if k != "visual.patch_embed.proj.weight"}
    vis_t, held_vis, vcounts = gguf_of(vis_rest, Q.F16 if a.mmproj_f16 else qtype, lambda n: llama_name(n, layers))
    patch = vis["visual.patch_embed.proj.weight"]  # [out, 3, 2, p, p]: two 2-D slices in llama.cpp's files
    held_slices = []
    for i, name in enumerate(("v.patch_embd.weight", "v.patch_embd.weight.1")):
        h = patch[:, :, i].float().numpy().astype(np.float16)
        vis_t[name] = (Q.F16, list(h.shape), h.tobytes())
        held_slices.append(torch.from_numpy(h.astype(np.float32)))
    held_vis["visual.patch_embed.proj.weight"] = torch.stack(held_slices, dim=2)
    hf_t, _, _ = gguf_of(sd, qtype)
    files = {"gguf": os.path.join(a.out, a.name + ".gguf"), "mmproj": os.path.join(a.out, f"mmproj-{a.name}-f16.gguf"),
             "hf": os.path.join(a.out, a.name + "_hf.gguf"), "deq": os.path.join(a.out, a.name + "_deq.safetensors"),
             "orig": os.path.join(a.out, a.name + "_orig.safetensors")}
    write_gguf(files["gguf"], lm_t)
    write_gguf(files["mmproj"], vis_t, {"general.architecture": "clip", "general.type": "mmproj"})
    write_gguf(files["hf"], hf_t)
    save({**held_lm, **held_vis}, files["deq"])
    save(sd, files["orig"])
    return {"files": files, "types": counts, "mmproj_types": vcounts}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("kind", choices=["dit", "te"])
    ap.add_argument("--qtype", default="Q8_0")
    ap.add_argument("--out", required=True)
    ap.add_argument("--name", required=True)
    ap.add_argument("--dit", help="JSON of DiT dims (make_tiny_h3.build_dit)")
    ap.add_argument("--mmproj-f16", action="store_true", help="keep the vision tower in F16 (as mmproj files are)")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    print(json.dumps(make_dit(a) if a.kind == "dit" else make_te(a)))


if __name__ == "__main__":
    sys.exit(main())
