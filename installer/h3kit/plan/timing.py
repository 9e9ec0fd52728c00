"""How long one clip takes: the one formula the plan and the calibration share (docs/plan.md, "How long a clip takes").

One model call (one DiT forward) costs, per block, a part linear in the
sequence length T (the qkv/out projections and the SwiGLU MLP) and a part in
T^2 (attention), plus a fixed part outside the blocks (embeddings, token
refiner, final layer, reading the weights once):

    seconds_per_call = blocks * (block_s_per_token * T + block_s_per_token2 * T^2)
                       + step_fixed_s + step_fixed_s_per_token * T
    seconds_per_step = seconds_per_call * (1 at cfg 1.0, else 2)
    seconds_per_clip = steps * seconds_per_step + text_encode_s + decode_s_per_pixel_frame * w * h * frames

The rates in a `timing` mapping come either from calibration (measured in
ComfyUI's Python; the settings key `timing`) or, before any calibration,
from `rates_from_table`: the model's FLOPs over a device's dense peak
(profiles/throughput.yaml) times an efficiency. Both functions are pure; the
table is read once (cached) unless one is passed in.
"""

from __future__ import annotations

import re

from h3kit.bundled import h3k_cost
from h3kit.data import throughput as throughput_mod
from h3kit.data import architecture
from h3kit.data.catalog import Catalog
from h3kit.data.figures import DTYPE_BYTES
from h3kit.data.fingerprint import Fingerprint, Gpu

DTYPE_NAMES = {"bf16": "bfloat16", "bfloat16": "bfloat16", "fp16": "float16", "float16": "float16",
               "fp32": "float32", "float32": "float32"}
_CLOCK = re.compile(r"@\s*([0-9]+(?:\.[0-9]+)?)\s*GHz", re.IGNORECASE)


def sequence_rule(cat: Catalog) -> h3k_cost.SequenceRule | None:
    """The catalog's `sequence:` and `frames:` as the cost model's rule; None for a catalog without `sequence:`."""
    seq = cat.sequence
    if seq is None:
        return None
    return h3k_cost.SequenceRule(seq.text_tokens, seq.first_latent_frames, seq.latent_frames_per_step,
                                 seq.audio_rows_per_second, seq.fps, cat.frames.base, cat.frames.step,
                                 cat.tokens.spatial_tokens_px)


def sequence_tokens(cat: Catalog, width: int, height: int, frames: int) -> int:
    """Rows of the DiT's joint sequence [text | audio | video] at this canvas (the catalog's `sequence:`)."""
    rule = sequence_rule(cat)
    if rule is None:  # a catalog without the section: the memory model's token rule
        return architecture.tokens_for(cat.tokens, width, height, frames)
    return rule.rows(width, height, frames)


def block_flops(arch: dict) -> tuple[float, float]:
    """data.architecture.block_flops for an arch mapping (calibrate/arch.py's, read from a file's header)."""
    return architecture.block_flops(arch["hidden"], arch["heads"], arch["head_dim"], arch["ffn"])


def _cc(text) -> tuple | None:
    try:
        return tuple(int(p) for p in str(text).split(".")[:2]) if text else None
    except ValueError:
        return None


def match_device(gpu: Gpu, table) -> throughput_mod.DeviceRow | None:
    """The table row for `gpu`: the longest name substring that matches, else its vendor's generation row."""
    name = " " + " ".join(str(gpu.name or "").lower().split()) + " "
    vendor = gpu.vendor
    best, best_len = None, 0
    for row in table.devices:
        if row.vendor != vendor:
            continue
        for n in row.names:
            if n in name and len(n) > best_len:
                best, best_len = row, len(n)
    if best is not None:
        return best
    cc = _cc(gpu.compute_capability)
    for row in table.devices:
        if row.vendor != vendor or row.generation is None:
            continue
        lo, hi = row.generation
        if cc is None and (lo is not None or hi is not None):
            continue
        if (lo is None or cc >= lo) and (hi is None or cc <= hi):
            return row
    return None


def _cpu_peak(fingerprint: Fingerprint, table) -> tuple[float, float, str]:
    """(fp32 TFLOPS, GB/s, description) of the CPU from its cores, widest SIMD flag and clock."""
    cpu = fingerprint.cpu
    flags = {str(f).lower() for f in cpu.flags}
    per, flag = table.cpu.scalar_flops_per_cycle, "scalar"
    for name, value in table.cpu.flops_per_cycle:
        if name in flags:
            per, flag = value, name
            break
    m = _CLOCK.search(str(cpu.model or ""))
    clock = float(m.group(1)) if m else table.cpu.clock_ghz
    cores = max(1, int(cpu.physical_cores or cpu.logical_cores or 1))
    tflops = cores * per * clock / 1000.0
    what = (f"{cores} cores x {per:g} FLOP/cycle ({flag}) x {clock:g} GHz"
            + ("" if m else " (assumed clock)") + f" = {tflops * 1000:.0f} GFLOPS fp32")
    return tflops, table.cpu.bandwidth, what


