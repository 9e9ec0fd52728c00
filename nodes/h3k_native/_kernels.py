"""One loaded libh3kit: every kernel as a method that checks its arguments before calling C."""

from __future__ import annotations

import array
import ctypes
import os
from pathlib import Path
from typing import NamedTuple

from ._buffers import (
    _address,
    _ByteBuffer,
    _count,
    _FloatBuffer,
    _kind,
    _new_floats,
    _require_blocks,
)
from ._handles import Arena, Streamer
from ._library import ABI, BLOCK, BLOCK_BYTES, OK, NativeError, _Api, _feature_names, selftest_filename
from ._selftest import run_selftest


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
        """{passed, checks, message} of the self-test program built against this file (beside it)."""
        return run_selftest(self.path.parent / selftest_filename(self.variant()))

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
        acc_n, weight_n = channels * height * width, height * width
        for t in tiles:
            data = _FloatBuffer(t.data, "tile")
            if data.n != channels * t.height * t.width:
                raise ValueError(f"tile at ({t.y}, {t.x}) holds {data.n} values, "
                                 f"expected {channels} x {t.height} x {t.width}.")
            if t.y + t.height > height or t.x + t.width > width:
                raise ValueError(f"tile at ({t.y}, {t.x}) of {t.height} x {t.width} leaves the "
                                 f"{height} x {width} image.")
            self.check(self.c.h3k_tile_accumulate(acc_addr, acc_n, w_addr, weight_n, channels, height, width,
                                                  data.address, data.n, t.y, t.x, t.height, t.width, overlap),
                       "tile blend")
        self.check(self.c.h3k_tile_finish(acc_addr, acc_n, w_addr, weight_n, channels, height, width), "tile finish")
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

    def streamer_limits(self) -> "StreamerLimits":
        """The largest read and ring depth the streamer accepts, as the library says (never a copy)."""
        max_read, max_depth = ctypes.c_uint64(0), ctypes.c_int(0)
        self.check(self.c.h3k_streamer_limits(ctypes.byref(max_read), ctypes.byref(max_depth)), "streamer limits")
        return StreamerLimits(max_read.value, max_depth.value)


class StreamerLimits(NamedTuple):
    """What h3k_streamer_open accepts at most: one read of `max_read_bytes`, a ring of `max_depth` buffers."""

    max_read_bytes: int
    max_depth: int


class Tile(NamedTuple):
    y: int
    x: int
    height: int
    width: int
    data: object
