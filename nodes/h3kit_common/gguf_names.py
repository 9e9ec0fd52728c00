"""What h3kit's GGUF loaders decide, without importing ComfyUI, torch or gguf-py.

H3's published GGUF files come from stable-diffusion.cpp, whose GGUF writer
writes no KV fields at all (no `general.architecture`), and ComfyUI-GGUF
refuses such files before it looks at the tensors. The loaders in
`load` keep ComfyUI-GGUF's dequantizing ops and patcher and add only
what is decided here, on names, shapes and byte ranges:

- `read_gguf` is the pack's one checked GGUF reader (`h3k_gguf`, shared with
  h3kit's calibration): absolute byte ranges with torch-order shapes, or one
  sentence for a file that is damaged, cut short or crafted;
- `is_h3_dit` is ComfyUI's own H3 test (`video_patch_proj.weight` and
  `audio_patch_proj.weight`, comfy/model_detection.py) after the prefixes
  such files may carry;
- `te_names` maps llama.cpp's tensor names (`blk.N.attn_q`,
  `v.blk.N.attn_qkv`, `v.deepstack.K`, `mm.0`, ...) and the prefixed HF
  names onto the ones ComfyUI's Qwen3-VL-32B (MiniMax H3) encoder loads;
  `te_missing` says in one sentence what ComfyUI's `detect_te_model` would
  not find (it needs `visual.deepstack_merger_list.0.norm.weight` and
  `model.layers.49.self_attn.q_proj.weight` for QWEN3VL_32B);
- `vision_problem` says in one sentence when a vision tower (an mmproj's,
  or the encoder's own) is not the one ComfyUI builds for that encoder
  (`comfy_shapes`: the header's shapes as the loader hands them over), so
  a tower for another model is refused by name instead of being taken
  silently and failing, or not, at the first image;
- `find_mmproj` picks the vision file beside a text encoder.
"""

from __future__ import annotations

import re
from pathlib import Path

# the loaders take these from here: one import for everything GGUF they decide on
from ..h3k_gguf import DEFAULT_ALIGNMENT, GGML_TYPES, PLAIN_TYPES, GGUFError, read_gguf  # noqa: F401

DIT_PREFIXES = ("model.diffusion_model.", "diffusion_model.", "transformer.")
H3_KEYS = ("video_patch_proj.weight", "audio_patch_proj.weight")
QWEN3VL_32B_KEYS = ("visual.deepstack_merger_list.0.norm.weight", "model.layers.49.self_attn.q_proj.weight")
LOADERS_HINT = "h3kit models fetch --with-loaders"


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
LAYER_RE = re.compile(r"^model\.layers\.(\d+)\.")  # a text-encoder layer, ComfyUI's name: the one rule
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
    # a layer named by anything but its number (model.layers.L0.*) is no layer ComfyUI builds: not counted
    numbered = [int(m.group(1)) for n in names for m in [LAYER_RE.match(n)] if m]
    if not numbered:
        odd = sorted(n for n in names if n.startswith("model.layers."))
        return (f"{file_name} has no Qwen3 language model layers numbered as ComfyUI loads them (model.layers.N / "
                f"blk.N{'; it has ' + odd[0] if odd else ''}); it is not a Qwen3-VL text encoder: pick MiniMax H3's "
                "text encoder file.")
    if QWEN3VL_32B_KEYS[1] not in names:
        layers = 1 + max(numbered)
        return (f"{file_name} has {layers} language-model layers where MiniMax H3's Qwen3-VL-32B encoder has 50; "
                "pick MiniMax H3's text encoder file.")
    if QWEN3VL_32B_KEYS[0] not in names:
        return (f"{file_name} has no Qwen3-VL vision tower (no DeepStack mergers) and no matching mmproj file was "
                "given or found beside it; put MiniMax H3's mmproj GGUF next to it (its name containing 'mmproj') "
                "or name it in the loader's mmproj input.")
    return None


# -- the vision tower's shapes ---------------------------------------------------------------------------------

# ComfyUI's Qwen3-VL-32B tower (comfy/text_encoders/qwen3vl.py, QWEN3VL_VISION["qwen3vl_32b"] with
# QWEN3VL_VISION_COMMON) and the width of the language model its mergers feed (llama.py, Qwen3VL_32BConfig)
QWEN3VL_32B_VISION = {"hidden": 1152, "intermediate": 4304, "depth": 27, "deepstack": 3, "positions": 2304,
                      "channels": 3, "temporal": 2, "patch": 16, "merge": 2}
QWEN3VL_32B_WIDTH = 5120
_VBLOCK = re.compile(r"^visual\.blocks\.(\d+)\.")
_VDEEP = re.compile(r"^visual\.deepstack_merger_list\.(\d+)\.")


