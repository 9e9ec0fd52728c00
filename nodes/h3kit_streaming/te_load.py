"""The streamed text encoder: MiniMax H3's Qwen3-VL-32B with its 50 layers read from the file as they run.

ComfyUI's CLIPLoader holds the whole encoder (13.1 GB to 25.28 GiB quantized
in the catalog, 51.5 GB in bf16) while it encodes one prompt. `load_streamed_text_encoder` builds
the same CLIP object with ComfyUI's own code -- `load_text_encoder_state_dicts`
on a state dict of shapes only (`meta`), so detection, classes, ops and
dtypes are exactly the stock load's -- and then holds almost nothing:

- the language model's layers go to `blocks.BlockStream`, the DiT
  streamer's machinery (native reads, in place on the CPU or through the
  ring, past the page cache with page_cache "bypass"; GGUF layers dequantized
  by ComfyUI-GGUF's code): a forward pre-hook reads a layer into the
  parameters in the dtype ComfyUI chose, a forward hook frees it;
- the embedding table (151,936 rows) is `RowEmbedding`: only the rows of the
  prompt's tokens are read, in the table's dtype, then gathered and cast the
  way ComfyUI's Embedding does, so the vectors are the stock ones;
- the vision tower (image-to-video) is `TowerOnDemand`: read whole when an
  image is encoded, dropped when the encode ends;
- when the encode ends, the layer buffers and the ring are freed too, so the
  sampler gets the memory back; `h3kit_te_streaming_stats.json` says what
  was read and waited for.

A bf16/fp16 safetensors file computes in its own dtype, as stock: the
conditioning equals CLIPLoader's bit for bit (tests/real_comfyui). A GGUF
file's layers are dequantized to bf16 (the weights they were made from).
ComfyUI's quantized safetensors (int8/nvfp4/int4 ConvRot) are refused with
the loader to use instead: their layers need ComfyUI's quantized ops.

torch and comfy are imported inside functions: the pack must import without them.
"""

from __future__ import annotations

import logging
import math
from pathlib import Path

from .blocks import BlockStream, _dtype, _Spec
from .load import ATTR, gguf_dequantizer, open_checked, patcher_class, read_gguf_tensor
from ..h3k_loader import BYPASS_READ_BYTES
from ..h3kit_common.files import file_stamp
from .logic import StreamError, is_quantized, merge_ranges, plan_stream, range_starts
from .te_logic import (EMBED, group_layers, layer_file_bytes, refuse_unsupported_te, row_span, te_layout_problem,
                       te_tensors)

LOG = logging.getLogger("h3kit")
MINIMAX = "MINIMAX"


class _Encode:
    """What one encode holds beyond ComfyUI's objects: started and ended by hooks on the encoder's forward."""

    def __init__(self, stream: BlockStream, tower):
        self.stream, self.tower = stream, tower

    def started(self) -> None:
        self.tower.release()  # an encode that failed half way left its tower behind
        s = self.stream
        s.drop_buffers()
        s.start_counters()
        s.counters["model_calls"] += 1

    def finished(self) -> None:
        s = self.stream
        s.end_run()  # frees the last layer and writes the stats
        s.drop_buffers()  # the layer buffers and the ring go back before the sampler runs
        s.close()
        self.tower.release()


