"""ctypes bridge to the h3kit native library (libh3kit-<variant>).

This file is SELF-CONTAINED: standard library only, never `import h3kit`.
Deploy copies it into the node pack as `h3k_native.py`, and the calibration
runner loads it inside ComfyUI's Python, so it must work with numpy and torch
present (ComfyUI) and without numpy (h3kit's own venv).

Where the library comes from, in this order (the first that exists wins):

1. the `path` argument of `load(path)` (a library file or a folder of them);
2. the environment variable `H3KIT_NATIVE_LIB` (file or folder);
3. `lib/` beside this file (the node pack);
4. the h3kit cache: `$H3KIT_HOME/cache/native/current.json` when H3KIT_HOME
   is set, else the per-user cache folder (`~/.cache/h3kit` on Linux,
   `~/Library/Caches/h3kit` on macOS, `%LOCALAPPDATA%\\h3kit\\Cache` on
   Windows), written by `h3kit build`.

In a folder the portable `baseline` build is loaded first and asked which
CPU features this machine has; a tuned build (`x86-64-v3`, `arm64-dotprod`)
replaces it when the CPU has everything that build needs.

Buffers: any contiguous float32 buffer (array('f'), numpy arrays, bytes-like
objects holding float32 data, CPU torch tensors). Every size is checked here
before C sees a pointer. Results come back as numpy arrays when the input was
one, else as array('f').
"""

from __future__ import annotations

import array
import ctypes
import json
import os
import sys
from pathlib import Path
from typing import NamedTuple

KINDS = {"q8_0": 8, "q4_0": 2}
BLOCK = 32
BLOCK_BYTES = {"q8_0": 34, "q4_0": 18}
VARIANTS = ("baseline", "x86-64-v3", "arm64-dotprod")
ENV_LIB = "H3KIT_NATIVE_LIB"
ABI = 1  # H3K_ABI in payload/h3k.h: bumped when a C signature changes

# Bit names of h3k_cpu_features(), in bit order (payload/h3k.h).
FEATURE_BITS = ("sse2", "avx", "avx2", "fma", "f16c", "avx512f", "neon", "dotprod", "fp16")

# h3k status codes (payload/h3k.h).
OK, EINVAL, ENOMEM, EIO, ERANGE, EUNSUPPORTED, END, ESELFTEST = range(8)


class NativeError(RuntimeError):
    """The library is missing, refused a call, or failed a check."""


def library_filename(variant: str) -> str:
    if sys.platform == "win32":
        return f"libh3kit-{variant}.dll"
    if sys.platform == "darwin":
        return f"libh3kit-{variant}.dylib"
    return f"libh3kit-{variant}.so"


def cache_dir() -> Path:
    """h3kit's cache folder, computed the way h3kit.paths does (without platformdirs)."""
    home = os.environ.get("H3KIT_HOME")
    if home:
        return Path(home).expanduser().absolute() / "cache"
    if sys.platform == "win32":
        base = os.environ.get("LOCALAPPDATA") or str(Path.home() / "AppData" / "Local")
        return Path(base) / "h3kit" / "Cache"
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Caches" / "h3kit"
    xdg = os.environ.get("XDG_CACHE_HOME", "").strip()
    return (Path(xdg) if xdg and os.path.isabs(xdg) else Path.home() / ".cache") / "h3kit"


