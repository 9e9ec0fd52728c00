"""Importing ComfyUI inside the runner with the plan's flags, and what the H3 measurement shares.

ComfyUI reads its flags once, when `comfy.model_management` is imported
(device, VRAM state, attention backend, dtypes), so the flags have to be on
`comfy.cli_args.args` before that import. The plan's `comfyui_args` are
parsed with ComfyUI's own parser and only the flags that shape memory,
dtypes, devices and attention are copied; server, path and UI flags are
irrelevant to a measurement and stay at their defaults.
"""

from __future__ import annotations

import itertools
import math
import re
import sys
import time
from pathlib import Path

from .job import Job

MIN_VERSION = (0, 30, 0)  # the catalog's model.comfyui_min_version (H3 arrived in 0.30.0)
# ComfyUI flags that change how the model is held and computed (comfy/cli_args.py dests).
MEMORY_FLAGS = frozenset("""
cuda_device default_device cuda_malloc disable_cuda_malloc force_fp32 force_fp16 fp32_unet fp64_unet bf16_unet
fp16_unet fp8_e4m3fn_unet fp8_e5m2_unet fp8_e8m0fnu_unet fp16_vae fp32_vae bf16_vae cpu_vae fp8_e4m3fn_text_enc
fp8_e5m2_text_enc fp16_text_enc fp32_text_enc bf16_text_enc fp16_intermediates force_channels_last directml
oneapi_device_selector supports_fp8_compute enable_triton_backend disable_triton_backend high_ram
use_split_cross_attention use_quad_cross_attention use_pytorch_cross_attention use_sage_attention
use_flash_attention use_ck_attention disable_xformers force_upcast_attention dont_upcast_attention gpu_only
highvram lowvram novram cpu reserve_vram vram_headroom async_offload disable_async_offload disable_dynamic_vram
enable_dynamic_vram fast_disk disable_cuda_graphs force_non_blocking disable_smart_memory deterministic fast
disable_pinned_memory mmap_torch_files disable_mmap
""".split())
ATTENTION_NAMES = {"attention_pytorch": "pytorch sdpa", "attention_sub_quad": "sub-quadratic (ComfyUI)",
                   "attention_split": "split (ComfyUI)", "attention_basic": "basic (ComfyUI)",
                   "attention_xformers": "xformers", "attention_sage": "sage", "attention_flash": "flash-attn",
                   "attention_comfy_kitchen_int8": "comfy-kitchen int8"}


class Skip(Exception):
    """This measurement cannot run here; the message says why (it becomes `reason`)."""


def comfyui_version(comfyui: Path) -> str | None:
    try:
        text = (comfyui / "comfyui_version.py").read_text(encoding="utf-8")
    except OSError:
        return None
    m = re.search(r"__version__\s*=\s*['\"]([^'\"]+)", text)
    return m.group(1) if m else None


def version_tuple(v: str) -> tuple:
    return tuple(int(p) for p in re.findall(r"\d+", v)[:3])


def apply_flags(args, parser, flags: list[str], device: str | None) -> dict:
    """Copy the memory-relevant flags of `flags` onto ComfyUI's `args`; returns {dest: value} set."""
    applied = {}
    try:
        parsed, _unknown = parser.parse_known_args([str(f) for f in flags])
    except SystemExit:  # argparse exits on a bad value; the measurement goes on without the flags
        parsed = None
    defaults = parser.parse_known_args([])[0]
    if parsed is not None:
        for dest in MEMORY_FLAGS:
            if hasattr(parsed, dest) and getattr(parsed, dest) != getattr(defaults, dest, None):
                setattr(args, dest, getattr(parsed, dest))
                applied[dest] = getattr(parsed, dest)
    if device == "cpu":
        args.cpu = True
        applied["cpu"] = True
    return applied


