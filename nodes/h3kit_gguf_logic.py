"""What h3kit's GGUF loaders decide, without importing ComfyUI, torch or gguf-py.

H3's published GGUF files come from stable-diffusion.cpp, whose GGUF writer
writes no KV fields at all (no `general.architecture`), and ComfyUI-GGUF
refuses such files before it looks at the tensors. The loaders in
`h3kit_gguf` keep ComfyUI-GGUF's dequantizing ops and patcher and add only
what is decided here, on names, shapes and byte ranges:

- `read_gguf` parses the container (magic, version, KV table, tensor table)
  into absolute byte ranges with torch-order shapes, and refuses a file the
  table says is longer than it is, naming the first tensor past the end;
- `is_h3_dit` is ComfyUI's own H3 test (`video_patch_proj.weight` and
  `audio_patch_proj.weight`, comfy/model_detection.py) after the prefixes
  such files may carry;
- `te_names` maps llama.cpp's tensor names (`blk.N.attn_q`,
  `v.blk.N.attn_qkv`, `v.deepstack.K`, `mm.0`, ...) and the prefixed HF
  names onto the ones ComfyUI's Qwen3-VL-32B (MiniMax H3) encoder loads;
  `te_missing` says in one sentence what ComfyUI's `detect_te_model` would
  not find (it needs `visual.deepstack_merger_list.0.norm.weight` and
  `model.layers.49.self_attn.q_proj.weight` for QWEN3VL_32B);
- `find_mmproj` picks the vision file beside a text encoder.
"""

from __future__ import annotations

import os
import re
import struct
from pathlib import Path

MAGIC = b"GGUF"
DEFAULT_ALIGNMENT = 32
# ggml type id -> (name, elements per block, bytes per block) for the types H3's files use (ggml.h, gguf-py
# constants.GGML_QUANT_SIZES). F32/F16/BF16 keep safetensors' dtype names, which the streamer reads itself.
GGML_TYPES = {0: ("F32", 1, 4), 1: ("F16", 1, 2), 2: ("Q4_0", 32, 18), 3: ("Q4_1", 32, 20), 6: ("Q5_0", 32, 22),
              7: ("Q5_1", 32, 24), 8: ("Q8_0", 32, 34), 10: ("Q2_K", 256, 84), 11: ("Q3_K", 256, 110),
              12: ("Q4_K", 256, 144), 13: ("Q5_K", 256, 176), 14: ("Q6_K", 256, 210), 30: ("BF16", 1, 2)}
PLAIN_TYPES = {"F32", "F16", "BF16"}
# KV value types: id -> struct format (8: string, 9: array)
_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_MAX_ARRAY_KEPT = 256  # longer arrays (a tokenizer's vocabulary) are skipped, only their length kept
DIT_PREFIXES = ("model.diffusion_model.", "diffusion_model.", "transformer.")
H3_KEYS = ("video_patch_proj.weight", "audio_patch_proj.weight")
QWEN3VL_32B_KEYS = ("visual.deepstack_merger_list.0.norm.weight", "model.layers.49.self_attn.q_proj.weight")
LOADERS_HINT = "h3kit models fetch --with-loaders"


class GGUFError(RuntimeError):
    """A sentence for the user: what is wrong with which file, and what to do."""


class _Reader:
    def __init__(self, f, path, size):
        self.f, self.path, self.size = f, path, size

    def take(self, n: int) -> bytes:
        data = self.f.read(n)
        if len(data) < n:
            raise GGUFError(f"{self.path} is cut short inside its GGUF header ({self.size} bytes); re-download it.")
        return data

    def unpack(self, fmt: str):
        return struct.unpack(fmt, self.take(struct.calcsize(fmt)))[0]

    def string(self) -> str:
        n = self.unpack("<Q")
        if n > self.size:
            raise GGUFError(f"{self.path} has a garbled GGUF header (a {n}-byte name); re-download it.")
        return self.take(n).decode("utf-8", errors="replace")

    def value(self, vtype: int):
        if vtype in _SCALARS:
            return self.unpack(_SCALARS[vtype])
        if vtype == 8:
            return self.string()
        if vtype == 9:
            itype, count = self.unpack("<I"), self.unpack("<Q")
            if itype in _SCALARS and count > _MAX_ARRAY_KEPT:  # skip without reading element by element
                self.f.seek(struct.calcsize(_SCALARS[itype]) * count, os.SEEK_CUR)
                return {"array_of": itype, "length": count}
            items = [self.value(itype) for _ in range(count)]
            return items if count <= _MAX_ARRAY_KEPT else {"array_of": itype, "length": count}
        raise GGUFError(f"{self.path} has a KV field of unknown type {vtype}; it is not a GGUF file h3kit reads.")