def _row_module(path: str, entry: dict, dtype, dequantize, stamp):
    """An nn.Module standing in for the embedding table: reads the rows it is asked for."""
    import torch

    class RowEmbedding(torch.nn.Module):
        def __init__(self):
            super().__init__()
            # ComfyUI asks the table for its device when nothing else says where to encode
            self.weight = torch.nn.Parameter(torch.empty(0, dtype=dtype), requires_grad=False)

        def forward(self, input, out_dtype=None, **kwargs):
            if file_stamp(path) != stamp:
                raise StreamError(f"h3kit streamed text encoder: {path} changed since it was loaded; queue the "
                                  "prompt again.")
            ids = input.flatten().tolist()
            wanted = sorted(set(ids))
            with open(path, "rb") as f:  # one open per prompt, rows in file order
                rows = [self._row(f, r) for r in wanted]
            table = torch.stack(rows) if rows else torch.empty(0, entry["shape"][1], dtype=dtype)
            where = {r: i for i, r in enumerate(wanted)}
            index = torch.tensor([where[r] for r in ids], dtype=torch.long).reshape(input.shape)
            out = torch.nn.functional.embedding(index, table)
            return out.to(device=input.device, dtype=out_dtype if out_dtype is not None else dtype)

        def _row(self, f, row: int):
            start, end = row_span(entry, row)
            f.seek(start)
            raw = bytearray(f.read(end - start))
            if len(raw) != end - start:
                raise StreamError(f"{Path(path).name} is cut short (the embedding table ends past the end of the "
                                  "file); re-download it.")
            data = torch.frombuffer(raw, dtype=torch.uint8)
            if is_quantized(entry):
                return dequantize(data, entry["type_id"], (entry["shape"][1],), dtype)
            return data.view(_dtype(entry["dtype"])).to(dtype)

    return RowEmbedding()


class TowerOnDemand:
    """The vision tower's weights, read when an image is encoded and dropped when the encode ends."""

    def __init__(self, module, prefix: str, read_all):
        import torch
        self.params = []  # (owner module, parameter name, shape, dtype, name in the file)
        for name, p in module.named_parameters():
            owner, _, pname = name.rpartition(".")
            self.params.append((module.get_submodule(owner) if owner else module, pname, tuple(p.shape), p.dtype,
                                prefix + name))
        self.placeholders = [torch.nn.Parameter(torch.empty(0, dtype=d), requires_grad=False)
                             for _, _, _, d, _ in self.params]
        self.read_all = read_all  # () -> {file name: tensor}
        self.held = False
        self.release()

    def load(self) -> None:
        if self.held:
            return
        import torch
        tensors = self.read_all()
        for owner, pname, shape, dtype, name in self.params:
            t = tensors.get(name)
            if t is None or tuple(t.shape) != shape:
                raise StreamError(f"the text encoder's vision tower lacks {name} (or it has another shape); the "
                                  "file is not MiniMax H3's encoder or is damaged: re-download it.")
            owner._parameters[pname] = torch.nn.Parameter(t.to(dtype), requires_grad=False)
        self.held = True

    def release(self) -> None:
        for i, (owner, pname, _, _, _) in enumerate(self.params):
            owner._parameters[pname] = self.placeholders[i]
        self.held = False


def _meta_state_dict(path: Path, header: dict, mmproj, folder_lookup):
    """(state dict of shape-only tensors, as ComfyUI would get the file, the vision file) for detection."""
    import torch
    tensors = header["tensors"]
    if not header.get("gguf"):
        # checked here, not by ComfyUI's load: its torch error names neither the file nor the tensor
        problem = te_layout_problem(path.name, {n: e["shape"] for n, e in tensors.items()}, with_tower=True)
        if problem:
            raise StreamError(problem)
        return {n: torch.empty(e["shape"], dtype=_dtype(e["dtype"]), device="meta") for n, e in tensors.items()}, None
    from ..h3kit_common.gguf_load import mmproj_path
    from ..h3kit_common.gguf_names import comfy_shapes, has_vision, read_gguf, te_missing, vision_problem

    shapes = comfy_shapes(read_gguf(path)["tensors"], header["kv"])
    vision_file = None
    if not has_vision(shapes) or mmproj:
        vision_file, how = mmproj_path(path, mmproj, folder_lookup)
        if vision_file is not None:
            doc = read_gguf(vision_file)
            shapes.update({k: v for k, v in comfy_shapes(doc["tensors"], doc["kv"]).items()
                           if k.startswith("visual.")})
        LOG.info("h3kit streamed text encoder: vision tower from %s", how)
    problem = te_missing(shapes, path.name) or te_layout_problem(path.name, shapes, with_tower=False) or vision_problem(
        shapes, shapes, Path(vision_file).name if vision_file else path.name, path.name)
    if problem:
        raise StreamError(problem)
    # a GGUF's weights stand for the bf16 weights they were made from (what ComfyUI picks its dtype by)
    return {n: torch.empty(s, dtype=torch.bfloat16, device="meta") for n, s in shapes.items()}, vision_file


