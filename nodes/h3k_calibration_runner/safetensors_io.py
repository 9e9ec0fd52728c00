"""A safetensors file written by hand (8-byte header length, JSON header, raw data); h3k_safetensors reads it."""

from __future__ import annotations

import json
import struct


def write_safetensors(path: str, tensors: list[tuple[str, str, list[int], bytes]], metadata: dict) -> dict:
    """Write (name, dtype, shape, raw bytes) tensors in order; returns {name: (start, end)} file offsets.

    Format: u64 little-endian header length, a JSON header padded with spaces
    to a multiple of 8, then the data; offsets in the header are relative to
    the end of the header.
    """
    header: dict = {"__metadata__": {k: str(v) for k, v in metadata.items()}}
    pos = 0
    for name, dtype, shape, raw in tensors:
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [pos, pos + len(raw)]}
        pos += len(raw)
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)
    base = 8 + len(text)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for _, _, _, raw in tensors:
            f.write(raw)
    return {name: (base + header[name]["data_offsets"][0], base + header[name]["data_offsets"][1])
            for name, _, _, _ in tensors}

