"""What h3kit's streamed loaders read and how, in one place: the nodes use these, and h3kit's planner and
calibration reach them as `h3kit.bundled.h3k_loader` instead of keeping copies.

The truth is the loader code (nodes/h3kit_streaming/): its header check
(`refuse_unsupported`) streams the safetensors dtypes below and every GGUF
block type, and turns away ComfyUI's quantized checkpoints by their scale
keys (QUANT_MARKERS) -- their weights need ComfyUI's own converters. So a
plain float8 file (F8_E4M3 / F8_E5M2 weights, no scales) streams, and the
catalog's `fp8_scaled` does not.

The native streamer's own limits (one read, ring depth) are not here: the
library reports them (`h3k_native.streamer_limits()`, payload/streamer.c).

Standard library only, never `import h3kit`: this runs in ComfyUI's Python.
"""

from __future__ import annotations

MIB = 1 << 20
# A read past the page cache (page_cache "bypass") when the loader's shard_size_bytes is 0: pieces small enough
# to be widened on the CPU behind the disk. The calibration's memory model counts one such piece.
BYPASS_READ_BYTES = 64 * MIB
# Blocks (layers) read ahead while the current one computes: the loaders' prefetch input ends here, and so does
# the plan's prefetch (one disk gains nothing from a deeper queue).
MAX_PREFETCH = 8
# The loaders' page_cache input: read through the OS's page cache, or past it (a file larger than the cache can
# keep next to the run misses it on every pass); the first is the default.
PAGE_CACHE_CHOICES = ("use", "bypass")

# The safetensors dtypes the loaders stream (converted to the compute dtype as each block is read).
STREAMED_DTYPES = frozenset({"F64", "F32", "F16", "BF16", "I64", "I32", "I16", "I8", "U8", "BOOL", "F8_E4M3",
                             "F8_E5M2", "U16", "U32", "U64"})
# Keys of ComfyUI's quantized formats (scaled fp8, comfy_quant): a file with one is refused.
QUANT_MARKERS = ("scale_weight", "scale_input", "weight_scale", "input_scale", "comfy_quant", "scaled_fp8")

# The same in the catalog's format names (profiles/models/*.yaml `formats`): plain safetensors of these formats,
# GGUF files of those, dequantized per block with ComfyUI-GGUF's code.
SAFETENSORS_STREAMABLE = ("bf16", "fp16", "fp32", "fp8")
GGUF_STREAMABLE = ("q8_0", "q6_k", "q5_0", "q5_k_m", "q4_k_m", "q3_k_m", "q2_k")
STREAMABLE_FORMATS = SAFETENSORS_STREAMABLE + GGUF_STREAMABLE
# How a sentence names them: "plain bf16/fp16/fp32/fp8 safetensors and GGUF files".
STREAMED_FILES = f"plain {'/'.join(SAFETENSORS_STREAMABLE)} safetensors and GGUF files"


def clamp_prefetch(blocks) -> int:
    """A prefetch count as the loaders take it: 1 to MAX_PREFETCH (1 for anything that is not a number)."""
    if isinstance(blocks, bool) or not isinstance(blocks, (int, float)):
        return 1
    return max(1, min(MAX_PREFETCH, int(blocks)))


__all__ = ["BYPASS_READ_BYTES", "GGUF_STREAMABLE", "MAX_PREFETCH", "MIB", "PAGE_CACHE_CHOICES", "QUANT_MARKERS",
           "SAFETENSORS_STREAMABLE", "STREAMABLE_FORMATS", "STREAMED_DTYPES", "STREAMED_FILES", "clamp_prefetch"]
