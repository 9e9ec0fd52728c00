"""The scaled DiT run: weights written, streamed back block by block, checked against fp32."""

from __future__ import annotations

import os
import tempfile
import time

from ._numpy import need_numpy
from .dit_ops import (
    LINEARS,
    NumpyOps,
    PythonOps,
    block_forward,
    linear_shapes,
    python_path_shape,
    reference_forward,
)
from .job import Job
from .measure import PeakSampler, Progress, current_rss, drop_page_cache
from .safetensors_io import write_safetensors


def write_model(nat, cfg: dict, path: str, progress: Progress, weights_of) -> list[dict]:
    """Quantize every block's linears and write the safetensors file; returns each block's byte range."""
    kind = cfg["quantization"]
    tensors = []
    for b in range(cfg["blocks"]):
        w = weights_of(b)
        for name in LINEARS:
            tensors.append((f"blocks.{b}.{name}", "U8", None, bytes(nat.quantize(w[name], kind))))
        for name in ("attn_norm", "ffn_norm"):
            tensors.append((f"blocks.{b}.{name}", "F32", [cfg["hidden"]], memoryview(w[name]).tobytes()))
        progress("writing the scaled model", b + 1, cfg["blocks"])
    tensors = [(n, d, s if s is not None else [len(r)], r) for n, d, s, r in tensors]
    meta = {"format": "h3kit-calibration", "quantization": kind, "hidden": cfg["hidden"], "ffn": cfg["ffn"],
            "blocks": cfg["blocks"]}
    offsets = write_safetensors(path, tensors, meta)
    layout = []
    for b in range(cfg["blocks"]):
        names = [n for n, _, _, _ in tensors if n.startswith(f"blocks.{b}.")]
        start = min(offsets[n][0] for n in names)
        end = max(offsets[n][1] for n in names)
        layout.append({"block": b, "start": start, "end": end,
                       "tensors": {n.split(".", 2)[2]: (offsets[n][0] - start, offsets[n][1] - start) for n in names}})
    return layout


def open_streamer(nat, path: str, shard: int, preload: int):
    """The bridge's Streamer for `path`; the library derives read size and depth from shard and preload."""
    return nat.streamer(path, shard_size_bytes=shard, preload_bytes=preload)


def stream_blocks(st, layout: list[dict]):
    """Yield (block layout, block bytes, seconds waited) in order; ranges are submitted up front."""
    for blk in layout:
        st.submit(blk["start"], blk["end"] - blk["start"])
    for blk in layout:
        need = blk["end"] - blk["start"]
        buf = bytearray(need)
        got = 0
        waited = 0.0
        while got < need:
            t0 = time.perf_counter()
            chunk = st.next()
            waited += time.perf_counter() - t0
            if chunk is None:
                raise RuntimeError(f"the streamer ended {need - got} bytes short of block {blk['block']}")
            offset, mv = chunk  # the view is valid until the next call: copy it out now
            pos = offset - blk["start"]
            buf[pos:pos + len(mv)] = mv
            got += len(mv)
        yield blk, buf, waited


def run_scaled_dit(nat, job: Job, quick: bool, progress: Progress, path: str | None = None) -> dict:
    """Write the scaled model, stream it through the native streamer, check it against fp32.

    `path` is "numpy" or "native+python"; by default numpy when this Python has it.
    """
    return scaled_dit(nat, job, quick, progress, path)[0]


def scaled_dit(nat, job: Job, quick: bool, progress: Progress, path: str | None = None,
               weights_of=None, inputs=None) -> tuple[dict, object]:
    """run_scaled_dit's result and the streamed output (in the path's format). `weights_of(cfg, block)`
    and `inputs` (flat float32 buffers) replace the path's own random weights and input, so two paths
    can be compared on the same numbers."""
    ops, cfg = _path(nat, job, quick, path)
    shard = job.settings.shard_size_bytes or (64 << 20)
    preload = job.settings.preload_bytes or 0
    t, h = cfg["tokens"], cfg["hidden"]
    if weights_of is None:
        fp32_weights = lambda b: ops.block_weights(cfg, b)  # noqa: E731
    else:
        fp32_weights = lambda b: ops.adopt_weights(weights_of(cfg, b), cfg)  # noqa: E731
    x0 = ops.inputs(cfg) if inputs is None else ops.adopt(cfg, inputs)
    fd, file_path = tempfile.mkstemp(prefix="h3kit-scaled-dit-", suffix=".safetensors")
    os.close(fd)
    try:
        layout = write_model(nat, cfg, file_path, progress, fp32_weights)
        file_bytes = os.path.getsize(file_path)
        cache_dropped = drop_page_cache(file_path)  # so waiting on the streamer means waiting on the disk
        run = _streamed_forward(nat, ops, cfg, file_path, layout, (shard, preload), x0, progress)
        streamed, blocks = run["x"], run["blocks"]
        ring = ring_bytes(nat, shard, preload)
        progress("fp32 reference forward", 0, 2)
        ref = reference_forward(ops, cfg, x0, fp32_weights)
        progress("fp32 reference forward", 1, 2)
        deq = reference_forward(ops, cfg, x0, lambda b: _dequantized(nat, ops, cfg, fp32_weights(b)))
        progress("fp32 reference forward", 2, 2)
    finally:
        os.unlink(file_path)
    act = t * (4 * h + 3 * cfg["ffn"]) * 4 + cfg["heads"] * t * t * 4 * 2
    predicted = run["base_rss"] + ring + max(b["bytes"] for b in blocks) + act
    result = {
        "status": "measured",
        "path": ops.name,
        "path_note": "numpy for the norms, attention and fp32 reference" if ops.name == "numpy" else
                     "no numpy in this Python: products in the native library (quantized linears; fp32 reference "
                     "linears, Q K^T and attention x V through h3k_matmul_f32), RMSNorm, softmax and SwiGLU in "
                     "plain Python, at a smaller shape",
        "config": {**cfg, "shard_size_bytes": shard, "preload_bytes": preload},
        "requested_config": dict(job.scaled_dit),
        "file_bytes": file_bytes,
        "blocks": blocks,
        "timeline": run["timeline"],
        "bytes_streamed": run["stats"].get("bytes_read") or sum(b["bytes"] for b in blocks),
        "streamer": run["stats"],
        "page_cache_dropped": cache_dropped,
        **_split(blocks),
        "peak_rss_bytes": run["peak"],
        "baseline_rss_bytes": run["base_rss"],
        "predicted_peak_rss_bytes": predicted,
        "memory_growth_ratio": (run["peak"] - run["base_rss"]) / (predicted - run["base_rss"])
                               if predicted > run["base_rss"] else None,
        "relative_error": ops.rel_err(streamed, ref),
        "kernel_relative_error": ops.rel_err(streamed, deq),
        "error_note": "relative_error compares with fp32 weights (quantization included); "
                      "kernel_relative_error with the dequantized weights (the kernels alone)",
    }
    return result, streamed