def cached_build_dir() -> Path | None:
    """The folder `h3kit build` last wrote, from cache/native/current.json."""
    pointer = cache_dir() / "native" / "current.json"
    try:
        folder = Path(json.loads(pointer.read_text(encoding="utf-8"))["dir"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return folder if folder.is_dir() else None


def candidates(path: str | os.PathLike | None = None) -> list[tuple[str, Path]]:
    """The search order of the module docstring as (source, file-or-folder) pairs."""
    found: list[tuple[str, Path]] = []
    if path is not None:
        found.append(("argument", Path(path)))
    if os.environ.get(ENV_LIB):
        found.append((ENV_LIB, Path(os.environ[ENV_LIB])))
    found.append(("lib/ beside the bridge", Path(__file__).resolve().parent / "lib"))
    cached = cached_build_dir()
    if cached is not None:
        found.append(("h3kit cache", cached))
    return found


# --------------------------------------------------------------- library


class _Api:
    """Prototypes of the C functions (payload/h3k.h)."""

    SIG = {
        "h3k_version": (ctypes.c_char_p, []),
        "h3k_abi": (ctypes.c_int, []),
        "h3k_variant": (ctypes.c_char_p, []),
        "h3k_build_features": (ctypes.c_uint, []),
        "h3k_cpu_features": (ctypes.c_uint, []),
        "h3k_cpu_count": (ctypes.c_int, []),
        "h3k_strerror": (ctypes.c_char_p, [ctypes.c_int]),
        "h3k_quant_bytes": (ctypes.c_size_t, [ctypes.c_int, ctypes.c_size_t]),
        "h3k_quantize": (ctypes.c_int, [ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_size_t]),
        "h3k_dequantize": (ctypes.c_int, [ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_size_t]),
        "h3k_matvec": (ctypes.c_int, [ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_size_t, ctypes.c_size_t,
                                      ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]),
        "h3k_matmul": (ctypes.c_int, [ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_size_t, ctypes.c_size_t,
                                      ctypes.c_void_p, ctypes.c_size_t, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_size_t,
                                      ctypes.c_int]),
        "h3k_matmul_f32": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_size_t, ctypes.c_size_t,
                                          ctypes.c_void_p, ctypes.c_size_t, ctypes.c_size_t, ctypes.c_void_p,
                                          ctypes.c_size_t, ctypes.c_int]),
        "h3k_matvec_reference": (ctypes.c_int, [ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_size_t,
                                                ctypes.c_size_t, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p,
                                                ctypes.c_size_t]),
        "h3k_arena_open": (ctypes.c_int, [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t, ctypes.c_int]),
        "h3k_arena_close": (None, [ctypes.c_void_p]),
        "h3k_arena_alloc": (ctypes.c_void_p, [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_size_t]),
        "h3k_arena_reset": (None, [ctypes.c_void_p]),
        "h3k_arena_capacity": (ctypes.c_size_t, [ctypes.c_void_p]),
        "h3k_arena_used": (ctypes.c_size_t, [ctypes.c_void_p]),
        "h3k_arena_peak": (ctypes.c_size_t, [ctypes.c_void_p]),
        "h3k_arena_locked": (ctypes.c_int, [ctypes.c_void_p]),
        "h3k_arena_last_error": (ctypes.c_char_p, [ctypes.c_void_p]),
        "h3k_streamer_plan": (ctypes.c_int, [ctypes.c_uint64, ctypes.c_uint64, ctypes.POINTER(ctypes.c_size_t),
                                             ctypes.POINTER(ctypes.c_int)]),
        "h3k_streamer_open": (ctypes.c_int, [ctypes.POINTER(ctypes.c_void_p), ctypes.c_char_p, ctypes.c_size_t,
                                             ctypes.c_int]),
        "h3k_streamer_close": (None, [ctypes.c_void_p]),
        "h3k_streamer_file_size": (ctypes.c_uint64, [ctypes.c_void_p]),
        "h3k_streamer_submit": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint64]),
        "h3k_streamer_next": (ctypes.c_int, [ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p),
                                             ctypes.POINTER(ctypes.c_size_t), ctypes.POINTER(ctypes.c_uint64)]),
        "h3k_streamer_stats": (None, [ctypes.c_void_p, ctypes.POINTER(ctypes.c_uint64),
                                      ctypes.POINTER(ctypes.c_double), ctypes.POINTER(ctypes.c_double),
                                      ctypes.POINTER(ctypes.c_uint64)]),
        "h3k_streamer_last_error": (ctypes.c_char_p, [ctypes.c_void_p]),
        "h3k_tile_starts": (ctypes.c_int, [ctypes.c_size_t, ctypes.c_size_t, ctypes.c_size_t,
                                           ctypes.POINTER(ctypes.c_size_t), ctypes.c_size_t,
                                           ctypes.POINTER(ctypes.c_size_t)]),
        "h3k_tile_extract": (ctypes.c_int, [ctypes.c_void_p] + [ctypes.c_size_t] * 7 + [ctypes.c_void_p, ctypes.c_size_t]),
        "h3k_tile_accumulate": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_void_p] + [ctypes.c_size_t] * 3
                                + [ctypes.c_void_p] + [ctypes.c_size_t] * 5),
        "h3k_tile_finish": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_void_p] + [ctypes.c_size_t] * 3),
        "h3k_selftest": (ctypes.c_int, [ctypes.POINTER(ctypes.c_int), ctypes.c_char_p, ctypes.c_size_t]),
    }

    @classmethod
    def bind(cls, dll: ctypes.CDLL) -> None:
        for name, (restype, argtypes) in cls.SIG.items():
            fn = getattr(dll, name)
            fn.restype = restype
            fn.argtypes = argtypes


def _feature_names(mask: int) -> list[str]:
    return [name for bit, name in enumerate(FEATURE_BITS) if mask & (1 << bit)]


