"""The one safetensors header reader, shared by h3kit and the code that runs in ComfyUI's Python.

A safetensors file is an 8-byte little-endian header length, a JSON object
mapping each tensor name to its dtype, shape and byte range (relative to the
end of the header) plus an optional "__metadata__" table, then the data.
`read_header` reads only the header and checks what a cut-short download, a
wrong file or a damaged header would break later, far from the cause: the
length is sane, the JSON is an object, every entry has a known dtype, a
shape and a range whose size matches both, and every range lies inside the
file. Each refusal is a `HeaderError`: one sentence naming the file (and the
tensor, where one is at fault) and what to do.

Users: the streamed loader (nodes/h3kit_streaming/logic.py, as the pack's
package beside it) and calibration's architecture reader
(h3kit.calibrate.arch, as h3kit.bundled.h3k_safetensors). Standard library
only, and never `import h3kit`: this runs where h3kit is not installed.
"""

from __future__ import annotations

import json
import math
import os
import re
import struct
from pathlib import Path

__all__ = ["DTYPE_BITS", "MAX_HEADER", "HeaderError", "read_header"]

MAX_HEADER = 256 << 20  # far above any real header (an H3 one is a few hundred kB): bigger means not safetensors
# Bits per element of every dtype the safetensors format names (F4 and F6 pack several elements per byte).
DTYPE_BITS = {"BOOL": 8, "U8": 8, "I8": 8, "F8_E5M2": 8, "F8_E4M3": 8, "F8_E8M0": 8, "I16": 16, "U16": 16,
              "F16": 16, "BF16": 16, "I32": 32, "U32": 32, "F32": 32, "I64": 64, "U64": 64, "F64": 64, "C64": 64,
              "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6}
BLOCK_RE = re.compile(r"^blocks\.(\d+)\.")  # a DiT block's tensors: the one rule (the streamed loader's too)


class HeaderError(ValueError):
    """A sentence for the user: what is wrong with which file (and tensor), and what to do."""

    def __init__(self, message: str, path=None, tensor: str | None = None):
        super().__init__(message)
        self.path, self.tensor = path, tensor


def _raw_table(path: Path) -> tuple[bytes, int, int]:
    """(the header's bytes, where the data starts, the file's size)."""
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            head = f.read(8)
            if len(head) < 8:
                raise HeaderError(f"{path} is not a safetensors file (only {size} bytes); re-download it.", path)
            (length,) = struct.unpack("<Q", head)
            if length > min(MAX_HEADER, size - 8):
                raise HeaderError(f"{path} is not a safetensors file or is cut short (its header claims {length} "
                                  f"bytes of a {size}-byte file); re-download it.", path)
            return f.read(length), 8 + length, size
    except OSError as exc:
        raise HeaderError(f"cannot read {path}: {exc.strerror or exc}; check that the file exists and that it "
                          "may be read.", path) from exc


def _entry(path: Path, name: str, info, data_start: int) -> dict:
    """One tensor's {dtype, shape, start, end} (absolute offsets), checked against its dtype and shape."""
    try:
        dtype = info["dtype"]
        shape = [int(d) for d in info["shape"]]
        begin, end = (int(v) for v in info["data_offsets"])
        if not isinstance(dtype, str) or min(shape, default=0) < 0 or not 0 <= begin <= end:
            raise ValueError(f"dtype {dtype!r}, shape {shape}, data_offsets [{begin}, {end}]")
    except (KeyError, TypeError, ValueError) as exc:
        raise HeaderError(f"{path}: the header entry for {name} is malformed ({exc}); re-download the file.",
                          path, name) from exc
    if dtype not in DTYPE_BITS:
        raise HeaderError(f"{path}: {name} has dtype {dtype}, which is not a safetensors dtype; the file is damaged "
                          "or not safetensors: re-download it.", path, name)
    bits = math.prod(shape) * DTYPE_BITS[dtype]
    if bits != 8 * (end - begin):
        raise HeaderError(f"{path}: {name} should hold {bits / 8:g} bytes but the header gives {end - begin}; "
                          "re-download the file.", path, name)
    return {"dtype": dtype, "shape": shape, "start": data_start + begin, "end": data_start + end}


def read_header(path: str | os.PathLike) -> dict:
    """{"tensors": {name: {dtype, shape, start, end}} in header order, "metadata", "data_start", "file_size"}.

    Offsets are absolute (from the start of the file); `metadata` is the
    "__metadata__" table ({} without one). HeaderError when the file is not a
    whole, readable safetensors file.
    """
    path = Path(path)
    raw, data_start, size = _raw_table(path)
    try:
        table = json.loads(raw.decode("utf-8"))
        if not isinstance(table, dict):
            raise ValueError("the header is not a JSON object")
    except (UnicodeDecodeError, ValueError) as exc:
        raise HeaderError(f"{path} has an unreadable safetensors header ({exc}); re-download it.", path) from exc
    metadata = table.pop("__metadata__", None) or {}
    if not isinstance(metadata, dict):
        raise HeaderError(f"{path} has an unreadable safetensors header (its __metadata__ is not a JSON object); "
                          "re-download it.", path)
    tensors = {name: _entry(path, name, info, data_start) for name, info in table.items()}
    past = [(e["start"], n) for n, e in tensors.items() if e["end"] > size]
    if past:
        _, first = min(past)
        block = BLOCK_RE.match(first)
        where = f"block {block.group(1)} ({first})" if block else first
        need = max(tensors[n]["end"] for _, n in past)
        raise HeaderError(f"{path} is cut short: it has {size} bytes but its tensors need {need} ({where} and after "
                          "lie past the end); re-download the file.", path, first)
    return {"tensors": tensors, "metadata": metadata, "data_start": data_start, "file_size": size}
