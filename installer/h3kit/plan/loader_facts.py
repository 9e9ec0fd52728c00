"""What h3kit's streamed DiT loader (nodes/h3kit_streaming/) does, as the planner and calibration count it.

The one installer home of these facts: the read-ahead cap, the files the
loader streams, and which reader it picks on a CPU -- which decides whether
a ring of read-ahead buffers sits in the process's memory.
"""

from __future__ import annotations

from h3kit.bundled import h3k_loader

# The loaders' own facts, from the pack module the nodes read: the read-ahead cap (their prefetch_blocks input)
# and what H3kitStreamedDiTLoader streams, in the catalog's format names (ComfyUI's quantized safetensors are
# turned away; GGUF blocks are dequantized per use by ComfyUI-GGUF's code).
MAX_PREFETCH = h3k_loader.MAX_PREFETCH
SAFETENSORS_STREAMABLE = h3k_loader.SAFETENSORS_STREAMABLE
GGUF_STREAMABLE = h3k_loader.GGUF_STREAMABLE
STREAMABLE_FORMATS = h3k_loader.STREAMABLE_FORMATS
STREAMED_FILES = h3k_loader.STREAMED_FILES

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
