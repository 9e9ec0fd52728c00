"""`python h3k_calibration_runner format-probe --comfyui DIR --out FILE [--progress FILE] [--tokens N] [--budget S]`.

Which weight formats run on this machine's device, measured in ComfyUI's own
Python with ComfyUI's own code: for each part (the DiT, the text encoder) and
each format (`format_build.FORMATS`) one full-width H3 layer is written in
that format, loaded through the ops class ComfyUI picks for that part, moved
to the device ComfyUI runs that part on and called on a few tokens in the
part's compute dtype. Each case ends as `runs`, `fails` (the exception's one
line) or `skipped` (the format cannot be built in this ComfyUI, or the time
budget ran out); each layer is freed before the next. The result is one
`h3kit.format_probe/1` document (h3kit.data.format_evidence reads it),
written atomically to --out.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import time
import traceback

from . import format_build as fb
from .comfy_env import Skip, import_comfy
from .device import torch_device
from .job import Job, JobSettings
from .measure import Progress

SCHEMA = "h3kit.format_probe/1"
PARTS = ("dit", "text_encoder")
TOKENS = 16  # enough rows for every kernel's path; the probe asks "does it run", not "how fast"
BUDGET_S = 60.0


def one_line(exc: BaseException) -> str:
    """The exception as one line: its type and the first line of its message, at most 300 characters."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".rstrip(": ")[:300]


def device_label(env) -> str:
    """The key's device: "cpu", "mps", or "cuda:0 (NVIDIA GeForce RTX 4090)" (the name where torch gives one)."""
    dev, torch = env["device"], env["torch"]
    label = str(dev)
    if dev.type == "cuda" and dev.index is None:
        label = "cuda:0"
    try:
        if dev.type in ("cuda", "xpu"):
            label += f" ({getattr(torch, dev.type).get_device_name(dev.index or 0)})"
    except Exception:
        pass
    return label


def backend_of(env) -> str:
    dev, torch = env["device"], env["torch"]
    if dev.type == "cuda":
        return "rocm" if getattr(torch.version, "hip", None) else "cuda"
    return dev.type if dev.type in ("mps", "xpu") else "cpu"


def _sync(torch, device) -> None:
    mod = getattr(torch, device.type, None)
    if device.type in ("cuda", "xpu", "mps") and hasattr(mod, "synchronize"):
        mod.synchronize()


def probe_case(env, part: str, fmt: str, tokens: int, pack) -> dict:
    """One format on one part: build, load, move, call; the result row (never raises)."""
    torch = env["torch"]
    started = time.perf_counter()
    where = None
    try:
        if fmt in fb.GGUF:
            if isinstance(pack, Exception):
                raise pack
            sd = fb.gguf_state(env, part, fmt, pack)
            where = fb.placement(env, part, sd, pack_ops=pack)
        else:
            sd = fb.safetensors_state(env, part, fmt)
            where = fb.placement(env, part, sd)
        module = fb.build_layer(env, part, sd, where)
        del sd
        # ComfyUI computes with the weight dequantized (GGUF; a format its ops disable on this device, e.g. fp8 and
        # nvfp4 off recent NVIDIA, where it says "emulated"; the text encoder's full_precision_mm) or quantized
        dequantized = fmt in fb.GGUF or (fmt != "bf16" and bool(getattr(module, "_full_precision_mm", True)))
        x = torch.randn(tokens, fb.LAYERS[part]["in"], generator=torch.Generator().manual_seed(1)) * 0.5
        x = x.to(device=where["device"], dtype=where["compute_dtype"])
        t_forward = time.perf_counter()
        with torch.inference_mode():
            y = module(x)
            _sync(torch, where["device"])
        forward_s = time.perf_counter() - t_forward
        if tuple(y.shape) != (tokens, fb.LAYERS[part]["out"]):
            raise ValueError(f"the layer returned shape {tuple(y.shape)}, expected {(tokens, fb.LAYERS[part]['out'])}")
        if not bool(torch.isfinite(y.float()).all()):
            raise ValueError("the layer's output is not finite (NaN or inf)")
        row = {"status": "runs", "error": None, "forward_seconds": round(forward_s, 4),
               "out_dtype": str(y.dtype).replace("torch.", ""), "dequantized": dequantized}
        del module, x, y
    except fb.NotHere as why:
        row = {"status": "skipped", "error": str(why)}
    except Exception as exc:  # the format does not run here: that is the measurement
        row = {"status": "fails", "error": one_line(exc), "traceback": traceback.format_exc(limit=3)[-1500:]}
    finally:
        gc.collect()
        empty = getattr(getattr(torch, env["device"].type, None), "empty_cache", None)
        if callable(empty) and env["device"].type != "cpu":
            empty()
    row["seconds"] = round(time.perf_counter() - started, 4)
    row["device"] = str(where["device"]) if where else None
    row["dtype"] = str(where["compute_dtype"]).replace("torch.", "") if where else None
    row["layer"] = fb.LAYERS[part]["key"]
    row["shape"] = [fb.LAYERS[part]["out"], fb.LAYERS[part]["in"]]
    return row


