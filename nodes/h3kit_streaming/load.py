"""Building the streamed model: comfy.sd.load_diffusion_model's steps with the blocks left on disk.

`load_streamed` reads the safetensors header, loads the tensors outside
`blocks.N.*` (the embeddings, token refiner and final layer ComfyUI keeps
anyway), lets ComfyUI detect the model and choose its dtypes from a state
dict whose block tensors are shape-only (`meta`), builds the model with
ComfyUI's own classes, replaces every block parameter by an empty
placeholder (recording the dtype ComfyUI gave it, which is what a block is
converted to when it is read) and wraps it in `patcher_class()`, a
ModelPatcher that leaves those blocks to `blocks.BlockStream`.
MiniMax H3 DiTs in safetensors or GGUF are streamed (a GGUF's tensors
outside the blocks are dequantized once, its block tensors per use, by
ComfyUI-GGUF's own dequantize); anything else is refused with a sentence
naming the loader to use instead.

torch and comfy are imported inside functions: the pack must import without them.
"""

from __future__ import annotations

import logging
import weakref
from pathlib import Path

from ..h3k_loader import BYPASS_READ_BYTES
from ..h3kit_common.files import file_stamp
from .blocks import BlockStream, _dtype, _Spec
from .logic import (StreamError, check_page_cache, group_blocks, is_quantized, merge_ranges, plan_stream,
                    range_starts, read_weights, refuse_unsupported)

LOG = logging.getLogger("h3kit")
ATTR = "h3kit_stream"
_PATCHER_CLASS = None


def _native(bridge=None):
    """The h3k_native bridge (the pack's copy), loaded, or one sentence saying why not."""
    if bridge is None:
        try:
            from .. import h3k_native as bridge
        except ImportError:
            try:
                import h3k_native as bridge
            except ImportError as exc:
                raise StreamError("h3kit's native bridge (h3k_native) is missing from the node pack; run "
                                  "'h3kit apply' (or use ComfyUI's Load Diffusion Model).") from exc
    try:
        bridge.load()
    except Exception as exc:
        raise StreamError(f"h3kit's native library does not load here ({exc}); run 'h3kit build' and "
                          "'h3kit apply', or use ComfyUI's Load Diffusion Model.") from exc
    return bridge


def open_checked(path, page_cache: str, who: str, read, refuse, bridge=None):
    """What both streamed loaders do before building anything: the page_cache choice checked, the file's header
    read and checked (`read`, `refuse`), the native bridge loaded and the file's stamp taken (the stream checks
    it before every read). Returns (path, header, bridge, stamp)."""
    check_page_cache(page_cache, who)
    path = Path(path)
    header = read(path)
    refuse(path, header["tensors"])
    return path, header, _native(bridge), file_stamp(path)


def patcher_class():
    """ModelPatcher that leaves the streamed blocks to BlockStream (built once, after comfy imports).

    Without it ComfyUI's load would patch and move the placeholders itself (a LoRA on a placeholder is a
    shape error). It leaves the streamed modules out of the load list and patches their weights per block
    instead; clones (LoraLoader, model patches) keep the class, because ModelPatcher.clone uses it.
    """
    global _PATCHER_CLASS
    if _PATCHER_CLASS is not None:
        return _PATCHER_CLASS
    import comfy.model_patcher

    class H3kitStreamedModelPatcher(comfy.model_patcher.ModelPatcher):
        def _stream(self):
            return getattr(self.model, ATTR, None)

        def _load_list(self, *args, **kwargs):
            out = super()._load_list(*args, **kwargs)
            stream = self._stream()
            return out if stream is None else [x for x in out if x[-3] not in stream.modules]

        def patch_weight_to_device(self, key, device_to=None, inplace_update=False, return_weight=False,
                                   force_cast=False):
            stream = self._stream()
            if stream is not None and key in stream.keys:
                return None  # BlockStream patches this weight each time it reads the block
            return super().patch_weight_to_device(key, device_to, inplace_update, return_weight, force_cast)

        def load(self, *args, **kwargs):
            out = super().load(*args, **kwargs)
            stream = self._stream()
            if stream is not None:  # the clone whose patches ComfyUI just put on the device
                stream.patcher_ref = weakref.ref(self)
            return out

        def unpatch_model(self, *args, **kwargs):
            out = super().unpatch_model(*args, **kwargs)
            stream = self._stream()
            if stream is not None:  # ComfyUI unloads the model: the block buffers go too (they live outside it)
                stream.drop_buffers()
            return out

        def pre_run(self):
            super().pre_run()
            stream = self._stream()
            if stream is not None:
                stream.begin_run(self)

        def cleanup(self):
            stream = self._stream()
            try:
                if stream is not None:
                    stream.end_run()
            finally:
                super().cleanup()

    _PATCHER_CLASS = H3kitStreamedModelPatcher
    return _PATCHER_CLASS


