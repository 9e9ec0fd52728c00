"""The streamed DiT loader's pure logic (nodes/h3kit_streaming/logic.py): no ComfyUI, no torch.

Header parsing and the refusals a bad file gets, block key grouping, the
native streamer's read size / ring depth / resident blocks, the chunk to
tensor mapping, the prefetch order, file-change detection, the profile's
widget defaults and the stats file. The real-ComfyUI tests are in
test_streamed_loader_real_comfyui.py.
"""

from __future__ import annotations

import importlib.util
import json
import os
import struct
import sys
import time
from pathlib import Path

import pytest
from pack_support import pack_module

REPO = Path(__file__).resolve().parents[2]
NODES = REPO / "nodes"
MIB = 1 << 20


L = pack_module("h3kit_streaming.logic")
P = pack_module("h3k_profile")
LIMITS = pack_module("h3k_native").StreamerLimits(max_read_bytes=1 << 31, max_depth=64)  # what libh3kit says


def write_safetensors(path: Path, tensors: list[tuple[str, str, list[int]]], metadata=None, cut: int = 0) -> dict:
    """A real safetensors file (zero data) with tensors in the given order; `cut` bytes removed from its end."""
    size = {"BF16": 2, "F32": 4, "U8": 1, "F16": 2}
    header, off = {}, 0
    for name, dtype, shape in tensors:
        n = size[dtype]
        for d in shape:
            n *= d
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + n]}
        off += n
    if metadata:
        header["__metadata__"] = metadata
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    data = struct.pack("<Q", len(raw)) + raw + bytes(off)
    path.write_bytes(data[:len(data) - cut] if cut else data)
    return {"data_start": 8 + len(raw), "total": len(data)}


H3ISH = [("blocks.0.attn.qkv_proj.weight", "BF16", [96, 32]), ("blocks.0.norm1.weight", "BF16", [32]),
         ("blocks.1.attn.qkv_proj.weight", "BF16", [96, 32]), ("blocks.1.norm1.weight", "BF16", [32]),
         ("blocks.10.attn.qkv_proj.weight", "BF16", [96, 32]), ("final_layer.norm.weight", "F32", [32]),
         ("token_refiner.blocks.0.norm1.weight", "BF16", [32]), ("video_patch_proj.weight", "F32", [32, 96])]


def test_header_gives_absolute_ranges_and_metadata(tmp_path):
    f = tmp_path / "dit.safetensors"
    info = write_safetensors(f, H3ISH, metadata={"config": "{}"})
    h = L.read_header(f)
    assert h["metadata"] == {"config": "{}"} and h["data_start"] == info["data_start"]
    q = h["tensors"]["blocks.0.attn.qkv_proj.weight"]
    assert q == {"dtype": "BF16", "shape": [96, 32], "start": info["data_start"], "end": info["data_start"] + 96 * 32 * 2}
    assert h["tensors"]["blocks.0.norm1.weight"]["start"] == q["end"]
    assert h["file_size"] == info["total"]


def test_cut_short_file_names_the_file_and_first_block_past_the_end(tmp_path):
    f = tmp_path / "cut.safetensors"
    write_safetensors(f, H3ISH[:5], cut=96 * 32 * 2 + 10)  # the end of block 1's norm and all of block 10 are gone
    with pytest.raises(L.StreamError) as err:
        L.read_header(f)
    text = str(err.value)
    assert str(f) in text and "cut short" in text and "block 1 " in text and "re-download" in text


@pytest.mark.parametrize("content, says", [
    (b"", "not a safetensors file"),
    (b"\xff" * 64, "not a safetensors file or is cut short"),
    (struct.pack("<Q", 4) + b"[1] ", "header"),
    (struct.pack("<Q", 8) + b"{bad js}", "unreadable safetensors header"),
])
def test_garbage_gets_one_sentence(tmp_path, content, says):
    f = tmp_path / "junk.safetensors"
    f.write_bytes(content)
    with pytest.raises(L.StreamError) as err:
        L.read_header(f)
    assert says in str(err.value) and str(f) in str(err.value)


def test_header_size_disagreeing_with_shape_is_refused(tmp_path):
    f = tmp_path / "odd.safetensors"
    raw = json.dumps({"blocks.0.w": {"dtype": "BF16", "shape": [4], "data_offsets": [0, 6]}}).encode()
    raw += b" " * (-len(raw) % 8)
    f.write_bytes(struct.pack("<Q", len(raw)) + raw + bytes(6))
    with pytest.raises(L.StreamError, match="should hold 8 bytes"):
        L.read_header(f)


