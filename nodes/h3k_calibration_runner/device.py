"""The torch device: matmul rates, host-to-device copies, free memory, a tile sweep."""

from __future__ import annotations

import math
import time

from .job import Job
from .measure import Progress


def torch_device():
    """(torch, device name, backend) when torch sees a GPU, else (torch|None, None, why not)."""
    try:
        import torch
    except Exception as exc:
        return None, None, f"torch is not importable in this Python ({type(exc).__name__})"
    if torch.cuda.is_available():
        backend = "rocm" if getattr(torch.version, "hip", None) else "cuda"
        return torch, "cuda", backend
    if getattr(torch, "xpu", None) is not None and torch.xpu.is_available():
        return torch, "xpu", "xpu"
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        return torch, "mps", "mps"
    return torch, None, f"torch {torch.__version__} sees no cuda, mps or xpu device"


def _sync(torch, dev: str) -> None:
    getattr(torch, dev).synchronize()


def _device_timed(torch, dev: str, fn, repeats: int) -> float:
    fn()
    _sync(torch, dev)
    t0 = time.perf_counter()
    for _ in range(repeats):
        fn()
    _sync(torch, dev)
    return (time.perf_counter() - t0) / repeats


def _free_memory(torch, dev: str) -> tuple[int | None, int | None]:
    if dev in ("cuda", "xpu") and hasattr(getattr(torch, dev), "mem_get_info"):
        free, total = getattr(torch, dev).mem_get_info()
        return int(free), int(total)
    if dev == "mps":
        total = torch.mps.recommended_max_memory()
        return int(total - torch.mps.driver_allocated_memory()), int(total)
    return None, None


def _reset_peak(torch, dev: str) -> None:
    mod = getattr(torch, dev)
    if hasattr(mod, "reset_peak_memory_stats"):
        mod.reset_peak_memory_stats()
    if hasattr(mod, "empty_cache"):
        mod.empty_cache()


def _peak(torch, dev: str) -> int | None:
    mod = getattr(torch, dev)
    if hasattr(mod, "max_memory_allocated"):
        return int(mod.max_memory_allocated())
    if dev == "mps":
        return int(torch.mps.driver_allocated_memory())
    return None


def decode_shaped(torch, dev: str, tile: int, frames: int, dtype):
    """The last stages of a video VAE decoder at one pixel tile: 3x3 convs at 512/256/128 channels
    on 1/4, 1/2 and full resolution with nearest-neighbour upsampling in between, per frame."""
    nn = torch.nn.functional
    x = torch.randn(frames, 512, tile // 4, tile // 4, device=dev, dtype=dtype)
    for ch_in, ch_out in ((512, 256), (256, 128), (128, 128)):
        w = torch.randn(ch_out, ch_in, 3, 3, device=dev, dtype=dtype) / math.sqrt(9 * ch_in)
        x = nn.silu(nn.conv2d(x, w, padding=1))
        if x.shape[-1] < tile:
            x = nn.interpolate(x, scale_factor=2, mode="nearest")
    return nn.conv2d(x, torch.randn(3, 128, 3, 3, device=dev, dtype=dtype) / 34.0, padding=1)


def measure_device(job: Job, quick: bool, progress: Progress) -> tuple[dict, list[dict]]:
    torch, dev, backend = torch_device()
    if dev is None:
        return {"status": "skipped", "reason": backend, "torch": getattr(torch, "__version__", None)}, []
    out = {"status": "measured", "backend": backend, "torch": torch.__version__}
    try:
        out["name"] = torch.cuda.get_device_name(0) if dev == "cuda" else dev
    except Exception:
        out["name"] = dev
    free, total = _free_memory(torch, dev)
    out["free_bytes"], out["total_bytes"] = free, total
    n = job.device_matmul_size or (2048 if quick else 4096)
    for label, dtype in (("bf16", torch.bfloat16), ("fp16", torch.float16)):
        try:
            a = torch.randn(n, n, device=dev, dtype=dtype)
            b = torch.randn(n, n, device=dev, dtype=dtype)
            sec = _device_timed(torch, dev, lambda: a @ b, 5 if quick else 20)
            out[f"{label}_tflops"] = 2.0 * n ** 3 / sec / 1e12
        except Exception as exc:
            out[f"{label}_tflops"] = None
            out[f"{label}_error"] = str(exc)[:200]
    progress("device", 1, 3)
    size = job.device_copy_bytes or ((64 if quick else 256) << 20)
    host = torch.empty(size, dtype=torch.uint8)
    try:
        host = host.pin_memory()
        out["h2d_pinned"] = True
    except Exception:
        out["h2d_pinned"] = False
    sec = _device_timed(torch, dev, lambda h=host: h.to(dev, non_blocking=True), 3 if quick else 10)
    out["h2d_gb_per_s"] = size / sec / 1e9
    del host  # free the pinned buffer before the tile sweep
    progress("device", 2, 3)
    tiles = sweep_tiles(torch, dev, job, quick, progress)
    progress("device", 3, 3)
    return out, tiles


def sweep_tiles(torch, dev: str, job: Job, quick: bool, progress: Progress) -> list[dict]:
    """Time and peak memory of the decode-shaped convolutions at each candidate tile (stops at OOM)."""
    budget = job.gpu_budget_bytes
    candidates = job.tile_candidates
    frames = 2 if quick else 4
    dtype = torch.bfloat16 if dev != "mps" else torch.float16
    out = []
    for i, tile in enumerate(candidates):
        _reset_peak(torch, dev)
        try:
            with torch.inference_mode():
                sec = _device_timed(torch, dev, lambda: decode_shaped(torch, dev, tile, frames, dtype), 2 if quick else 3)
            peak = _peak(torch, dev)
            out.append({"tile": tile, "frames": frames, "seconds": sec, "peak_bytes": peak,
                        "within_budget": None if budget is None or peak is None else peak <= budget})
        except Exception as exc:  # out of memory ends the sweep: larger tiles need more
            out.append({"tile": tile, "frames": frames, "seconds": None, "peak_bytes": None,
                        "within_budget": False, "error": str(exc)[:200]})
            break
        finally:
            progress("tile sweep", i + 1, len(candidates))
    return out
