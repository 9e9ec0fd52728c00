"""h3kit's GGUF loaders at run time: H3's GGUF files through ComfyUI-GGUF's own ops and patcher.

ComfyUI-GGUF (city96) dequantizes GGUF weights per layer as they compute
(`GGMLOps`, `GGMLTensor`, `GGUFModelPatcher`); it refuses H3's files only
at its architecture check: stable-diffusion.cpp writes no KV fields, and
its arch list has no H3 (DiT: "Unknown model architecture"; text encoder:
"incompatible with llama.cpp", and no Qwen3-VL vision tower). These
loaders use the installed pack's classes as they are (found among
ComfyUI's loaded custom nodes, never a copy) and add only the detection
and the renaming of `logic`:

- `load_dit`: an H3 DiT by ComfyUI's own H3 keys, metadata or not, into
  `comfy.sd.load_diffusion_model_state_dict` with the pack's ops; any other
  GGUF goes to the pack's own reader unchanged;
- `load_text_encoder`: a Qwen3-VL-32B GGUF (llama.cpp or ComfyUI names), its
  vision tower from the same file or an mmproj GGUF, renamed so that
  `detect_te_model` finds QWEN3VL_32B, loaded as CLIPLoader type `minimax`
  does, through the pack's CLIPLoaderGGUF.load_patcher.

Every file is read and checked by the pack's own reader (`h3k_gguf`, through
`logic`) before ComfyUI-GGUF's gguf-py sees it: a crafted or
damaged file is one sentence in a header read, the same one the streamed
loader gives, never gguf-py's memory blow-up or raw error; anything gguf-py
still raises comes back as a sentence naming the file.

torch, comfy and gguf are imported inside functions: the pack must import without them.
"""

from __future__ import annotations

import importlib
import logging
import os
import sys
import warnings
from pathlib import Path

from .gguf_names import (LOADERS_HINT, PATCH_SPLITS, GGUFError, comfy_shapes, dit_prefix, find_mmproj,
                               has_vision, is_h3_dit, read_gguf, split_qkv_groups, te_missing, te_names, vision_problem)

LOG = logging.getLogger("h3kit")
PACK_NODE = "UnetLoaderGGUF"
PACK_PARTS = ("nodes", "ops", "dequant", "loader")
EMBED_DEQUANT_ROWS = 64 * 1024  # ComfyUI-GGUF's own threshold: a vocabulary this big is dequantized once


class GGUFPack:
    """The installed ComfyUI-GGUF package's modules (nodes, ops, dequant, loader) and gguf-py."""

    def __init__(self, modules: dict, gguf):
        self.nodes, self.ops, self.dequant, self.loader = (modules[p] for p in PACK_PARTS)
        self.gguf = gguf


_PACK: GGUFPack | None = None


def _missing(why: str) -> GGUFError:
    return GGUFError(f"h3kit's GGUF loaders need the ComfyUI-GGUF node pack ({why}); install it with "
                     f"'{LOADERS_HINT}' and restart ComfyUI.")


def gguf_pack() -> GGUFPack:
    """ComfyUI-GGUF as ComfyUI loaded it (the module behind its UnetLoaderGGUF node), or a custom_nodes folder
    holding it; one GGUFError naming `h3kit models fetch --with-loaders` when it is not there."""
    global _PACK
    if _PACK is not None:
        return _PACK
    package = None
    try:
        import nodes as comfy_nodes
        cls = comfy_nodes.NODE_CLASS_MAPPINGS.get(PACK_NODE)
        if cls is not None:
            package = cls.__module__.rsplit(".", 1)[0]
    except ImportError:
        pass
    if package is None:
        package = _import_from_custom_nodes()
    try:
        import gguf
        modules = {p: importlib.import_module(f"{package}.{p}") for p in PACK_PARTS}
    except ImportError as exc:
        raise _missing(f"importing it failed: {exc}") from exc
    _PACK = GGUFPack(modules, gguf)
    return _PACK


def _import_from_custom_nodes() -> str:
    """Import ComfyUI-GGUF from a custom_nodes folder when ComfyUI has not (a script, not the server)."""
    import importlib.util
    try:
        import folder_paths
        roots = folder_paths.get_folder_paths("custom_nodes")
    except Exception:
        roots = []
    for root in roots:
        for name in sorted(os.listdir(root)) if os.path.isdir(root) else []:
            folder = os.path.join(root, name)
            if "gguf" in name.lower() and not name.endswith(".disabled") and all(
                    os.path.isfile(os.path.join(folder, f"{p}.py")) for p in PACK_PARTS):
                module = "h3kit_found_" + "".join(c if c.isalnum() else "_" for c in name)
                if module not in sys.modules:
                    spec = importlib.util.spec_from_file_location(module, os.path.join(folder, "__init__.py"),
                                                                  submodule_search_locations=[folder])
                    mod = importlib.util.module_from_spec(spec)
                    sys.modules[module] = mod
                    try:
                        spec.loader.exec_module(mod)
                    except Exception as exc:
                        del sys.modules[module]
                        raise _missing(f"{folder} does not import: {exc}") from exc
                return module
    raise _missing("it is not installed in this ComfyUI")


