#!/usr/bin/env python3
"""Write a random-weight MiniMax H3 DiT at H3's real block width, block by block.

    python scripts/make_h3_dit.py --out FILE [--blocks 30] [--json]

Run it with ComfyUI's Python (it needs torch). The file is a safetensors
DiT that ComfyUI (>= 0.31) detects as H3 by its keys and builds at the
shapes they hold (comfy/model_detection.py, comfy/ldm/minimax/model.py):
hidden 5376, 56 heads of 128 (so qkv is 3 x 7168 wide), SwiGLU FFN 14336,
text dim 5120, two token-refiner blocks, and the pruned checkpoints' AdaLN
form: an `adaln_t_table` curve basis (no time embedder) feeding fp32
`adaln_proj` linears of --curve-dim (4) inputs, which makes 50 blocks 40.2
GB as FACTS.md's pruned bf16 file. Block weights are bf16. With the
defaults a block is 0.772 GB and 30 blocks make a 24.8 GB file, larger than
a 23 GB machine's RAM: it is written one piece (at most 64 MiB) at a time,
never held whole, and each block's pages are flushed and dropped from the
page cache once written, so writing it neither fills the cache nor leaves
the file cached (the first read is a cold one).

Values are small and finite: every tensor is a window, at a seeded random
offset, of a 16 Mi-value pool of normal values scaled by 1/sqrt(fan_in)
(AdaLN by 0.1 of that, the curve table by 1), norms are 1, biases 0,
`rope.inv_freq` the real frequencies. A pool is used because torch makes
about 60 M normal values a second on a 2-core machine: drawing all 12 G
values would take minutes, copying windows is as fast as the disk.

The last line on stdout is a JSON object: path, bytes, tensors, blocks,
block_bytes, dims, seconds. Exit codes: 0 written; 2 bad arguments; 3 not
enough free disk (nothing written).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import struct
import sys
import time

POOL_VALUES = 16 << 20
DIMS = {"hidden_size": 5376, "num_attention_heads": 56, "attention_head_dim": 128, "ffn_hidden_size": 14336,
        "text_dim": 5120, "token_refiner_num_layers": 2, "latents_dim": 24, "audio_latents_dim": 32,
        "rope_inv_freq_len": 16, "curve_dim": 4, "curve_grid": 1001}


def layout(blocks: int, d: dict) -> list[tuple[str, str, tuple, str, float]]:
    """Every tensor in file order: (name, safetensors dtype, shape, fill, std): fill is normal, ones, zeros or rope."""
    H, hd, ffn, k = d["hidden_size"], d["attention_head_dim"], d["ffn_hidden_size"], d["curve_dim"]
    inner = d["num_attention_heads"] * hd
    video_in = d["latents_dim"] * 4  # patch 1x2x2
    out = []

    def linear(name, rows, cols, dtype="BF16", bias=True, scale=1.0):
        out.append((name + ".weight", dtype, (rows, cols), "normal", scale / math.sqrt(cols)))
        if bias:
            out.append((name + ".bias", dtype, (rows,), "zeros", 0.0))

    def norm(name, n, dtype="BF16"):
        out.append((name + ".weight", dtype, (n,), "ones", 0.0))

    def attn_mlp(p):
        norm(p + ".norm1", H)
        norm(p + ".norm2", H)
        linear(p + ".attn.qkv_proj", 3 * inner, H, bias=False)
        norm(p + ".attn.q_norm", hd)
        norm(p + ".attn.k_norm", hd)
        linear(p + ".attn.out_proj", H, inner, bias=False)
        linear(p + ".mlp.fc1", 2 * ffn, H, bias=False)
        linear(p + ".mlp.fc2", H, ffn, bias=False)

    # the curve form's AdaLN linears are fp32 in ComfyUI's model (adaln_dtype), and so in the file
    linear("video_patch_proj", H, video_in, dtype="F32")
    linear("audio_patch_proj", H, d["audio_latents_dim"], dtype="F32")
    linear("condition_proj", H, d["text_dim"])
    out.append(("adaln_t_table", "F32", (d["curve_grid"], k), "normal", 1.0))
    out.append(("rope.inv_freq", "F32", (d["rope_inv_freq_len"],), "rope", 0.0))
    for i in range(d["token_refiner_num_layers"]):
        attn_mlp(f"token_refiner.blocks.{i}")
    norm("token_refiner.final_norm", H)
    for i in range(blocks):
        attn_mlp(f"blocks.{i}")
        linear(f"blocks.{i}.adaln_proj.linear", 6 * H * 3, k, dtype="F32", scale=0.1)  # 6 mods x 3 modalities
    norm("final_layer.norm", H)
    linear("final_layer.adaln_proj.linear", 2 * H, k, dtype="F32", scale=0.1)
    linear("final_layer.video_out", video_in, H, dtype="F32")
    linear("final_layer.audio_out", d["audio_latents_dim"], H, dtype="F32")
    return out


ITEMSIZE = {"BF16": 2, "F32": 4}


def header_bytes(tensors, metadata: dict) -> tuple[bytes, int]:
    """The safetensors header (length prefix included) and the data size it describes."""
    head = {"__metadata__": metadata}
    off = 0
    for name, dtype, shape, _, _ in tensors:
        size = math.prod(shape) * ITEMSIZE[dtype]
        head[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [off, off + size]}
        off += size
    raw = json.dumps(head, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    return struct.pack("<Q", len(raw)) + raw, off


class Pools:
    """Byte pools of scaled normal values, one per (dtype, std), made once; windows of them fill the tensors."""

    def __init__(self, seed: int):
        import torch
        self.torch = torch
        self.g = torch.Generator().manual_seed(seed)
        self.pools: dict = {}

    def normal(self, dtype: str, std: float) -> memoryview:
        key = (dtype, std)
        if key not in self.pools:
            torch = self.torch
            t = torch.randn(POOL_VALUES, generator=self.g).mul_(std)
            t = t.to(torch.bfloat16) if dtype == "BF16" else t
            self.pools[key] = memoryview(t.view(torch.uint8).numpy().tobytes())
        return self.pools[key]

    def offset(self, n: int) -> int:
        return int(self.torch.randint(0, n, (1,), generator=self.g))


def tensor_bytes(pools: Pools, dtype: str, shape: tuple, fill: str, std: float, piece: int = 64 << 20):
    """The tensor's bytes in pieces of at most `piece` bytes."""
    import torch
    size = ITEMSIZE[dtype]
    total = math.prod(shape) * size
    if fill == "normal":
        pool = pools.normal(dtype, std)
        pos = pools.offset(POOL_VALUES) * size
        left = total
        while left:
            take = min(left, len(pool) - pos, piece)
            yield pool[pos:pos + take]
            left -= take
            pos = (pos + take) % len(pool)
        return
    if fill == "rope":
        n = shape[0]
        t = 1.0 / (10000.0 ** (torch.arange(n, dtype=torch.float64) / n))
    else:
        t = torch.full(shape, 1.0 if fill == "ones" else 0.0)
    t = t.to(torch.bfloat16 if dtype == "BF16" else torch.float32).contiguous()
    yield memoryview(t.view(torch.uint8).numpy().tobytes())