def comfy_shapes(tensors: dict, kv: dict) -> dict[str, list[int]]:
    """{ComfyUI name: shape} of a text encoder or mmproj header, as the held loader hands the tensors to ComfyUI:
    renamed, the two patch-embed slices stacked, split q/k/v fused, `comfy.gguf.orig_shape.*` applied."""
    shapes = {}
    for n, e in tensors.items():
        orig = kv.get(f"comfy.gguf.orig_shape.{n}")
        shapes[n] = [int(d) for d in orig] if isinstance(orig, list) else list(e["shape"])
    names = te_names(shapes)
    out = {names[n]: s for n, s in shapes.items()}
    for first, second in PATCH_SPLITS:
        if first in out:
            one, other = out.pop(first), out.pop(second, None)
            out["visual.patch_embed.proj.weight"] = one if other is None else one[:2] + [2] + one[2:]
    for fused, trio in split_qkv_groups(out).items():
        parts = [out.pop(n) for n in trio]
        out[fused] = [sum(p[0] for p in parts)] + parts[0][1:]
    return out


def tower_shapes(v: dict, width: int) -> dict[str, list[int]]:
    """{name: shape} of the vision tower ComfyUI builds for dims `v` feeding a `width`-wide language model
    (Qwen35VisionModel's blocks and merger, Qwen3VLDeepstackMerger's)."""
    h, i, m = v["hidden"], v["intermediate"], v["hidden"] * v["merge"] ** 2
    out = {"visual.patch_embed.proj.weight": [h, v["channels"], v["temporal"], v["patch"], v["patch"]],
           "visual.patch_embed.proj.bias": [h], "visual.pos_embed.weight": [v["positions"], h]}
    for b in range(v["depth"]):
        p = f"visual.blocks.{b}."
        out.update({p + "norm1.weight": [h], p + "norm1.bias": [h], p + "norm2.weight": [h], p + "norm2.bias": [h],
                    p + "attn.qkv.weight": [3 * h, h], p + "attn.qkv.bias": [3 * h], p + "attn.proj.weight": [h, h],
                    p + "attn.proj.bias": [h], p + "mlp.linear_fc1.weight": [i, h], p + "mlp.linear_fc1.bias": [i],
                    p + "mlp.linear_fc2.weight": [h, i], p + "mlp.linear_fc2.bias": [h]})
    mergers = [("visual.merger.", h)] + [(f"visual.deepstack_merger_list.{d}.", m) for d in range(v["deepstack"])]
    for p, norm in mergers:
        out.update({p + "norm.weight": [norm], p + "norm.bias": [norm], p + "linear_fc1.weight": [m, m],
                    p + "linear_fc1.bias": [m], p + "linear_fc2.weight": [width, m], p + "linear_fc2.bias": [width]})
    return out


def _count(names, pattern) -> int:
    found = [int(m.group(1)) for n in names for m in [pattern.match(n)] if m]
    return 1 + max(found) if found else 0


def vision_problem(te: dict, vision: dict, vision_file: str, te_file: str) -> str | None:
    """One sentence when the vision tensors in `vision` ({ComfyUI name: shape}, `comfy_shapes`) are not the tower
    ComfyUI builds for the text encoder `te` feeds, else None.

    For a 5120-wide language model ComfyUI builds Qwen3-VL-32B's tower at its fixed size, so the file must be
    that tower. A narrower one is a test's tiny encoder, built by its own test node at the size of its file:
    there the tower is sized from the file's own anchors, and every other tensor must fit them."""
    width = (te.get("model.embed_tokens.weight") or [QWEN3VL_32B_WIDTH])[-1]
    got = {n: s for n, s in vision.items() if n.startswith("visual.")}
    counts = {"depth": _count(got, _VBLOCK), "deepstack": _count(got, _VDEEP)}
    dims = dict(QWEN3VL_32B_VISION)
    if width != QWEN3VL_32B_WIDTH:
        dims.update(counts, hidden=(got.get("visual.pos_embed.weight") or [0, dims["hidden"]])[-1],
                    positions=(got.get("visual.pos_embed.weight") or [dims["positions"]])[0],
                    intermediate=(got.get("visual.blocks.0.mlp.linear_fc1.weight") or [dims["intermediate"]])[0])
    what = "the mmproj file made for it" if vision_file != te_file else "MiniMax H3's text encoder file"
    for key, word in (("depth", "blocks"), ("deepstack", "DeepStack mergers")):
        if counts[key] != dims[key]:
            return (f"{vision_file} is not the vision tower of {te_file}: it has {counts[key]} vision {word} where "
                    f"MiniMax H3's Qwen3-VL-32B has {dims[key]}; pick {what}.")
    want = tower_shapes(dims, width)
    wrong = [n for n in sorted(got) if n in want and list(got[n]) != want[n]]
    if wrong:
        return (f"{vision_file} is not the vision tower of {te_file}: {wrong[0]} is {list(got[wrong[0]])} where "
                f"ComfyUI builds {want[wrong[0]]} for it ({len(wrong)} of its {len(got)} vision tensors differ); "
                f"pick {what}.")
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