def model_options_for(weight_dtype: str) -> dict:
    """UNETLoader's weight_dtype choices, the same way it maps them."""
    import torch
    if weight_dtype == "fp8_e4m3fn":
        return {"dtype": torch.float8_e4m3fn}
    if weight_dtype == "fp8_e4m3fn_fast":
        return {"dtype": torch.float8_e4m3fn, "fp8_optimizations": True}
    if weight_dtype == "fp8_e5m2":
        return {"dtype": torch.float8_e5m2}
    return {}


def load_streamed(path, weight_dtype: str = "default", preload_bytes: int = 0, shard_size_bytes: int = 0,
                  prefetch_blocks: int = 1, stats_path=None, bridge=None, page_cache: str = "use"):
    """A ModelPatcher for the H3 DiT in `path` with its blocks streamed (comfy.sd.load_diffusion_model's steps).

    `page_cache` "bypass" reads the blocks past the OS's page cache (read.UncachedRead), in
    BYPASS_READ_BYTES pieces when `shard_size_bytes` is 0."""
    path, header, bridge, stamp = open_checked(path, page_cache, "h3kit streamed loader", read_weights,
                                               refuse_unsupported, bridge)
    tensors = header["tensors"]
    import comfy.model_management as mm

    blocks, rest = group_blocks(sorted(tensors, key=lambda n: tensors[n]["start"]))
    small, dequantize = _outside_blocks(path, header, rest)
    sd = _shape_only(small, blocks, tensors)
    config, dtype = _h3_config(path, sd, header["metadata"] or None, weight_dtype)
    model = config.get_model(sd, "")
    specs, compute_block_bytes = _strip_blocks(model.diffusion_model, blocks, tensors, path)
    ranges = {b: merge_ranges((s.start, s.end) for s in ss) for b, ss in specs.items()}
    if page_cache == "bypass" and not shard_size_bytes:
        shard_size_bytes = BYPASS_READ_BYTES
    plan = plan_stream(ranges, shard_size_bytes, prefetch_blocks, preload_bytes, bridge.streamer_limits())
    stream = BlockStream(path, stamp, bridge, specs, plan, stats_path, dequantize, page_cache=page_cache)
    setattr(model, ATTR, stream)
    _hook_blocks(model, stream)
    load_device, offload_device = mm.get_torch_device(), mm.unet_offload_device()
    # reading in place on the CPU needs one set of block buffers and no ring; the ring way needs two sets
    # (one computes while the helper fills the other) and the ring itself
    reader = stream.reader_for(load_device)
    buffers = compute_block_bytes * (len(plan["resident"]) + reader.buffer_sets)
    held = mm.module_size(model) + buffers + reader.ring_bytes()
    patcher = patcher_class()(model, load_device=load_device, offload_device=offload_device, size=held)
    if not mm.is_device_cpu(offload_device):
        model.to(offload_device)
    _load_outside_blocks(model, config, small, stream, path)
    _log_reading(path, stream, reader, plan, len(specs), dtype)
    return patcher


