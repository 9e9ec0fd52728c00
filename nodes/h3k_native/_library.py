"""Finding and loading libh3kit: file names, the search order, the C prototypes, the variant pick."""

from __future__ import annotations

import ctypes
import json
import os
import sys
from pathlib import Path

KINDS = {"q8_0": 8, "q4_0": 2}


# Value types a direct read takes and gives, by their safetensors names (payload/h3k.h: ggml's type ids).
VALUE_TYPES = {"F32": 0, "F16": 1, "BF16": 30}


BLOCK = 32


BLOCK_BYTES = {"q8_0": 34, "q4_0": 18}


VARIANTS = ("baseline", "x86-64-v3", "arm64-dotprod")


ENV_LIB = "H3KIT_NATIVE_LIB"


ABI = 6  # H3K_ABI in payload/h3k.h: bumped when a C signature changes


# Bit names of h3k_cpu_features(), in bit order (payload/h3k.h).
FEATURE_BITS = ("sse2", "avx", "avx2", "fma", "f16c", "avx512f", "neon", "dotprod", "fp16")


# h3k status codes (payload/h3k.h).
OK, EINVAL, ENOMEM, EIO, ERANGE, EUNSUPPORTED, END, ESELFTEST = range(8)


class ReadRequest(ctypes.Structure):
    """One direct read (h3k_read in payload/h3k.h)."""

    _fields_ = [("offset", ctypes.c_uint64), ("length", ctypes.c_uint64), ("dst", ctypes.c_void_p),
                ("dst_size", ctypes.c_size_t), ("file_type", ctypes.c_int), ("dst_type", ctypes.c_int)]


class NativeError(RuntimeError):
    """The library is missing, refused a call, or failed a check."""


def library_filename(variant: str) -> str:
    if sys.platform == "win32":
        return f"libh3kit-{variant}.dll"
    if sys.platform == "darwin":
        return f"libh3kit-{variant}.dylib"
    return f"libh3kit-{variant}.so"


def selftest_filename(variant: str) -> str:
    """The self-test program built against libh3kit-<variant>, in the same folder (payload/selftest.c)."""
    return f"h3k-selftest-{variant}.exe" if sys.platform == "win32" else f"h3k-selftest-{variant}"


def cache_dir() -> Path:
    """h3kit's cache folder, computed the way h3kit.core.paths does (without platformdirs)."""
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
    found.append(("lib/ beside the bridge", Path(__file__).resolve().parent.parent / "lib"))
    cached = cached_build_dir()
    if cached is not None:
        found.append(("h3kit cache", cached))
    return found


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
        "h3k_streamer_limits": (ctypes.c_int, [ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(ctypes.c_int)]),
        "h3k_streamer_close": (None, [ctypes.c_void_p]),
        "h3k_streamer_file_size": (ctypes.c_uint64, [ctypes.c_void_p]),
        "h3k_streamer_submit": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint64]),
        "h3k_streamer_next": (ctypes.c_int, [ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p),
                                             ctypes.POINTER(ctypes.c_size_t), ctypes.POINTER(ctypes.c_uint64)]),
        "h3k_streamer_stats": (None, [ctypes.c_void_p, ctypes.POINTER(ctypes.c_uint64),
                                      ctypes.POINTER(ctypes.c_double), ctypes.POINTER(ctypes.c_double),
                                      ctypes.POINTER(ctypes.c_uint64)]),
        "h3k_streamer_last_error": (ctypes.c_char_p, [ctypes.c_void_p]),
        "h3k_streamer_advise": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint64]),
        "h3k_streamer_bypass_cache": (ctypes.c_int, [ctypes.c_void_p]),
        "h3k_streamer_bypassing": (ctypes.c_int, [ctypes.c_void_p]),
        "h3k_streamer_read": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]),
        "h3k_tile_starts": (ctypes.c_int, [ctypes.c_size_t, ctypes.c_size_t, ctypes.c_size_t,
                                           ctypes.POINTER(ctypes.c_size_t), ctypes.c_size_t,
                                           ctypes.POINTER(ctypes.c_size_t)]),
        "h3k_tile_extract": (ctypes.c_int, [ctypes.c_void_p] + [ctypes.c_size_t] * 7 + [ctypes.c_void_p, ctypes.c_size_t]),
        "h3k_tile_accumulate": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_size_t]
                                + [ctypes.c_size_t] * 3 + [ctypes.c_void_p, ctypes.c_size_t] + [ctypes.c_size_t] * 5),
        "h3k_tile_finish": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_size_t]
                            + [ctypes.c_size_t] * 3),
        "h3k_pool_shutdown": (None, []),
        "h3k_pool_threads": (ctypes.c_int, []),
    }

    @classmethod
    def bind(cls, dll: ctypes.CDLL) -> None:
        for name, (restype, argtypes) in cls.SIG.items():
            fn = getattr(dll, name)
            fn.restype = restype
            fn.argtypes = argtypes


def _feature_names(mask: int) -> list[str]:
    return [name for bit, name in enumerate(FEATURE_BITS) if mask & (1 << bit)]


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