# -- reading ------------------------------------------------------------------------------------------------


def read_state_dict(path, pack: GGUFPack) -> dict:
    """{tensor name: ComfyUI-GGUF GGMLTensor} (quantized ones stay quantized, memory-mapped), like the pack's
    reader but without its architecture check; shapes from `comfy.gguf.orig_shape.*` where the file has them."""
    return _pack_call(path, _read_state_dict, path, pack)


def _pack_call(path, fn, *args):
    """fn(*args), with anything ComfyUI-GGUF or gguf-py raise on this file as one GGUFError naming it (the file
    passed h3kit's checks first, so this is what they take that h3kit's reader does not)."""
    try:
        return fn(*args)
    except GGUFError:
        raise
    except Exception as exc:
        why = " ".join(f"{type(exc).__name__}: {exc}".split())[:300]
        raise GGUFError(f"ComfyUI-GGUF cannot read {Path(path).name} ({why}); check that it is a model file "
                        "ComfyUI-GGUF loads, or re-download it.") from exc


def _read_state_dict(path, pack: GGUFPack) -> dict:
    reader = pack.gguf.GGUFReader(str(path))
    import torch

    ggml = pack.gguf.GGMLQuantizationType
    out = {}
    for tensor in reader.tensors:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
            data = torch.from_numpy(tensor.data)
        shape = pack.loader.get_orig_shape(reader, tensor.name)
        if shape is None:
            shape = torch.Size(tuple(int(v) for v in reversed(tensor.shape)))
        if tensor.tensor_type in (ggml.F32, ggml.F16):
            data = data.view(*shape)
        t = pack.ops.GGMLTensor(data, tensor_type=tensor.tensor_type, tensor_shape=shape)
        if len(shape) <= 1 and tensor.tensor_type == ggml.BF16:  # as the pack does: 1-D BF16 as plain fp32
            t = pack.dequant.dequantize_tensor(t, dtype=torch.float32)
        out[tensor.name] = t
    quantized = {k: v for k, v in out.items() if pack.dequant.is_quantized(v)}
    if quantized:  # the pack's VRAM estimate looks for this mark
        out[max(quantized, key=lambda k: quantized[k].numel())].is_largest_weight = True
    return out


def _check(path) -> dict:
    try:
        return read_gguf(path)
    except GGUFError:
        raise
    except Exception as exc:  # a parse the logic module did not foresee: still one sentence
        raise GGUFError(f"{Path(path).name} is not a GGUF file h3kit can read ({exc}); re-download it.") from exc


# -- the DiT -------------------------------------------------------------------------------------------------


def _dtype_option(value):
    import torch
    if value in ("default", None):
        return None
    return value if value == "target" else getattr(torch, value)


def load_dit(path, dequant_dtype: str = "default", patch_dtype: str = "default", patch_on_device: bool = False):
    """A ModelPatcher for the GGUF DiT in `path` (H3 with or without metadata; anything else as the pack reads it)."""
    path = Path(path)
    header = _check(path)  # before ComfyUI, ComfyUI-GGUF or gguf-py see the file
    import comfy.sd

    pack = gguf_pack()
    names = header["tensors"]
    if is_h3_dit(names):
        sd = read_state_dict(path, pack)
        prefix = dit_prefix(names)
        if prefix:
            sd = {k[len(prefix):] if k.startswith(prefix) else k: v for k, v in sd.items()}
        arch = header["kv"].get("general.architecture")
        LOG.info("h3kit GGUF loader: %s is a MiniMax H3 DiT (%s), %d tensors", path.name,
                 f"general.architecture {arch!r}" if arch else "no metadata, detected by its H3 keys", len(sd))
    else:
        sd = _pack_call(path, pack.loader.gguf_sd_loader, str(path))
    ops = pack.ops.GGMLOps()
    ops.Linear.dequant_dtype = _dtype_option(dequant_dtype)
    ops.Linear.patch_dtype = _dtype_option(patch_dtype)
    model = comfy.sd.load_diffusion_model_state_dict(sd, model_options={"custom_operations": ops})
    if model is None:
        raise GGUFError(f"ComfyUI does not recognise the diffusion model in {path.name}; it is not a model this "
                        "ComfyUI knows (MiniMax H3 needs ComfyUI 0.30 or later).")
    model = pack.nodes.GGUFModelPatcher.clone(model)
    model.patch_on_device = bool(patch_on_device)
    return model


# -- the text encoder ----------------------------------------------------------------------------------------