def _tower_reader(path: Path, header: dict, vision_file):
    """() -> {ComfyUI name: tensor} of the vision tower, read from the file when called."""
    if not header.get("gguf"):
        def read():
            import safetensors
            with safetensors.safe_open(str(path), framework="pt", device="cpu") as f:
                return {n: f.get_tensor(n) for n in f.keys() if n.startswith("visual.")}
        return read

    def read_gguf_tower():
        import torch
        from ..h3kit_common.gguf_load import gguf_pack, tower_state_dict
        pack = gguf_pack()
        return {n: pack.dequant.dequantize_tensor(t, dtype=torch.float32).as_subclass(torch.Tensor)
                for n, t in tower_state_dict(vision_file or path).items()}
    return read_gguf_tower


def load_streamed_text_encoder(path, mmproj=None, page_cache: str = "use", prefetch_layers: int = 1,
                               stats_path=None, bridge=None, folder_lookup=None, embedding_directory=None):
    """ComfyUI's CLIP object for MiniMax H3's text encoder in `path`, its layers streamed from the file."""
    path, header, bridge, stamp = open_checked(path, page_cache, "h3kit streamed text encoder", te_tensors,
                                               refuse_unsupported_te, bridge)
    tensors = header["tensors"]
    layers, vision, rest = group_layers(sorted(tensors, key=lambda n: tensors[n]["start"]))
    gguf = bool(header.get("gguf"))
    dequantize = gguf_dequantizer() if gguf and any(is_quantized(e) for e in tensors.values()) else None
    meta, vision_file = _meta_state_dict(path, header, mmproj, folder_lookup)
    clip = _shape_only_clip(meta, embedding_directory)
    te = clip.cond_stage_model
    inner = getattr(te, te.clip)
    prefix = f"{te.clip}.transformer."
    lm = inner.transformer.model
    if len(lm.layers) != len(layers):
        raise StreamError(f"{path.name} has {len(layers)} language-model layers but ComfyUI built {len(lm.layers)}; "
                          "re-download the file.")
    specs = _strip_layers(lm, layers, tensors, path, prefix)
    embed_dtype = lm.embed_tokens.weight.dtype
    lm.embed_tokens = _row_module(str(path), tensors[EMBED], embed_dtype, dequantize, stamp)
    tower = TowerOnDemand(inner.transformer.visual, "visual.", _tower_reader(path, header, vision_file))
    _load_rest(te, prefix, rest, tensors, path, dequantize, gguf)
    ranges = {b: merge_ranges((s.start, s.end) for s in ss) for b, ss in specs.items()}
    plan = plan_stream(ranges, BYPASS_READ_BYTES if page_cache == "bypass" else 0, prefetch_layers, 0,
                       bridge.streamer_limits())
    stream = BlockStream(path, stamp, bridge, specs, plan, stats_path, dequantize, page_cache=page_cache)
    setattr(te, ATTR, stream)
    _hook_encode(inner.transformer, stream, tower)
    reader = _stream_patcher(clip, stream, specs)
    LOG.info("h3kit streamed text encoder: %s, %d layers read as reached (%s, %d-byte reads, layer %d bytes in the "
             "file), %d vision tensors read per image encode, compute dtype %s", path.name, len(specs), reader.name,
             plan["read_size"], layer_file_bytes(tensors, layers), len(vision), embed_dtype)
    return clip


def _shape_only_clip(meta: dict, embedding_directory):
    """ComfyUI's own CLIP (type minimax) built from a shape-only state dict: nothing of the 32B is allocated."""
    import torch
    import comfy.sd

    kind = getattr(comfy.sd.CLIPType, MINIMAX, None)
    if kind is None:
        raise StreamError("this ComfyUI has no MiniMax text encoder type; MiniMax H3 needs ComfyUI 0.30 or later.")
    return comfy.sd.load_text_encoder_state_dicts([meta], embedding_directory=embedding_directory, clip_type=kind,
                                                  model_options={"initial_device": torch.device("meta")},
                                                  disable_dynamic=True)


