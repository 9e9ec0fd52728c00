"""What the streamed text encoder loader decides, without importing ComfyUI or torch.

MiniMax H3's text encoder is Qwen3-VL-32B cut to 50 language-model layers
(ComfyUI's `Qwen3VL_32BConfig`); its conditioning is the last layer's
output. `te_load` keeps those layers on disk and reads each one as
the encoder reaches it, like the streamed DiT loader does with the DiT's
blocks. Decided here, on the file's header alone:

- `te_tensors` reads the header (safetensors or GGUF, the checked readers of
  `logic`) and puts every tensor under the name ComfyUI's
  encoder loads it by (the GGUF feature's `logic.te_names` for llama.cpp's names);
- `refuse_unsupported_te` is one sentence for what the loader does not
  stream: ComfyUI's quantized safetensors (their layers need ComfyUI's own
  quantized ops: CLIPLoader loads them) and files that are no Qwen3-VL
  encoder;
- `te_layout_problem` checks every tensor's shape against the layout
  ComfyUI builds (Qwen3-VL-32B's; a test's tiny encoder at the dims most of
  its own tensors agree on) before ComfyUI's load sees the file, whose
  torch error would name neither the file nor the tensor;
- `group_layers` sorts names into `model.layers.N.*` (streamed), the
  embedding table (read by rows), the vision tower (read when an image is
  encoded) and the rest (loaded once);
- `row_span` is where one embedding row lies in the file: a row of a
  quantized GGUF table is a whole number of ggml blocks, so it is read and
  dequantized on its own.
"""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

from ..h3k_loader import QUANT_MARKERS, STREAMED_DTYPES, STREAMED_FILES
from ..h3kit_common.gguf_names import (GGML_TYPES, LAYER_RE, PATCH_SPLITS, QWEN3VL_32B_WIDTH, has_vision, te_names,
                                       vision_problem)
from .logic import StreamError, is_quantized, read_weights

TE_STATS_FILE = "h3kit_te_streaming_stats.json"
EMBED = "model.embed_tokens.weight"
VISION_PREFIX = "visual."
CLIP_LOADER_HINT = "use ComfyUI's Load CLIP (CLIPLoader, type minimax)"

# The language model ComfyUI builds for MiniMax H3 (comfy/text_encoders/llama.py: Qwen3VL_32BConfig, which takes
# its KV heads and vocabulary from Qwen3VL_8BConfig; head_dim is a class constant there). ComfyUI's config is
# fixed-size, so a 5120-wide file must be exactly this.
QWEN3VL_32B_LM = {"hidden": QWEN3VL_32B_WIDTH, "ffn": 25600, "heads": 64, "kv_heads": 8, "head_dim": 128,
                  "vocab": 151936}
# Each language-model tensor ComfyUI builds, its axes named by the value they hold ("q" is heads x head_dim,
# "kv" is KV heads x head_dim): the one description both the expected shapes and a tiny file's dims come from.
_LAYER_AXES = {"self_attn.q_proj.weight": ("q", "hidden"), "self_attn.k_proj.weight": ("kv", "hidden"),
               "self_attn.v_proj.weight": ("kv", "hidden"), "self_attn.o_proj.weight": ("hidden", "q"),
               "self_attn.q_norm.weight": ("head_dim",), "self_attn.k_norm.weight": ("head_dim",),
               "mlp.gate_proj.weight": ("ffn", "hidden"), "mlp.up_proj.weight": ("ffn", "hidden"),
               "mlp.down_proj.weight": ("hidden", "ffn"), "input_layernorm.weight": ("hidden",),
               "post_attention_layernorm.weight": ("hidden",)}
_EMBED_AXES = ("vocab", "hidden")


def te_tensors(path: str | os.PathLike) -> dict:
    """The checked header of a text encoder file, its tensors keyed by ComfyUI's names (`renamed` maps back)."""
    header = read_weights(path)
    names = te_names(header["tensors"]) if header.get("gguf") else {n: n for n in header["tensors"]}
    tensors = {names[n]: e for n, e in header["tensors"].items()}
    return {**header, "tensors": tensors, "renamed": {new: old for old, new in names.items()}}


def refuse_unsupported_te(path: str | os.PathLike, tensors: dict) -> None:
    """One sentence for a file this loader cannot stream (it never guesses at a conversion)."""
    name = Path(path).name
    quant = sorted(n for n in tensors if n.rsplit(".", 1)[-1] in QUANT_MARKERS)
    if quant:
        raise StreamError(f"{name} is a quantized ComfyUI text encoder ({quant[0]}); h3kit's streamed text encoder "
                          f"reads {STREAMED_FILES} only: {CLIP_LOADER_HINT}.")
    odd = sorted({e["dtype"] for e in tensors.values() if e["dtype"] not in STREAMED_DTYPES and not is_quantized(e)})
    if odd:
        raise StreamError(f"{name} holds tensors of type {', '.join(odd)}, which the streamed text encoder does not "
                          f"read; {CLIP_LOADER_HINT}.")
    if EMBED not in tensors or not any(LAYER_RE.match(n) for n in tensors):
        raise StreamError(f"{name} has no Qwen3-VL language model ({EMBED} and model.layers.N.*), so it is not "
                          "MiniMax H3's text encoder; pick the H3 text encoder (qwen3vl_32b_minimax_h3*) instead.")


