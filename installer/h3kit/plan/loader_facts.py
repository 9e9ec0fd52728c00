"""What h3kit's streamed DiT loader (nodes/h3kit_streaming*.py) does, as the planner and calibration count it.

The one installer home of these facts: the read-ahead cap, the files the
loader streams, and which reader it picks on a CPU -- which decides whether
a ring of read-ahead buffers sits in the process's memory.
"""

from __future__ import annotations

# The deepest read-ahead the loader node accepts (its prefetch_blocks input, nodes profile_defaults).
MAX_PREFETCH = 8

# What H3kitStreamedDiTLoader reads (nodes/h3kit_streaming_logic.py refuse_unsupported turns away ComfyUI's
# quantized safetensors, whose weights need ComfyUI's converters): plain safetensors of the first three, GGUF
# files of the rest (the catalog's format names), their blocks dequantized per use by ComfyUI-GGUF's code --
# tests/real_comfyui/test_gguf_loaders_real_comfyui.py runs a GGUF DiT through it.
SAFETENSORS_STREAMABLE = ("bf16", "fp16", "fp32")
GGUF_STREAMABLE = ("q8_0", "q6_k", "q5_0", "q5_k_m", "q4_k_m", "q3_k_m", "q2_k")
STREAMABLE_FORMATS = SAFETENSORS_STREAMABLE + GGUF_STREAMABLE


def streamable(weight) -> bool:
    """Can h3kit's streamed loader read this DiT file?"""
    file = getattr(weight, "file", None)
    fmt, name = getattr(weight, "format", None), str(getattr(file, "name", None) or "").lower()
    return ((fmt in SAFETENSORS_STREAMABLE and name.endswith(".safetensors"))
            or (fmt in GGUF_STREAMABLE and name.endswith(".gguf")))


def cpu_reader(fmt: str, bypass: bool) -> str:
    """The reader the loader picks on a CPU (nodes BlockStream.reader_for): "uncached" past the page cache,
    "direct" (in place, its read-ahead left to the OS's page cache) for plain float tensors, else "ring"
    (a GGUF file's quantized tensors are staged and dequantized by a helper thread)."""
    if bypass:
        return "uncached"
    return "direct" if fmt in SAFETENSORS_STREAMABLE else "ring"


# Per reader: (block buffer sets in the compute dtype, whether a ring of file-dtype reads is held). The ring
# holds the block in use and `prefetch_blocks` read ahead: the plan's shard is whole blocks, so each read is one.
READER_MEMORY = {"direct": (1, False), "uncached": (1, True), "ring": (2, True)}
