"""A GGUF v3 container written byte by byte (standard library only), as stable-diffusion.cpp writes one.

gguf-py's GGUFWriter always adds `general.architecture`; stable-diffusion.cpp's H3 files carry no KV field
at all, which is the case h3kit's loaders must take. Used by make_tiny_gguf.py (in ComfyUI's Python) and
by the loaders' unit tests.
"""

from __future__ import annotations

import struct

ALIGN = 32


def _string(s: str) -> bytes:
    b = s.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


def write_gguf(path, tensors: dict, kv: dict | None = None) -> None:
    """GGUF v3 with `kv` ({key: str or list of ints (a uint32 array)}) and `tensors` ({name: (ggml type id,
    torch-order shape, raw bytes)})."""
    head = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kv or {}))
    for k, v in (kv or {}).items():
        if isinstance(v, str):
            head += _string(k) + struct.pack("<I", 8) + _string(v)
        else:
            head += _string(k) + struct.pack("<IIQ", 9, 4, len(v)) + struct.pack(f"<{len(v)}I", *v)
    offset, blobs = 0, []
    for name, (qtype, shape, raw) in tensors.items():
        ne = list(reversed(shape))
        head += _string(name) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<Q", d) for d in ne)
        head += struct.pack("<IQ", int(qtype), offset)
        pad = -len(raw) % ALIGN
        blobs.append(raw + b"\0" * pad)
        offset += len(raw) + pad
    head += b"\0" * (-len(head) % ALIGN)
    with open(path, "wb") as f:
        f.write(head)
        for b in blobs:
            f.write(b)