def _streamed_forward(nat, ops, cfg: dict, file_path: str, layout: list, sizes: tuple[int, int], x0,
                      progress: Progress) -> dict:
    """The blocks read through the native streamer at the plan's (shard, preload) sizes, each run as it arrives:
    {"x": the output, "blocks", "timeline" (wait and compute spans), "stats", "peak", "base_rss"}."""
    kind = cfg["quantization"]
    shapes = linear_shapes(cfg["hidden"], cfg["ffn"])
    blocks, timeline = [], []
    x = x0
    base_rss = current_rss() or 0
    t_start = time.perf_counter()
    with PeakSampler() as sampler, open_streamer(nat, file_path, *sizes) as st:
        for blk, buf, waited in stream_blocks(st, layout):
            t_ready = time.perf_counter()
            mv = memoryview(buf)
            tens = blk["tensors"]
            norms = {n: ops.floats(mv[tens[n][0]:tens[n][1]]) for n in ("attn_norm", "ffn_norm")}

            def linear(name, a, _mv=mv, _tens=tens):
                s, e = _tens[name]
                return ops.quantized_linear(_mv[s:e], kind, *shapes[name], a)

            x = block_forward(ops, x, norms, linear, cfg)
            t_done = time.perf_counter()
            i = blk["block"]
            timeline.append({"block": i, "kind": "wait", "start": t_ready - waited - t_start, "end": t_ready - t_start})
            timeline.append({"block": i, "kind": "compute", "start": t_ready - t_start, "end": t_done - t_start})
            blocks.append({"index": i, "seconds": waited + (t_done - t_ready), "wait_seconds": waited,
                           "compute_seconds": t_done - t_ready, "bytes": blk["end"] - blk["start"]})
            progress("scaled DiT through the streamer", i + 1, cfg["blocks"])
        stats = _streamer_stats(st)
    return {"x": x, "blocks": blocks, "timeline": timeline, "stats": stats, "peak": sampler.peak,
            "base_rss": base_rss}


def _path(nat, job: Job, quick: bool, path: str | None):
    """(ops, shape): numpy's ops at the job's shape by default when this Python has numpy, else the native+python
    ops at the shape that path can afford."""
    if path is None:
        path = "numpy" if need_numpy() else "native+python"
    if path == "numpy" and not need_numpy():
        raise RuntimeError("the numpy path of the scaled DiT needs numpy")
    cfg = dict(job.scaled_dit)
    if path == "numpy":
        return NumpyOps(nat), cfg
    return PythonOps(nat), python_path_shape(cfg, quick)


def _split(blocks: list[dict]) -> dict:
    """Waiting on the disk against computing, over all blocks."""
    wait = sum(b["wait_seconds"] for b in blocks)
    compute = sum(b["compute_seconds"] for b in blocks)
    return {"wait_seconds": wait, "compute_seconds": compute,
            "wait_fraction": wait / (wait + compute) if wait + compute > 0 else 0.0,
            "seconds_per_block": (wait + compute) / len(blocks)}


def _dequantized(nat, ops, cfg: dict, w: dict) -> dict:
    """The block's weights with every linear quantized and dequantized again (the kernels' view)."""
    out = dict(w)
    for name, (rows, cols) in linear_shapes(cfg["hidden"], cfg["ffn"]).items():
        q = nat.quantize(w[name], cfg["quantization"])
        out[name] = ops.adopt_weights({name: nat.dequantize(q, cfg["quantization"], rows * cols)}, cfg)[name]
    return out


def _streamer_stats(st) -> dict:
    stats = getattr(st, "stats", None)
    try:
        s = stats() if callable(stats) else stats
    except Exception:
        return {}
    return dict(s) if isinstance(s, dict) else {}


def ring_bytes(nat, shard: int, preload: int) -> int:
    """The streamer's buffers (read size x depth, as the library plans them): allocated whole,
    however small the file, so they count in full."""
    read_size, depth = nat.streamer_plan(shard, preload)
    return read_size * depth