def mmproj_path(model_path, chosen: str | None, folder_lookup=None) -> tuple[str | None, str]:
    """(the vision file to use, how it was found): the one named in the node, else a matching mmproj*.gguf in
    the text encoder's folder."""
    model_path = Path(model_path)
    if chosen and chosen not in ("none", "(auto)", "auto"):
        full = folder_lookup(chosen) if folder_lookup else chosen
        if not full or not os.path.isfile(full):
            raise GGUFError(f"the mmproj file {chosen} named in the loader is not in models/text_encoders; put it "
                            "there or pick '(auto)'.")
        return str(full), f"{chosen} (named in the loader)"
    found, note = find_mmproj(model_path.name, os.listdir(model_path.parent))
    return (str(model_path.parent / found) if found else None), note


def _renamed(sd: dict, pack: GGUFPack) -> dict:
    import torch

    names = te_names(sd)
    out = {names[k]: v for k, v in sd.items()}
    for split in PATCH_SPLITS:
        if split[0] in out:
            first, second = out.pop(split[0]), out.pop(split[1], None)
            deq = [pack.dequant.dequantize_tensor(w, dtype=torch.float32) for w in (first, second) if w is not None]
            # two 2-D convolutions, one per temporal slice, are ComfyUI's one Conv3d over both
            out["visual.patch_embed.proj.weight"] = torch.stack(deq, dim=2) if len(deq) == 2 else deq[0]
    for fused, trio in split_qkv_groups(out).items():
        parts = [pack.dequant.dequantize_tensor(out.pop(n), dtype=torch.float32) for n in trio]
        out[fused] = torch.cat(parts, dim=0)
    embed = out.get("model.embed_tokens.weight")
    if embed is not None and pack.dequant.is_quantized(embed) and embed.shape[0] >= EMBED_DEQUANT_ROWS:
        out["model.embed_tokens.weight"] = pack.dequant.dequantize_tensor(embed, dtype=torch.float16)
    return out


def tower_state_dict(path) -> dict:
    """{ComfyUI name: tensor} of the vision tower in a text encoder or mmproj GGUF (the streamed encoder's tower)."""
    _check(path)
    pack = gguf_pack()
    return {k: v for k, v in _renamed(read_state_dict(path, pack), pack).items() if k.startswith("visual.")}


def text_encoder_state_dict(path, mmproj: str | None = None, folder_lookup=None) -> tuple[dict, list[str]]:
    """(ComfyUI's state dict for the Qwen3-VL-32B encoder in `path` (+ its vision tower), notes).

    Both files' headers are read and checked, and the tower's shapes matched to the encoder's, before
    gguf-py reads either: a wrong file costs a header read, not the load of a 20 GB model."""
    path = Path(path)
    header = _check(path)
    names = comfy_shapes(header["tensors"], header["kv"])
    notes = [f"{path.name}: {len(header['tensors'])} tensors" +
             (", no KV fields" if not header["kv"] else f", architecture {header['kv'].get('general.architecture')!r}")]
    vision, vision_names = None, {}
    if not has_vision(names) or mmproj:
        vision, how = mmproj_path(path, mmproj, folder_lookup)
        if vision is not None:
            vheader = _check(vision)
            vision_names = {k: v for k, v in comfy_shapes(vheader["tensors"], vheader["kv"]).items()
                            if k.startswith("visual.")}
            notes.append(f"vision tower from {how}")
        else:
            notes.append(f"no vision tower: {how}")
    else:
        notes.append("vision tower inside the file")
    full = {**names, **vision_names}
    problem = te_missing(full, path.name) or vision_problem(
        names, full, Path(vision).name if vision is not None else path.name, path.name)
    if problem:
        raise GGUFError(problem)
    pack = gguf_pack()
    sd = _renamed(read_state_dict(path, pack), pack)
    if vision is not None:
        vsd = _renamed(read_state_dict(vision, pack), pack)
        sd.update({k: v for k, v in vsd.items() if k.startswith("visual.")})
    return sd, notes


def load_text_encoder(path, mmproj: str | None = None, clip_type: str = "minimax", folder_lookup=None):
    """The CLIP object for a MiniMax H3 Qwen3-VL-32B GGUF, loaded as ComfyUI-GGUF's CLIPLoaderGGUF loads one."""
    sd, notes = text_encoder_state_dict(path, mmproj, folder_lookup)
    import comfy.sd

    LOG.info("h3kit GGUF text encoder: %s", "; ".join(notes))
    kind = getattr(comfy.sd.CLIPType, clip_type.upper(), None)
    if kind is None:
        raise GGUFError(f"this ComfyUI has no text encoder type {clip_type!r}; MiniMax H3 needs ComfyUI 0.30 or later.")
    pack = gguf_pack()
    return pack.nodes.CLIPLoaderGGUF().load_patcher([str(path)], kind, [sd])
