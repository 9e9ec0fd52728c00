"""The scaled H3-shaped block's arithmetic, once with numpy and once in plain Python."""

from __future__ import annotations

import functools
import math
import struct

from . import _numpy
from .measure import QUANT_BLOCK
from .native_bench import native_matmul

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
    np = _numpy.np
    h, ffn = cfg["hidden"], cfg["ffn"]
    out = {}
    for i, (name, (rows, cols)) in enumerate(linear_shapes(h, ffn).items()):
        rng = np.random.default_rng(1000 * (block + 1) + i)
        out[name] = rng.standard_normal((rows, cols), dtype=np.float32) / np.float32(math.sqrt(cols))
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
        return _numpy.np.random.default_rng(7).standard_normal((cfg["tokens"], cfg["hidden"]), dtype=_numpy.np.float32)

    def block_weights(self, cfg: dict, block: int) -> dict:
        return block_weights(cfg, block)

    def adopt(self, cfg: dict, buf):
        """Any flat float32 buffer as this path's activations."""
        return _numpy.np.frombuffer(memoryview(buf).cast("B"), dtype=_numpy.np.float32).reshape(cfg["tokens"], cfg["hidden"]).copy()

    def adopt_weights(self, w: dict, cfg: dict) -> dict:
        shapes = linear_shapes(cfg["hidden"], cfg["ffn"])
        return {n: _numpy.np.frombuffer(memoryview(v).cast("B"), dtype=_numpy.np.float32).reshape(shapes.get(n, (-1,)))
                for n, v in w.items()}

    def floats(self, raw):
        return _numpy.np.frombuffer(raw, dtype=_numpy.np.float32)

    def quantized_linear(self, data, kind: str, rows: int, cols: int, a):
        return native_matmul(self.nat, data, kind, rows, cols, _numpy.np.ascontiguousarray(a, dtype=_numpy.np.float32), a.shape[0])

    def fp32_linear(self, w, rows: int, cols: int, a):
        return a @ w.T

    def rms_norm(self, x, g, cfg: dict, eps: float = 1e-6):
        return x / _numpy.np.sqrt(_numpy.np.mean(x * x, axis=-1, keepdims=True) + eps) * g

    def attention(self, q, k, v, cfg: dict):
        """Full (non-causal) softmax attention over all tokens, per head."""
        t, heads, head_dim = q.shape[0], cfg["heads"], cfg["head_dim"]
        q = q.reshape(t, heads, head_dim).transpose(1, 0, 2)
        k = k.reshape(t, heads, head_dim).transpose(1, 0, 2)
        v = v.reshape(t, heads, head_dim).transpose(1, 0, 2)
        s = q @ k.transpose(0, 2, 1) / _numpy.np.float32(math.sqrt(head_dim))
        s = _numpy.np.exp(s - s.max(axis=-1, keepdims=True))
        s /= s.sum(axis=-1, keepdims=True)
        return (s @ v).transpose(1, 0, 2).reshape(t, heads * head_dim)

    def swiglu(self, gate, up):
        return gate / (1.0 + _numpy.np.exp(-gate)) * up

    def add(self, a, b):
        return a + b

    def rel_err(self, a, b) -> float:
        return float(_numpy.np.linalg.norm(a - b) / max(float(_numpy.np.linalg.norm(b)), 1e-30))


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
