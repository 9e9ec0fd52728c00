"""Run by ComfyUI's Python for the GPU check: H3's text encoder through CLIPLoader's code, then streamed.

    te_probe.py COMFY_DIR DEVICE FILE [PREFETCH_LAYERS]

DEVICE is cpu (ComfyUI as with --cpu) or cuda. Loads the tests' tiny_h3_testnode (ComfyUI builds the real-width
encoder at the file's depth) and h3kit's pack from COMFY_DIR/custom_nodes, encodes a text prompt and an image
prompt with ComfyUI's own load of FILE (comfy.sd.load_clip, as CLIPLoader), unloads it, then loads FILE through
h3kit's streamed text encoder (the way tests/support/comfy_h3/te_stream_probe.py does on the CPU) and encodes
the same prompts. Per loader: load and encode seconds, and the peak of what the device held above the start
(CUDA: the card's used memory, sampled every 20 ms, which counts dynamic VRAM; CPU: the process's RSS). Then
whether the conditionings are equal and their largest relative error. Prints one JSON line.
"""

import importlib.util
import json
import os
import sys
import threading
import time

comfy_dir, device, te_file = sys.argv[1:4]
prefetch = int(sys.argv[4]) if len(sys.argv) > 4 else 1
sys.path.insert(0, comfy_dir)
os.chdir(comfy_dir)
from comfy.cli_args import args  # noqa: E402

args.cpu = device == "cpu"
import torch  # noqa: E402
import comfy.model_management as mm  # noqa: E402
import comfy.sd  # noqa: E402


def _load(name, init):
    spec = importlib.util.spec_from_file_location(name, init, submodule_search_locations=[os.path.dirname(init)])
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


_load("tiny_h3_testnode", os.path.join(comfy_dir, "custom_nodes", "tiny_h3_testnode", "__init__.py"))
_load("h3kpack", os.path.join(comfy_dir, "custom_nodes", "ComfyUI-h3kit", "__init__.py"))
from h3kpack.h3kit_streaming import te_load as ts  # noqa: E402

TE_DIR = os.path.join(comfy_dir, "models", "text_encoders")
IMAGE = torch.rand(1, 64, 64, 3, generator=torch.Generator().manual_seed(0))
PROMPTS = (("a red fox runs through snow, cinematic", []), ("the picture comes alive", [IMAGE]))


class Peak:
    """The peak of what the device holds, sampled in a thread every 20 ms."""

    def __init__(self):
        self.peak, self._stop = self.used(), threading.Event()
        self.start = self.peak
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    @staticmethod
    def used():
        if device == "cuda":
            free, total = torch.cuda.mem_get_info()
            return total - free
        import psutil
        return psutil.Process().memory_info().rss

    def _loop(self):
        while not self._stop.wait(0.02):
            self.peak = max(self.peak, self.used())

    def close(self):
        if device == "cuda":
            torch.cuda.synchronize()
        self._stop.set()
        self._thread.join(1)
        self.peak = max(self.peak, self.used())
        return {"peak_bytes": self.peak, "start_bytes": self.start, "peak_over_start_bytes": self.peak - self.start}


def encode(clip):
    out = []
    for text, images in PROMPTS:
        cond = clip.encode_from_tokens_scheduled(clip.tokenize(text, images=images))
        out.append(cond[0][0].detach().float().cpu())
    return out


def measured(load):
    peak = Peak()
    t0 = time.perf_counter()
    clip = load()
    t1 = time.perf_counter()
    conds = encode(clip)
    t2 = time.perf_counter()
    doc = dict(peak.close(), load_seconds=round(t1 - t0, 3), encode_seconds=round(t2 - t1, 3))
    del clip
    mm.unload_all_models()
    mm.soft_empty_cache()
    return conds, doc


path = os.path.join(TE_DIR, te_file)
stock, stock_doc = measured(lambda: comfy.sd.load_clip([path], clip_type=comfy.sd.CLIPType.MINIMAX))
stats = os.path.join(comfy_dir, "te_probe_stats.json")
streamed, streamed_doc = measured(lambda: ts.load_streamed_text_encoder(
    path, page_cache="use", prefetch_layers=prefetch, stats_path=stats, folder_lookup=lambda n: os.path.join(TE_DIR, n)))
rel = max(float((b - a).norm() / a.norm()) for a, b in zip(stock, streamed))
print(json.dumps({"device": str(mm.get_torch_device()), "stock": stock_doc, "streamed": streamed_doc,
                  "equal": all(torch.equal(a, b) for a, b in zip(stock, streamed)), "max_rel": rel,
                  "stats": json.load(open(stats, encoding="utf-8")) if os.path.isfile(stats) else None}))
