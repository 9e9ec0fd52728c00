"""h3kit calibration runner: measure this machine from inside ComfyUI's Python.

Self-contained on purpose (stdlib, plus numpy and torch when importable;
never `import h3kit`): deploy copies this one file into the node pack as
`h3k_calibration_runner.py`, and h3kit runs it with ComfyUI's interpreter so
the torch measured is the torch ComfyUI uses.

    python calibration_runner.py --bridge PATH/native.py --lib LIB \
        --plan plan.json --out result.json [--quick] [--progress FILE]

`plan.json` is either a bare `h3kit.plan/1` document or h3kit's job
`{"plan": ..., "scaled_dit": {...}, "budget": {...}, "tile_candidates": [...]}`.
The result is one JSON object: `runner`, `native`, `inference`, `device`,
`tiles`, `skipped`. Each part that cannot run says why in `reason` instead
of stopping the others. Progress goes to --progress as JSON lines
`{"stage", "done", "total"}` for h3kit's progress bars.

What it measures:
- native: the library's self-test; q8_0/q4_0 matvec and matmul (GB/s of
  weights read, GFLOP/s); matmul scaling from 1 thread to all cores;
- inference: a scaled-down H3-shaped DiT (RMSNorm, attention with head_dim
  128, SwiGLU FFN) whose random weights are written to a temporary
  safetensors file (written here: 8-byte header length, JSON header, raw
  data), read back block by block through the native streamer at the plan's
  shard/preload sizes, with linear layers run by the native quantized
  kernels; checked against a plain fp32 forward of the same weights. With
  numpy the rest of the block is numpy; without it (h3kit's own venv) the
  fp32 products go through the library's h3k_matmul_f32 and the norms,
  softmax and SwiGLU are plain Python at a smaller shape (`path` says which);
- device (torch sees cuda, mps or xpu): bf16/fp16 matmul TFLOP/s,
  host-to-device GB/s, free memory, a tile sweep of decode-shaped
  convolutions with time and peak memory per tile.
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import json
import math
import os
import platform
import statistics
import struct
import sys
import tempfile
import threading
import time
import traceback

# numpy is optional (without it the scaled DiT runs its native+python path, at a smaller shape) and is
# imported only when a measurement runs: h3kit's own process imports this module for its page-cache helpers.
np = None


def need_numpy() -> bool:
    """Import numpy into this module on first use; False when this Python has none."""
    global np
    if np is None:
        try:
            import numpy
        except ImportError:
            return False
        np = numpy
    return True

RESULT_SCHEMA = "h3kit.calibration-run/1"
QUANT_BLOCK = 32
QUANT_BYTES_PER_BLOCK = {"q8_0": 34, "q4_0": 18}  # ggml block: fp16 scale + 32 int8 / 16 packed nibbles


# -- progress ---------------------------------------------------------------------

class Progress:
    """Appends {"stage", "done", "total"} lines to a file h3kit follows; a no-op without one."""

    def __init__(self, path: str | None):
        self.path = path

    def __call__(self, stage: str, done: int, total: int) -> None:
        if not self.path:
            return
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(json.dumps({"stage": stage, "done": done, "total": total, "t": time.time()}) + "\n")


# -- resident memory, sampled ---------------------------------------------------------

def current_rss() -> int | None:
    """This process's resident set in bytes, or None where it cannot be read cheaply."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError, AttributeError):
        pass
    try:
        import psutil

        return psutil.Process().memory_info().rss
    except Exception:  # psutil missing or refused: fall back to the lifetime peak
        try:
            import resource

            peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
            return peak if sys.platform == "darwin" else peak * 1024
        except Exception:
            return None


class PeakSampler:
    """Samples RSS every few milliseconds in a thread while a `with` block runs."""

    def __init__(self, interval: float = 0.005):
        self.interval = interval
        self.peak = 0
        self._stop = threading.Event()

    def __enter__(self):
        self.start = current_rss() or 0
        self.peak = self.start
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()
        return self

    def _loop(self):
        while not self._stop.is_set():
            rss = current_rss()
            if rss and rss > self.peak:
                self.peak = rss
            self._stop.wait(self.interval)

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        rss = current_rss()
        if rss and rss > self.peak:
            self.peak = rss
        return False


# -- the page cache ------------------------------------------------------------------

def drop_page_cache(path: str) -> bool:
    """Ask the OS to forget a written file's cached pages, so the next read comes from the disk.

    Linux (and other POSIX systems with posix_fadvise): fsync, then
    POSIX_FADV_DONTNEED. Returns False where that does not exist (macOS,
    Windows): readers there may be served from memory, and reports say so.
    """
    if not hasattr(os, "posix_fadvise"):
        return False
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


def no_cache(fd: int) -> None:
    """macOS: read this handle around the unified buffer cache (F_NOCACHE); elsewhere nothing."""
    if sys.platform == "darwin":
        import fcntl

        try:
            fcntl.fcntl(fd, 48, 1)  # F_NOCACHE from sys/fcntl.h; Python's fcntl module lacks the name
        except OSError:
            pass