def rates_from_table(fingerprint: Fingerprint, catalog: Catalog, dtype: str, *, backend: str | None = None,
                     table=None, weight_format: str | None = None) -> dict:
    """A `timing` mapping for this machine from profiles/throughput.yaml (source "table: <row>").

    `dtype` is the compute dtype (bf16/bfloat16, fp16, fp32/float32); `backend` forces one (cpu for a
    CPU-only plan on a machine with a GPU); `table` defaults to the one read with the catalog
    (data.catalog.load), else the shipped throughput.yaml. `weight_format` is the DiT's format: one whose
    catalog entry says `compute: int8|fp8|fp4` runs its linear layers at the row's 8-bit rate on CUDA."""
    table = table or getattr(catalog, "throughput", None) or throughput_mod.load()
    backend = backend or fingerprint.backend
    dt = DTYPE_NAMES.get(str(dtype).lower(), "bfloat16")
    gpu = fingerprint.primary_gpu if backend != "cpu" else None
    row = match_device(gpu, table) if gpu else None
    if gpu is None or row is None:
        backend = "cpu" if gpu is None else backend
        dt = "float32" if backend == "cpu" else dt  # _cpu_peak's figures are float32 ones
        tflops, bandwidth, what = _cpu_peak(fingerprint, table)
        row_id = "cpu" if gpu is None else f"{gpu.vendor} (not in the table; CPU figures)"
    else:
        tflops = {"bfloat16": row.bf16, "float16": row.fp16, "float32": row.fp32}[dt]
        bandwidth, row_id = row.bandwidth, row.id
        what = f"{tflops:g} TFLOPS {dt} dense, {bandwidth:g} GB/s ({row.source})"
    eff = table.efficiency[backend if backend in table.efficiency else "cpu"]
    linear_tflops = tflops
    spec = catalog.formats.get(weight_format) if weight_format else None
    low = spec.compute if spec else None
    if low and backend == "cuda" and row is not None and row.int8:
        linear_tflops = max(tflops, row.int8)  # quantized linears; attention stays in the compute dtype
        what += f"; {weight_format} linears at {row.int8:g} TOPS {low}"
    linear_rate = linear_tflops * 1e12 * eff["linear"]
    attn_rate = tflops * 1e12 * eff["attention"]
    bytes_rate = bandwidth * 1e9 * table.memory_efficiency
    arch = catalog.architecture
    per_token, per_pair = arch.block_flops
    weight_bytes = per_token / 2.0 * catalog.blocks * DTYPE_BYTES[dt]  # every block weight read once per call
    work = catalog.work
    text_tokens = catalog.sequence.text_tokens if catalog.sequence else 256
    refiner = (work.refiner_blocks if work else 0) * (per_token * text_tokens / linear_rate
                                                      + per_pair * text_tokens ** 2 / attn_rate)
    out = {
        "source": f"table: {row_id} ({what}; efficiency {eff['linear']:g} linear, {eff['attention']:g} attention)",
        "device": backend if backend in ("cpu", "cuda", "mps", "rocm", "xpu") else "cpu",
        "dtype": dt,
        "block_s_per_token": per_token / linear_rate,
        "block_s_per_token2": per_pair / attn_rate,
        "step_fixed_s": weight_bytes / bytes_rate + refiner + table.call_overhead_s.get(backend, 0.0),
        # patch embedding in and the final layer out: 2 x hidden x (video patch 96 + audio 32) x 2 FLOPs
        "step_fixed_s_per_token": 2.0 * arch.hidden * 2 * (96 + 32) / linear_rate,
    }
    if work is not None:
        te_bytes = work.text_encoder_params * DTYPE_BYTES[dt]
        out["text_encode_s"] = 2.0 * work.text_encoder_params * text_tokens / linear_rate + te_bytes / bytes_rate
        out["decode_s_per_pixel_frame"] = work.decode_flops_per_pixel_frame / linear_rate
    return out


def _blocks(arch: dict, catalog: Catalog) -> int:
    return int(arch.get("blocks_total") or arch.get("blocks") or catalog.blocks)


def held_call_seconds(arch: dict, timing: dict, tokens: int, catalog: Catalog) -> float:
    """Seconds of one model call over `tokens` packed rows with the weights held (no streaming share)."""
    return h3k_cost.held_call_seconds(timing, _blocks(arch, catalog), tokens)


def estimate_clip(arch: dict, timing: dict, canvas: tuple[int, int], frames: int, steps: int, cfg: float,
                  catalog: Catalog, *, pass_overhead: float = 0.0) -> dict:
    """Seconds and minutes for one clip at `canvas` x `frames`, `steps` steps, guidance `cfg`, with `timing`'s rates
    (h3k_cost.clip_time, the formula the pack's panel and guard use too).

    `arch` needs `blocks` (or `blocks_total`, as the runner reports it); the catalog's architecture fills it in.
    `pass_overhead` is the share every model call takes longer when h3kit streams the DiT (0.84: +84%)."""
    w, h = int(canvas[0]), int(canvas[1])
    tokens = sequence_tokens(catalog, w, h, int(frames))
    out = h3k_cost.clip_time(timing, _blocks(arch, catalog), tokens, w, h, int(frames), int(steps), cfg,
                             pass_overhead)
    return {**out, "source": str(timing.get("source", ""))}