def test_missing_file_says_so(tmp_path):
    with pytest.raises(L.StreamError, match="cannot read .*gone.safetensors"):
        L.read_header(tmp_path / "gone.safetensors")


def test_unsupported_formats_are_refused_by_name(tmp_path):
    with pytest.raises(L.StreamError, match="type IQ9_Z"):
        L.refuse_unsupported(tmp_path / "h3-IQ9.gguf", {"blocks.0.x.weight": {"dtype": "IQ9_Z"}})
    L.refuse_unsupported(tmp_path / "h3-Q4_K_M.gguf", {"blocks.0.x.weight": {"dtype": "Q4_K"}})  # streamed
    quant = {"blocks.0.attn.qkv_proj.weight": {"dtype": "F8_E4M3"}, "blocks.0.attn.qkv_proj.scale_weight": {"dtype": "F32"}}
    with pytest.raises(L.StreamError, match="quantized ComfyUI checkpoint .*scale_weight"):
        L.refuse_unsupported(tmp_path / "q.safetensors", quant)
    with pytest.raises(L.StreamError, match="no blocks.N"):
        L.refuse_unsupported(tmp_path / "vae.safetensors", {"decoder.conv.weight": {"dtype": "F16"}})
    with pytest.raises(L.StreamError, match="type F4"):
        L.refuse_unsupported(tmp_path / "x.safetensors", {"blocks.0.w": {"dtype": "F4"}})
    L.refuse_unsupported(tmp_path / "ok.safetensors", {"blocks.0.w": {"dtype": "BF16"}})


def test_block_keys_group_by_number_and_leave_the_refiner_alone():
    names = [n for n, _, _ in H3ISH]
    blocks, rest = L.group_blocks(names)
    assert list(blocks) == [0, 1, 10]
    assert blocks[1] == ["blocks.1.attn.qkv_proj.weight", "blocks.1.norm1.weight"]
    assert "token_refiner.blocks.0.norm1.weight" in rest and "final_layer.norm.weight" in rest
    assert sum(len(v) for v in blocks.values()) + len(rest) == len(names)


def test_ranges_merge_and_count_chunks():
    assert L.merge_ranges([(30, 40), (0, 10), (10, 20), (35, 50)]) == [(0, 20), (30, 50)]
    assert L.chunk_count([(0, 20), (30, 50)], 8) == 3 + 3
    assert L.chunk_count([(0, MIB)], MIB) == 1 and L.chunk_count([(5, 5)], MIB) == 0


def test_plan_defaults_to_one_block_per_read_and_one_block_ahead():
    block = 100 * MIB + 123
    ranges = {b: [(b * block, (b + 1) * block)] for b in range(24)}
    p = L.plan_stream(ranges, 0, 1, 0, LIMITS)
    assert p["read_size"] == 101 * MIB and p["chunks_per_block"] == 1
    assert p["depth"] == 2 and p["prefetch_blocks"] == 1 and p["resident"] == []
    assert p["ring_bytes"] == 2 * 101 * MIB and p["streamed_bytes_per_pass"] == 24 * block


def test_plan_small_shards_deep_prefetch_is_capped_and_reported():
    block = 100 * MIB
    ranges = {b: [(b * block, (b + 1) * block)] for b in range(8)}
    p = L.plan_stream(ranges, 4 * MIB, 8, 0, LIMITS)
    assert p["read_size"] == 4 * MIB and p["chunks_per_block"] == 25
    assert p["depth"] == LIMITS.max_depth and p["prefetch_blocks"] == 2 and p["prefetch_asked"] == 8
    tiny = L.plan_stream({0: [(0, 1000)], 1: [(1000, 2000)]}, 0, 3, 0, LIMITS)
    assert tiny["read_size"] == MIB and tiny["depth"] == 4  # at least a MiB, never past what a block needs