def _axes(name: str) -> tuple[str, ...] | None:
    if name == EMBED:
        return _EMBED_AXES
    m = LAYER_RE.match(name)
    return _LAYER_AXES.get(name[m.end():]) if m else None


def te_config(shapes: dict) -> dict:
    """The language model's dims ComfyUI builds for a file of these shapes ({ComfyUI name: shape}).

    A 5120-wide file gets Qwen3-VL-32B's own (ComfyUI's config is fixed-size). A narrower one is a test's tiny
    encoder, which its test node builds at the file's dims (head_dim stays ComfyUI's 128): each is the value most
    of the tensors holding it agree on, so one damaged tensor is named rather than taken for the layout."""
    votes: dict[str, Counter] = {}
    for name, shape in shapes.items():
        axes = _axes(name)
        if axes and len(shape) == len(axes):
            for axis, n in zip(axes, shape):
                votes.setdefault(axis, Counter())[int(n)] += 1
    seen = {axis: c.most_common(1)[0][0] for axis, c in votes.items()}
    if seen.get("hidden", QWEN3VL_32B_WIDTH) == QWEN3VL_32B_WIDTH:
        return dict(QWEN3VL_32B_LM)
    head_dim = QWEN3VL_32B_LM["head_dim"]  # a class constant of ComfyUI's Qwen3 configs: the test node keeps it too
    # a table that is not 2-D says nothing of the vocabulary: the tokenizer's is Qwen3-VL's at any width
    return {"hidden": seen["hidden"], "ffn": seen.get("ffn", 0), "heads": seen.get("q", 0) // head_dim,
            "kv_heads": seen.get("kv", 0) // head_dim, "head_dim": head_dim,
            "vocab": seen.get("vocab", QWEN3VL_32B_LM["vocab"])}


def te_layout_problem(file_name: str, shapes: dict, with_tower: bool) -> str | None:
    """One sentence naming the first tensor (in `shapes`' order) whose shape is not the one ComfyUI builds for
    MiniMax H3's encoder, else None; the vision tower too when `with_tower` (a GGUF's is checked with its mmproj)."""
    cfg = te_config(shapes)
    size = {"hidden": cfg["hidden"], "ffn": cfg["ffn"], "head_dim": cfg["head_dim"], "vocab": cfg["vocab"],
            "q": cfg["heads"] * cfg["head_dim"], "kv": cfg["kv_heads"] * cfg["head_dim"]}
    for name, shape in shapes.items():
        axes = _axes(name)
        if axes is None:
            continue
        want = [size[a] for a in axes]
        if list(shape) != want:
            real = "Qwen3-VL-32B" if cfg == QWEN3VL_32B_LM else "this tiny Qwen3-VL encoder"
            return (f"{file_name} does not have the layout ComfyUI builds for MiniMax H3's text encoder: {name} has "
                    f"shape {list(shape)} where {real} (hidden {cfg['hidden']}, MLP {cfg['ffn']}, {cfg['heads']} "
                    f"heads and {cfg['kv_heads']} KV heads of {cfg['head_dim']}, vocabulary {cfg['vocab']}) has "
                    f"{want}; the file is damaged or not MiniMax H3's encoder: re-download it.")
    if with_tower and has_vision(shapes):
        return vision_problem(shapes, shapes, file_name, file_name)
    return None


def group_layers(names) -> tuple[dict[int, list[str]], list[str], list[str]]:
    """({layer: its names}, the vision tower's names, every other name except the embedding table)."""
    layers: dict[int, list[str]] = {}
    vision: list[str] = []
    rest: list[str] = []
    for name in names:
        m = LAYER_RE.match(name)
        if m:
            layers.setdefault(int(m.group(1)), []).append(name)
        elif name.startswith(VISION_PREFIX) or name.startswith(("v.", "mm.")) or any(name in s for s in PATCH_SPLITS):
            vision.append(name)  # llama.cpp's tower names left as they are: the GGUF tower is renamed when read
        elif name != EMBED:
            rest.append(name)
    if layers and sorted(layers) != list(range(len(layers))):
        gap = next(i for i in range(len(layers)) if i not in layers)
        raise StreamError(f"the text encoder's layers are numbered with a gap (no model.layers.{gap}); the file is "
                          "damaged: re-download it.")
    return layers, vision, rest


def row_span(entry: dict, row: int) -> tuple[int, int]:
    """(start, end) in the file of row `row` of a 2-D table (torch order: rows x width)."""
    rows, width = entry["shape"]
    if not 0 <= row < rows:
        raise StreamError(f"token id {row} is outside the embedding table ({rows} rows); the tokenizer and the "
                          "text encoder file do not belong together.")
    if is_quantized(entry):
        _, block, block_bytes = GGML_TYPES[entry["type_id"]]
        row_bytes = width // block * block_bytes
    else:
        row_bytes = (entry["end"] - entry["start"]) // rows
    start = entry["start"] + row * row_bytes
    return start, start + row_bytes


def layer_file_bytes(tensors: dict, layers: dict[int, list[str]]) -> int:
    """The largest layer's bytes in the file: what one read of a layer costs."""
    return max(sum(tensors[n]["end"] - tensors[n]["start"] for n in names) for names in layers.values())
