"""The one GGUF container reader, shared by h3kit and the code that runs in ComfyUI's Python.

A GGUF file is a magic, a version, a KV table of typed values (scalars,
strings, arrays, arrays of arrays), a table of tensor infos (name, dims
innermost first, ggml type, offset into the data section), padding to the
alignment, then the data. `read_gguf` reads the two tables and checks what
would break later, far from the cause, before anything hands the file to
ComfyUI-GGUF's gguf-py or reads a weight:

- bounded work and memory per byte: a cap on KV fields, tensors, the
  values of all KV arrays together (a tokenizer has a few hundred thousand;
  gguf-py keeps more than a kilobyte for each) and array nesting; long
  arrays are skipped (scalars by one seek, strings by walking their lengths
  through one buffer), long strings are skipped past a budget;
- one meaning per name: no KV key and no tensor name twice;
- `general.alignment`, when there, a uint32 power of two (gguf-py's rule);
- every tensor: 1 to 8 dims, none 0, rows of whole blocks of a ggml type
  the loaders read, its offset aligned, its bytes inside the data section,
  no two tensors' bytes overlapping.

Each refusal is a `GGUFError`: one sentence naming the file (and the tensor
or key at fault) and what to do. Left out on purpose: the tensor data is
never read, and KV values nobody reads (a vocabulary) are not kept.

Users: the GGUF loaders in the pack (nodes/h3kit_common/gguf_names.py re-exports
it; the held loader, the streamed loader) and calibration's architecture
reader (h3kit.calibrate.arch, as h3kit.bundled.h3k_gguf). Standard library
only, and never `import h3kit`: this runs where h3kit is not installed.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path

__all__ = ["DEFAULT_ALIGNMENT", "GGML_TYPES", "GGUFError", "LIMITS", "PLAIN_TYPES", "read_gguf"]

MAGIC = b"GGUF"
DEFAULT_ALIGNMENT = 32
# ggml type id -> (name, elements per block, bytes per block) for the types H3's files use (ggml.h, gguf-py
# constants.GGML_QUANT_SIZES). F32/F16/BF16 keep safetensors' dtype names, which the streamer reads itself.
GGML_TYPES = {0: ("F32", 1, 4), 1: ("F16", 1, 2), 2: ("Q4_0", 32, 18), 3: ("Q4_1", 32, 20), 6: ("Q5_0", 32, 22),
              7: ("Q5_1", 32, 24), 8: ("Q8_0", 32, 34), 10: ("Q2_K", 256, 84), 11: ("Q3_K", 256, 110),
              12: ("Q4_K", 256, 144), 13: ("Q5_K", 256, 176), 14: ("Q6_K", 256, 210), 30: ("BF16", 1, 2)}
PLAIN_TYPES = {"F32", "F16", "BF16"}
# KV value types: id -> struct format (8: string, 9: array)
_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_UINT32 = 4
# Above any file H3 uses (its text encoder: ~600 tensors; llama.cpp's Qwen3-VL tokenizer: 455,259 array values
# in tokens, token types and merges). gguf-py walks every array value into numpy views of its own (measured:
# 1.4 GB and 16 s for a million short strings), so the value cap is what a file that passes may cost it: about
# twice a real Qwen3 tokenizer (room for a vocabulary of 350k tokens, as large as any llama.cpp writes today,
# so no real encoder is refused), never the 9 GB and more of a 20-million-string file.
LIMITS = {"tensors": 1 << 16, "kv": 1 << 16, "array_values": 1 << 20, "array_depth": 2, "dims": 8,
          "name_bytes": 1 << 10, "elements": 1 << 50}
ARRAY_KEPT = 256  # longer arrays (a vocabulary) are skipped, only their type and length kept
STRING_KEPT = 1 << 16  # a longer KV string (a chat template) is skipped, only its length kept
KEPT_BUDGET = 16 << 20  # all kept KV strings together; past it strings are skipped like long ones
_CHUNK = 1 << 20


class GGUFError(RuntimeError):
    """A sentence for the user: what is wrong with which file (and tensor or key), and what to do."""

    def __init__(self, message: str, path=None, tensor: str | None = None):
        super().__init__(message)
        self.path, self.tensor = path, tensor


class _Header:
    """The header's bytes through one buffer: a walk over a million short strings costs no system call each."""

    def __init__(self, f, path: Path, size: int):
        self.f, self.path, self.name, self.size = f, path, path.name, size
        self.buf, self.base, self.pos = b"", 0, 0  # buf holds the file's bytes [base, base + len(buf))
        self.values = 0  # KV array values so far, all arrays together
        self.kept = 0  # bytes of kept KV strings so far

    def fail(self, what: str, tensor: str | None = None) -> GGUFError:
        return GGUFError(f"{self.name}{'' if what.startswith(':') else ' '}{what}", self.path, tensor)

    def take(self, n: int) -> bytes:
        end = self.pos + n
        if end > self.size:
            raise self.fail(f"is cut short inside its GGUF header ({self.size} bytes); re-download it.")
        if end > self.base + len(self.buf):
            self.f.seek(self.pos)
            self.buf, self.base = self.f.read(max(n, _CHUNK)), self.pos
            if len(self.buf) < n:
                raise self.fail("changed while it was read; wait until it is written whole, then load it again.")
        i = self.pos - self.base
        self.pos = end
        return self.buf[i:i + n]

    def skip(self, n: int) -> None:
        if self.pos + n > self.size:
            raise self.fail(f"is cut short inside its GGUF header ({self.size} bytes); re-download it.")
        self.pos += n

    def unpack(self, fmt: str):
        return struct.unpack(fmt, self.take(struct.calcsize(fmt)))[0]

    def length(self) -> int:
        n = self.unpack("<Q")
        if n > self.size:
            raise self.fail(f"has a garbled GGUF header (a {n}-byte string in a {self.size}-byte file); re-download it.")
        return n

    def name_string(self, what: str) -> str:
        n = self.length()
        if n > LIMITS["name_bytes"]:
            raise self.fail(f"has a {n}-byte {what} in its GGUF header (at most {LIMITS['name_bytes']}); it is "
                            "damaged or not a model file: re-download it.")
        return self.take(n).decode("utf-8", errors="replace")

    def text(self):
        n = self.length()
        if n > STRING_KEPT or self.kept + n > KEPT_BUDGET:
            self.skip(n)
            return {"string_bytes": n}
        self.kept += n
        return self.take(n).decode("utf-8", errors="replace")

    def value(self, vtype: int, key: str, depth: int = 0):
        if vtype in _SCALARS:
            return self.unpack(_SCALARS[vtype])
        if vtype == 8:
            return self.text()
        if vtype != 9:
            raise self.fail(f"has the KV field {key} of unknown type {vtype}; it is not a GGUF file h3kit reads: "
                            "re-download it or use another file.")
        if depth >= LIMITS["array_depth"]:
            raise self.fail(f"nests the KV field {key} more than {LIMITS['array_depth']} arrays deep; it is not a "
                            "model file h3kit reads: re-download it or use another file.")
        itype, count = self.unpack("<I"), self.unpack("<Q")
        self.values += count
        if self.values > LIMITS["array_values"]:  # before the walk: a refusal costs nothing however long the array
            raise self.fail(f"holds more than {LIMITS['array_values']} values in its KV arrays (the field {key} alone "
                            f"claims {count}; a tokenizer has a few hundred thousand); it is not a model file h3kit "
                            "reads: re-download it or use another file.")
        if count <= ARRAY_KEPT:
            return [self.value(itype, key, depth + 1) for _ in range(count)]
        if itype in _SCALARS:
            self.skip(struct.calcsize(_SCALARS[itype]) * count)
        elif itype == 8:
            for _ in range(count):
                self.skip(self.length())
        else:
            for _ in range(count):
                self.value(itype, key, depth + 1)
        return {"array_of": itype, "length": count}


