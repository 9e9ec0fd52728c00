"""The native-kernel estimate: the real model's FLOPs over h3kit's own matmul rate (an appendix figure).

This was calibration's headline until it turned out to predict a kernel the
real run never uses (ComfyUI computes with torch) and to depend on which
interpreter ran h3kit. It stays as the appendix (`native_appendix`), next to the
scaled DiT it can be checked against, and is never the time a report leads
with (that is `estimates`, from ComfyUI's own H3 transformer).

Pure functions of the catalog (layers, widths, the token rule), the plan and
the measured rates: no file, no process, no clock. Every figure `estimate`
returns carries its formula in `formulas`.
"""

from __future__ import annotations

from h3kit.data.architecture import tokens_for
from h3kit.data.catalog import Catalog
from h3kit.data.plan_doc import Plan

# The scaled DiT: H3's block shape (from the catalog) at a width this machine can run in seconds.
SCALED = {"quick": {"blocks": 2, "hidden": 512}, "full": {"blocks": 4, "hidden": 1024}}
CALIBRATION_CANVAS = (256, 256, 22)  # w, h, frames: the smallest H3 canvas (17k + 5 frames)
NATIVE_KINDS = ("q8_0", "q4_0")


def native_kind(fmt: str | None) -> str:
    """The native kernel closest to a weight format: q4_0 for 5 bits and below, else q8_0."""
    if fmt in NATIVE_KINDS:
        return fmt
    low_bits = ("q5", "q4", "q3", "q2", "w4a8", "nvfp4")
    return "q4_0" if fmt and fmt.startswith(low_bits) else "q8_0"


def scaled_dit_config(catalog: Catalog, plan: Plan, quick: bool) -> dict:
    """The scaled-down H3-shaped DiT the runner builds: H3's ratios, a small width."""
    arch = catalog.architecture
    size = SCALED["quick" if quick else "full"]
    hidden = size["hidden"]
    head_dim = arch.head_dim
    ffn = int(round(hidden * arch.ffn / arch.hidden / 32)) * 32  # same FFN ratio, whole quant blocks
    quant = plan.settings.quantization
    return {
        "blocks": size["blocks"],
        "hidden": hidden,
        "heads": hidden // head_dim,
        "head_dim": head_dim,
        "ffn": ffn,
        "tokens": tokens_for(catalog.tokens, *CALIBRATION_CANVAS),
        "canvas": list(CALIBRATION_CANVAS),
        "quantization": native_kind(quant),
        "plan_quantization": quant,
    }


def block_params(hidden: int, ffn: int) -> int:
    """Weights of one block: q, k, v, o (4 h^2) and the SwiGLU gate, up, down (3 h ffn)."""
    return 4 * hidden * hidden + 3 * hidden * ffn


def flops_per_pass(blocks: int, hidden: int, ffn: int, tokens: int) -> float:
    """One forward pass: 2 FLOPs per weight per token, plus attention's QK^T and AV (4 T^2 h per block)."""
    return blocks * (2.0 * block_params(hidden, ffn) * tokens + 4.0 * tokens * tokens * hidden)


def rate_for(native: dict, kind: str) -> float | None:
    """Best matmul GFLOP/s the runner measured for one quantization kind."""
    rates = [k["gflop_per_s"] for k in native.get("kernels") or [] if k["kind"] == kind and k["op"] == "matmul"]
    return max(rates) if rates else None


def measured_rates(native: dict, device: dict, disk: dict, inference: dict, kind: str) -> dict:
    """The rates `estimate` reads, picked out of the run's parts (None where a part did not measure)."""
    return {"native_gflops": rate_for(native, kind) or (native.get("best") or {}).get("gflop_per_s"),
            "device_tflops": device.get("bf16_tflops") or device.get("fp16_tflops"),
            "h2d_gbps": device.get("h2d_gb_per_s"), "disk_gbps": disk.get("gb_per_s"),
            "memory_growth_ratio": inference.get("memory_growth_ratio")}


def streamed_per_step(plan: Plan, dit_bytes: int | None) -> tuple[int, str]:
    """DiT bytes moved per sampling step and where they come from (ram or disk), by the plan's streaming."""
    s = plan.settings
    streaming = s.streaming
    ram_budget = plan.budget.ram_bytes or 0
    source = "disk" if s.stream_from == "disk" or (dit_bytes and ram_budget and dit_bytes > ram_budget) else "ram"
    if streaming.resident:
        return 0, source
    if streaming.block_bytes and streaming.blocks:
        moving_blocks = streaming.blocks - (streaming.resident_blocks or 0)
        return int(moving_blocks * streaming.block_bytes), source
    return int(dit_bytes or 0), source


def _g(x) -> str:
    return "-" if x is None else f"{x:.3g}"