def run_probe(comfyui: str, flags: list[str], tokens: int, budget: float, formats, progress: Progress) -> dict:
    """The whole table as an h3kit.format_probe/1 document; raises Skip when ComfyUI cannot be imported."""
    started = time.perf_counter()
    # no accelerator: ComfyUI only starts with --cpu, as h3kit's launcher runs it
    job = Job(settings=JobSettings(comfyui_args=tuple(str(f) for f in flags)),
              h3_device="cpu" if torch_device()[1] is None else None)
    try:
        env = import_comfy(comfyui, job)
    except Skip:
        raise
    except Exception as exc:  # ComfyUI's own import failed (e.g. no driver for its torch build)
        raise Skip(f"ComfyUI at {comfyui} did not import ({one_line(exc)})") from None
    try:
        pack, pack_dir = fb.gguf_pack(comfyui)
    except fb.NotHere as why:
        pack, pack_dir = why, None
    except Exception as exc:
        pack, pack_dir = fb.NotHere(f"ComfyUI-GGUF's ops did not import ({one_line(exc)})"), None
    parts: dict = {p: {} for p in PARTS}
    cases = [(p, f) for p in PARTS for f in formats]
    for i, (part, fmt) in enumerate(cases):
        spent = time.perf_counter() - started
        if spent > budget:
            parts[part][fmt] = {"status": "skipped", "seconds": 0.0, "device": None, "dtype": None,
                                "error": f"the probe's time budget ({budget:g} s) ran out before this format"}
        else:
            parts[part][fmt] = probe_case(env, part, fmt, tokens, pack)
        progress("format probe", i + 1, len(cases))
    torch = env["torch"]
    return {"schema": SCHEMA,
            "key": {"comfyui_version": env["version"], "torch": torch.__version__, "device": device_label(env)},
            "backend": backend_of(env), "parts": parts, "seconds": round(time.perf_counter() - started, 3),
            "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "tokens": tokens, "import_seconds": round(env["import_s"], 3), "flags_applied": env["flags_applied"],
            "gguf_pack": str(pack_dir) if pack_dir else None, "python": sys.executable,
            "threads": torch.get_num_threads()}


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="h3k_calibration_runner format-probe",
                                 description="which weight formats run on this device, in ComfyUI's own ops")
    ap.add_argument("--comfyui", required=True, help="ComfyUI's folder (this Python being ComfyUI's)")
    ap.add_argument("--out", required=True, help="where to write the h3kit.format_probe/1 JSON")
    ap.add_argument("--progress", help="append progress lines here")
    ap.add_argument("--tokens", type=int, default=TOKENS)
    ap.add_argument("--budget", type=float, default=BUDGET_S, help="seconds; formats past it are skipped")
    ap.add_argument("--formats", default=",".join(fb.FORMATS), help="comma-separated subset of the formats")
    ap.add_argument("--comfyui-args", default="[]", help="JSON list of ComfyUI flags (memory, dtype, device)")
    args = ap.parse_args(argv)
    formats = [f for f in args.formats.split(",") if f in fb.FORMATS]
    try:
        doc = run_probe(args.comfyui, json.loads(args.comfyui_args), args.tokens, args.budget, formats,
                        Progress(args.progress))
        code = 0
    except Skip as why:
        doc, code = {"schema": SCHEMA, "status": "skipped", "reason": str(why)}, 2
    tmp = args.out + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=2, default=str)
    os.replace(tmp, args.out)
    return code
