"""What the streamed DiT loader decides, without importing ComfyUI or torch.

The loader (`blocks`, `load`) keeps a DiT's transformer blocks on disk and
reads each one when the model reaches it. Everything here is arithmetic on
the safetensors header and on the node's inputs, so it is tested on its own:

- `read_header` parses the file's JSON header into absolute byte ranges
  with h3kit's one safetensors reader (the pack's h3k_safetensors, which
  h3kit uses too), which refuses a file the header says is longer than it is --
  naming the first block that lies past the end, so a cut-short download
  is reported before any prompt runs;
  `read_weights` does the same for a GGUF file (the GGUF feature's `logic`), whose
  quantized tensors (`is_quantized`) are read as bytes and dequantized per
  use;
- `group_blocks` sorts tensor names into `blocks.N.*` (streamed) and the
  rest (loaded once, like ComfyUI's own loader does);
- `plan_stream` turns shard size, prefetch depth and preload into the
  native streamer's read size and ring depth, and says which blocks stay
  resident;
- `pieces` maps one chunk the streamer delivered onto the tensors it holds;
- `upcoming` is the prefetch order: the blocks after the current one, round
  the end of the model to the start of the next call (the sampler calls the
  model again for the next step);
- `stamp_change` (over h3kit_common's `file_stamp`) and `block_heads` / `head_change` tell a
  file that changed under the model (gone, shrunk, rewritten in place)
  before its next block is read, in one sentence naming file and block;
- `stats_document` / `write_json_atomic` write `h3kit_streaming_stats.json`.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from ..h3k_loader import MIB, PAGE_CACHE_CHOICES, QUANT_MARKERS, STREAMED_DTYPES, STREAMED_FILES, clamp_prefetch
from ..h3k_profile import DiTLoaderSettings
from ..h3kit_common.files import file_stamp
from ..h3k_safetensors import BLOCK_RE
from ..h3kit_common.gguf_names import GGML_TYPES, PLAIN_TYPES, GGUFError, dit_prefix, read_gguf

STATS_FILE = "h3kit_streaming_stats.json"
STATS_SCHEMA = "h3kit.streaming_stats/1"
# What the loaders read is h3k_loader's (STREAMED_DTYPES, QUANT_MARKERS; blocks._dtype has the torch types).
GGUF_QUANT_TYPES = {name for name, _, _ in GGML_TYPES.values()} - PLAIN_TYPES


class StreamError(RuntimeError):
    """A sentence for the user: what is wrong with which file (and block), and what to do."""


def _block_of(name: str) -> int | None:
    m = BLOCK_RE.match(name)
    return int(m.group(1)) if m else None


def _shared_reader():
    """The pack's h3k_safetensors, the header reader h3kit uses too (beside this module in nodes/ and in the pack)."""
    try:
        from .. import h3k_safetensors
    except ImportError as exc:
        raise StreamError("h3kit's safetensors reader (h3k_safetensors) is missing from the node pack; run "
                          "'h3kit apply' again (or use ComfyUI's Load Diffusion Model).") from exc
    return h3k_safetensors


def read_header(path: str | os.PathLike) -> dict:
    """{"tensors": {name: {dtype, shape, start, end}}, "metadata", "data_start", "file_size"}; offsets absolute.

    The checks are h3k_safetensors.read_header's; its refusal comes back as a StreamError with the same sentence.
    """
    reader = _shared_reader()
    try:
        return reader.read_header(path)
    except reader.HeaderError as exc:
        raise StreamError(str(exc)) from exc