def read_gguf(path: str | os.PathLike) -> dict:
    """{"version", "kv", "tensors": {name: {dtype, type_id, shape (torch order), start, end}}, "data_start",
    "file_size"}; offsets absolute. `dtype` is F32/F16/BF16 or the ggml type name (Q8_0, Q4_K, ...)."""
    path = Path(path)
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            r = _Reader(f, path, size)
            if size < 24 or r.take(4) != MAGIC:
                raise GGUFError(f"{path.name} is not a GGUF file (no 'GGUF' magic); re-download it.")
            version = r.unpack("<I")
            if version not in (2, 3):
                raise GGUFError(f"{path.name} is GGUF version {version}; h3kit reads versions 2 and 3.")
            n_tensors, n_kv = r.unpack("<Q"), r.unpack("<Q")
            if n_tensors > size or n_kv > size:
                raise GGUFError(f"{path.name} has a garbled GGUF header; re-download it.")
            kv = {}
            for _ in range(n_kv):
                key = r.string()
                kv[key] = r.value(r.unpack("<I"))
            infos = []
            for _ in range(n_tensors):
                name = r.string()
                n_dims = r.unpack("<I")
                if n_dims > 8:
                    raise GGUFError(f"{path.name}: tensor {name} claims {n_dims} dimensions; re-download the file.")
                ne = [r.unpack("<Q") for _ in range(n_dims)]
                infos.append((name, ne, r.unpack("<I"), r.unpack("<Q")))
            header_end = f.tell()
    except OSError as exc:
        raise GGUFError(f"cannot read {path}: {exc.strerror or exc}; check that the file exists and that "
                        "ComfyUI may read it.") from exc
    align = kv.get("general.alignment", DEFAULT_ALIGNMENT)
    align = align if isinstance(align, int) and align > 0 else DEFAULT_ALIGNMENT
    data_start = -(-header_end // align) * align
    tensors = {}
    for name, ne, type_id, offset in infos:
        if type_id not in GGML_TYPES:
            raise GGUFError(f"{path.name}: tensor {name} has ggml type {type_id}, which h3kit's loaders do not "
                            "read; use a file of another quantization.")
        tname, block, nbytes = GGML_TYPES[type_id]
        count = 1
        for d in ne:
            count *= d
        if count % block:
            raise GGUFError(f"{path.name}: tensor {name} ({count} values) is not whole {tname} blocks; "
                            "re-download the file.")
        start = data_start + offset
        tensors[name] = {"dtype": tname, "type_id": type_id, "shape": [int(d) for d in reversed(ne)],
                         "start": start, "end": start + count // block * nbytes}
    past = [(e["start"], n) for n, e in tensors.items() if e["end"] > size]
    if past:
        first = min(past)[1]
        need = max(e["end"] for e in tensors.values())
        raise GGUFError(f"{path.name} is cut short: it has {size} bytes but its tensors need {need} ({first} and "
                        "after lie past the end); re-download the file.")
    return {"version": version, "kv": kv, "tensors": tensors, "data_start": data_start, "file_size": size}


# -- the DiT ----------------------------------------------------------------------------------------------


def dit_prefix(names) -> str:
    """The prefix in front of an H3 DiT's own names ('' when none)."""
    names = set(names)
    for p in DIT_PREFIXES:
        if all(p + k in names for k in H3_KEYS):
            return p
    return ""


def is_h3_dit(names) -> bool:
    """ComfyUI's own MiniMax H3 test (comfy/model_detection.py), after the prefix the file may carry."""
    names = set(names)
    p = dit_prefix(names)
    return all(p + k in names for k in H3_KEYS)


# -- the text encoder (Qwen3-VL-32B, as ComfyUI's MiniMax H3 encoder loads it) -----------------------------

# Outer prefixes a whole-pipeline or HF export puts in front (sd.cpp's "text_encoders.llm.", HF Qwen3-VL's
# "model.language_model." / "model.visual."): the name inside them is ComfyUI's.
_TE_PREFIXES = (("text_encoders.llm.model.visual.", "visual."), ("text_encoders.llm.visual.", "visual."),
                ("text_encoders.llm.", ""), ("model.language_model.", "model."), ("model.visual.", "visual."),
                ("language_model.model.", "model."), ("language_model.", "model."))
# llama.cpp's names of the language model (convert_hf_to_gguf, stable-diffusion.cpp llm_name_map), in the order
# they are tried: the longer suffix first where one contains another.
_LLM_PARTS = (("attn_q_norm", "self_attn.q_norm"), ("attn_k_norm", "self_attn.k_norm"), ("attn_q", "self_attn.q_proj"),
              ("attn_k", "self_attn.k_proj"), ("attn_v", "self_attn.v_proj"), ("attn_output", "self_attn.o_proj"),
              ("attn_norm", "input_layernorm"), ("ffn_gate", "mlp.gate_proj"), ("ffn_up", "mlp.up_proj"),
              ("ffn_down", "mlp.down_proj"), ("ffn_norm", "post_attention_layernorm"))
_LLM_TOP = {"token_embd": "model.embed_tokens", "output_norm": "model.norm", "output": "lm_head"}
# llama.cpp's names of the Qwen3-VL vision tower (mmproj files; stable-diffusion.cpp convert_qwen3_vl_vision_name)
_VIS_BLOCK = (("attn_qkv", "attn.qkv"), ("attn_q", "attn.q"), ("attn_k", "attn.k"), ("attn_v", "attn.v"),
              ("attn_out", "attn.proj"), ("ffn_up", "mlp.linear_fc1"), ("ffn_down", "mlp.linear_fc2"),
              ("ln1", "norm1"), ("ln2", "norm2"))
_VIS_TOP = {"mm.0": "visual.merger.linear_fc1", "mm.2": "visual.merger.linear_fc2", "v.post_ln": "visual.merger.norm",
            "v.position_embd": "visual.pos_embed", "v.patch_embd": "visual.patch_embed.proj"}
_DEEPSTACK_PARTS = {"fc1": "linear_fc1", "fc2": "linear_fc2", "ffn_up": "linear_fc1", "ffn_down": "linear_fc2",
                    "ffn_norm": "norm", "norm": "norm", "linear_fc1": "linear_fc1", "linear_fc2": "linear_fc2"}
_BLK = re.compile(r"^blk\.(\d+)\.(.+)\.(weight|bias)$")
_VBLK = re.compile(r"^v\.blk\.(\d+)\.(.+)\.(weight|bias)$")
_DEEP = re.compile(r"^v\.(deepstack|deepstack_merger_list)\.(\d+)\.(.+)\.(weight|bias)$")
PATCH_SPLIT = ("v.patch_embd.weight", "v.patch_embd.weight.1")  # llama.cpp: the 2 temporal slices
# the same two slices in stable-diffusion.cpp's own names (convert_qwen3_vl_vision_name's output)
PATCH_SPLITS = (PATCH_SPLIT, ("visual.patch_embed.proj.0.weight", "visual.patch_embed.proj.1.weight"))
_RENAMED = {"visual.patch_embed.bias": "visual.patch_embed.proj.bias"}  # stable-diffusion.cpp's name for it


def _strip_prefix(name: str) -> str:
    for old, new in _TE_PREFIXES:
        if name.startswith(old):
            return new + name[len(old):]
    return name


def _blocks_and_top(name: str, block_re, parts: dict, block_prefix: str, top: dict) -> str | None:
    """`block_prefix`.N.<part>.weight for a numbered layer's tensor, `top`'s name for the others, else None."""
    m = block_re.match(name)
    if m:
        part = parts.get(m.group(2))
        return None if part is None else f"{block_prefix}.{m.group(1)}.{part}.{m.group(3)}"
    base, _, leaf = name.rpartition(".")
    return f"{top[base]}.{leaf}" if base in top else None


def _llama_llm(name: str) -> str | None:
    return _blocks_and_top(name, _BLK, dict(_LLM_PARTS), "model.layers", _LLM_TOP)


def te_names(names) -> dict[str, str]:
    """{file name: ComfyUI name} for a Qwen3-VL text encoder or mmproj file (language model, vision tower).

    The two patch-embed slices keep their names (`PATCH_SPLITS`): the loader stacks them into
    visual.patch_embed.proj.weight. Names already ComfyUI's (`model.layers.N.*`, `visual.*`, after known
    prefixes) stay; llama.cpp's are mapped;
    anything else keeps its name (ComfyUI reports it as left over).
    """
    out = {}
    names = list(names)
    ranks = _deepstack_ranks(names)
    for n in names:
        s = _strip_prefix(n)
        mapped = _llama_llm(s)
        if mapped is None and (s.startswith("v.") or s.startswith("mm.")) and s not in PATCH_SPLIT:
            mapped = _vision(s, ranks)
        out[n] = _RENAMED.get(mapped or s, mapped or s)
    return out


def _deepstack_ranks(names) -> dict[tuple[str, int], int]:
    """llama.cpp numbers a DeepStack merger by the vision layer it reads (v.deepstack.8 / .16 / .24 for
    Qwen3-VL-32B); ComfyUI by position (deepstack_merger_list.0 / .1 / .2)."""
    seen = sorted({(m.group(1), int(m.group(2))) for n in names for m in [_DEEP.match(_strip_prefix(n))] if m})
    ranks = {}
    for kind in ("deepstack", "deepstack_merger_list"):
        idx = [i for k, i in seen if k == kind]
        ranks.update({(kind, i): (r if kind == "deepstack" else i) for r, i in enumerate(idx)})
    return ranks


def _vision(s: str, ranks: dict) -> str | None:
    m = _DEEP.match(s)
    if m:
        part = _DEEPSTACK_PARTS.get(m.group(3))
        r = ranks.get((m.group(1), int(m.group(2))))
        return None if part is None or r is None else f"visual.deepstack_merger_list.{r}.{part}.{m.group(4)}"
    return _blocks_and_top(s, _VBLK, dict(_VIS_BLOCK), "visual.blocks", _VIS_TOP)


def split_qkv_groups(names) -> dict[str, tuple[str, str, str]]:
    """{ComfyUI qkv name: (q, k, v) names} where a vision block has separate q/k/v (ComfyUI's is fused)."""
    names = set(names)
    out = {}
    for n in names:
        m = re.match(r"^(visual\.blocks\.\d+\.attn)\.q\.(weight|bias)$", n)
        if m:
            trio = tuple(f"{m.group(1)}.{x}.{m.group(2)}" for x in "qkv")
            if all(t in names for t in trio):
                out[f"{m.group(1)}.qkv.{m.group(2)}"] = trio
    return out


def has_vision(names) -> bool:
    return any(n.startswith("visual.") for n in names)


def te_missing(names, file_name: str) -> str | None:
    """One sentence when ComfyUI would not detect MiniMax H3's Qwen3-VL-32B encoder in these names, else None."""
    names = set(names)
    if not any(n.startswith("model.layers.") for n in names):
        return (f"{file_name} has no Qwen3 language model layers (model.layers.N / blk.N); it is not a Qwen3-VL "
                "text encoder: pick MiniMax H3's text encoder file.")
    if QWEN3VL_32B_KEYS[1] not in names:
        layers = 1 + max(int(n.split(".")[2]) for n in names if re.match(r"^model\.layers\.\d+\.", n))
        return (f"{file_name} has {layers} language-model layers where MiniMax H3's Qwen3-VL-32B encoder has 50; "
                "pick MiniMax H3's text encoder file.")
    if QWEN3VL_32B_KEYS[0] not in names:
        return (f"{file_name} has no Qwen3-VL vision tower (no DeepStack mergers) and no matching mmproj file was "
                "given or found beside it; put MiniMax H3's mmproj GGUF next to it (its name containing 'mmproj') "
                "or name it in the loader's mmproj input.")
    return None


# -- the mmproj file beside a text encoder -------------------------------------------------------------------

_QUANT_SUFFIX = re.compile(r"[-_.]?(?:ud-)?i?q[0-9]_[a-z0-9_\-]{1,8}$|[-_.]?(?:bf16|f16|f32)$", re.IGNORECASE)


def model_stem(file_name: str) -> str:
    """The name without extension and quantization suffix, lower case ('Qwen3VL-32B-Q4_K_M.gguf' -> 'qwen3vl-32b')."""
    stem = Path(file_name).stem.lower()
    return _QUANT_SUFFIX.sub("", stem)


def find_mmproj(model_file: str, listing) -> tuple[str | None, str]:
    """(the mmproj file in `listing` (names in the model's folder) for `model_file`, a note): the one whose name
    holds the model's stem, else the only mmproj there; None when none or several fit equally."""
    cands = sorted(n for n in listing if n.lower().endswith(".gguf") and "mmproj" in n.lower() and n != model_file)
    if not cands:
        return None, "no mmproj*.gguf file beside it"
    stem = model_stem(model_file)
    named = [n for n in cands if stem and stem in n.lower()]
    if len(named) == 1:
        return named[0], f"{named[0]} (its name holds '{stem}')"
    if len(named) > 1:
        return named[0], f"{named[0]}, the first of {len(named)} whose name holds '{stem}'"
    if len(cands) == 1:
        return cands[0], f"{cands[0]}, the only mmproj file beside it"
    return None, f"{len(cands)} mmproj files beside it and none named after it ({', '.join(cands[:3])})"
