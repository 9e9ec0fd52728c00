"""Turning the caller's float32 buffers (array, numpy, bytes, CPU tensors) into checked C pointers."""

from __future__ import annotations

import array
import ctypes

from ._library import BLOCK, KINDS


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
            # Native byte order only: C reads the bytes as they lie, so a '>f4' array would be read as garbage.
            if not (obj.dtype.kind == "f" and obj.dtype.itemsize == 4 and obj.dtype.isnative):
                raise ValueError(f"{name} must be float32 in this machine's byte order; got {obj.dtype.str} "
                                 f"({obj.dtype}). Convert with .astype('float32').")
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
