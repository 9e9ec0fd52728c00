"""h3kit calibration runner: measure this machine from inside ComfyUI's Python.

Self-contained on purpose: the standard library at import time, numpy and
torch only inside the functions that measure, never `import h3kit`. It is a
package of the node pack (nodes/), and h3kit runs it with ComfyUI's
interpreter, so the torch measured is the torch ComfyUI
uses:

    python PATH/h3k_calibration_runner --bridge PATH/h3k_native --plan plan.json \
        --out result.json [--lib LIB] [--quick] [--progress FILE] [--comfyui DIR]

`plan.json` is either a bare `h3kit.plan/1` document or h3kit's job
`{"plan": ..., "scaled_dit": {...}, "budget": {...}, "tile_candidates": [...]}`.
The result is one JSON object: `runner`, `native`, `inference`, `device`,
`tiles`, `h3_model`, `skipped`. Each part that cannot run says why in `reason` instead
of stopping the others. Progress goes to --progress as JSON lines
`{"stage", "done", "total"}` for h3kit's progress bars.

What it measures, module by module:
- `native_bench`: the library's self-test; q8_0/q4_0 matvec and matmul (GB/s
  of weights read, GFLOP/s); matmul scaling from 1 thread to all cores;
- `scaled_dit`: a scaled-down H3-shaped DiT (RMSNorm, attention with
  head_dim 128, SwiGLU FFN; the arithmetic is in `dit_ops`) whose random
  weights are written to a temporary safetensors file (`safetensors_io`),
  read back block by block through the native streamer at the plan's
  shard/preload sizes, with linear layers run by the native quantized
  kernels; checked against a plain fp32 forward of the same weights. With
  numpy the rest of the block is numpy; without it (h3kit's own venv) the
  fp32 products go through the library's h3k_matmul_f32 and the norms,
  softmax and SwiGLU are plain Python at a smaller shape (`path` says which);
- `device` (torch sees cuda, mps or xpu): bf16/fp16 matmul TFLOP/s,
  host-to-device GB/s, free memory, a tile sweep of decode-shaped
  convolutions with time and peak memory per tile.

- `h3_model` (with `--comfyui DIR`, in ComfyUI's Python >= 0.31):
  ComfyUI's own H3 transformer at the file's full width and one or two
  blocks deep, timed through `apply_model` at a few token counts plus its
  attention alone, fitted into the plan's timing rates (`fit`, pure), with
  peak RSS / device memory; `h3_parts` times the video VAE decoder and the
  Qwen3-VL text encoder the same way; `comfy_env` imports ComfyUI with the
  plan's memory flags. Result key `h3_model`.

`measure` holds what they share (progress, peak RSS, medians, the page
cache); `_numpy` imports numpy on first use. h3kit's own process imports
this package only for the page-cache helpers its disk probe uses.
"""

from __future__ import annotations

from .measure import drop_page_cache, no_cache

__all__ = ["drop_page_cache", "no_cache"]
