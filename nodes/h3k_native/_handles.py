"""The library's two handles: the preload arena and the block streamer."""

from __future__ import annotations

import ctypes
import os
from pathlib import Path

from ._buffers import _count
from ._library import END, OK, VALUE_TYPES, NativeError, ReadRequest


class _Handle:
    """An opaque C handle: closed by close(), `with`, or garbage collection."""

    @staticmethod
    def _default_library():
        raise NativeError("no library given; use h3k_native.Arena / h3k_native.Streamer, which load the default one")

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

    def __init__(self, capacity: int, lock: bool = True, library=None):
        self._lib = library if library is not None else self._default_library()
        capacity = _count(capacity, "capacity")
        handle = ctypes.c_void_p()
        self._lib.check(self._lib.c.h3k_arena_open(ctypes.byref(handle), capacity, 1 if lock else 0),
                        f"reserving an arena of {capacity} bytes")
        self._h = handle
        self.lock_requested = lock

    @classmethod
    def from_plan(cls, plan: dict, lock: bool = True, library=None) -> "Arena":
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
                 library=None):
        self._lib = library if library is not None else self._default_library()
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
    def from_plan(cls, path, plan: dict, library=None) -> "Streamer":
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

    def bypass_cache(self) -> str | None:
        """Have the ring's reads (`submit`) bypass the OS's page cache from now on, for a file larger than
        the cache can keep. None when they do; else the reason they cannot here (the ring reads through the
        cache as before)."""
        if self._lib.c.h3k_streamer_bypass_cache(self._handle()) == OK:
            return None
        return self.last_error()

    @property
    def bypassing(self) -> bool:
        """True while the ring's reads bypass the page cache (an uncached read that failed turns it off)."""
        return bool(self._lib.c.h3k_streamer_bypassing(self._handle()))

    def advise(self, offset: int, length: int) -> None:
        """Have the OS read a range into its page cache ahead of `read_into` (the background thread does it;
        this returns at once). A range past the end of the file raises NativeError."""
        if offset < 0 or length < 0:
            raise ValueError(f"offset and length must not be negative; got {offset}, {length}.")
        if self._lib.c.h3k_streamer_advise(self._handle(), offset, length) != OK:
            raise NativeError(self.last_error())

    def read_many(self, reads, threads: int = 0) -> None:
        """Direct reads, all in one call to the worker pool: `reads` holds (offset, length, address, nbytes,
        file_type, dst_type) tuples, each `length` bytes of `file_type` values at `offset` read straight into
        the `nbytes` at `address` (a tensor's data_ptr, say) and widened to `dst_type`: the same type, or
        F16/BF16 into F32. Every read is checked before any is done; a file that ends early or fails to read
        raises NativeError naming it."""
        reads = list(reads)
        table = (ReadRequest * max(1, len(reads)))()
        for i, (offset, length, address, nbytes, file_type, dst_type) in enumerate(reads):
            if offset < 0 or length < 0:
                raise ValueError(f"offset and length must not be negative; got {offset}, {length}.")
            for name in (file_type, dst_type):
                if name not in VALUE_TYPES:
                    raise ValueError(f"value type {name!r} is not one of {', '.join(VALUE_TYPES)}.")
            table[i] = ReadRequest(offset, length, address or None, _count(nbytes, "nbytes"), VALUE_TYPES[file_type],
                                   VALUE_TYPES[dst_type])
        status = self._lib.c.h3k_streamer_read(self._handle(), ctypes.cast(table, ctypes.c_void_p), len(reads),
                                               int(threads))
        if status != OK:
            raise NativeError(self.last_error())

    def read_into(self, offset: int, length: int, address: int, nbytes: int, file_type: str = "BF16",
                  dst_type: str = "F32", threads: int = 0) -> None:
        """One direct read (see read_many)."""
        self.read_many([(offset, length, address, nbytes, file_type, dst_type)], threads)

    def read_into_buffer(self, offset: int, length: int, buffer, file_type: str = "BF16", dst_type: str = "F32",
                         threads: int = 0) -> None:
        """`read_into` a writable buffer (bytearray, memoryview, numpy array)."""
        view = memoryview(buffer).cast("B")
        if view.readonly:
            raise ValueError("read_into_buffer needs a writable buffer.")
        address = ctypes.addressof(ctypes.c_char.from_buffer(view)) if view.nbytes else 0
        self.read_into(offset, length, address, view.nbytes, file_type, dst_type, threads)

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

