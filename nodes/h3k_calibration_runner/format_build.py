"""One full-width H3 layer in one weight format, written and loaded the way ComfyUI does it.

Quantized safetensors: ComfyUI's own quantizers (`QuantizedTensor.from_float`
with the layout `comfy.quant_ops.QUANT_ALGOS` names) write the weight into a
`mixed_precision_ops` Linear, whose `state_dict` is ComfyUI's writer
(`ops._quantized_weight_state_dict`: the tensors plus the per-layer
`comfy_quant` JSON). Quantizing a 38-million-value matrix with the nvfp4 or
w4a8 quantizer takes 10-30 s on two cores, so the quantizer runs on the first
SLAB rows and the rows are repeated to full height: every one of these
layouts scales rows independently, so the repeated tensor is exactly what the
quantizer writes for a weight whose rows repeat (checked in the tests).

GGUF: gguf-py's quantizer where it has one (q8_0, q5_0); for the k-quants it
only dequantizes, so the blocks are random bytes with finite fp16 scales,
which is a valid block of that type. They load as ComfyUI-GGUF's loader
hands them over (`GGMLTensor` with the type and shape) into its `GGMLOps`.

torch, comfy and gguf are imported inside the functions (the package imports
only the standard library at import time).
"""

from __future__ import annotations

import importlib
import importlib.util
import math
import sys
from pathlib import Path

SLAB = 256  # rows quantized for real; a multiple of 128 keeps swizzled block scales whole

# format -> (QUANT_ALGOS key, layout, from_float kwargs); "bf16" is the plain file.
SAFETENSORS = {
    "fp8_scaled": ("float8_e4m3fn", "TensorCoreFP8E4M3Layout", {"scale": "recalculate"}),
    "int8_convrot": ("int8_tensorwise", "TensorWiseINT8Layout", {"per_channel": True, "convrot": True}),
    "nvfp4": ("nvfp4", "TensorCoreNVFP4Layout", {}),
    "nvfp4_awq": ("nvfp4", "TensorCoreNVFP4Layout", {}),
    "w4a8": ("asym_w4a8_int8", "AsymW4A8Int8Layout", {}),
}
GGUF = {"q8_0": "Q8_0", "q6_k": "Q6_K", "q5_0": "Q5_0", "q4_k": "Q4_K", "q3_k": "Q3_K", "q2_k": "Q2_K"}
# Byte offsets of the fp16 scales inside one k-quant block (ggml's block_q*_K structs, gguf-py's split order),
# and the largest |sub-block scale x quant| a random block can reach, so d keeps the weights at a trained size.
K_QUANT_SCALES = {"Q2_K": ((80, 82), 15 * 3), "Q3_K": ((108,), 32 * 4), "Q4_K": ((0, 2), 63 * 15),
                  "Q6_K": ((208,), 128 * 32)}
FORMATS = ("bf16", *SAFETENSORS, *GGUF)

# One layer per part at the real width: the attention output projection (in: heads x head_dim, out: hidden).
# DiT: comfy/ldm/minimax/model.py Attention.out_proj (56 x 128 -> 5376); text encoder:
# comfy/text_encoders/llama.py Qwen3VL_32BConfig o_proj (64 x 128 -> 5120).
LAYERS = {
    "dit": {"key": "blocks.0.attn.out_proj", "in": 56 * 128, "out": 5376, "norm": "blocks.0.norm1.weight"},
    "text_encoder": {"key": "model.layers.0.self_attn.o_proj", "in": 64 * 128, "out": 5120,
                     "norm": "model.layers.0.input_layernorm.weight"},
}
H3_PARAMS = 33_000_000_000  # what ComfyUI sizes the DiT's dtype choice by (the full model, not this layer)


class NotHere(Exception):
    """This format cannot be built in this ComfyUI (its quantizer or loader is missing): status skipped."""


def random_rows(torch, rows: int, cols: int, seed: int):
    """Small, non-constant float32 values of a trained layer's size (about 1/sqrt(fan_in))."""
    gen = torch.Generator().manual_seed(seed)
    return (torch.rand(rows, cols, generator=gen) * 2.0 - 1.0) * (0.5 / math.sqrt(cols))


