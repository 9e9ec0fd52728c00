#!/usr/bin/env python3
"""Write a random-weight MiniMax H3 text encoder (Qwen3-VL-32B) at its real width, layer by layer.

    python scripts/make_h3_te.py --out FILE [--layers 8] [--json]

Run it with ComfyUI's Python (it needs torch). The tensors carry ComfyUI's
names and the real shapes of `Qwen3VL_32BConfig` (comfy/text_encoders/llama.py:
hidden 5120, SwiGLU 25600, 64 query heads and 8 KV heads of 128, vocabulary
151,936) and of the vision tower ComfyUI builds for it
(comfy/text_encoders/qwen3vl.py QWEN3VL_VISION["qwen3vl_32b"]: hidden 1152,
MLP 4304, 27 blocks, DeepStack mergers at 8/16/24), in bf16. The real
encoder has 50 layers (51.2 GB); with --layers 8 the file is 10.5 GB. ComfyUI
detects the encoder by its 50th layer, so a shorter file loads only with the
tests' tiny_h3_testnode, which builds ComfyUI's own classes at the depth the
file holds.

It is written one piece (at most 64 MiB) at a time and each layer is flushed
and dropped from the page cache once written (scripts/make_h3_dit.py's
writer: windows of a seeded pool of normal values scaled by 1/sqrt(fan_in),
the embedding rows by 0.02 like a trained table, norms 1, biases 0).

The last line on stdout is a JSON object: path, bytes, tensors, layers,
layer_bytes, seconds. Exit codes: 0 written; 2 bad arguments; 3 not enough
free disk (nothing written).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_h3_dit import header_bytes, write_tensors  # noqa: E402

LM = {"hidden": 5120, "ffn": 25600, "heads": 64, "kv_heads": 8, "head_dim": 128, "vocab": 151936}
VISION = {"hidden": 1152, "ffn": 4304, "depth": 27, "deepstack": 3, "patch": 16, "temporal": 2, "merge": 2,
          "positions": 2304}


def layout(layers: int) -> list[tuple[str, str, tuple, str, float]]:
    """Every tensor in file order: (name, dtype, shape, fill, std), as make_h3_dit.layout."""
    out = []

    def linear(name, rows, cols, bias=False):
        out.append((name + ".weight", "BF16", (rows, cols), "normal", 1 / math.sqrt(cols)))
        if bias:
            out.append((name + ".bias", "BF16", (rows,), "zeros", 0.0))

    def norm(name, n, bias=False):
        out.append((name + ".weight", "BF16", (n,), "ones", 0.0))
        if bias:
            out.append((name + ".bias", "BF16", (n,), "zeros", 0.0))

    h, hd = LM["hidden"], LM["head_dim"]
    out.append(("model.embed_tokens.weight", "BF16", (LM["vocab"], h), "normal", 0.02))
    for i in range(layers):
        p = f"model.layers.{i}."
        linear(p + "self_attn.q_proj", LM["heads"] * hd, h)
        linear(p + "self_attn.k_proj", LM["kv_heads"] * hd, h)
        linear(p + "self_attn.v_proj", LM["kv_heads"] * hd, h)
        linear(p + "self_attn.o_proj", h, LM["heads"] * hd)
        norm(p + "self_attn.q_norm", hd)
        norm(p + "self_attn.k_norm", hd)
        linear(p + "mlp.gate_proj", LM["ffn"], h)
        linear(p + "mlp.up_proj", LM["ffn"], h)
        linear(p + "mlp.down_proj", h, LM["ffn"])
        norm(p + "input_layernorm", h)
        norm(p + "post_attention_layernorm", h)
    vh, merged = VISION["hidden"], VISION["hidden"] * VISION["merge"] ** 2
    out.append(("visual.patch_embed.proj.weight", "BF16", (vh, 3, VISION["temporal"], VISION["patch"], VISION["patch"]),
                "normal", 1 / math.sqrt(3 * VISION["temporal"] * VISION["patch"] ** 2)))
    out.append(("visual.patch_embed.proj.bias", "BF16", (vh,), "zeros", 0.0))
    out.append(("visual.pos_embed.weight", "BF16", (VISION["positions"], vh), "normal", 0.02))
    for i in range(VISION["depth"]):
        p = f"visual.blocks.{i}."
        norm(p + "norm1", vh, bias=True)
        norm(p + "norm2", vh, bias=True)
        linear(p + "attn.qkv", 3 * vh, vh, bias=True)
        linear(p + "attn.proj", vh, vh, bias=True)
        linear(p + "mlp.linear_fc1", VISION["ffn"], vh, bias=True)
        linear(p + "mlp.linear_fc2", vh, VISION["ffn"], bias=True)
    for p, width in [("visual.merger.", vh)] + [(f"visual.deepstack_merger_list.{d}.", merged)
                                                for d in range(VISION["deepstack"])]:
        norm(p + "norm", width, bias=True)
        linear(p + "linear_fc1", merged, merged, bias=True)
        linear(p + "linear_fc2", h, merged, bias=True)
    return out


def _layer_of(name: str):
    return name.split(".", 3)[2] if name.startswith("model.layers.") else None


def _metadata(layers: int) -> dict:
    return {"h3kit_random_te": json.dumps({"layers": layers, **LM})}


def planned_bytes(layers: int) -> int:
    head, data = header_bytes(layout(layers), _metadata(layers))
    return len(head) + data


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="the .safetensors file to write (its folder must exist)")
    ap.add_argument("--layers", type=int, default=8, help="language-model layers (the real encoder has 50)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", action="store_true", help="print only the JSON line")
    a = ap.parse_args(argv)
    if not 1 <= a.layers <= 64:
        print("make_h3_te: --layers must be 1..64.", file=sys.stderr)
        return 2
    folder = os.path.dirname(os.path.abspath(a.out))
    if not os.path.isdir(folder):
        print(f"make_h3_te: the folder of --out does not exist: {folder}", file=sys.stderr)
        return 2
    need = planned_bytes(a.layers)
    old = os.path.getsize(a.out) if os.path.isfile(a.out) else 0
    if need + (1 << 30) > shutil.disk_usage(folder).free + old:
        print(f"make_h3_te: {need / 1e9:.1f} GB to write but not that much free under {folder} (1 GB kept spare); "
              "free space or pass fewer --layers.", file=sys.stderr)
        return 3
    doc = write_tensors(os.path.abspath(a.out), layout(a.layers), _metadata(a.layers), a.seed, _layer_of)
    doc = dict(doc, layers=a.layers, layer_bytes=doc.pop("block_bytes"))
    if not a.json:
        print(f"{doc['path']}: {doc['bytes'] / 1e9:.2f} GB, {a.layers} layers of {doc['layer_bytes'] / 1e9:.3f} GB, "
              f"{doc['seconds']} s", file=sys.stderr)
    print(json.dumps(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