def _outside_blocks(path: Path, header: dict, rest: list[str]) -> tuple[dict, object]:
    """({name: tensor} of everything outside the blocks, read now; the GGUF dequantizer or None)."""
    tensors = header["tensors"]
    if header.get("gguf"):
        dequantize = gguf_dequantizer() if any(is_quantized(tensors[n]) for n in tensors) else None
        return {n: read_gguf_tensor(path, tensors[n], dequantize) for n in rest}, dequantize
    import safetensors

    with safetensors.safe_open(str(path), framework="pt", device="cpu") as f:
        return {n: f.get_tensor(n) for n in rest}, None


def _shape_only(small: dict, blocks: dict, tensors: dict) -> dict:
    """The state dict ComfyUI detects and builds from: the small tensors, the block tensors on `meta`."""
    import torch

    sd = dict(small)
    for names in blocks.values():
        for n in names:
            # a GGUF block type stands for the bf16 weights it was made from (what ComfyUI picks dtypes by)
            like = torch.bfloat16 if is_quantized(tensors[n]) else _dtype(tensors[n]["dtype"])
            sd[n] = torch.empty(tensors[n]["shape"], dtype=like, device="meta")
    return sd


def _h3_config(path: Path, sd: dict, metadata, weight_dtype: str):
    """ComfyUI's model config for the file, its inference dtype set as UNETLoader sets it; (config, dtype)."""
    import comfy.model_detection
    import comfy.model_management as mm
    import comfy.supported_models
    import comfy.utils

    options = model_options_for(weight_dtype)
    config = comfy.model_detection.model_config_from_unet(sd, "", metadata=metadata)
    if config is None or not isinstance(config, comfy.supported_models.MiniMaxH3):
        raise StreamError(f"{path.name} is not a MiniMax H3 DiT (ComfyUI detects it as "
                          f"{type(config).__name__ if config else 'nothing it knows'}); h3kit's streamed loader "
                          "streams H3 only: use ComfyUI's Load Diffusion Model for it.")
    load_device = mm.get_torch_device()
    dtype = options.get("dtype")
    if dtype is None:
        dtype = mm.unet_dtype(model_params=comfy.utils.calculate_parameters(sd),
                              supported_dtypes=list(config.supported_inference_dtypes),
                              weight_dtype=comfy.utils.weight_dtype(sd))
    manual_cast = mm.unet_manual_cast(dtype, load_device, config.supported_inference_dtypes)
    try:
        config.set_inference_dtype(dtype, manual_cast, device=load_device)
    except TypeError:  # releases before the device argument
        config.set_inference_dtype(dtype, manual_cast)
    if options.get("fp8_optimizations"):
        config.optimizations["fp8"] = True
    return config, dtype


def _hook_blocks(model, stream: BlockStream) -> None:
    for b, block in enumerate(model.diffusion_model.blocks):
        block.register_forward_pre_hook(lambda m, args, b=b: stream.before(b, args))
        block.register_forward_hook(lambda m, args, out, b=b: stream.after(b))
    model.diffusion_model.register_forward_pre_hook(lambda m, args: stream.model_call(args))


def _load_outside_blocks(model, config, small: dict, stream: BlockStream, path: Path) -> None:
    missing, unexpected = model.diffusion_model.load_state_dict(config.process_unet_state_dict(small), strict=False)
    missing = [k for k in missing if k not in {s.key.split(".", 1)[1] for s in stream.keys_specs()}]
    if missing:
        LOG.warning("h3kit streamed loader: %s lacks %s", path.name, ", ".join(missing[:8]))
    if unexpected:
        LOG.info("h3kit streamed loader: left over keys in %s: %s", path.name, ", ".join(unexpected[:8]))