def repeat_rows(tensor, slab: int, rows: int):
    """`tensor` with its first dimension repeated from `slab` to `rows` (other shapes unchanged)."""
    if tensor.ndim == 0 or tensor.shape[0] != slab:
        return tensor
    return tensor.repeat(rows // slab, *([1] * (tensor.ndim - 1)))


def safetensors_state(env, part: str, fmt: str) -> dict:
    """The layer's state dict as a file in `fmt` holds it (ComfyUI's writer), plus one norm weight."""
    torch = env["torch"]
    layer = LAYERS[part]
    rows, cols, key = layer["out"], layer["in"], layer["key"]
    sd = {layer["norm"]: torch.ones(layer["out"], dtype=torch.bfloat16)}
    slab = random_rows(torch, SLAB, cols, seed=len(fmt))
    if fmt == "bf16":
        sd[f"{key}.weight"] = repeat_rows(slab.to(torch.bfloat16), SLAB, rows)
        return sd
    try:
        import comfy.quant_ops as quant_ops
    except ImportError as exc:
        raise NotHere(f"this ComfyUI has no comfy.quant_ops ({exc})") from None
    algo, layout, kwargs = SAFETENSORS[fmt]
    if algo not in quant_ops.QUANT_ALGOS or not getattr(quant_ops, "_CK_AVAILABLE", True):
        raise NotHere(f"this ComfyUI has no {algo} quantization (comfy.quant_ops.QUANT_ALGOS, comfy-kitchen)")
    writer = env["ops"].mixed_precision_ops({}, torch.float32).Linear(cols, SLAB, bias=False)
    writer.weight = torch.nn.Parameter(quant_ops.QuantizedTensor.from_float(slab, layout, **kwargs),
                                       requires_grad=False)
    writer.quant_format = algo
    if fmt == "nvfp4_awq":
        # ModelOpt AWQ: a per-input-channel smoothing vector, written next to the weight (pre_quant_scale)
        writer.pre_quant_scale = torch.nn.Parameter(1.0 + 0.1 * torch.rand(cols), requires_grad=False)
    written = writer.state_dict(prefix=f"{key}.")
    for name, tensor in written.items():
        sd[name] = tensor if name.endswith(("comfy_quant", "pre_quant_scale")) else repeat_rows(tensor, SLAB, rows)
    return sd


def gguf_pack(comfyui: str):
    """ComfyUI-GGUF's `ops` and `dequant` modules from this ComfyUI's custom_nodes; NotHere when absent.

    Imported as a package without running its __init__ (that registers the nodes and needs the server's
    folder_paths); the ops and the dequantizer are the code ComfyUI-GGUF's loaders run."""
    nodes = Path(comfyui) / "custom_nodes"
    found = sorted(d for d in nodes.iterdir() if d.is_dir() and "gguf" in d.name.lower()
                   and (d / "ops.py").is_file() and (d / "dequant.py").is_file()) if nodes.is_dir() else []
    if not found:
        raise NotHere(f"ComfyUI-GGUF is not installed in {nodes} (the GGUF loaders and their dequantizing ops)")
    try:
        import gguf  # noqa: F401  (the pack needs gguf-py)
    except ImportError:
        raise NotHere("gguf-py is not importable in ComfyUI's Python (ComfyUI-GGUF's requirement)") from None
    name = "h3k_probe_gguf_pack"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, found[0] / "__init__.py",
                                                      submodule_search_locations=[str(found[0])])
        sys.modules[name] = importlib.util.module_from_spec(spec)
    return importlib.import_module(f"{name}.ops"), found[0]


