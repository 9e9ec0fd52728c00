"""The width and depth of the DiT file a plan chose, read from the file itself when it is there.

Calibration builds ComfyUI's own H3 transformer at the width of the file the
user will run, so the width has to be the one ComfyUI will build from that
file. ComfyUI sizes the model from tensor shapes (comfy/model_detection.py,
the MiniMax H3 branch of comfy/model_detection.py), so this module reads the same shapes
from the file's header, with the standard library only and without loading
a single weight:

- safetensors: an 8-byte little-endian length, then a JSON header mapping
  each tensor name to its dtype, shape and byte range, read and checked by
  the one header reader the streamed loader uses too (h3kit.bundled.h3k_safetensors);
- GGUF: the tensor-info table after the key/value section (dims stored
  innermost first, reversed into torch's order), read and checked by the
  one GGUF reader both of the pack's GGUF loaders use (h3kit.bundled.h3k_gguf).

Without the file (not downloaded yet, or no ComfyUI), the catalog's
`architecture` is the answer and `from` says so. A file this module cannot
read is never an error for calibration: `arch_for` falls back to the catalog
and names the reason.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

from h3kit.bundled import h3k_gguf, h3k_safetensors
from h3kit.data.catalog import Catalog

FLOAT_FORMATS = ("bf16", "fp16", "fp32", "f16", "f32")
TORCH_DTYPES = {"BF16": "bfloat16", "F16": "float16", "F32": "float32", "F8_E4M3": "float8_e4m3fn",
                "F8_E5M2": "float8_e5m2"}


class HeaderError(ValueError):
    """The file is not a DiT header this module can read (the message says why)."""


def _safetensors_shapes(path: Path) -> tuple[dict, dict]:
    """({tensor name: (shape, bytes)}, metadata) from a safetensors header (the shared reader's, with its checks)."""
    try:
        header = h3k_safetensors.read_header(path)
    except h3k_safetensors.HeaderError as exc:
        raise HeaderError(str(exc)) from None
    meta = dict(header["metadata"])
    dtypes = meta.setdefault("__dtypes__", {})  # the blocks' stored dtypes, counted (from_file picks the commonest)
    shapes = {}
    for name, t in header["tensors"].items():
        shapes[name] = (tuple(t["shape"]), t["end"] - t["start"])
        if "blocks." in name and name.endswith(".weight"):
            dtypes[t["dtype"]] = dtypes.get(t["dtype"], 0) + 1
    return shapes, meta


def _gguf_shapes(path: Path) -> tuple[dict, dict]:
    """({tensor name: (shape in torch order, bytes)}, KV fields) from a GGUF file (the shared reader's, with its
    checks)."""
    try:
        doc = h3k_gguf.read_gguf(path)
    except h3k_gguf.GGUFError as exc:
        raise HeaderError(str(exc)) from None
    return {n: (tuple(t["shape"]), t["end"] - t["start"]) for n, t in doc["tensors"].items()}, dict(doc["kv"])


def read_shapes(path: Path) -> tuple[dict, dict]:
    """Tensor shapes and byte sizes from a .safetensors/.sft or .gguf file's header (HeaderError when unreadable)."""
    path = Path(path)
    if path.suffix.lower() == ".gguf":
        return _gguf_shapes(path)
    return _safetensors_shapes(path)


def _count(keys, prefix: str) -> int:
    pattern = re.compile(re.escape(prefix) + r"(\d+)\.")
    found = {int(m.group(1)) for k in keys if (m := pattern.match(k))}
    return max(found) + 1 if found else 0


def detect(shapes: dict, meta: dict | None = None) -> dict:
    """H3's dims from tensor shapes, read as ComfyUI's detection reads them (comfy/model_detection.py)."""
    anchor = next((k for k in shapes if k.endswith("video_patch_proj.weight")), None)
    if anchor is None:
        raise HeaderError("no video_patch_proj.weight: not a MiniMax H3 DiT")
    p = anchor[: -len("video_patch_proj.weight")]

    def dim(key: str, axis: int) -> int:
        if p + key not in shapes:
            raise HeaderError(f"no {p + key} in the file: not a MiniMax H3 DiT ComfyUI can size")
        return int(shapes[p + key][0][axis])

    head_dim = dim("blocks.0.attn.q_norm.weight", 0)
    arch = {
        "hidden": dim("video_patch_proj.weight", 0),
        "head_dim": head_dim,
        "heads": dim("blocks.0.attn.qkv_proj.weight", 0) // (3 * head_dim),
        "ffn": dim("blocks.0.mlp.fc1.weight", 0) // 2,
        "text_dim": dim("condition_proj.weight", 1),
        "blocks_total": _count(shapes, p + "blocks."),
        "refiner_blocks": _count(shapes, p + "token_refiner.blocks."),
    }
    # The dims outside the blocks ComfyUI also reads from shapes (the runner builds them the same way).
    optional = {"rope_inv_freq_len": ("rope.inv_freq", 0), "timestep_input_dim": ("time_embedder.proj_in.weight", 1),
                "time_embed_hidden": ("time_embedder.proj_in.weight", 0),
                "time_embed_dim": ("time_embedder.proj_out.weight", 0),
                "latents_dim": ("final_layer.video_out.weight", 0), "audio_latents_dim": ("final_layer.audio_out.weight", 0)}
    for ours, (key, axis) in optional.items():
        if p + key in shapes and len(shapes[p + key][0]) > axis:
            arch[ours] = int(shapes[p + key][0][axis])
    if "latents_dim" in arch:
        arch["latents_dim"] //= 4  # patch 1x2x2
    if p + "adaln_t_table" in shapes:
        grid, k = shapes[p + "adaln_t_table"][0][:2]
        arch.update(adaln_curve_grid=int(grid), time_embed_dim=int(k))
    config = (meta or {}).get("config")
    if isinstance(config, str):  # ComfyUI lets the file's metadata override the detected dims
        try:
            over = json.loads(config).get("transformer", {})
        except (ValueError, AttributeError):
            over = {}
        names = {"hidden_size": "hidden", "num_layers": "blocks_total", "num_attention_heads": "heads",
                 "attention_head_dim": "head_dim", "ffn_hidden_size": "ffn", "text_dim": "text_dim"}
        arch.update({ours: int(over[theirs]) for theirs, ours in names.items() if isinstance(over.get(theirs), int)})
    return arch


def weight_sizes(shapes: dict, prefix_anchor: str = "video_patch_proj.weight") -> dict:
    """Parameters and stored bytes, in the blocks and outside them (embeddings, refiner, final layer)."""
    anchor = next((k for k in shapes if k.endswith(prefix_anchor)), "")
    block = anchor[: -len(prefix_anchor)] + "blocks."
    out = {"block_params": 0, "block_file_bytes": 0, "other_params": 0, "other_file_bytes": 0}
    for name, (shape, nbytes) in shapes.items():
        part = "block" if name.startswith(block) else "other"
        out[f"{part}_params"] += math.prod(shape) if shape else 1
        out[f"{part}_file_bytes"] += nbytes
    return out


def from_file(path: Path) -> dict:
    """The full arch of one DiT file: dims, parameter counts and stored bytes, `from` naming the file."""
    shapes, meta = read_shapes(path)
    arch = detect(shapes, meta)
    arch.update(weight_sizes(shapes))
    counts = meta.get("__dtypes__") or {}
    if counts:  # the blocks' stored dtype (what UNETLoader's "default" keeps on a GPU)
        arch["weight_dtype"] = TORCH_DTYPES.get(max(counts, key=counts.get))
    arch["file_bytes"] = Path(path).stat().st_size
    arch["from"] = f"file header {path}"
    return arch


def from_catalog(catalog: Catalog, weight=None) -> dict:
    """The catalog's architecture, in the same shape (parameter split unknown: block bytes by the file size)."""
    a = catalog.architecture
    arch = {"hidden": a.hidden, "heads": a.heads, "head_dim": a.head_dim, "ffn": a.ffn,
            "text_dim": a.text_dim, "blocks_total": a.blocks, "refiner_blocks": a.text_refiner_blocks,
            "from": "catalog"}
    if weight is not None:
        arch["file_bytes"] = weight.bytes
    return arch


def dit_path(install_path, weight) -> Path | None:
    """Where ComfyUI keeps the catalog's file for `weight` (models/<folder>/<name>), or None without a name."""
    file = getattr(weight, "file", None)
    if install_path is None or file is None or not file.name:
        return None
    return Path(install_path) / "models" / (file.folder or "diffusion_models") / file.name


def arch_for(catalog: Catalog, weight, install_path=None) -> tuple[dict, str | None]:
    """(arch, why the catalog was used or None): the file's header when the file is there, else the catalog."""
    path = dit_path(install_path, weight)
    if path is None or not path.is_file():
        why = "no ComfyUI is known" if install_path is None else \
            f"the plan's DiT file is not in {path.parent if path else 'models/'} yet"
        return from_catalog(catalog, weight), why
    try:
        return from_file(path), None
    except (HeaderError, OSError, KeyError, TypeError) as exc:
        return from_catalog(catalog, weight), f"{path.name} could not be read as an H3 DiT ({exc})"


def held_weight_bytes(arch: dict, fmt: str | None, dtype_bytes: int) -> dict:
    """What ComfyUI keeps of the weights: float files are cast to the compute dtype, quantized ones stay stored.

    Returns {"per_block", "other", "total"} in bytes; None parts where the arch does not say.
    """
    blocks = arch.get("blocks_total") or 0
    if arch.get("block_params") is not None and (fmt or "").lower() in FLOAT_FORMATS:
        per_block = arch["block_params"] * dtype_bytes / max(1, blocks)
        other = arch["other_params"] * dtype_bytes
    elif arch.get("block_file_bytes") is not None:
        per_block = arch["block_file_bytes"] / max(1, blocks)
        other = arch["other_file_bytes"]
    elif arch.get("file_bytes"):  # catalog only: the file size over the blocks (the catalog's block_bytes_rule)
        scale = dtype_bytes / 2 if (fmt or "").lower() in FLOAT_FORMATS else 1.0
        per_block, other = arch["file_bytes"] * scale / max(1, blocks), 0
    else:
        return {"per_block": None, "other": None, "total": None}
    return {"per_block": int(per_block), "other": int(other), "total": int(per_block * blocks + other)}