# -- the native bridge --------------------------------------------------------------

def load_bridge(bridge_path: str, lib_path: str | None):
    """Import the self-contained ctypes bridge file and bind it to `lib_path`."""
    if lib_path:
        os.environ["H3KIT_NATIVE_LIB"] = lib_path  # the bridge's own search order reads this second
    spec = importlib.util.spec_from_file_location("h3k_native_calibration", bridge_path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import the bridge {bridge_path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    # The bridge's load() gives a Library object with the kernels as methods; bind to it.
    return module.load(lib_path) if lib_path else module.load()


def native_matmul(nat, data, kind: str, rows: int, cols: int, x, batch: int, threads: int | None = None):
    """Y[batch][rows] = X[batch][cols] W^T through the native kernel, as a numpy array when numpy exists."""
    y = nat.matmul(data, kind, rows, cols, x, batch, threads=threads or 0)
    return as_f32(y).reshape(batch, rows) if np is not None else y


def as_f32(buf):
    """A float32 numpy view of whatever float32 buffer the bridge returned (array, bytes, ndarray)."""
    return buf if isinstance(buf, np.ndarray) and buf.dtype == np.float32 else np.frombuffer(buf, dtype=np.float32)


def native_matvec(nat, data, kind: str, rows: int, cols: int, x, threads: int | None = None):
    return nat.matvec(data, kind, rows, cols, x, threads=threads or 0)


def _floats(n: int, seed: int, scale: float = 1.0):
    """n pseudo-random floats in [-scale, scale): numpy when present, else an array('f')."""
    if np is not None:
        return (np.random.default_rng(seed).standard_normal(n, dtype=np.float32) * scale).astype(np.float32)
    import array
    import random

    rnd = random.Random(seed)
    return array.array("f", (rnd.uniform(-scale, scale) for _ in range(n)))


def _median_seconds(fn, repeats: int) -> float:
    fn()  # warm caches and thread pools
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


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
    w = _floats(rows * cols, 1, 1.0 / math.sqrt(cols))
    x = _floats(cols, 2)
    xb = _floats(cols * batch, 3)
    kernels = []
    steps = 4 + len(_thread_counts(cores))
    progress("native kernels", 0, steps)
    for kind in ("q8_0", "q4_0"):
        q = nat.quantize(w, kind)
        for op in ("matvec", "matmul"):
            if op == "matvec":
                sec = _median_seconds(lambda: native_matvec(nat, q, kind, rows, cols, x), repeats)
                n = 1
            else:
                sec = _median_seconds(lambda: native_matmul(nat, q, kind, rows, cols, xb, batch), repeats)
                n = batch
            kernels.append({"kind": kind, "op": op, "shape": [rows, cols], "batch": n, "threads": cores,
                            "seconds": sec, "weight_bytes": len(q), "weight_gb_per_s": len(q) / sec / 1e9,
                            "gflop_per_s": 2.0 * rows * cols * n / sec / 1e9})
            progress("native kernels", len(kernels), steps)
    out["kernels"] = kernels
    q8 = nat.quantize(w, "q8_0")
    scaling = []
    for i, t in enumerate(_thread_counts(cores)):
        sec = _median_seconds(lambda: native_matmul(nat, q8, "q8_0", rows, cols, xb, batch, threads=t), repeats)
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


# -- safetensors, written by hand ----------------------------------------------------

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


def read_safetensors_header(path: str) -> tuple[dict, int]:
    """The JSON header and the byte offset where data starts."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        return json.loads(f.read(n)), 8 + n


# -- the scaled H3-shaped DiT -----------------------------------------------------------
#
# Two ways to run it, the same block and the same report fields:
# - "numpy": activations are numpy arrays; the fp32 reference is numpy matmuls;
# - "native+python" (this Python has no numpy, e.g. h3kit's own venv): activations
#   are flat array('f') buffers, every product (the quantized linears, the fp32
#   reference linears, Q K^T and attention x V) goes through the native library,
#   and RMSNorm, softmax and SwiGLU are plain Python loops, so the shape is
#   capped (PYTHON_PATH_LIMITS) to keep those loops to seconds.

LINEARS = ("wq", "wk", "wv", "wo", "w_gate", "w_up", "w_down")
PYTHON_PATH_LIMITS = {"quick": {"blocks": 2, "hidden": 256, "tokens": 384},
                      "full": {"blocks": 4, "hidden": 512, "tokens": 384}}


def linear_shapes(hidden: int, ffn: int) -> dict:
    """(rows, cols) of each linear layer of a block: y = W x with W rows x cols."""
    return {"wq": (hidden, hidden), "wk": (hidden, hidden), "wv": (hidden, hidden), "wo": (hidden, hidden),
            "w_gate": (ffn, hidden), "w_up": (ffn, hidden), "w_down": (hidden, ffn)}


def python_path_shape(cfg: dict, quick: bool) -> dict:
    """The scaled DiT capped for the native+python path: the same head_dim and FFN ratio, fewer
    blocks, a narrower width, at most the limit's tokens. Shapes already within the caps stay."""
    lim = PYTHON_PATH_LIMITS["quick" if quick else "full"]
    hidden = max(cfg["head_dim"], min(cfg["hidden"], lim["hidden"]) // cfg["head_dim"] * cfg["head_dim"])
    ffn = cfg["ffn"] if hidden == cfg["hidden"] else \
        max(32, int(round(hidden * cfg["ffn"] / cfg["hidden"] / 32)) * 32)
    return {**cfg, "blocks": min(cfg["blocks"], lim["blocks"]), "hidden": hidden, "heads": hidden // cfg["head_dim"],
            "ffn": ffn, "tokens": min(cfg["tokens"], lim["tokens"])}


def block_weights(cfg: dict, block: int) -> dict:
    """The fp32 weights of one block (numpy), regenerated from seeds (so they need not stay in memory)."""
    h, ffn = cfg["hidden"], cfg["ffn"]
    out = {}
    for i, (name, (rows, cols)) in enumerate(linear_shapes(h, ffn).items()):
        seed = 1000 * (block + 1) + i
        out[name] = np.random.default_rng(seed).standard_normal((rows, cols), dtype=np.float32) / np.float32(math.sqrt(cols))
    rng = np.random.default_rng(1000 * (block + 1) + 99)
    out["attn_norm"] = (1.0 + 0.1 * rng.standard_normal(h)).astype(np.float32)
    out["ffn_norm"] = (1.0 + 0.1 * rng.standard_normal(h)).astype(np.float32)
    return out


@functools.lru_cache(maxsize=None)
def _gaussian_byte_table(sigma: float) -> bytes:
    """256 int8 values (as bytes) at the quantiles of N(0, sigma): bytes.translate through it turns
    uniform random bytes into roughly normal int8 values at C speed. |value| <= 80 < 127, so q8_0
    re-quantizing these weights really rounds (a full int8 range would survive it unchanged)."""
    from statistics import NormalDist

    unit = NormalDist()
    return bytes(max(-127, min(127, round(unit.inv_cdf((b + 0.5) / 256) * sigma))) & 0xFF for b in range(256))


GAUSS_SIGMA = 30.0


def stdlib_block_weights(nat, cfg: dict, block: int) -> dict:
    """The fp32 weights of one block as array('f') without numpy: roughly normal int8 values with
    one fp16 scale per 32 (std 1/sqrt(cols)), laid out as q8_0 blocks and widened by the native
    dequantize. Regenerated from seeds like block_weights."""
    import array
    import random

    table = _gaussian_byte_table(GAUSS_SIGMA)
    out = {}
    for i, (name, (rows, cols)) in enumerate(linear_shapes(cfg["hidden"], cfg["ffn"]).items()):
        raw = random.Random(1000 * (block + 1) + i).randbytes(rows * cols).translate(table)
        scale = struct.pack("<e", 1.0 / (GAUSS_SIGMA * math.sqrt(cols)))
        blocks = b"".join(scale + raw[j:j + QUANT_BLOCK] for j in range(0, len(raw), QUANT_BLOCK))
        out[name] = nat.dequantize(blocks, "q8_0", rows * cols)
    rnd = random.Random(1000 * (block + 1) + 99)
    for name in ("attn_norm", "ffn_norm"):
        out[name] = array.array("f", (1.0 + 0.1 * rnd.gauss(0.0, 1.0) for _ in range(cfg["hidden"])))
    return out


def stdlib_inputs(cfg: dict):
    """The DiT's input tokens (tokens x hidden, N(0, 1)) as array('f'), without numpy."""
    import array
    import random

    rnd = random.Random(7)
    return array.array("f", (rnd.gauss(0.0, 1.0) for _ in range(cfg["tokens"] * cfg["hidden"])))


class NumpyOps:
    """The block's non-linear parts over numpy arrays (tokens x width)."""

    name = "numpy"

    def __init__(self, nat):
        self.nat = nat

    def inputs(self, cfg: dict):
        return np.random.default_rng(7).standard_normal((cfg["tokens"], cfg["hidden"]), dtype=np.float32)

    def block_weights(self, cfg: dict, block: int) -> dict:
        return block_weights(cfg, block)

    def adopt(self, cfg: dict, buf):
        """Any flat float32 buffer as this path's activations."""
        return np.frombuffer(memoryview(buf).cast("B"), dtype=np.float32).reshape(cfg["tokens"], cfg["hidden"]).copy()

    def adopt_weights(self, w: dict, cfg: dict) -> dict:
        shapes = linear_shapes(cfg["hidden"], cfg["ffn"])
        return {n: np.frombuffer(memoryview(v).cast("B"), dtype=np.float32).reshape(shapes.get(n, (-1,)))
                for n, v in w.items()}

    def floats(self, raw):
        return np.frombuffer(raw, dtype=np.float32)

    def quantized_linear(self, data, kind: str, rows: int, cols: int, a):
        return native_matmul(self.nat, data, kind, rows, cols, np.ascontiguousarray(a, dtype=np.float32), a.shape[0])

    def fp32_linear(self, w, rows: int, cols: int, a):
        return a @ w.T

    def rms_norm(self, x, g, cfg: dict, eps: float = 1e-6):
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * g

    def attention(self, q, k, v, cfg: dict):
        """Full (non-causal) softmax attention over all tokens, per head."""
        t, heads, head_dim = q.shape[0], cfg["heads"], cfg["head_dim"]
        q = q.reshape(t, heads, head_dim).transpose(1, 0, 2)
        k = k.reshape(t, heads, head_dim).transpose(1, 0, 2)
        v = v.reshape(t, heads, head_dim).transpose(1, 0, 2)
        s = q @ k.transpose(0, 2, 1) / np.float32(math.sqrt(head_dim))
        s = np.exp(s - s.max(axis=-1, keepdims=True))
        s /= s.sum(axis=-1, keepdims=True)
        return (s @ v).transpose(1, 0, 2).reshape(t, heads * head_dim)

    def swiglu(self, gate, up):
        return gate / (1.0 + np.exp(-gate)) * up

    def add(self, a, b):
        return a + b

    def rel_err(self, a, b) -> float:
        return float(np.linalg.norm(a - b) / max(float(np.linalg.norm(b)), 1e-30))


class PythonOps:
    """The same block over flat array('f') buffers (row-major tokens x width): products native,
    the rest plain Python. Sums run in Python floats (double) and are stored as float32."""

    name = "native+python"

    def __init__(self, nat):
        self.nat = nat

    def inputs(self, cfg: dict):
        return stdlib_inputs(cfg)

    def block_weights(self, cfg: dict, block: int) -> dict:
        return stdlib_block_weights(self.nat, cfg, block)

    def adopt(self, cfg: dict, buf):
        import array

        out = array.array("f")
        out.frombytes(memoryview(buf).cast("B"))
        return out

    def adopt_weights(self, w: dict, cfg: dict) -> dict:
        return {n: self.adopt(cfg, v) for n, v in w.items()}

    def floats(self, raw):
        return self.adopt(None, raw)

    def quantized_linear(self, data, kind: str, rows: int, cols: int, a):
        return self.nat.matmul(data, kind, rows, cols, a, len(a) // cols)

    def fp32_linear(self, w, rows: int, cols: int, a):
        return self.nat.matmul_f32(w, rows, cols, a, len(a) // cols)

    def rms_norm(self, x, g, cfg: dict, eps: float = 1e-6):
        import array
        from operator import mul

        h = cfg["hidden"]
        out = array.array("f")
        for start in range(0, len(x), h):
            row = x[start:start + h]
            inv = 1.0 / math.sqrt(sum(map(mul, row, row)) / h + eps)
            out.extend(map(mul, row, map(inv.__mul__, g)))
        return out

    def attention(self, q, k, v, cfg: dict):
        """Per head: S = Q K^T and O = P V through the native fp32 product, softmax in Python."""
        import array

        t, h, hd = cfg["tokens"], cfg["hidden"], cfg["head_dim"]
        scale = 1.0 / math.sqrt(hd)
        heads_out = []
        for head in range(cfg["heads"]):
            off = head * hd
            qh, kh, vt = array.array("f"), array.array("f"), array.array("f")
            for row in range(off, t * h, h):
                qh.extend(q[row:row + hd])
                kh.extend(k[row:row + hd])
            for d in range(hd):  # V^T: O = P (V^T)^T, the product's X W^T form
                vt.extend(v[off + d::h])
            s = self.nat.matmul_f32(kh, t, hd, qh, t)  # S[i][j] = q_i . k_j
            p = array.array("f")
            inv_sums = []
            for i in range(0, t * t, t):
                row = s[i:i + t]
                shift = -max(row) * scale
                start = len(p)
                p.extend(map(math.exp, map(shift.__add__, map(scale.__mul__, row))))
                inv_sums.append(1.0 / sum(p[start:]))
            o = self.nat.matmul_f32(vt, hd, t, p, t)  # unnormalized P V, tokens x head_dim
            heads_out.append((o, inv_sums))
        out = array.array("f")
        for i in range(t):
            for o, inv_sums in heads_out:
                out.extend(map(inv_sums[i].__mul__, o[i * hd:(i + 1) * hd]))
        return out

    def swiglu(self, gate, up):
        import array

        exp = math.exp  # below -80 silu(g) is 0 in float32, and exp(-g) would overflow a double past -709
        return array.array("f", map(lambda g, u: g / (1.0 + exp(-g)) * u if g > -80.0 else 0.0, gate, up))

    def add(self, a, b):
        import array
        from operator import add

        return array.array("f", map(add, a, b))

    def rel_err(self, a, b) -> float:
        from operator import sub

        diff = list(map(sub, a, b))
        return math.sqrt(math.fsum(d * d for d in diff)) / max(math.sqrt(math.fsum(v * v for v in b)), 1e-30)


def block_forward(ops, x, norms: dict, linear, cfg: dict):
    """One DiT block; `linear(name, activations)` computes activations W^T for that layer."""
    h1 = ops.rms_norm(x, norms["attn_norm"], cfg)
    a = ops.attention(linear("wq", h1), linear("wk", h1), linear("wv", h1), cfg)
    x = ops.add(x, linear("wo", a))
    h2 = ops.rms_norm(x, norms["ffn_norm"], cfg)
    return ops.add(x, linear("w_down", ops.swiglu(linear("w_gate", h2), linear("w_up", h2))))


def reference_forward(ops, cfg: dict, x, weights_of):
    """Plain fp32 forward; `weights_of(block)` gives that block's weights in the ops' format."""
    shapes = linear_shapes(cfg["hidden"], cfg["ffn"])
    for b in range(cfg["blocks"]):
        w = weights_of(b)
        x = block_forward(ops, x, w, lambda name, a: ops.fp32_linear(w[name], *shapes[name], a), cfg)
    return x


def write_model(nat, cfg: dict, path: str, progress: Progress, weights_of) -> list[dict]:
    """Quantize every block's linears and write the safetensors file; returns each block's byte range."""
    kind = cfg["quantization"]
    tensors = []
    for b in range(cfg["blocks"]):
        w = weights_of(b)
        for name in LINEARS:
            tensors.append((f"blocks.{b}.{name}", "U8", None, bytes(nat.quantize(w[name], kind))))
        for name in ("attn_norm", "ffn_norm"):
            tensors.append((f"blocks.{b}.{name}", "F32", [cfg["hidden"]], memoryview(w[name]).tobytes()))
        progress("writing the scaled model", b + 1, cfg["blocks"])
    tensors = [(n, d, s if s is not None else [len(r)], r) for n, d, s, r in tensors]
    meta = {"format": "h3kit-calibration", "quantization": kind, "hidden": cfg["hidden"], "ffn": cfg["ffn"],
            "blocks": cfg["blocks"]}
    offsets = write_safetensors(path, tensors, meta)
    layout = []
    for b in range(cfg["blocks"]):
        names = [n for n, _, _, _ in tensors if n.startswith(f"blocks.{b}.")]
        start = min(offsets[n][0] for n in names)
        end = max(offsets[n][1] for n in names)
        layout.append({"block": b, "start": start, "end": end,
                       "tensors": {n.split(".", 2)[2]: (offsets[n][0] - start, offsets[n][1] - start) for n in names}})
    return layout


def open_streamer(nat, path: str, shard: int, preload: int):
    """The bridge's Streamer for `path`; the library derives read size and depth from shard and preload."""
    return nat.streamer(path, shard_size_bytes=shard, preload_bytes=preload)


def stream_blocks(st, layout: list[dict]):
    """Yield (block layout, block bytes, seconds waited) in order; ranges are submitted up front."""
    for blk in layout:
        st.submit(blk["start"], blk["end"] - blk["start"])
    for blk in layout:
        need = blk["end"] - blk["start"]
        buf = bytearray(need)
        got = 0
        waited = 0.0
        while got < need:
            t0 = time.perf_counter()
            chunk = st.next()
            waited += time.perf_counter() - t0
            if chunk is None:
                raise RuntimeError(f"the streamer ended {need - got} bytes short of block {blk['block']}")
            offset, mv = chunk  # the view is valid until the next call: copy it out now
            pos = offset - blk["start"]
            buf[pos:pos + len(mv)] = mv
            got += len(mv)
        yield blk, buf, waited


def run_scaled_dit(nat, job: dict, quick: bool, progress: Progress, path: str | None = None) -> dict:
    """Write the scaled model, stream it through the native streamer, check it against fp32.

    `path` is "numpy" or "native+python"; by default numpy when this Python has it.
    """
    return scaled_dit(nat, job, quick, progress, path)[0]


def scaled_dit(nat, job: dict, quick: bool, progress: Progress, path: str | None = None,
               weights_of=None, inputs=None) -> tuple[dict, object]:
    """run_scaled_dit's result and the streamed output (in the path's format). `weights_of(cfg, block)`
    and `inputs` (flat float32 buffers) replace the path's own random weights and input, so two paths
    can be compared on the same numbers."""
    if path is None:
        path = "numpy" if need_numpy() else "native+python"
    if path == "numpy" and not need_numpy():
        raise RuntimeError("the numpy path of the scaled DiT needs numpy")
    ops = NumpyOps(nat) if path == "numpy" else PythonOps(nat)
    cfg = dict(job["scaled_dit"])
    if path != "numpy":
        cfg = python_path_shape(cfg, quick)
    settings = (job.get("plan") or {}).get("settings") or {}
    shard = int(settings.get("shard_size_bytes") or (64 << 20))
    preload = int(settings.get("preload_bytes") or 0)
    kind = cfg["quantization"]
    t, h = cfg["tokens"], cfg["hidden"]
    if weights_of is None:
        fp32_weights = lambda b: ops.block_weights(cfg, b)  # noqa: E731
    else:
        fp32_weights = lambda b: ops.adopt_weights(weights_of(cfg, b), cfg)  # noqa: E731
    x0 = ops.inputs(cfg) if inputs is None else ops.adopt(cfg, inputs)
    fd, file_path = tempfile.mkstemp(prefix="h3kit-scaled-dit-", suffix=".safetensors")
    os.close(fd)
    try:
        layout = write_model(nat, cfg, file_path, progress, fp32_weights)
        file_bytes = os.path.getsize(file_path)
        cache_dropped = drop_page_cache(file_path)  # so waiting on the streamer means waiting on the disk
        shapes = linear_shapes(h, cfg["ffn"])
        blocks, timeline = [], []
        x = x0
        base_rss = current_rss() or 0
        t_start = time.perf_counter()
        with PeakSampler() as sampler, open_streamer(nat, file_path, shard, preload) as st:
            for blk, buf, waited in stream_blocks(st, layout):
                t_ready = time.perf_counter()
                mv = memoryview(buf)
                tens = blk["tensors"]
                norms = {n: ops.floats(mv[tens[n][0]:tens[n][1]]) for n in ("attn_norm", "ffn_norm")}

                def linear(name, a, _mv=mv, _tens=tens):
                    s, e = _tens[name]
                    return ops.quantized_linear(_mv[s:e], kind, *shapes[name], a)

                x = block_forward(ops, x, norms, linear, cfg)
                t_done = time.perf_counter()
                i = blk["block"]
                timeline.append({"block": i, "kind": "wait", "start": t_ready - waited - t_start, "end": t_ready - t_start})
                timeline.append({"block": i, "kind": "compute", "start": t_ready - t_start, "end": t_done - t_start})
                blocks.append({"index": i, "seconds": waited + (t_done - t_ready), "wait_seconds": waited,
                               "compute_seconds": t_done - t_ready, "bytes": blk["end"] - blk["start"]})
                progress("scaled DiT through the streamer", i + 1, cfg["blocks"])
            stats = _streamer_stats(st)
        streamed = x
        ring = ring_bytes(nat, shard, preload)
        progress("fp32 reference forward", 0, 2)
        ref = reference_forward(ops, cfg, x0, fp32_weights)
        progress("fp32 reference forward", 1, 2)
        deq = reference_forward(ops, cfg, x0, lambda b: _dequantized(nat, ops, cfg, fp32_weights(b)))
        progress("fp32 reference forward", 2, 2)
    finally:
        os.unlink(file_path)
    wait = sum(b["wait_seconds"] for b in blocks)
    compute = sum(b["compute_seconds"] for b in blocks)
    act = t * (4 * h + 3 * cfg["ffn"]) * 4 + cfg["heads"] * t * t * 4 * 2
    predicted = base_rss + ring + max(b["bytes"] for b in blocks) + act
    result = {
        "status": "measured",
        "path": ops.name,
        "path_note": "numpy for the norms, attention and fp32 reference" if ops.name == "numpy" else
                     "no numpy in this Python: products in the native library (quantized linears; fp32 reference "
                     "linears, Q K^T and attention x V through h3k_matmul_f32), RMSNorm, softmax and SwiGLU in "
                     "plain Python, at a smaller shape",
        "config": {**cfg, "shard_size_bytes": shard, "preload_bytes": preload},
        "requested_config": dict(job["scaled_dit"]),
        "file_bytes": file_bytes,
        "blocks": blocks,
        "timeline": timeline,
        "bytes_streamed": stats.get("bytes_read") or sum(b["bytes"] for b in blocks),
        "streamer": stats,
        "page_cache_dropped": cache_dropped,
        "wait_seconds": wait,
        "compute_seconds": compute,
        "wait_fraction": wait / (wait + compute) if wait + compute > 0 else 0.0,
        "seconds_per_block": (wait + compute) / len(blocks),
        "peak_rss_bytes": sampler.peak,
        "baseline_rss_bytes": base_rss,
        "predicted_peak_rss_bytes": predicted,
        "memory_growth_ratio": (sampler.peak - base_rss) / (predicted - base_rss) if predicted > base_rss else None,
        "relative_error": ops.rel_err(streamed, ref),
        "kernel_relative_error": ops.rel_err(streamed, deq),
        "error_note": "relative_error compares with fp32 weights (quantization included); "
                      "kernel_relative_error with the dequantized weights (the kernels alone)",
    }
    return result, streamed


def _dequantized(nat, ops, cfg: dict, w: dict) -> dict:
    """The block's weights with every linear quantized and dequantized again (the kernels' view)."""
    out = dict(w)
    for name, (rows, cols) in linear_shapes(cfg["hidden"], cfg["ffn"]).items():
        q = nat.quantize(w[name], cfg["quantization"])
        out[name] = ops.adopt_weights({name: nat.dequantize(q, cfg["quantization"], rows * cols)}, cfg)[name]
    return out


def _streamer_stats(st) -> dict:
    stats = getattr(st, "stats", None)
    try:
        s = stats() if callable(stats) else stats
    except Exception:
        return {}
    return dict(s) if isinstance(s, dict) else {}


def ring_bytes(nat, shard: int, preload: int) -> int:
    """The streamer's buffers (read size x depth, as the library plans them): allocated whole,
    however small the file, so they count in full."""
    read_size, depth = nat.streamer_plan(shard, preload)
    return read_size * depth


# -- device (torch) ------------------------------------------------------------------------

def _torch_device():
    """(torch, device name, backend) when torch sees a GPU, else (torch|None, None, why not)."""
    try:
        import torch
    except Exception as exc:
        return None, None, f"torch is not importable in this Python ({type(exc).__name__})"
    if torch.cuda.is_available():
        backend = "rocm" if getattr(torch.version, "hip", None) else "cuda"
        return torch, "cuda", backend
    if getattr(torch, "xpu", None) is not None and torch.xpu.is_available():
        return torch, "xpu", "xpu"
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        return torch, "mps", "mps"
    return torch, None, f"torch {torch.__version__} sees no cuda, mps or xpu device"


def _sync(torch, dev: str) -> None:
    getattr(torch, dev).synchronize()


def _device_timed(torch, dev: str, fn, repeats: int) -> float:
    fn()
    _sync(torch, dev)
    t0 = time.perf_counter()
    for _ in range(repeats):
        fn()
    _sync(torch, dev)
    return (time.perf_counter() - t0) / repeats


def _free_memory(torch, dev: str) -> tuple[int | None, int | None]:
    if dev in ("cuda", "xpu") and hasattr(getattr(torch, dev), "mem_get_info"):
        free, total = getattr(torch, dev).mem_get_info()
        return int(free), int(total)
    if dev == "mps":
        total = torch.mps.recommended_max_memory()
        return int(total - torch.mps.driver_allocated_memory()), int(total)
    return None, None


def _reset_peak(torch, dev: str) -> None:
    mod = getattr(torch, dev)
    if hasattr(mod, "reset_peak_memory_stats"):
        mod.reset_peak_memory_stats()
    if hasattr(mod, "empty_cache"):
        mod.empty_cache()


def _peak(torch, dev: str) -> int | None:
    mod = getattr(torch, dev)
    if hasattr(mod, "max_memory_allocated"):
        return int(mod.max_memory_allocated())
    if dev == "mps":
        return int(torch.mps.driver_allocated_memory())
    return None


def decode_shaped(torch, dev: str, tile: int, frames: int, dtype):
    """The last stages of a video VAE decoder at one pixel tile: 3x3 convs at 512/256/128 channels
    on 1/4, 1/2 and full resolution with nearest-neighbour upsampling in between, per frame."""
    nn = torch.nn.functional
    x = torch.randn(frames, 512, tile // 4, tile // 4, device=dev, dtype=dtype)
    for ch_in, ch_out in ((512, 256), (256, 128), (128, 128)):
        w = torch.randn(ch_out, ch_in, 3, 3, device=dev, dtype=dtype) / math.sqrt(9 * ch_in)
        x = nn.silu(nn.conv2d(x, w, padding=1))
        if x.shape[-1] < tile:
            x = nn.interpolate(x, scale_factor=2, mode="nearest")
    return nn.conv2d(x, torch.randn(3, 128, 3, 3, device=dev, dtype=dtype) / 34.0, padding=1)


def measure_device(job: dict, quick: bool, progress: Progress) -> tuple[dict, list[dict]]:
    torch, dev, backend = _torch_device()
    if dev is None:
        return {"status": "skipped", "reason": backend, "torch": getattr(torch, "__version__", None)}, []
    out = {"status": "measured", "backend": backend, "torch": torch.__version__}
    try:
        out["name"] = torch.cuda.get_device_name(0) if dev == "cuda" else dev
    except Exception:
        out["name"] = dev
    free, total = _free_memory(torch, dev)
    out["free_bytes"], out["total_bytes"] = free, total
    n = int(job.get("device_matmul_size") or (2048 if quick else 4096))
    for label, dtype in (("bf16", torch.bfloat16), ("fp16", torch.float16)):
        try:
            a = torch.randn(n, n, device=dev, dtype=dtype)
            b = torch.randn(n, n, device=dev, dtype=dtype)
            sec = _device_timed(torch, dev, lambda: a @ b, 5 if quick else 20)
            out[f"{label}_tflops"] = 2.0 * n ** 3 / sec / 1e12
        except Exception as exc:
            out[f"{label}_tflops"] = None
            out[f"{label}_error"] = str(exc)[:200]
    progress("device", 1, 3)
    size = int(job.get("device_copy_bytes") or ((64 if quick else 256) << 20))
    host = torch.empty(size, dtype=torch.uint8)
    try:
        host = host.pin_memory()
        out["h2d_pinned"] = True
    except Exception:
        out["h2d_pinned"] = False
    sec = _device_timed(torch, dev, lambda: host.to(dev, non_blocking=True), 3 if quick else 10)
    out["h2d_gb_per_s"] = size / sec / 1e9
    del host
    progress("device", 2, 3)
    tiles = sweep_tiles(torch, dev, job, quick, progress)
    progress("device", 3, 3)
    return out, tiles


def sweep_tiles(torch, dev: str, job: dict, quick: bool, progress: Progress) -> list[dict]:
    """Time and peak memory of the decode-shaped convolutions at each candidate tile (stops at OOM)."""
    budget = (job.get("budget") or {}).get("gpu_bytes")
    candidates = job.get("tile_candidates") or [128, 256, 384, 512, 640, 768]
    frames = 2 if quick else 4
    dtype = torch.bfloat16 if dev != "mps" else torch.float16
    out = []
    for i, tile in enumerate(candidates):
        _reset_peak(torch, dev)
        try:
            with torch.inference_mode():
                sec = _device_timed(torch, dev, lambda: decode_shaped(torch, dev, tile, frames, dtype), 2 if quick else 3)
            peak = _peak(torch, dev)
            out.append({"tile": tile, "frames": frames, "seconds": sec, "peak_bytes": peak,
                        "within_budget": None if budget is None or peak is None else peak <= budget})
        except Exception as exc:  # out of memory ends the sweep: larger tiles need more
            out.append({"tile": tile, "frames": frames, "seconds": None, "peak_bytes": None,
                        "within_budget": False, "error": str(exc)[:200]})
            break
        finally:
            progress("tile sweep", i + 1, len(candidates))
    return out


# -- main ----------------------------------------------------------------------------------

def _runner_info() -> dict:
    info = {"python": sys.executable, "python_version": platform.python_version(), "platform": platform.platform(),
            "numpy": getattr(np, "__version__", None), "cpu_count": os.cpu_count()}
    return info


def _guard(what: str, fn, *args):
    """Run one measurement; a failure becomes {"status": "error", "reason": ...} and never stops the rest."""
    try:
        return fn(*args)
    except Exception as exc:
        return {"status": "error", "reason": f"{what} failed: {type(exc).__name__}: {exc}",
                "traceback": traceback.format_exc(limit=4)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="h3kit calibration runner (self-contained)")
    ap.add_argument("--bridge", required=True, help="path of the native bridge (native.py / h3k_native.py)")
    ap.add_argument("--lib", help="path of the native library (else the bridge's own search order)")
    ap.add_argument("--plan", required=True, help="h3kit.plan/1 JSON, or h3kit's job JSON")
    ap.add_argument("--out", required=True, help="where to write the result JSON")
    ap.add_argument("--quick", action="store_true", help="a short run")
    ap.add_argument("--progress", help="append progress lines here")
    args = ap.parse_args(argv)
    progress = Progress(args.progress)
    need_numpy()
    with open(args.plan, encoding="utf-8") as f:
        job = json.load(f)
    if "plan" not in job:
        job = {"plan": job}
    job.setdefault("budget", job["plan"].get("budget") or {})
    result: dict = {"schema": RESULT_SCHEMA, "runner": _runner_info(), "skipped": []}
    started = time.perf_counter()
    try:
        nat = load_bridge(args.bridge, args.lib)
    except Exception as exc:
        nat = None
        why = f"the native bridge could not be loaded ({type(exc).__name__}: {exc})"
        result["native"] = {"status": "error", "reason": why}
        result["skipped"].append(f"native kernels and the scaled DiT: {why}")
    if nat is not None:
        result["native"] = _guard("native measurement", measure_native, nat, args.quick, progress)
    if nat is None:
        result["inference"] = {"status": "skipped", "reason": "no native library"}
    elif "scaled_dit" not in job:
        result["inference"] = {"status": "skipped", "reason": "the job names no scaled DiT shape"}
    else:
        result["inference"] = _guard("scaled DiT", run_scaled_dit, nat, job, args.quick, progress)
    device = _guard("device measurement", measure_device, job, args.quick, progress)
    result["device"], result["tiles"] = device if isinstance(device, tuple) else (device, [])
    if result["device"].get("status") != "measured":
        result["skipped"].append(f"device rates and tile sweep: {result['device'].get('reason')}")
    try:
        import torch

        result["runner"]["torch"] = torch.__version__
    except Exception:
        result["runner"]["torch"] = None
    result["seconds"] = time.perf_counter() - started
    tmp = args.out + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(result, f, indent=2, default=str)
    os.replace(tmp, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