def gguf_rows(torch, qtype, rows: int, cols: int, seed: int):
    """Quantized rows of one GGUF type as uint8 [rows, bytes per row]: gguf-py's quantizer, else random blocks."""
    import gguf
    import numpy as np

    block, size = gguf.GGML_QUANT_SIZES[qtype]
    slab = random_rows(torch, SLAB, cols, seed)
    try:
        raw = torch.from_numpy(np.ascontiguousarray(gguf.quants.quantize(slab.numpy(), qtype)))
    except NotImplementedError:
        gen = torch.Generator().manual_seed(seed)
        blocks = torch.randint(0, 256, (SLAB, cols // block, size), generator=gen, dtype=torch.uint8)
        offsets, span = K_QUANT_SCALES[qtype.name]
        d = torch.tensor([2.0 / (math.sqrt(cols) * span)], dtype=torch.float16).view(torch.uint8)
        for offset in offsets:
            blocks[:, :, offset:offset + 2] = d
        raw = blocks.reshape(SLAB, -1)
    return repeat_rows(raw, SLAB, rows)


def gguf_state(env, part: str, fmt: str, pack_ops) -> dict:
    """The layer as ComfyUI-GGUF's gguf_sd_loader hands it over: GGMLTensor(raw bytes, type, shape)."""
    import gguf

    torch = env["torch"]
    layer = LAYERS[part]
    qtype = getattr(gguf.GGMLQuantizationType, GGUF[fmt])
    raw = gguf_rows(torch, qtype, layer["out"], layer["in"], seed=len(fmt))
    weight = pack_ops.GGMLTensor(raw, tensor_type=qtype, tensor_shape=torch.Size((layer["out"], layer["in"])))
    norm = torch.ones(layer["out"], dtype=torch.float32)
    return {f"{layer['key']}.weight": weight,
            layer["norm"]: pack_ops.GGMLTensor(norm, tensor_type=gguf.GGMLQuantizationType.F32,
                                               tensor_shape=norm.shape)}


def placement(env, part: str, sd: dict, pack_ops=None) -> dict:
    """Where and how ComfyUI runs this part from `sd`: {ops, weight_dtype, compute_dtype, device}.

    DiT: comfy/sd.py load_diffusion_model_state_dict (unet_dtype, unet_manual_cast, pick_operations with the
    detected layer quantization; ComfyUI-GGUF passes its GGMLOps as custom_operations). Text encoder:
    comfy/sd.py CLIP and sd1_clip (text_encoder_device, the file's norm dtype via llama_detect, MixedPrecisionOps
    with full_precision_mm for quantized files, a dtype the device cannot cast sends it to the offload device;
    it computes in float32)."""
    torch, mm, ops = env["torch"], env["mm"], env["ops"]
    import comfy.utils

    quant = comfy.utils.detect_layer_quantization(sd, "")
    if part == "dit":
        load = mm.get_torch_device()
        supported = [torch.bfloat16, torch.float32]  # comfy/supported_models.py MiniMaxH3.supported_inference_dtypes
        weight_dtype = None if (quant or pack_ops) else comfy.utils.weight_dtype(sd)
        unet = mm.unet_dtype(model_params=H3_PARAMS, supported_dtypes=supported, weight_dtype=weight_dtype)
        cast = mm.unet_manual_cast(None if (quant or pack_ops) else unet, load, supported)
        if pack_ops is not None:
            chosen = pack_ops.GGMLOps()
        else:
            config = type("H3Config", (), {"quant_config": quant})()
            chosen = ops.pick_operations(unet, cast, load_device=load, model_config=config)
        return {"ops": chosen, "weight_dtype": unet, "compute_dtype": cast or unet, "device": load}
    load, offload = mm.text_encoder_device(), mm.text_encoder_offload_device()
    from comfy.text_encoders.hunyuan_video import llama_detect

    detected = llama_detect(sd)
    dtype = detected.get("dtype_llama") or mm.text_encoder_dtype(load)
    if pack_ops is not None:
        chosen = pack_ops.GGMLOps
    elif detected.get("llama_quantization_metadata") is not None:
        chosen = ops.mixed_precision_ops(detected["llama_quantization_metadata"], dtype, full_precision_mm=True)
    else:
        chosen = ops.manual_cast
    if not mm.supports_cast(load, dtype):
        load = offload
    return {"ops": chosen, "weight_dtype": dtype, "compute_dtype": torch.float32, "device": load}


def build_layer(env, part: str, sd: dict, where: dict):
    """The layer from ComfyUI's chosen ops class, loaded from `sd` (ComfyUI loads with strict=False) and
    moved to the part's device; ValueError naming what did not load."""
    layer = LAYERS[part]
    prefix = f"{layer['key']}."
    module = where["ops"].Linear(layer["in"], layer["out"], bias=False, device=None, dtype=where["weight_dtype"])
    own = {k[len(prefix):]: v for k, v in sd.items() if k.startswith(prefix)}
    missing, _unexpected = module.load_state_dict(own, strict=False)
    if "weight" in missing or getattr(module, "weight", None) is None:
        raise ValueError(f"ComfyUI's {type(module).__name__} did not load {prefix}weight")
    return module.to(where["device"])