def _hook_encode(transformer, stream: BlockStream, tower) -> None:
    """Each layer read before it runs and freed after; the tower read for an image; the encode's start and end."""
    encode = _Encode(stream, tower)
    for b, layer in enumerate(transformer.model.layers):
        layer.register_forward_pre_hook(lambda m, args, kwargs, b=b: stream.before(b, (kwargs.get("x", args[0] if
                                        args else None),)), with_kwargs=True)
        layer.register_forward_hook(lambda m, args, out, b=b: stream.after(b))
    transformer.visual.register_forward_pre_hook(lambda m, args: tower.load())
    transformer.register_forward_pre_hook(lambda m, args: encode.started())
    transformer.register_forward_hook(lambda m, args, out: encode.finished())


def _stream_patcher(clip, stream: BlockStream, specs: dict):
    """Put the streaming ModelPatcher in place of the CLIP's own, sized for what it holds; the reader it uses."""
    import torch
    import comfy.model_management as mm

    te, old = clip.cond_stage_model, clip.patcher
    reader = stream.reader_for(old.load_device)
    layer_held = max(sum(s.placeholder.element_size() * math.prod(s.shape) for s in ss) for ss in specs.values())
    held = mm.module_size(te) + layer_held * reader.buffer_sets + reader.ring_bytes()
    patcher = patcher_class()(te, load_device=old.load_device, offload_device=old.offload_device, size=held)
    patcher.set_model_compute_dtype(torch.float32)  # as CLIP's own patcher: the encoder upcasts to float32
    patcher.hook_mode = old.hook_mode
    patcher.is_clip = True
    clip.patcher = patcher
    return reader


def _strip_layers(lm, layers: dict, tensors: dict, path: Path, prefix: str) -> dict:
    """Specs for every layer parameter, each replaced by an empty placeholder."""
    specs = {}
    for b, names in layers.items():
        layer = lm.layers[b]
        params = dict(layer.named_parameters())
        head = f"model.layers.{b}."
        file_keys = {n[len(head):] for n in names}
        if set(params) != file_keys:
            odd = sorted(file_keys ^ set(params))[0]
            raise StreamError(f"layer {b} of {path.name} does not match the encoder ComfyUI built ({odd}); "
                              "re-download the file.")
        range_start = range_starts(names, tensors)
        out = []
        for n in names:
            rel = n[len(head):]
            param = params[rel]
            if list(param.shape) != list(tensors[n]["shape"]):
                raise StreamError(f"{n} in {path.name} has shape {tensors[n]['shape']} but the encoder wants "
                                  f"{list(param.shape)}; re-download the file.")
            owner, _, pname = rel.rpartition(".")
            out.append(_Spec(b, prefix + n, layer.get_submodule(owner) if owner else layer, pname, param, tensors[n],
                             range_start[n], within=rel))
            out[-1].clear()
        specs[b] = out
    return specs


def _load_rest(te, prefix: str, rest: list, tensors: dict, path: Path, dequantize, gguf: bool) -> None:
    """Read the few tensors outside the layers, the table and the tower; anything still shape-only is an error."""
    import torch
    import safetensors

    wanted = {prefix + n: n for n in rest}
    params = dict(te.named_parameters())
    found = {k: n for k, n in wanted.items() if k in params}
    if found:
        if gguf:  # the checked header's word (open_checked), not the file's name
            values = {n: read_gguf_tensor(path, tensors[n], dequantize) for n in found.values()}
        else:
            with safetensors.safe_open(str(path), framework="pt", device="cpu") as f:
                values = {n: f.get_tensor(n) for n in found.values()}
        for key, n in found.items():
            owner, _, pname = key.rpartition(".")
            module = te.get_submodule(owner)
            module._parameters[pname] = torch.nn.Parameter(values[n].to(params[key].dtype), requires_grad=False)
    left = [k for k, p in te.named_parameters() if p.is_meta] + [k for k, b in te.named_buffers() if b.is_meta]
    if left:
        raise StreamError(f"{path.name} lacks {left[0][len(prefix):] if left[0].startswith(prefix) else left[0]}, "
                          "which ComfyUI's MiniMax H3 text encoder needs; re-download the file.")