def test_plan_resident_blocks_come_from_preload_in_file_bytes():
    block = 10 * MIB
    ranges = {b: [(b * block, (b + 1) * block)] for b in range(6)}
    assert L.plan_stream(ranges, 0, 1, 25 * MIB, LIMITS)["resident"] == [0, 1]
    assert L.plan_stream(ranges, 0, 1, 10 ** 12, LIMITS)["resident"] == list(range(6))
    assert L.plan_stream(ranges, 0, 1, 25 * MIB, LIMITS)["streamed_bytes_per_pass"] == 4 * block
    with pytest.raises(ValueError):
        L.plan_stream({}, 0, 1, 0, LIMITS)


def test_direct_reads_take_same_type_or_16_bit_floats_into_fp32():
    assert L.direct_types("BF16", "torch.float32") == ("BF16", "F32")
    assert L.direct_types("F16", "torch.float32") == ("F16", "F32")
    assert L.direct_types("BF16", "torch.bfloat16") == ("BF16", "BF16")
    assert L.direct_types("F32", "torch.float32") == ("F32", "F32")
    assert L.direct_types("F32", "torch.bfloat16") is None  # narrowing: torch does it, through the ring
    assert L.direct_types("BF16", "torch.float16") is None
    assert L.direct_types("F8_E4M3", "torch.float32") is None
    assert L.direct_types("BF16", "torch.float8_e4m3fn") is None


def test_pieces_clip_tensors_to_the_chunk():
    spans = [("a", 0, 10), ("b", 10, 30), ("c", 30, 31)]
    assert L.pieces(5, 20, spans) == [("a", 5, 10), ("b", 10, 25)]
    assert L.pieces(30, 100, spans) == [("c", 30, 31)]
    assert L.pieces(40, 10, spans) == []


def test_prefetch_order_wraps_to_the_next_call_and_skips_resident():
    order = [0, 1, 2, 3, 4]
    assert L.upcoming(1, order, set(), 2) == [2, 3]
    assert L.upcoming(4, order, {0}, 2) == [1, 2]
    assert L.upcoming(3, order, {0, 1, 2}, 5) == [4, 3]  # round to itself: the next call needs it again
    assert L.upcoming(9, order, set(), 2) == [] and L.upcoming(1, order, set(), 0) == []


def test_file_changes_are_named_with_the_block(tmp_path):
    f = tmp_path / "dit.safetensors"
    f.write_bytes(bytes(100))
    was = L.file_stamp(f)
    assert L.stamp_change(f, was, 3) is None
    f.write_bytes(bytes(50))
    shrank = L.stamp_change(f, was, 3)
    assert "shrank from 100 to 50 bytes" in shrank and "block 3" in shrank and str(f) in shrank
    f.unlink()
    gone = L.stamp_change(f, was, 7)
    assert "disappeared" in gone and "block 7" in gone
    f.write_bytes(bytes(200))
    assert "changed" in L.stamp_change(f, was, 0)


def test_a_file_rewritten_in_place_with_size_and_mtime_put_back_is_seen(tmp_path):
    f = tmp_path / "dit.safetensors"
    f.write_bytes(bytes(range(256)) * 64)
    ranges = {0: [(0, 4096)], 1: [(8192, 16384)]}
    was, heads = L.file_stamp(f), L.block_heads(f, ranges)
    assert heads[1] == (bytes(range(256)) * 16) and L.head_change(f, ranges, heads, 1) is None
    st = os.stat(f)
    time.sleep(0.01)  # a ctime of its own even on a coarse clock
    with open(f, "r+b") as out:
        out.seek(8192)
        out.write(b"\xff" * 4096)
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))
    now = os.stat(f)
    assert (now.st_size, now.st_mtime_ns) == (st.st_size, st.st_mtime_ns)
    # POSIX: the ctime the write set cannot be put back, so the stamp alone tells
    assert "changed while the model was streaming it (at block 1)" in L.stamp_change(f, was, 1)
    # Windows, where no time tells: the block's first bytes do, for the block that changed only
    assert "changed while the model was streaming it (at block 1)" in L.head_change(f, ranges, heads, 1)
    assert L.head_change(f, ranges, heads, 0) is None
    assert L.block_heads(tmp_path / "gone", ranges) == {}