def _log_reading(path: Path, stream: BlockStream, reader, plan: dict, blocks: int, dtype) -> None:
    streamed, resident = blocks - len(plan["resident"]), len(plan["resident"])
    if reader is stream.uncached:
        LOG.info("h3kit streamed loader: %s, %d blocks read past the page cache in %d-byte reads (ring %d, "
                 "prefetch %d) and widened on the CPU, %d resident, compute dtype %s", path.name, streamed,
                 plan["read_size"], plan["depth"], plan["prefetch_blocks"], resident, dtype)
    elif reader is stream.direct:
        LOG.info("h3kit streamed loader: %s, %d blocks read in place on the CPU (read-ahead %d blocks), "
                 "%d resident, compute dtype %s", path.name, streamed, plan["prefetch_blocks"], resident, dtype)
    else:
        LOG.info("h3kit streamed loader: %s, %d blocks streamed in %d-byte reads, ring %d x %d, prefetch %d, "
                 "%d resident, compute dtype %s", path.name, streamed, plan["read_size"], plan["depth"],
                 plan["read_size"], plan["prefetch_blocks"], resident, dtype)


def _strip_blocks(dm, blocks: dict, tensors: dict, path: Path):
    """Specs for every block parameter, with the parameter replaced by an empty placeholder."""
    if len(dm.blocks) != len(blocks):
        raise StreamError(f"{path.name} has {len(blocks)} blocks but ComfyUI built {len(dm.blocks)}; the file's "
                          "block numbering has gaps: re-download it.")
    specs: dict[int, list[_Spec]] = {}
    block_bytes = 0
    for b, names in blocks.items():
        block = dm.blocks[b]
        params = dict(block.named_parameters())
        file_keys = {n[len(f"blocks.{b}."):] for n in names}
        if set(params) != file_keys:
            lacking = sorted(file_keys - set(params)) or sorted(set(params) - file_keys)
            raise StreamError(f"block {b} of {path.name} does not match the model ComfyUI built ({lacking[0]}); "
                              "if this ComfyUI streams weights itself (dynamic VRAM), start it with "
                              "--disable-dynamic-vram to use h3kit's streamer, or use Load Diffusion Model.")
        range_start = range_starts(names, tensors)
        out = []
        total = 0
        for n in names:
            rel = n[len(f"blocks.{b}."):]
            param = params[rel]
            if list(param.shape) != tensors[n]["shape"]:
                raise StreamError(f"{n} in {path.name} has shape {tensors[n]['shape']} but the model wants "
                                  f"{list(param.shape)}; re-download the file.")
            owner, _, pname = rel.rpartition(".")
            module = block.get_submodule(owner) if owner else block
            out.append(_Spec(b, f"diffusion_model.{n}", module, pname, param, tensors[n], range_start[n]))
            total += param.numel() * param.element_size()
            out[-1].clear()
        specs[b] = out
        block_bytes = max(block_bytes, total)
    return specs, block_bytes


def gguf_dequantizer():
    """(bytes, ggml type id, shape, dtype) -> tensor, through the installed ComfyUI-GGUF's torch dequantize."""
    from ..h3kit_common.gguf_load import GGUFError, gguf_pack

    try:
        pack = gguf_pack()
    except GGUFError as exc:
        raise StreamError(str(exc)) from exc
    import torch
    kinds = pack.gguf.GGMLQuantizationType
    arithmetic = (torch.float32, torch.float16, torch.bfloat16)

    def dequantize(raw, type_id, shape, dtype):
        # fp8 buffers (weight_dtype fp8_*) get the values cast, never computed in fp8
        work = dtype if dtype in arithmetic else torch.float32
        return pack.dequant.dequantize(raw, kinds(type_id), shape, dtype=work).to(dtype)

    return dequantize


def read_gguf_tensor(path: Path, entry: dict, dequantize):
    """One tensor of a GGUF file as a plain torch tensor (fp32 when it was quantized)."""
    import torch
    with open(path, "rb") as f:
        f.seek(entry["start"])
        raw = bytearray(f.read(entry["end"] - entry["start"]))
    if len(raw) != entry["end"] - entry["start"]:
        raise StreamError(f"{path.name} is cut short (a tensor ends past the end of the file); re-download it.")
    data = torch.frombuffer(raw, dtype=torch.uint8)
    if is_quantized(entry):
        return dequantize(data, entry["type_id"], tuple(entry["shape"]), torch.float32)
    return data.view(_dtype(entry["dtype"])).reshape(entry["shape"]).clone()