def read_weights(path: str | os.PathLike) -> dict:
    """`read_header` for safetensors, the GGUF feature's `logic.read_gguf` for a .gguf file (its names without the
    prefix in front of the H3 names, its metadata the GGUF KV fields), both as StreamError when wrong."""
    if not str(path).lower().endswith(".gguf"):
        return read_header(path)
    try:
        doc = read_gguf(path)
    except GGUFError as exc:
        raise StreamError(str(exc)) from exc
    prefix = dit_prefix(doc["tensors"])
    tensors = {(n[len(prefix):] if prefix and n.startswith(prefix) else n): e for n, e in doc["tensors"].items()}
    return {"tensors": tensors, "metadata": {}, "kv": doc["kv"], "data_start": doc["data_start"],
            "file_size": doc["file_size"], "gguf": True}


def is_quantized(entry: dict) -> bool:
    """A GGUF block type (Q8_0, Q4_K, ...): read as bytes, dequantized by ComfyUI-GGUF's code per use."""
    return entry["dtype"] in GGUF_QUANT_TYPES


def refuse_unsupported(path: str | os.PathLike, tensors: dict) -> None:
    """One sentence for the formats this loader does not stream (it never guesses at a conversion)."""
    name = Path(path).name
    odd = sorted({e["dtype"] for e in tensors.values() if e["dtype"] not in STREAMED_DTYPES and not is_quantized(e)})
    if odd:
        raise StreamError(f"{name} holds tensors of type {', '.join(odd)}, which the streamed loader does not "
                          "read; use ComfyUI's Load Diffusion Model (UNETLoader) for it.")
    quant = sorted(n for n in tensors if n.rsplit(".", 1)[-1] in QUANT_MARKERS)
    if quant:
        raise StreamError(f"{name} is a quantized ComfyUI checkpoint ({quant[0]}); the streamed loader streams "
                          f"{STREAMED_FILES} only: use ComfyUI's Load Diffusion Model (UNETLoader).")
    if not any(_block_of(n) is not None for n in tensors):
        raise StreamError(f"{name} has no blocks.N.* tensors, so there is nothing to stream; it is not an H3 "
                          "DiT file: use ComfyUI's Load Diffusion Model (UNETLoader).")


def group_blocks(names) -> tuple[dict[int, list[str]], list[str]]:
    """({block index: its tensor names, in file order of the caller}, every other name)."""
    blocks: dict[int, list[str]] = {}
    rest: list[str] = []
    for name in names:
        b = _block_of(name)
        if b is None:
            rest.append(name)
        else:
            blocks.setdefault(b, []).append(name)
    return dict(sorted(blocks.items())), rest


def merge_ranges(spans) -> list[tuple[int, int]]:
    """Sorted [start, end) byte ranges with touching or overlapping ones joined (one read each)."""
    out: list[list[int]] = []
    for start, end in sorted(spans):
        if out and start <= out[-1][1]:
            out[-1][1] = max(out[-1][1], end)
        else:
            out.append([start, end])
    return [(a, b) for a, b in out]


def check_page_cache(page_cache: str, loader: str) -> None:
    """One sentence for a page_cache input that is neither choice (a prompt written by hand)."""
    if page_cache not in PAGE_CACHE_CHOICES:
        raise StreamError(f"{loader}: page_cache is {page_cache!r}; choose one of {', '.join(PAGE_CACHE_CHOICES)}.")


def range_starts(names, tensors: dict) -> dict[str, int]:
    """{name: start of the merged byte range it lies in}: chunk edges fall on those starts (plan_stream)."""
    out = {}
    for start, end in merge_ranges((tensors[n]["start"], tensors[n]["end"]) for n in names):
        for n in names:
            if start <= tensors[n]["start"] < end:
                out[n] = start
    return out