def test_profile_defaults_read_the_plan_and_ignore_junk():
    def defaults(settings):
        return L.profile_defaults(P.PackProfile(settings=settings).dit_loader())

    assert defaults({}) == {"page_cache": "use", "preload_bytes": 0, "shard_size_bytes": 0, "prefetch_blocks": 1}
    s = {"preload_bytes": 5 * MIB, "shard_size_bytes": 7 * MIB,
         "streaming": {"prefetch_blocks": 3, "enabled": True, "page_cache": "bypass"}}
    assert defaults(s) == {"page_cache": "bypass", "preload_bytes": 5 * MIB, "shard_size_bytes": 7 * MIB,
                           "prefetch_blocks": 3}
    s = {"preload_bytes": "auto", "shard_size_bytes": -1, "streaming": {"page_cache": "sometimes", "prefetch_blocks": 99}}
    assert defaults(s) == {"page_cache": "use", "preload_bytes": 0, "shard_size_bytes": 0, "prefetch_blocks": 8}


def test_profile_defaults_read_the_keys_where_the_plan_writes_them():
    """PlanSettings: shard_size_bytes at the top, prefetch_blocks in streaming, the streamed run's preload_bytes
    over the top-level one; a key at another level is not the plan's and is not read."""
    s = {"preload_bytes": 5 * MIB, "prefetch_blocks": 4, "streaming": {"preload_bytes": 2 * MIB,
                                                                        "shard_size_bytes": 9 * MIB}}
    assert L.profile_defaults(P.PackProfile(settings=s).dit_loader()) == {
        "page_cache": "use", "preload_bytes": 2 * MIB, "shard_size_bytes": 0, "prefetch_blocks": 1}


def test_stats_file_has_the_interface_keys_and_is_written_whole(tmp_path):
    plan = {"resident": [0, 1], "prefetch_blocks": 2, "prefetch_asked": 2, "read_size": MIB, "depth": 3,
            "ring_bytes": 3 * MIB, "block_bytes": 5}
    counters = {"bytes_read": 10, "wait_s": 0.25, "compute_s": 2.0, "steps": 4, "run_s": 3.0, "finished": True}
    doc = L.stats_document("/m/dit.safetensors", 24, counters, plan)
    interface = {"file", "blocks", "bytes_read", "wait_s", "compute_s", "steps", "resident_blocks", "prefetch_blocks"}
    assert interface <= set(doc)
    assert (doc["blocks"], doc["resident_blocks"], doc["prefetch_blocks"], doc["steps"]) == (24, 2, 2, 4)
    out = tmp_path / L.STATS_FILE
    L.write_json_atomic(out, doc)
    L.write_json_atomic(out, dict(doc, steps=5))
    assert json.loads(out.read_text())["steps"] == 5
    assert [p.name for p in tmp_path.iterdir()] == [L.STATS_FILE]


def test_node_module_imports_without_comfyui_and_registers():
    spec = importlib.util.spec_from_file_location("h3kit_pack_probe", NODES / "__init__.py",
                                                  submodule_search_locations=[str(NODES)])
    pack = importlib.util.module_from_spec(spec)
    sys.modules["h3kit_pack_probe"] = pack
    try:
        spec.loader.exec_module(pack)
        assert "H3kitStreamedDiTLoader" in pack.NODE_CLASS_MAPPINGS
        assert pack.NODE_DISPLAY_NAME_MAPPINGS["H3kitStreamedDiTLoader"].startswith("h3kit")
        node = pack.NODE_CLASS_MAPPINGS["H3kitStreamedDiTLoader"]
        assert node.RETURN_TYPES == ("MODEL",) and node.CATEGORY == "h3kit"
        assert not {"h3kit_pack_probe.h3kit_streaming.blocks", "h3kit_pack_probe.h3kit_streaming.load"} & set(
            sys.modules)  # the torch side loads only when the node runs
    finally:
        for m in [m for m in sys.modules if m.startswith("h3kit_pack_probe")]:
            del sys.modules[m]


def test_expected_nodes_lists_the_loader():
    from h3kit.comfyui import deploy

    assert "H3kitStreamedDiTLoader" in deploy.EXPECTED_NODES


def test_a_page_cache_value_it_does_not_know_is_one_sentence_before_anything_loads(tmp_path):
    load = pack_module("h3kit_streaming.load")  # no torch, no ComfyUI: the check comes first
    with pytest.raises(L.StreamError) as e:
        load.load_streamed(tmp_path / "dit.safetensors", page_cache="sometimes")
    assert str(e.value) == "h3kit streamed loader: page_cache is 'sometimes'; choose one of use, bypass."