def import_comfy(comfyui: str | None, job: Job):
    """Import torch and ComfyUI from `comfyui` with the plan's flags; Skip when that is not possible."""
    if not comfyui:
        raise Skip("no ComfyUI folder was given (--comfyui)")
    root = Path(comfyui)
    if not (root / "comfy" / "model_management.py").is_file():
        raise Skip(f"{root} is not a ComfyUI folder (no comfy/model_management.py)")
    version = comfyui_version(root)
    if version is None or version_tuple(version) < MIN_VERSION:
        raise Skip(f"ComfyUI {version or 'of unknown version'} at {root}; the H3 measurement needs ComfyUI >= 0.30")
    try:
        import torch
    except Exception as exc:
        raise Skip(f"torch is not importable in this Python ({type(exc).__name__}: {exc})") from None
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    device = job.device()
    started = time.perf_counter()
    try:
        from comfy.cli_args import args, parser

        applied = apply_flags(args, parser, list(job.settings.comfyui_args), device)
        import comfy.ldm.minimax.model as h3
        import comfy.model_base
        import comfy.model_management as mm
        import comfy.model_patcher
        import comfy.ops
        import comfy.supported_models
        import comfy.utils
    except ImportError as exc:
        raise Skip(f"ComfyUI {version} at {root} cannot import its H3 model ({exc})") from None
    env = {"torch": torch, "mm": mm, "h3": h3, "model_base": comfy.model_base, "supported": comfy.supported_models,
           "utils": comfy.utils, "patcher": comfy.model_patcher, "ops": comfy.ops, "version": version,
           "flags_applied": applied, "import_s": time.perf_counter() - started}
    env["device"] = mm.get_torch_device()
    env["device_kind"] = env["device"].type
    env["attention"] = attention_name(h3.optimized_attention)
    return env


def attention_name(fn) -> str:
    name = getattr(fn, "__name__", str(fn))
    return ATTENTION_NAMES.get(name, name)


def sync(env) -> None:
    torch, kind = env["torch"], env["device_kind"]
    if kind in ("cuda", "xpu", "mps"):
        getattr(torch, kind).synchronize()


def reset_device_peak(env) -> None:
    torch, kind = env["torch"], env["device_kind"]
    mod = getattr(torch, kind, None)
    if kind in ("cuda", "xpu") and hasattr(mod, "reset_peak_memory_stats"):
        mod.reset_peak_memory_stats()


def device_peak(env) -> int | None:
    torch, kind = env["torch"], env["device_kind"]
    if kind in ("cuda", "xpu"):
        return int(getattr(torch, kind).max_memory_allocated())
    if kind == "mps":
        return int(torch.mps.driver_allocated_memory())
    return None


def device_free(env) -> int | None:
    try:
        return int(env["mm"].get_free_memory(env["device"]))
    except Exception:
        return None


def fill_random_(module, torch, seed: int = 0) -> int:
    """Give every parameter and buffer cheap, small, non-constant values in place; returns the bytes written.

    A random chunk is drawn once and tiled across each tensor (a copy runs at
    memory speed, drawing billions of normals would not). Weights get about
    1/sqrt(fan_in) so activations stay finite through the blocks; norm
    weights 1; RoPE inverse frequencies their usual geometric series.
    """
    gen = torch.Generator().manual_seed(seed)
    base = torch.rand(1 << 22, generator=gen) * 2.0 - 1.0
    written = 0
    with torch.no_grad():
        for name, t in itertools.chain(module.named_parameters(), module.named_buffers()):
            flat = t.data.view(-1)
            n = flat.numel()
            written += n * t.element_size()
            if name.endswith("inv_freq"):
                flat.copy_(1.0 / (10000.0 ** (torch.arange(n, dtype=torch.float32) / max(n, 1))))
                continue
            if t.ndim == 1 and ("norm" in name or "scale" in name):
                flat.fill_(1.0)
                continue
            fan_in = t.shape[-1] if t.ndim >= 2 else 1
            chunk = (base * (0.5 / math.sqrt(fan_in) if t.ndim >= 2 else 0.02)).to(device=t.device, dtype=t.dtype)
            for i in range(0, n, chunk.numel()):
                m = min(chunk.numel(), n - i)
                flat[i:i + m].copy_(chunk[:m])
    return written


def param_bytes(module) -> int:
    return sum(p.numel() * p.element_size() for p in module.parameters())


class ModuleClock:
    """Forward hooks on modules (DiT blocks, VAE or text-encoder layers): each one's wall time inside a real
    call, the device synced around it so the time is the module's own, not the queue's."""

    def __init__(self, env, modules):
        self.env, self.times, self._t0 = env, [], 0.0
        self.handles = []
        for m in {id(m): m for m in modules}.values():  # a module listed twice fires its hooks twice already
            self.handles.append(m.register_forward_pre_hook(self._pre))
            self.handles.append(m.register_forward_hook(self._post))

    def _pre(self, *_):
        sync(self.env)
        self._t0 = time.perf_counter()

    def _post(self, *_):
        sync(self.env)
        self.times.append(time.perf_counter() - self._t0)

    def remove(self):
        for h in self.handles:
            h.remove()
