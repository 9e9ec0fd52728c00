"""ctypes bridge to the h3kit native library (libh3kit-<variant>).

This package is SELF-CONTAINED: standard library only, never `import h3kit`.
It is part of the node pack (deploy copies nodes/ into ComfyUI), the
calibration runner loads it inside ComfyUI's Python, and h3kit imports it as
`h3kit.bundled.h3k_native`, so it must work with numpy and torch
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

import os
from pathlib import Path

from . import _handles
from ._kernels import Library, StreamerLimits, Tile
from ._library import (
    ABI,
    BLOCK,
    BLOCK_BYTES,
    ENV_LIB,
    FEATURE_BITS,
    KINDS,
    VALUE_TYPES,
    VARIANTS,
    NativeError,
    _linux_cpu_has,
    cache_dir,
    cached_build_dir,
    candidates,
    library_filename,
    selftest_filename,
)
from ._selftest import SELFTEST_TIMEOUT, read_selftest, run_selftest


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


def streamer_limits() -> StreamerLimits:
    return load().streamer_limits()


class Arena(_handles.Arena):
    """The preload arena, on the default library unless `library=` names one."""

    @staticmethod
    def _default_library() -> Library:
        return load()


class Streamer(_handles.Streamer):
    """The block streamer, on the default library unless `library=` names one."""

    @staticmethod
    def _default_library() -> Library:
        return load()


__all__ = ["ABI", "BLOCK", "BLOCK_BYTES", "ENV_LIB", "FEATURE_BITS", "KINDS", "VARIANTS", "Arena", "Library", "NativeError",
           "Streamer", "StreamerLimits", "Tile", "VALUE_TYPES", "blend_tiles", "cache_dir", "cached_build_dir", "candidates", "dequantize", "features", "find",
           "library_filename", "load", "matmul", "matmul_f32", "matvec", "quantize", "read_selftest", "run_selftest",
           "selftest", "selftest_filename", "SELFTEST_TIMEOUT",
           "split_tiles", "streamer_limits", "tile_starts", "version"]