def _metadata(dims: dict, blocks: int) -> dict:
    return {"h3kit_random_dit": json.dumps({"blocks": blocks, **dims})}


def write(path: str, blocks: int, dims: dict, seed: int) -> dict:
    doc = write_tensors(path, layout(blocks, dims), _metadata(dims, blocks), seed,
                        lambda name: name.split(".", 2)[1] if name.startswith("blocks.") else None)
    return dict(doc, blocks=blocks, dims=dims)


def write_tensors(path: str, tensors: list, metadata: dict, seed: int, group_of) -> dict:
    """Write `tensors` (layout()'s tuples) to `path`, one piece at a time; each group (`group_of(name)`: a block,
    a layer) is flushed and dropped from the page cache once written. block_bytes: group "0"'s bytes."""
    head, data = header_bytes(tensors, metadata)
    pools = Pools(seed)
    partial = path + ".partial"
    block_bytes = 0
    t0 = time.perf_counter()
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, head)
        start = written = len(head)
        current = None
        for name, dtype, shape, fill, std in tensors:
            group = group_of(name)
            if group != current:
                _flush(fd, start, written)  # a block done: on disk, out of the cache
                start, current = written, group
            for chunk in tensor_bytes(pools, dtype, shape, fill, std):
                while chunk:
                    n = os.write(fd, chunk)
                    chunk = chunk[n:]
                    written += n
            if group == "0":
                block_bytes += math.prod(shape) * ITEMSIZE[dtype]
        _flush(fd, start, written)
    finally:
        os.close(fd)
    os.replace(partial, path)
    return {"path": path, "bytes": len(head) + data, "tensors": len(tensors), "block_bytes": block_bytes,
            "seconds": round(time.perf_counter() - t0, 1)}


