"""A custom node for the GPU check's own ComfyUI copy (copied there as custom_nodes/gpu_check_peak/__init__.py).

From ComfyUI's start a thread samples, every 20 ms, what the device holds: on CUDA the card's used memory
(total - free, torch.cuda.mem_get_info: it counts ComfyUI's dynamic VRAM, whose allocations bypass torch's
allocator, and the CUDA context), elsewhere this process's RSS. GpuCheckPeak, put after the sampler, writes
the peak since the last one (and torch's own peak on CUDA) to output/gpu_check_peak.jsonl and starts a new
window, so each prompt's peak is its own; the first sample is the baseline (ComfyUI with no model).
"""

import json
import os
import threading
import time

import folder_paths
import torch

_LOCK = threading.Lock()
_STATE = {"peak": 0, "baseline": None, "kind": None}


def _used():
    if torch.cuda.is_available():
        free, total = torch.cuda.mem_get_info()
        return "cuda_used_bytes", total - free
    import psutil
    return "rss_bytes", psutil.Process().memory_info().rss


def _loop():
    while True:
        try:
            kind, used = _used()
        except Exception:  # noqa: BLE001 -- a failed sample only leaves a gap
            time.sleep(0.02)
            continue
        with _LOCK:
            _STATE["kind"] = kind
            _STATE["peak"] = max(_STATE["peak"], used)
            if _STATE["baseline"] is None:
                _STATE["baseline"] = used
        time.sleep(0.02)


threading.Thread(target=_loop, daemon=True, name="gpu-check-peak").start()


class GpuCheckPeak:
    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"samples": ("LATENT",), "tag": ("STRING", {"default": "run"})}}

    RETURN_TYPES = ()
    FUNCTION = "record"
    OUTPUT_NODE = True
    CATEGORY = "testing"

    @classmethod
    def IS_CHANGED(cls, **kwargs):
        return float("nan")

    def record(self, samples, tag):
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        time.sleep(0.05)  # one more sample after the last kernel
        with _LOCK:
            row = {"tag": tag, "kind": _STATE["kind"], "peak_bytes": _STATE["peak"],
                   "baseline_bytes": _STATE["baseline"]}
            _STATE["peak"] = 0
        if torch.cuda.is_available():
            row.update(torch_max_allocated_bytes=torch.cuda.max_memory_allocated(),
                       torch_max_reserved_bytes=torch.cuda.max_memory_reserved())
            torch.cuda.reset_peak_memory_stats()
        with open(os.path.join(folder_paths.get_output_directory(), "gpu_check_peak.jsonl"), "a") as f:
            f.write(json.dumps(row) + "\n")
        return {}


NODE_CLASS_MAPPINGS = {"GpuCheckPeak": GpuCheckPeak}
