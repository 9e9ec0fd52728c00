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
- `group_layers` sorts names into `model.layers.N.*` (streamed), the
  embedding table (read by rows), the vision tower (read when an image is
  encoded) and the rest (loaded once);
- `row_span` is where one embedding row lies in the file: a row of a
  quantized GGUF table is a whole number of ggml blocks, so it is read and
  dequantized on its own.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from ..h3k_loader import QUANT_MARKERS, STREAMED_DTYPES, STREAMED_FILES
from ..h3kit_gguf.logic import GGML_TYPES, PATCH_SPLITS, te_names
from .logic import StreamError, is_quantized, read_weights

TE_STATS_FILE = "h3kit_te_streaming_stats.json"
LAYER_RE = re.compile(r"^model\.layers\.(\d+)\.")
EMBED = "model.embed_tokens.weight"
VISION_PREFIX = "visual."
CLIP_LOADER_HINT = "use ComfyUI's Load CLIP (CLIPLoader, type minimax)"


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