def _flush(fd: int, start: int, end: int) -> None:
    if end > start:
        os.fdatasync(fd)
        if hasattr(os, "posix_fadvise"):
            os.posix_fadvise(fd, start, end - start, os.POSIX_FADV_DONTNEED)


def planned_bytes(blocks: int, dims: dict) -> int:
    head, data = header_bytes(layout(blocks, dims), _metadata(dims, blocks))
    return len(head) + data


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="the .safetensors file to write (its folder must exist)")
    ap.add_argument("--blocks", type=int, default=30, help="DiT blocks (the real model has 50)")
    ap.add_argument("--hidden", type=int, default=DIMS["hidden_size"])
    ap.add_argument("--heads", type=int, default=DIMS["num_attention_heads"])
    ap.add_argument("--head-dim", type=int, default=DIMS["attention_head_dim"])
    ap.add_argument("--ffn", type=int, default=DIMS["ffn_hidden_size"])
    ap.add_argument("--text-dim", type=int, default=DIMS["text_dim"])
    ap.add_argument("--curve-dim", type=int, default=DIMS["curve_dim"], help="inputs of each AdaLN linear")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--dry-run", action="store_true", help="print the size it would write and stop")
    ap.add_argument("--json", action="store_true", help="print only the JSON line")
    a = ap.parse_args(argv)
    numbers = (a.blocks, a.hidden, a.heads, a.head_dim, a.ffn, a.text_dim, a.curve_dim)
    if min(numbers) < 1 or a.blocks > 1000:
        print("make_h3_dit: --blocks (1..1000) and every dimension must be positive.", file=sys.stderr)
        return 2
    folder = os.path.dirname(os.path.abspath(a.out))
    if not os.path.isdir(folder):
        print(f"make_h3_dit: the folder of --out does not exist: {folder}", file=sys.stderr)
        return 2
    dims = dict(DIMS, hidden_size=a.hidden, num_attention_heads=a.heads, attention_head_dim=a.head_dim,
                ffn_hidden_size=a.ffn, text_dim=a.text_dim, curve_dim=a.curve_dim)
    need = planned_bytes(a.blocks, dims)
    old = os.path.getsize(a.out) if os.path.isfile(a.out) else 0
    free = shutil.disk_usage(folder).free + old
    if a.dry_run:
        block = sum(math.prod(t[2]) * ITEMSIZE[t[1]] for t in layout(1, dims) if t[0].startswith("blocks.0."))
        print(json.dumps({"path": a.out, "bytes": need, "blocks": a.blocks, "block_bytes": block, "dims": dims,
                          "free_bytes": free}))
        return 0
    if need + (1 << 30) > free:
        print(f"make_h3_dit: {need / 1e9:.1f} GB to write but {free / 1e9:.1f} GB free under {folder} "
              "(1 GB kept spare); free space or pass fewer --blocks.", file=sys.stderr)
        return 3
    if old:
        os.remove(a.out)
    doc = write(os.path.abspath(a.out), a.blocks, dims, a.seed)
    if not a.json:
        print(f"{doc['path']}: {doc['bytes'] / 1e9:.2f} GB, {doc['blocks']} blocks of {doc['block_bytes'] / 1e9:.3f} "
              f"GB, {doc['seconds']} s", file=sys.stderr)
    print(json.dumps(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