def chunk_count(ranges, read_size: int) -> int:
    """How many chunks the streamer delivers for these ranges (it cuts each range into read_size pieces)."""
    return sum(-(-(end - start) // read_size) for start, end in ranges if end > start)


# What the native direct read converts (h3k_streamer_read): a type into itself, or the 16-bit floats into
# fp32. Safetensors dtype names, and the torch dtypes the compute buffers have.
DIRECT_TYPES = {"F32": "torch.float32", "F16": "torch.float16", "BF16": "torch.bfloat16"}


def direct_types(file_dtype: str, compute_dtype: str) -> tuple[str, str] | None:
    """(file type, buffer type) for a tensor the native library can read straight into its compute buffer
    ('BF16', 'torch.float32' -> ('BF16', 'F32')), or None when it must go through the ring and torch."""
    to = next((k for k, v in DIRECT_TYPES.items() if v == compute_dtype), None)
    if file_dtype not in DIRECT_TYPES or to is None:
        return None
    return (file_dtype, to) if to in (file_dtype, "F32") else None


def plan_stream(block_ranges: dict[int, list[tuple[int, int]]], shard_size_bytes: int, prefetch_blocks: int,
                preload_bytes: int, limits) -> dict:
    """Read size, ring depth and resident blocks for the native streamer.

    A read is `shard_size_bytes` (0: one block, the largest); the ring holds
    the chunks of `prefetch_blocks` blocks ahead plus the one in use, at most
    the native streamer's depth (`limits`: h3k_native.streamer_limits(), the
    library's own `max_read_bytes` and `max_depth`) buffers, so a small shard with a deep prefetch is cut down and
    the depth really reached is reported. `preload_bytes` of blocks (file
    bytes, like the plan's budget) stay resident once read: the first ones.
    """
    if not block_ranges:
        raise ValueError("no blocks to stream")
    sizes = {b: sum(e - s for s, e in r) for b, r in block_ranges.items()}
    largest = max(sizes.values())
    want = int(shard_size_bytes) if shard_size_bytes and shard_size_bytes > 0 else largest
    read_size = max(MIB, min(limits.max_read_bytes, -(-want // MIB) * MIB))  # whole MiB: the buffers are page-aligned
    read_size = min(read_size, max(MIB, -(-largest // MIB) * MIB))  # never a buffer bigger than a block needs
    per_block = max(chunk_count(r, read_size) for r in block_ranges.values())
    prefetch = clamp_prefetch(prefetch_blocks or 1)
    depth = min(limits.max_depth, prefetch * per_block + 1)
    reached = max(0, (depth - 1) // per_block)
    order = sorted(block_ranges)
    resident_n = min(len(order), max(0, int(preload_bytes or 0)) // largest) if largest else 0
    return {"read_size": read_size, "depth": depth, "chunks_per_block": per_block, "prefetch_blocks": reached,
            "prefetch_asked": prefetch, "resident": order[:resident_n], "ring_bytes": depth * read_size,
            "block_bytes": largest, "streamed_bytes_per_pass": sum(sizes[b] for b in order[resident_n:])}


def pieces(chunk_offset: int, chunk_length: int, spans) -> list[tuple[object, int, int]]:
    """(key, start, end) for each span of `spans` [(key, start, end)] overlapping the chunk, clipped to it."""
    lo, hi = chunk_offset, chunk_offset + chunk_length
    return [(k, max(s, lo), min(e, hi)) for k, s, e in spans if s < hi and e > lo and e > s]


def upcoming(current: int, order: list[int], skip, count: int) -> list[int]:
    """The next `count` blocks after `current` in `order`, wrapping round, leaving out those in `skip`."""
    if current not in order or count <= 0:
        return []
    i = order.index(current)
    out = []
    for step in range(1, len(order) + 1):
        b = order[(i + step) % len(order)]
        if b in skip:
            continue
        out.append(b)
        if len(out) == count:
            break
    return out


def stamp_change(path: str | os.PathLike, was: tuple, block: int) -> str | None:
    """A sentence when the file under `path` is no longer the one the model was built from."""
    now = file_stamp(path)
    if now == was:
        return None
    if now is None:
        return (f"the weight file {path} disappeared while the model was streaming it (at block {block}); "
                "put it back (or pick another file in the loader) and queue the prompt again.")
    if now[2] < was[2]:
        return (f"the weight file {path} shrank from {was[2]} to {now[2]} bytes while the model was streaming "
                f"it (at block {block}); restore or re-download it and queue the prompt again.")
    return _changed(path, block)


def _changed(path, block: int) -> str:
    return (f"the weight file {path} changed while the model was streaming it (at block {block}); queue the "
            "prompt again to reload it.")


# The first bytes of each block, kept from when the model was built and compared before the block is read again:
# one small read per block against hundreds of MB, and it catches a file rewritten in place where the stamp
# cannot (Windows, where no time changes that the rewriter cannot put back).
HEAD_BYTES = 4096


def block_heads(path: str | os.PathLike, ranges: dict, size: int = HEAD_BYTES) -> dict[int, bytes]:
    """Block -> the first `size` bytes of its first byte range; {} when the file cannot be read now (the stamp
    and the reads themselves still stand guard)."""
    heads = {}
    try:
        with open(path, "rb") as f:
            for block, spans in ranges.items():
                if spans:
                    start, end = spans[0]
                    f.seek(start)
                    heads[block] = f.read(min(size, end - start))
    except OSError:
        return {}
    return heads


def head_change(path: str | os.PathLike, ranges: dict, heads: dict, block: int) -> str | None:
    """A sentence when the block's first bytes on disk differ from those the model was built from."""
    was = heads.get(block)
    if was is None:
        return None
    now = block_heads(path, {block: ranges[block]}, len(was)).get(block)
    if now is None or now == was:  # unreadable now: the read that follows names the problem
        return None
    return _changed(path, block)


def profile_defaults(plan: DiTLoaderSettings) -> dict:
    """The loader's input defaults from what the pack's profile set (h3k_profile.DiTLoaderSettings)."""
    return {"page_cache": plan.page_cache if plan.page_cache in PAGE_CACHE_CHOICES else PAGE_CACHE_CHOICES[0],
            "preload_bytes": plan.preload_bytes or 0, "shard_size_bytes": plan.shard_size_bytes or 0,
            "prefetch_blocks": clamp_prefetch(plan.prefetch_blocks)}


def stats_document(file: str, blocks: int, counters: dict, plan: dict, read_mode: str | None = None,
                   page_cache: str | None = None) -> dict:
    """The stats document's shape (docs/streaming.md), plus the figures behind it.

    `wait_s` is the time the model stood still waiting for a block's weights (read and converted: with
    `read_mode` "direct" that is all the reading, done on every core while the compute waits);
    `reader_wait_s` the time the converting thread waited for the native reader ("ring" only: it overlaps
    compute, so it says whether the disk keeps up, not what it cost); `load_s` all the time spent in the
    block hooks.
    """
    return {"schema": STATS_SCHEMA, "file": file, "blocks": blocks,
            "bytes_read": int(counters.get("bytes_read", 0)), "wait_s": round(counters.get("wait_s", 0.0), 6),
            "compute_s": round(counters.get("compute_s", 0.0), 6), "steps": int(counters.get("steps", 0)),
            "resident_blocks": len(plan.get("resident", [])), "prefetch_blocks": plan.get("prefetch_blocks"),
            "prefetch_asked": plan.get("prefetch_asked"), "load_s": round(counters.get("load_s", 0.0), 6),
            "reader_wait_s": round(counters.get("reader_wait_s", 0.0), 6),
            "model_calls": int(counters.get("model_calls", 0)), "blocks_read": int(counters.get("blocks_read", 0)),
            "read_size": plan.get("read_size"), "ring_depth": plan.get("depth"), "ring_bytes": plan.get("ring_bytes"),
            "block_bytes": plan.get("block_bytes"), "run_s": round(counters.get("run_s", 0.0), 6),
            "read_mode": read_mode, "page_cache": page_cache,
            "finished": bool(counters.get("finished", False))}


def write_json_atomic(path: str | os.PathLike, doc: dict) -> None:
    """Write beside the target and rename over it, so a reader never sees half a file."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    os.replace(tmp, path)