def native_appendix(catalog: Catalog, plan: Plan, measured: dict, dit_bytes: int | None) -> dict:
    """Seconds per sampling step and peak memory of the real model at the plan's settings.

    `measured` holds the rates the run found (`measured_rates`): native
    GFLOP/s for the plan's quantization, device TFLOP/s and H2D GB/s when
    there is a GPU, disk GB/s, and the scaled DiT's measured vs predicted
    RSS growth. Every value carries its formula in `formulas`.
    """
    s = plan.settings
    w, h = (s.max_canvas or CALIBRATION_CANVAS)[:2]
    frames = s.max_frames or CALIBRATION_CANVAS[2]
    tokens = tokens_for(catalog.tokens, w, h, frames)
    flops = flops_per_pass(catalog.architecture.blocks, catalog.architecture.hidden, catalog.architecture.ffn, tokens)
    device_tflops = measured.get("device_tflops")
    rate = device_tflops * 1e12 if device_tflops else (measured.get("native_gflops") or 0) * 1e9
    rate_name = "device bf16 matmul" if device_tflops else "native CPU matmul"
    compute_s = flops / rate if rate else None
    streamed, source = streamed_per_step(plan, dit_bytes)
    link, link_name = _stream_link(measured, source)
    stream_s = streamed / (link * 1e9) if (streamed and link) else 0.0
    overlapped = (s.preload_bytes or 0) > 0
    step_s = None
    if compute_s is not None:
        step_s = max(compute_s, stream_s) if overlapped else compute_s + stream_s
    growth = measured.get("memory_growth_ratio") or 1.0
    plan_est = plan.estimates
    plan_peak_ram = plan_est.peak_ram_bytes
    moving = (plan_est.activation_bytes or 0) + (s.shard_size_bytes or 0) + (s.preload_bytes or 0)
    streaming = (f"streamed DiT bytes per step ({_g(streamed / 1e9)} GB from {source}) / measured {link_name} GB/s "
                 f"({_g(link)})") if link_name else "0: the CPU reads the weights in RAM (counted in the matmul rate)"
    return {
        "label": "native-kernel estimate (appendix)",
        "canvas": [w, h, frames],
        "tokens": tokens,
        "flops_per_pass": flops,
        "compute_seconds_per_step": compute_s,
        "stream_seconds_per_step": stream_s,
        "seconds_per_step": step_s,
        "peak_ram_bytes": int(plan_peak_ram + (growth - 1.0) * moving) if plan_peak_ram else None,
        "peak_gpu_bytes": plan_est.peak_gpu_bytes,
        "memory_growth_ratio": growth,
        "formulas": _appendix_formulas(catalog, tokens, f"{rate_name} rate ({_g(rate / 1e9 if rate else None)} GFLOP/s)",
                                       streaming, overlapped, growth),
    }


def _stream_link(measured: dict, source: str) -> tuple[float | None, str | None]:
    """The measured rate the streamed bytes cross each step, GB/s, and its name; (None, None) on a CPU run."""
    if source == "disk":
        return measured.get("disk_gbps"), "disk read"
    if measured.get("h2d_gbps"):
        return measured.get("h2d_gbps"), "host-to-device copy"
    return None, None  # CPU compute reads the weights where they lie: already in the measured matmul rate


def _appendix_formulas(catalog: Catalog, tokens: int, rate: str, streaming: str, overlapped: bool,
                       growth: float) -> dict[str, str]:
    arch, px, tc = catalog.architecture, catalog.tokens.spatial_tokens_px, catalog.tokens.temporal_compression
    return {
        "tokens": f"(w/{px}) x (h/{px}) x ceil(frames/{tc}) = {tokens}",
        "flops_per_pass": f"blocks x (2 x (4 h^2 + 3 h ffn) x T + 4 T^2 h) with blocks={arch.blocks}, "
                          f"h={arch.hidden}, ffn={arch.ffn}, T={tokens} (one model pass per step; "
                          "classifier-free guidance doubles it)",
        "compute_seconds_per_step": f"flops_per_pass / measured {rate}",
        "stream_seconds_per_step": streaming,
        "seconds_per_step": ("max(compute, stream): the streamer reads the next block while this one runs"
                             if overlapped else "compute + stream: no preload, reads are not overlapped"),
        "peak_ram_bytes": f"planner's peak RAM + (g - 1) x (activations + shard + preload), g = measured / "
                          f"predicted RSS growth of the scaled DiT while streaming = {_g(growth)}",
        "peak_gpu_bytes": "planner's estimate (a GPU run with the real model measures it: --with-model)",
    }


def check_scaled(config: dict, inference: dict, native_gflops: float | None) -> dict:
    """The estimate formula applied to the scaled DiT, next to what the run measured ({} when it did not run)."""
    if inference.get("status") != "measured" or not native_gflops:
        return {}
    ran = inference.get("config") or config  # the native+python path runs a smaller shape
    flops_block = flops_per_pass(1, ran["hidden"], ran["ffn"], ran["tokens"])
    out = {
        "measured_seconds_per_block": inference["seconds_per_block"],
        "estimated_seconds_per_block": flops_block / (native_gflops * 1e9),
        "formula": "(2 x (4 h^2 + 3 h ffn) x T + 4 T^2 h) / measured native GFLOP/s",
    }
    if inference.get("path") == "native+python":
        out["note"] = ("measured in the native+python path: the norms, softmax and SwiGLU ran as plain Python, "
                       "so the measured time is an upper bound on what the formula describes")
    return out