class Library:
    """One loaded libh3kit; every method checks its arguments before calling C."""

    def __init__(self, path: str | os.PathLike, source: str = "argument"):
        self.path = Path(path)
        self.source = source
        try:
            self._dll = ctypes.CDLL(str(self.path))
            _Api.bind(self._dll)
        except (OSError, AttributeError) as exc:
            raise NativeError(f"cannot load the h3kit native library {self.path}: {exc}. "
                              "Rebuild it with 'h3kit build --force'.") from exc
        self.c = self._dll
        if self.c.h3k_abi() != ABI:
            raise NativeError(f"{self.path} speaks ABI {self.c.h3k_abi()} but this bridge needs {ABI}; "
                              "rebuild it with 'h3kit build --force' and re-apply the pack (h3kit apply).")

    def __repr__(self) -> str:
        return f"<h3k_native.Library {self.variant()} {self.path}>"

    def error_text(self, status: int) -> str:
        return self.c.h3k_strerror(status).decode()

    def check(self, status: int, what: str, detail: str = "") -> None:
        if status != OK:
            raise NativeError(f"{what} failed: {detail or self.error_text(status)}")

    # --- identity
    def version(self) -> str:
        return self.c.h3k_version().decode()

    def variant(self) -> str:
        return self.c.h3k_variant().decode()

    def features(self) -> dict:
        return {
            "version": self.version(),
            "abi": self.c.h3k_abi(),
            "variant": self.variant(),
            "library": str(self.path),
            "source": self.source,
            "cpu": _feature_names(self.c.h3k_cpu_features()),
            "build": _feature_names(self.c.h3k_build_features()),
            "cpu_count": self.c.h3k_cpu_count(),
        }

    def runs_here(self) -> bool:
        need = self.c.h3k_build_features()
        return need & self.c.h3k_cpu_features() == need

    def selftest(self) -> dict:
        checks = ctypes.c_int(0)
        msg = ctypes.create_string_buffer(512)
        status = self.c.h3k_selftest(ctypes.byref(checks), msg, len(msg))
        return {"passed": status == OK, "checks": checks.value, "message": msg.value.decode(errors="replace")}

    # --- quant kernels
    def quantize(self, x, kind: str) -> bytes:
        code = _kind(kind)
        buf = _FloatBuffer(x, "x")
        _require_blocks(buf.n, "the number of values")
        out = bytearray(buf.n // BLOCK * BLOCK_BYTES[kind])
        self.check(self.c.h3k_quantize(code, buf.address, buf.n, _address(out, writable=True), len(out)),
                   f"quantize to {kind}")
        return bytes(out)

    def dequantize(self, data, kind: str, n: int):
        code = _kind(kind)
        _require_blocks(n, "n")
        raw = _ByteBuffer(data, "data")
        need = n // BLOCK * BLOCK_BYTES[kind]
        if raw.nbytes < need:
            raise ValueError(f"data holds {raw.nbytes} bytes but {n} {kind} values need {need}.")
        out = _new_floats(n, like=data)
        self.check(self.c.h3k_dequantize(code, raw.address, raw.nbytes, _address(out, writable=True), n),
                   f"dequantize {kind}")
        return out

    def matvec(self, data, kind: str, rows: int, cols: int, x, threads: int = 0):
        return self._product(data, kind, rows, cols, x, 1, threads, like=x, shape=(rows,))

    def matmul(self, data, kind: str, rows: int, cols: int, x, batch: int | None = None, threads: int = 0):
        """Y[batch, rows] = X[batch, cols] W^T with W quantized by rows."""
        if batch is None:
            shape = getattr(x, "shape", None)
            batch = int(shape[0]) if shape is not None and len(shape) == 2 else None
        if batch is None:
            n = _FloatBuffer(x, "x").n
            if cols <= 0 or n % cols:
                raise ValueError(f"x holds {n} values, not a whole number of rows of {cols}; pass batch=.")
            batch = n // cols
        return self._product(data, kind, rows, cols, x, batch, threads, like=x, shape=(batch, rows))

    def matmul_f32(self, w, rows: int, cols: int, x, batch: int | None = None, threads: int = 0):
        """Y[batch, rows] = X[batch, cols] W^T in plain fp32 (W rows x cols, any cols): the reference
        product for callers without numpy. Result: numpy when x is numpy, else array('f')."""
        rows, cols, threads = _count(rows, "rows"), _count(cols, "cols"), int(threads)
        if threads < 0:
            raise ValueError(f"threads must be 0 (all cores) or more; got {threads}.")
        wb, xb = _FloatBuffer(w, "w"), _FloatBuffer(x, "x")
        if wb.n != rows * cols:
            raise ValueError(f"w holds {wb.n} values but {rows} x {cols} were expected.")
        if batch is None:
            if xb.n % cols:
                raise ValueError(f"x holds {xb.n} values, not a whole number of rows of {cols}; pass batch=.")
            batch = xb.n // cols
        batch = _count(batch, "batch")
        if xb.n != batch * cols:
            raise ValueError(f"x holds {xb.n} values but {batch} x {cols} were expected.")
        y = _new_floats(batch * rows, like=x, shape=(batch, rows))
        self.check(self.c.h3k_matmul_f32(wb.address, wb.n, rows, cols, xb.address, xb.n, batch,
                                         _address(y, writable=True), batch * rows, threads), "fp32 product")
        return y

    def matvec_reference(self, data, kind: str, rows: int, cols: int, x):
        """The scalar kernel (for checking the SIMD one)."""
        return self._product(data, kind, rows, cols, x, 1, 1, like=x, shape=(rows,), reference=True)

    def _product(self, data, kind, rows, cols, x, batch, threads, like, shape, reference=False):
        code = _kind(kind)
        rows, cols, batch, threads = (_count(rows, "rows"), _count(cols, "cols"),
                                      _count(batch, "batch"), int(threads))
        if cols % BLOCK:
            raise ValueError(f"cols must be a multiple of {BLOCK} (the {kind} block size); got {cols}. "
                             f"Pad each row with zeros to {cols + BLOCK - cols % BLOCK} columns.")
        if threads < 0:
            raise ValueError(f"threads must be 0 (all cores) or more; got {threads}.")
        raw = _ByteBuffer(data, "weights")
        need = rows * (cols // BLOCK) * BLOCK_BYTES[kind]
        if raw.nbytes != need:
            raise ValueError(f"weights hold {raw.nbytes} bytes but {rows} x {cols} {kind} needs exactly {need}.")
        xb = _FloatBuffer(x, "x")
        if xb.n != batch * cols:
            raise ValueError(f"x holds {xb.n} values but {batch} x {cols} were expected.")
        y = _new_floats(batch * rows, like=like, shape=shape)
        yaddr = _address(y, writable=True)
        if reference:
            status = self.c.h3k_matvec_reference(code, raw.address, raw.nbytes, rows, cols, xb.address, xb.n,
                                                 yaddr, rows)
        else:
            status = self.c.h3k_matmul(code, raw.address, raw.nbytes, rows, cols, xb.address, xb.n, batch,
                                       yaddr, batch * rows, threads)
        self.check(status, f"{kind} product")
        return y

    # --- tiles
    def tile_starts(self, dim: int, tile: int, overlap: int) -> list[int]:
        count = ctypes.c_size_t(0)
        if self.c.h3k_tile_starts(dim, tile, overlap, None, 0, ctypes.byref(count)) != OK:
            raise ValueError(f"tiles of {tile} with overlap {overlap} do not fit a length of {dim}: "
                             "tile must be > 0 and overlap smaller than the tile.")
        starts = (ctypes.c_size_t * count.value)()
        self.check(self.c.h3k_tile_starts(dim, tile, overlap, starts, count.value, ctypes.byref(count)),
                   "tile_starts")
        return list(starts)

    def split_tiles(self, img, channels: int, height: int, width: int, tile: int, overlap: int) -> list:
        """Overlapping tiles of a planar [channels][height][width] float32 image."""
        src = _FloatBuffer(img, "img")
        if src.n != channels * height * width:
            raise ValueError(f"img holds {src.n} values but {channels} x {height} x {width} were expected.")
        tiles = []
        for y0 in self.tile_starts(height, tile, overlap):
            for x0 in self.tile_starts(width, tile, overlap):
                th, tw = min(tile, height), min(tile, width)
                out = _new_floats(channels * th * tw, like=img, shape=(channels, th, tw))
                self.check(self.c.h3k_tile_extract(src.address, channels, height, width, y0, x0, th, tw,
                                                   _address(out, writable=True), channels * th * tw),
                           "tile extract")
                tiles.append(Tile(y0, x0, th, tw, out))
        return tiles

    def blend_tiles(self, tiles, channels: int, height: int, width: int, overlap: int):
        """Blend tiles (y, x, height, width, data) back with linear feathering over `overlap`."""
        like = tiles[0].data if tiles else None
        acc = _new_floats(channels * height * width, like=like, shape=(channels, height, width))
        weight = array.array("f", bytes(4 * height * width))
        acc_addr, w_addr = _address(acc, writable=True), _address(weight, writable=True)
        for t in tiles:
            data = _FloatBuffer(t.data, "tile")
            if data.n != channels * t.height * t.width:
                raise ValueError(f"tile at ({t.y}, {t.x}) holds {data.n} values, "
                                 f"expected {channels} x {t.height} x {t.width}.")
            if t.y + t.height > height or t.x + t.width > width:
                raise ValueError(f"tile at ({t.y}, {t.x}) of {t.height} x {t.width} leaves the "
                                 f"{height} x {width} image.")
            self.check(self.c.h3k_tile_accumulate(acc_addr, w_addr, channels, height, width, data.address,
                                                  t.y, t.x, t.height, t.width, overlap), "tile blend")
        self.check(self.c.h3k_tile_finish(acc_addr, w_addr, channels, height, width), "tile finish")
        return acc

    # --- handles
    def arena(self, capacity: int, lock: bool = True) -> "Arena":
        return Arena(capacity, lock=lock, library=self)

    def streamer(self, path, **kw) -> "Streamer":
        return Streamer(path, library=self, **kw)

    def streamer_plan(self, shard_size_bytes: int, preload_bytes: int) -> tuple[int, int]:
        read_size, depth = ctypes.c_size_t(0), ctypes.c_int(0)
        self.check(self.c.h3k_streamer_plan(int(shard_size_bytes), int(preload_bytes), ctypes.byref(read_size),
                                            ctypes.byref(depth)), "streamer plan")
        return read_size.value, depth.value


class Tile(NamedTuple):
    y: int
    x: int
    height: int
    width: int
    data: object


# ---------------------------------------------------------------- buffers


def _kind(kind: str) -> int:
    if kind not in KINDS:
        raise ValueError(f"unknown quantization kind {kind!r}; use one of {', '.join(KINDS)}.")
    return KINDS[kind]


def _count(value, name: str) -> int:
    if isinstance(value, bool) or int(value) != value or int(value) <= 0:
        raise ValueError(f"{name} must be a positive whole number; got {value!r}.")
    return int(value)


def _require_blocks(n: int, name: str) -> None:
    if n <= 0 or n % BLOCK:
        raise ValueError(f"{name} must be a positive multiple of {BLOCK} (the block size); got {n}.")


def _is_numpy(obj) -> bool:
    return type(obj).__module__ == "numpy"


def _as_buffer(obj):
    """numpy arrays and CPU torch tensors pass through as themselves or numpy views."""
    if type(obj).__module__.startswith("torch") and hasattr(obj, "numpy"):
        return obj.detach().cpu().contiguous().numpy()
    if isinstance(obj, (list, tuple)):
        return array.array("f", obj)
    return obj


def _address(obj, writable: bool = False) -> int:
    """The address of a contiguous buffer's first byte (no copy)."""
    if isinstance(obj, bytes):
        return ctypes.cast(ctypes.c_char_p(obj), ctypes.c_void_p).value or 0
    iface = getattr(obj, "__array_interface__", None)
    if iface is not None:
        address, readonly = iface["data"]
        if writable and readonly:
            raise ValueError("the output array is read-only.")
        return address
    view = memoryview(obj)
    if view.readonly:  # the buffer classes copy such inputs to bytes first (see _readable)
        raise ValueError("the output buffer is read-only." if writable else "internal: read-only buffer not copied")
    if view.nbytes == 0:
        return 0
    return ctypes.addressof((ctypes.c_char * view.nbytes).from_buffer(view))


def _readable(obj):
    """obj itself when C may read it in place, else a bytes copy (read-only mmap, memoryview of bytes)."""
    if isinstance(obj, bytes) or hasattr(obj, "__array_interface__"):
        return obj
    view = memoryview(obj)
    return view.tobytes() if view.readonly else obj


class _FloatBuffer:
    """A contiguous float32 buffer: its address and element count."""

    def __init__(self, obj, name: str):
        obj = _as_buffer(obj)
        self.obj = obj  # keeps the memory alive while C uses it
        if _is_numpy(obj) and hasattr(obj, "dtype"):
            if obj.dtype.str not in ("<f4", "=f4") and not (obj.dtype.kind == "f" and obj.dtype.itemsize == 4
                                                             and sys.byteorder == "little"):
                raise ValueError(f"{name} must be float32; got {obj.dtype}. Convert with .astype('float32').")
            if not obj.flags["C_CONTIGUOUS"]:
                raise ValueError(f"{name} must be C-contiguous; pass numpy.ascontiguousarray({name}).")
            self.n = int(obj.size)
            self.address = _address(obj)
            return
        try:
            view = memoryview(obj)
        except TypeError:
            raise ValueError(f"{name} must be a float32 buffer (array('f'), numpy float32, bytes); "
                             f"got {type(obj).__name__}.") from None
        if not view.c_contiguous:
            raise ValueError(f"{name} must be contiguous.")
        if view.format.lstrip("<=@") == "f" and view.itemsize == 4:
            self.n = view.nbytes // 4
        elif view.format.lstrip("<=@") in ("B", "b", "c") and view.nbytes % 4 == 0:
            self.n = view.nbytes // 4  # raw bytes holding float32 values
        else:
            raise ValueError(f"{name} must hold float32 values; got a buffer of format {view.format!r}.")
        self.obj = _readable(obj)
        self.address = _address(self.obj)


class _ByteBuffer:
    """Quantized data: any contiguous bytes-like object (bytes, bytearray, numpy uint8, mmap)."""

    def __init__(self, obj, name: str):
        self.obj = obj
        if _is_numpy(obj) and hasattr(obj, "nbytes"):
            if not obj.flags["C_CONTIGUOUS"]:
                raise ValueError(f"{name} must be C-contiguous.")
            self.nbytes = int(obj.nbytes)
        else:
            try:
                view = memoryview(obj)
            except TypeError:
                raise ValueError(f"{name} must be bytes-like; got {type(obj).__name__}.") from None
            if not view.c_contiguous:
                raise ValueError(f"{name} must be contiguous.")
            self.nbytes = view.nbytes
            self.obj = _readable(obj)
        self.address = _address(self.obj)


def _new_floats(n: int, like=None, shape=None):
    """A zeroed float32 result: numpy when `like` is numpy, else array('f')."""
    if like is not None and (_is_numpy(like) or type(like).__module__.startswith("torch")):
        import numpy  # present whenever the caller passed numpy or torch data

        out = numpy.zeros(n, dtype=numpy.float32)
        return out.reshape(shape) if shape is not None and len(shape) > 1 else out
    return array.array("f", bytes(4 * n))


# ---------------------------------------------------------------- handles


class _Handle:
    """An opaque C handle: closed by close(), `with`, or garbage collection."""

    _kind = "handle"
    _closer = ""  # name of the C function that frees it

    _h = None

    def _handle(self):
        if not self._h:
            raise NativeError(f"the {self._kind} is closed.")
        return self._h

    def close(self) -> None:
        if self._h:
            getattr(self._lib.c, self._closer)(self._h)
            self._h = None

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:  # interpreter shutdown: the library may be gone already
            pass


class Arena(_Handle):
    """A preload region: reserved, touched and (where allowed) locked in RAM at once."""

    _kind, _closer = "arena", "h3k_arena_close"

    def __init__(self, capacity: int, lock: bool = True, library: Library | None = None):
        self._lib = library or load()
        capacity = _count(capacity, "capacity")
        handle = ctypes.c_void_p()
        self._lib.check(self._lib.c.h3k_arena_open(ctypes.byref(handle), capacity, 1 if lock else 0),
                        f"reserving an arena of {capacity} bytes")
        self._h = handle
        self.lock_requested = lock

    @classmethod
    def from_plan(cls, plan: dict, lock: bool = True, library: Library | None = None) -> "Arena":
        """The arena an h3kit.plan/1 document asks for (settings.preload_bytes)."""
        return cls(int(plan["settings"]["preload_bytes"]), lock=lock, library=library)

    def alloc(self, size: int, align: int = 64) -> memoryview:
        """A writable view of `size` bytes inside the arena, aligned to `align`."""
        size = _count(size, "size")
        addr = self._lib.c.h3k_arena_alloc(self._handle(), size, align)
        if not addr:
            raise NativeError(self.last_error())
        return memoryview((ctypes.c_char * size).from_address(addr)).cast("B")

    def reset(self) -> None:
        self._lib.c.h3k_arena_reset(self._handle())

    @property
    def capacity(self) -> int:
        return self._lib.c.h3k_arena_capacity(self._handle())

    @property
    def used(self) -> int:
        return self._lib.c.h3k_arena_used(self._handle())

    @property
    def peak(self) -> int:
        return self._lib.c.h3k_arena_peak(self._handle())

    @property
    def locked(self) -> bool:
        return bool(self._lib.c.h3k_arena_locked(self._handle()))

    def last_error(self) -> str:
        return self._lib.c.h3k_arena_last_error(self._handle()).decode(errors="replace")

    def stats(self) -> dict:
        return {"capacity": self.capacity, "used": self.used, "peak": self.peak, "locked": self.locked,
                "lock_error": None if self.locked or not self.lock_requested else self.last_error()}


class Streamer(_Handle):
    """Ranges of a file read ahead by a background thread into a ring of buffers.

    Either give read_size and depth, or shard_size_bytes and preload_bytes
    from the plan (the library derives both). Iterate to get (offset, view)
    pairs; a view is valid until the next step of the iteration.
    """

    _kind, _closer = "streamer", "h3k_streamer_close"

    def __init__(self, path, read_size: int | None = None, depth: int | None = None, *,
                 shard_size_bytes: int | None = None, preload_bytes: int | None = None,
                 library: Library | None = None):
        self._lib = library or load()
        self.path = Path(path)
        if not self.path.is_file():
            raise NativeError(f"cannot stream {self.path}: there is no such file.")
        if read_size is None or depth is None:
            planned = self._lib.streamer_plan(shard_size_bytes or self.path.stat().st_size, preload_bytes or 0)
            read_size = read_size or planned[0]
            depth = depth or planned[1]
        self.read_size, self.depth = _count(read_size, "read_size"), _count(depth, "depth")
        handle = ctypes.c_void_p()
        status = self._lib.c.h3k_streamer_open(ctypes.byref(handle), os.fsencode(self.path), self.read_size,
                                               self.depth)
        if status != OK:
            raise NativeError(f"cannot stream {self.path}: {self._lib.error_text(status)}")
        self._h = handle

    @classmethod
    def from_plan(cls, path, plan: dict, library: Library | None = None) -> "Streamer":
        """A streamer sized by an h3kit.plan/1 document (shard_size_bytes, preload_bytes)."""
        settings = plan["settings"]
        return cls(path, shard_size_bytes=int(settings["shard_size_bytes"]),
                   preload_bytes=int(settings["preload_bytes"]), library=library)

    @property
    def file_size(self) -> int:
        return self._lib.c.h3k_streamer_file_size(self._handle())

    def submit(self, offset: int, length: int) -> None:
        """Queue a range; a range past the end of the file raises NativeError at once."""
        if offset < 0 or length < 0:
            raise ValueError(f"offset and length must not be negative; got {offset}, {length}.")
        status = self._lib.c.h3k_streamer_submit(self._handle(), offset, length)
        if status != OK:
            raise NativeError(self.last_error())

    def next(self) -> tuple[int, memoryview] | None:
        data, length, offset = ctypes.c_void_p(), ctypes.c_size_t(), ctypes.c_uint64()
        status = self._lib.c.h3k_streamer_next(self._handle(), ctypes.byref(data), ctypes.byref(length),
                                               ctypes.byref(offset))
        if status == END:
            return None
        if status != OK:
            raise NativeError(self.last_error())
        return offset.value, memoryview((ctypes.c_char * length.value).from_address(data.value)).cast("B")

    def __iter__(self):
        while True:
            item = self.next()
            if item is None:
                return
            yield item

    def stats(self) -> dict:
        b, w, r, c = ctypes.c_uint64(), ctypes.c_double(), ctypes.c_double(), ctypes.c_uint64()
        self._lib.c.h3k_streamer_stats(self._handle(), ctypes.byref(b), ctypes.byref(w), ctypes.byref(r),
                                       ctypes.byref(c))
        return {"bytes_read": b.value, "wait_seconds": w.value, "read_seconds": r.value, "chunks": c.value,
                "read_size": self.read_size, "depth": self.depth}

    def last_error(self) -> str:
        return self._lib.c.h3k_streamer_last_error(self._handle()).decode(errors="replace")


# ---------------------------------------------------------------- loading


_LINUX_FLAGS = {"x86-64-v3": {"avx2", "fma", "f16c"}, "arm64-dotprod": {"asimddp"}}


def _linux_cpu_has(variant: str) -> bool:
    """Whether /proc/cpuinfo lists the tuned build's features (True where it cannot tell)."""
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return True
    flags = set()
    for line in text.splitlines():
        if line.split(":")[0].strip() in ("flags", "Features"):
            flags |= set(line.partition(":")[2].split())
    return not flags or _LINUX_FLAGS.get(variant, set()) <= flags


def _pick_in_folder(folder: Path, source: str) -> Library | None:
    """Baseline first (safe on any CPU of the arch), then the best tuned build it allows."""
    present = [v for v in VARIANTS if (folder / library_filename(v)).is_file()]
    if not present:
        return None
    if "baseline" not in present:  # a pack with only the tuned build: trust it unless Linux says no
        if not _linux_cpu_has(present[0]):
            raise NativeError(f"{folder} holds only {library_filename(present[0])}, which this CPU cannot run; "
                              "copy libh3kit-baseline from the h3kit cache beside it.")
        return Library(folder / library_filename(present[0]), source)
    base = Library(folder / library_filename("baseline"), source)
    cpu = base.c.h3k_cpu_features()
    for variant in reversed(VARIANTS[1:]):
        if variant in present:
            tuned = Library(folder / library_filename(variant), source)
            need = tuned.c.h3k_build_features()
            if need & cpu == need:
                return tuned
    return base


def find(path: str | os.PathLike | None = None) -> Library:
    """Load the library from the first place in the search order that has one."""
    looked = []
    for source, where in candidates(path):
        looked.append(f"{source}: {where}")
        if where.is_file():
            return Library(where, source)
        if where.is_dir():
            lib = _pick_in_folder(where, source)
            if lib is not None:
                return lib
    raise NativeError("the h3kit native library was not found (looked in " + "; ".join(looked) + "). "
                      "Build it with 'h3kit build'.")


_loaded: dict[str, Library] = {}


def load(path: str | os.PathLike | None = None) -> Library:
    """The library for `path` (or the search order), loaded once per process."""
    key = os.fspath(path) if path is not None else ""
    if key not in _loaded:
        _loaded[key] = find(path)
    return _loaded[key]


# Module-level functions use the library found by the search order.
def quantize(x, kind: str) -> bytes:
    return load().quantize(x, kind)


def dequantize(data, kind: str, n: int):
    return load().dequantize(data, kind, n)


def matvec(data, kind: str, rows: int, cols: int, x, threads: int = 0):
    return load().matvec(data, kind, rows, cols, x, threads)


def matmul(data, kind: str, rows: int, cols: int, x, batch: int | None = None, threads: int = 0):
    return load().matmul(data, kind, rows, cols, x, batch, threads)


def matmul_f32(w, rows: int, cols: int, x, batch: int | None = None, threads: int = 0):
    return load().matmul_f32(w, rows, cols, x, batch, threads)


def tile_starts(dim: int, tile: int, overlap: int) -> list[int]:
    return load().tile_starts(dim, tile, overlap)


def split_tiles(img, channels: int, height: int, width: int, tile: int, overlap: int) -> list:
    return load().split_tiles(img, channels, height, width, tile, overlap)


def blend_tiles(tiles, channels: int, height: int, width: int, overlap: int):
    return load().blend_tiles(tiles, channels, height, width, overlap)


def selftest() -> dict:
    return load().selftest()


def version() -> str:
    return load().version()


def features() -> dict:
    return load().features()


# ------------------------------------------------------------ command line


def selftest_folder(folder: str | os.PathLike) -> dict:
    """Self-test the baseline and the build chosen for this CPU in `folder`."""
    folder = Path(folder)
    chosen = _pick_in_folder(folder, "selftest")
    if chosen is None:
        return {"passed": False, "checks": 0, "selected": None, "message": f"no libh3kit-* in {folder}"}
    results = {}
    for variant in VARIANTS:
        path = folder / library_filename(variant)
        if not path.is_file():
            continue
        if variant in ("baseline", chosen.variant()):
            results[variant] = Library(path, "selftest").selftest()
        else:
            results[variant] = {"skipped": "this CPU lacks features that build needs"}
    failed = [f"{v}: {r['message']}" for v, r in results.items() if "passed" in r and not r["passed"]]
    return {"passed": not failed, "checks": results[chosen.variant()]["checks"], "selected": chosen.variant(),
            "library": str(chosen.path), "message": "; ".join(failed), "variants": results}


def main(argv: list[str] | None = None) -> int:
    """`python native.py selftest --dir FOLDER | --lib FILE` or `info`: one JSON line on stdout."""
    import argparse

    p = argparse.ArgumentParser(prog="h3k_native", description="h3kit native library bridge")
    p.add_argument("action", choices=("selftest", "info"))
    p.add_argument("--dir", help="a folder of libh3kit-<variant> builds")
    p.add_argument("--lib", help="one library file")
    args = p.parse_args(argv)
    try:
        if args.action == "selftest" and args.dir:
            doc = selftest_folder(args.dir)
        elif args.action == "selftest":
            lib = load(args.lib)
            doc = {**lib.selftest(), "selected": lib.variant(), "library": str(lib.path)}
        else:
            doc = load(args.lib or args.dir).features()
    except NativeError as exc:
        doc = {"passed": False, "checks": 0, "selected": None, "message": str(exc)}
    print(json.dumps(doc))
    return 0 if doc.get("passed", True) else 1


if __name__ == "__main__":
    sys.exit(main())