def _table(h: _Header) -> tuple[int, dict, list]:
    """(version, {key: value}, [(name, dims innermost first, type id, offset)]) from the two header tables."""
    if h.size < 24 or h.take(4) != MAGIC:
        raise h.fail("is not a GGUF file (no 'GGUF' magic); re-download it.")
    version = h.unpack("<I")
    if version not in (2, 3):
        raise h.fail(f"is GGUF version {version}; h3kit reads versions 2 and 3: use a file converted recently.")
    n_tensors, n_kv = h.unpack("<Q"), h.unpack("<Q")
    if n_tensors > LIMITS["tensors"] or n_kv > LIMITS["kv"]:
        raise h.fail(f"claims {n_tensors} tensors and {n_kv} KV fields (at most {LIMITS['tensors']} and "
                     f"{LIMITS['kv']}); it is damaged or not a model file: re-download it.")
    kv = {}
    for _ in range(n_kv):
        key = h.name_string("KV key")
        if key in kv:
            raise h.fail(f"has the KV field {key} twice; it is damaged: re-download it.")
        vtype = h.unpack("<I")
        kv[key] = h.value(vtype, key)
        if key == "general.alignment" and (vtype != _UINT32 or not kv[key] or kv[key] & (kv[key] - 1)):
            shown = kv[key] if vtype in _SCALARS or vtype == 8 else "an array"
            raise h.fail(f"gives general.alignment {shown!r}, which is not a uint32 power of two; it is damaged or "
                         "written by a broken converter: re-download it.")
    infos, names = [], set()
    for _ in range(n_tensors):
        name = h.name_string("tensor name")
        if name in names:
            raise h.fail(f"has the tensor {name} twice; it is damaged: re-download it.", name)
        names.add(name)
        n_dims = h.unpack("<I")
        if not 1 <= n_dims <= LIMITS["dims"]:
            raise h.fail(f": tensor {name} claims {n_dims} dimensions (1 to {LIMITS['dims']}); re-download the file.",
                         name)
        ne = [h.unpack("<Q") for _ in range(n_dims)]
        infos.append((name, ne, h.unpack("<I"), h.unpack("<Q")))
    return version, kv, infos


