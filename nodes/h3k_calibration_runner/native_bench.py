"""The native library through its bridge: loading it, self-test, quantized GEMV/GEMM rates, thread scaling."""

from __future__ import annotations

import importlib.util
import math
import os
import sys

from . import _numpy
from ._numpy import need_numpy
from .measure import Progress, median_seconds, random_floats


def load_bridge(bridge_path: str, lib_path: str | None):
    """Import the self-contained ctypes bridge package (a folder) and bind it to `lib_path`."""
    if lib_path:
        os.environ["H3KIT_NATIVE_LIB"] = lib_path  # the bridge's own search order reads this second
    module = import_package("h3k_native_calibration", bridge_path)
    # The bridge's load() gives a Library object with the kernels as methods; bind to it.
    return module.load(lib_path) if lib_path else module.load()


def native_matmul(nat, data, kind: str, rows: int, cols: int, x, batch: int, threads: int | None = None):
    """Y[batch][rows] = X[batch][cols] W^T through the native kernel, as a numpy array when numpy exists."""
    y = nat.matmul(data, kind, rows, cols, x, batch, threads=threads or 0)
    return as_f32(y).reshape(batch, rows) if _numpy.np is not None else y


def as_f32(buf):
    """A float32 numpy view of whatever float32 buffer the bridge returned (array, bytes, ndarray)."""
    np = _numpy.np
    return buf if isinstance(buf, np.ndarray) and buf.dtype == np.float32 else np.frombuffer(buf, dtype=np.float32)


def native_matvec(nat, data, kind: str, rows: int, cols: int, x, threads: int | None = None):
    return nat.matvec(data, kind, rows, cols, x, threads=threads or 0)


def measure_native(nat, quick: bool, progress: Progress) -> dict:
    """Self-test, kernel throughput per kind and op, and thread scaling."""
    need_numpy()
    out: dict = {"status": "measured"}
    for name in ("version", "features"):
        fn = getattr(nat, name, None)
        try:
            out[name] = fn() if callable(fn) else None
        except Exception as exc:  # a probe: report, never stop the run
            out[name] = f"error: {exc}"
    try:
        st = nat.selftest()
        out["selftest"] = st if isinstance(st, dict) else {"passed": bool(st)}
    except Exception as exc:
        out["selftest"] = {"passed": False, "error": str(exc)}
    rows, cols = (1024, 2048) if quick else (4096, 5376)
    batch = 32 if quick else 128
    repeats = 5 if quick else 7
    cores = os.cpu_count() or 1
    out["threads_max"] = cores
    w = random_floats(rows * cols, 1, 1.0 / math.sqrt(cols))
    x = random_floats(cols, 2)
    xb = random_floats(cols * batch, 3)
    kernels = []
    steps = 4 + len(_thread_counts(cores))
    progress("native kernels", 0, steps)
    for kind in ("q8_0", "q4_0"):
        q = nat.quantize(w, kind)
        for op in ("matvec", "matmul"):
            if op == "matvec":
                sec = median_seconds(lambda: native_matvec(nat, q, kind, rows, cols, x), repeats)
                n = 1
            else:
                sec = median_seconds(lambda: native_matmul(nat, q, kind, rows, cols, xb, batch), repeats)
                n = batch
            kernels.append({"kind": kind, "op": op, "shape": [rows, cols], "batch": n, "threads": cores,
                            "seconds": sec, "weight_bytes": len(q), "weight_gb_per_s": len(q) / sec / 1e9,
                            "gflop_per_s": 2.0 * rows * cols * n / sec / 1e9})
            progress("native kernels", len(kernels), steps)
    out["kernels"] = kernels
    q8 = nat.quantize(w, "q8_0")
    scaling = []
    for i, t in enumerate(_thread_counts(cores)):
        sec = median_seconds(lambda: native_matmul(nat, q8, "q8_0", rows, cols, xb, batch, threads=t), repeats)
        scaling.append({"threads": t, "seconds": sec, "gflop_per_s": 2.0 * rows * cols * batch / sec / 1e9})
        progress("native kernels", 4 + i + 1, steps)
    out["scaling"] = scaling
    best = max((k for k in kernels if k["op"] == "matmul"), key=lambda k: k["gflop_per_s"])
    out["best"] = {k: best[k] for k in ("kind", "op", "gflop_per_s", "weight_gb_per_s", "threads")}
    return out


def _thread_counts(cores: int) -> list[int]:
    counts, t = [], 1
    while t < cores:
        counts.append(t)
        t *= 2
    return counts + [cores]


def import_package(name: str, folder: str):
    """Import the package in `folder` under `name` (its relative imports need it in sys.modules)."""
    init = os.path.join(folder, "__init__.py")
    spec = importlib.util.spec_from_file_location(name, init, submodule_search_locations=[folder])
    if spec is None or spec.loader is None or not os.path.isfile(init):
        raise ImportError(f"cannot import the bridge package {folder}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module