def _entry(h: _Header, name: str, ne: list, type_id: int, offset: int, data_start: int, align: int) -> dict:
    """One tensor's {dtype, type_id, shape (torch order), start, end} (absolute), checked on its own."""
    if type_id not in GGML_TYPES:
        raise h.fail(f": tensor {name} has ggml type {type_id}, which h3kit's loaders do not read; use a file of "
                     "another quantization.", name)
    tname, block, nbytes = GGML_TYPES[type_id]
    count = 1
    for d in ne:
        count *= d
    if 0 in ne or count > LIMITS["elements"]:
        raise h.fail(f": tensor {name} has the shape {list(reversed(ne))}; the file is damaged: re-download it.",
                     name)
    if ne[0] % block:
        raise h.fail(f": tensor {name} has rows of {ne[0]} values, not whole {tname} blocks of {block}; "
                     "re-download the file.", name)
    if offset % align:
        raise h.fail(f": tensor {name} starts at data offset {offset}, not a multiple of the file's alignment "
                     f"{align}; the file is damaged: re-download it.", name)
    start = data_start + offset
    return {"dtype": tname, "type_id": type_id, "shape": [int(d) for d in reversed(ne)], "start": start,
            "end": start + count // block * nbytes}


def _check_ranges(h: _Header, tensors: dict) -> None:
    """Every tensor's bytes inside the file and apart from every other's."""
    past = [(e["start"], n) for n, e in tensors.items() if e["end"] > h.size]
    if past:
        first = min(past)[1]
        need = max(e["end"] for e in tensors.values())
        raise h.fail(f"is cut short: it has {h.size} bytes but its tensors need {need} ({first} and after lie past "
                     "the end); re-download the file.", first)
    last_end, last = 0, None
    for name in sorted(tensors, key=lambda n: (tensors[n]["start"], tensors[n]["end"])):
        if tensors[name]["start"] < last_end:
            raise h.fail(f": the bytes of tensor {name} overlap those of {last}; the file is damaged: re-download it.",
                         name)
        last_end, last = tensors[name]["end"], name


def read_gguf(path: str | os.PathLike) -> dict:
    """{"version", "kv", "tensors": {name: {dtype, type_id, shape (torch order), start, end}}, "data_start",
    "file_size"}; offsets absolute. `dtype` is F32/F16/BF16 or the ggml type name (Q8_0, Q4_K, ...). A KV
    array longer than ARRAY_KEPT is {"array_of": type id, "length": n}, a skipped string {"string_bytes": n}."""
    path = Path(path)
    try:
        with open(path, "rb") as f:
            h = _Header(f, path, os.fstat(f.fileno()).st_size)
            version, kv, infos = _table(h)
    except OSError as exc:
        raise GGUFError(f"cannot read {path}: {exc.strerror or exc}; check that the file exists and that "
                        "ComfyUI may read it.", path) from exc
    align = kv.get("general.alignment", DEFAULT_ALIGNMENT)
    data_start = -(-h.pos // align) * align
    tensors = {name: _entry(h, name, ne, type_id, offset, data_start, align) for name, ne, type_id, offset in infos}
    _check_ranges(h, tensors)
    return {"version": version, "kv": kv, "tensors": tensors, "data_start": data_start, "file_size": h.size}
