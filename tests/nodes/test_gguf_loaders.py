"""h3kit's GGUF loaders' own logic (nodes/h3kit_common/gguf_names.py): no ComfyUI, no torch, no gguf-py.

The container parse on real files written byte by byte (no KV fields, as
stable-diffusion.cpp writes them; with KV fields, as llama.cpp writes an
mmproj), the refusals of a cut-short or foreign file, ComfyUI's H3 test
after the prefixes a file may carry, the renaming of llama.cpp's Qwen3-VL
names onto ComfyUI's, the check that ComfyUI will detect QWEN3VL_32B, and
the mmproj search. The loaders in a real ComfyUI are in
test_gguf_loaders_real_comfyui.py.
"""

from __future__ import annotations

import struct
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "support" / "comfy_h3"))
from gguf_container import write_gguf  # noqa: E402
from pack_support import pack_module  # noqa: E402


L = pack_module("h3kit_common.gguf_names")
S = pack_module("h3kit_streaming.logic")
F32, F16, Q8_0, Q4_K = 0, 1, 8, 12


def _h3_tensors(prefix: str = "") -> dict:
    z = lambda n: bytes(n)  # noqa: E731
    return {prefix + "video_patch_proj.weight": (F32, [64, 96], z(64 * 96 * 4)),
            prefix + "audio_patch_proj.weight": (F16, [64, 32], z(64 * 32 * 2)),
            prefix + "blocks.0.attn.qkv_proj.weight": (Q8_0, [192, 64], z(192 * 2 * 34)),
            prefix + "blocks.0.mlp.fc1.weight": (Q4_K, [256, 256], z(256 * 144)),
            prefix + "blocks.1.norm1.weight": (F32, [64], z(256))}


def test_a_gguf_without_kv_fields_parses_with_torch_order_shapes_and_absolute_ranges(tmp_path):
    path = tmp_path / "h3-Q8_0.gguf"
    write_gguf(path, _h3_tensors())
    doc = L.read_gguf(path)
    assert doc["kv"] == {} and doc["version"] == 3
    t = doc["tensors"]
    assert t["video_patch_proj.weight"]["shape"] == [64, 96] and t["video_patch_proj.weight"]["dtype"] == "F32"
    assert t["blocks.0.attn.qkv_proj.weight"]["dtype"] == "Q8_0"
    assert t["blocks.0.mlp.fc1.weight"]["end"] - t["blocks.0.mlp.fc1.weight"]["start"] == 256 * 144
    data = path.read_bytes()
    qkv = t["blocks.0.attn.qkv_proj.weight"]
    assert qkv["start"] % 32 == 0 and qkv["end"] <= len(data)
    assert all(e["start"] >= doc["data_start"] for e in t.values())
    assert L.is_h3_dit(t) and L.dit_prefix(t) == ""


def test_kv_fields_are_read_and_a_long_array_is_skipped(tmp_path):
    path = tmp_path / "mmproj.gguf"
    kv = {"general.architecture": "clip", "comfy.gguf.orig_shape.x": [2, 3, 4], "tokenizer.ids": list(range(1000))}
    write_gguf(path, {"v.blk.0.ln1.weight": (F32, [32], struct.pack("<32f", *range(32)))}, kv)
    doc = L.read_gguf(path)
    assert doc["kv"]["general.architecture"] == "clip" and doc["kv"]["comfy.gguf.orig_shape.x"] == [2, 3, 4]
    assert doc["kv"]["tokenizer.ids"] == {"array_of": 4, "length": 1000}  # a vocabulary is not kept
    t = doc["tensors"]["v.blk.0.ln1.weight"]
    assert struct.unpack("<32f", path.read_bytes()[t["start"]:t["end"]])[31] == 31.0  # the range is the data


def test_prefixed_h3_names_are_h3_and_other_models_are_not(tmp_path):
    assert L.is_h3_dit(_h3_tensors("model.diffusion_model."))
    assert L.dit_prefix(_h3_tensors("model.diffusion_model.")) == "model.diffusion_model."
    assert not L.is_h3_dit({"video_patch_proj.weight": 1})  # ComfyUI needs both patch projections
    assert not L.is_h3_dit({"double_blocks.0.img_attn.qkv.weight": 1, "img_in.weight": 1})  # flux


def test_a_cut_short_gguf_names_the_first_tensor_past_the_end(tmp_path):
    path = tmp_path / "cut.gguf"
    write_gguf(path, _h3_tensors())
    data = path.read_bytes()
    path.write_bytes(data[:len(data) - 256 * 144])
    with pytest.raises(L.GGUFError, match="cut short.*blocks.0.mlp.fc1.weight.*re-download"):
        L.read_gguf(path)


def test_garbage_and_unknown_types_are_one_sentence(tmp_path):
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"\x89PNG" + bytes(100))
    with pytest.raises(L.GGUFError, match="not a GGUF file"):
        L.read_gguf(junk)
    odd = tmp_path / "iq.gguf"
    write_gguf(odd, {"blocks.0.w.weight": (19, [256], bytes(64))})  # IQ1_S
    with pytest.raises(L.GGUFError, match="ggml type 19"):
        L.read_gguf(odd)
    with pytest.raises(L.GGUFError, match="cannot read"):
        L.read_gguf(tmp_path / "gone.gguf")


def test_the_streamed_loader_reads_a_gguf_without_its_prefix_and_streams_its_block_types(tmp_path):
    path = tmp_path / "h3-Q4_K_M.gguf"
    write_gguf(path, _h3_tensors("model.diffusion_model."))
    doc = S.read_weights(path)
    assert doc["gguf"] and "blocks.0.attn.qkv_proj.weight" in doc["tensors"]
    S.refuse_unsupported(path, doc["tensors"])
    assert S.is_quantized(doc["tensors"]["blocks.0.mlp.fc1.weight"])
    assert not S.is_quantized(doc["tensors"]["blocks.1.norm1.weight"])
    blocks, rest = S.group_blocks(doc["tensors"])
    assert sorted(blocks) == [0, 1] and "video_patch_proj.weight" in rest
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(path.read_bytes()[:-300])
    with pytest.raises(S.StreamError, match="cut short"):
        S.read_weights(cut)


LLAMA_TE = ["token_embd.weight", "output_norm.weight", "output.weight"] + [
    f"blk.{i}.{p}.weight" for i in range(50) for p in
    ("attn_q", "attn_k", "attn_v", "attn_output", "attn_q_norm", "attn_k_norm", "attn_norm", "ffn_gate", "ffn_up",
     "ffn_down", "ffn_norm")]
MMPROJ = (["v.patch_embd.weight", "v.patch_embd.weight.1", "v.patch_embd.bias", "v.position_embd.weight",
           "v.post_ln.weight", "v.post_ln.bias", "mm.0.weight", "mm.0.bias", "mm.2.weight", "mm.2.bias"] +
          [f"v.blk.{i}.{p}.{w}" for i in range(27) for p in ("attn_qkv", "attn_out", "ffn_up", "ffn_down", "ln1", "ln2")
           for w in ("weight", "bias")] +
          [f"v.deepstack.{i}.{p}.{w}" for i in (8, 16, 24) for p in ("norm", "fc1", "fc2") for w in ("weight", "bias")])


def test_llama_cpp_language_model_names_map_onto_comfyuis():
    m = L.te_names(LLAMA_TE)
    assert m["token_embd.weight"] == "model.embed_tokens.weight"
    assert m["blk.49.attn_q.weight"] == "model.layers.49.self_attn.q_proj.weight"
    assert m["blk.3.attn_q_norm.weight"] == "model.layers.3.self_attn.q_norm.weight"  # not attn_q's
    assert m["blk.3.attn_output.weight"] == "model.layers.3.self_attn.o_proj.weight"
    assert m["blk.3.attn_norm.weight"] == "model.layers.3.input_layernorm.weight"
    assert m["blk.3.ffn_norm.weight"] == "model.layers.3.post_attention_layernorm.weight"
    assert m["output_norm.weight"] == "model.norm.weight"
    assert len(set(m.values())) == len(m)  # no two tensors land on one name


def test_mmproj_names_map_onto_comfyuis_vision_tower_deepstack_by_rank():
    m = L.te_names(MMPROJ)
    assert m["v.blk.26.attn_qkv.bias"] == "visual.blocks.26.attn.qkv.bias"
    assert m["v.blk.0.ffn_up.weight"] == "visual.blocks.0.mlp.linear_fc1.weight"
    assert m["v.blk.0.ln2.bias"] == "visual.blocks.0.norm2.bias"
    # llama.cpp numbers the mergers by the vision layer they read (8, 16, 24 in the 32B); ComfyUI by position
    assert m["v.deepstack.8.norm.weight"] == "visual.deepstack_merger_list.0.norm.weight"
    assert m["v.deepstack.16.fc1.weight"] == "visual.deepstack_merger_list.1.linear_fc1.weight"
    assert m["v.deepstack.24.fc2.bias"] == "visual.deepstack_merger_list.2.linear_fc2.bias"
    assert m["mm.0.weight"] == "visual.merger.linear_fc1.weight" and m["mm.2.bias"] == "visual.merger.linear_fc2.bias"
    assert m["v.post_ln.weight"] == "visual.merger.norm.weight"
    assert m["v.position_embd.weight"] == "visual.pos_embed.weight"
    assert m["v.patch_embd.bias"] == "visual.patch_embed.proj.bias"
    # the two temporal slices keep their names: the loader stacks them into one Conv3d weight
    assert m["v.patch_embd.weight"] == "v.patch_embd.weight" and m["v.patch_embd.weight.1"] == "v.patch_embd.weight.1"
    assert len(set(m.values())) == len(m)
    # 4B files number them 5 / 11 / 17: the same ranks
    four = L.te_names([f"v.deepstack.{i}.norm.weight" for i in (5, 11, 17)])
    assert sorted(four.values()) == [f"visual.deepstack_merger_list.{r}.norm.weight" for r in range(3)]


def test_comfyui_and_prefixed_hf_names_stay_or_lose_only_their_prefix():
    names = ["model.layers.49.self_attn.q_proj.weight", "visual.deepstack_merger_list.0.norm.weight",
             "model.language_model.layers.0.mlp.up_proj.weight", "model.visual.blocks.0.attn.qkv.weight",
             "text_encoders.llm.model.layers.1.input_layernorm.weight"]
    m = L.te_names(names)
    assert m[names[0]] == names[0] and m[names[1]] == names[1]
    assert m[names[2]] == "model.layers.0.mlp.up_proj.weight"
    # "model.visual." is what ComfyUI takes for the 4B/8B; MiniMax H3's 32B is detected on "visual."
    assert m[names[3]] == "visual.blocks.0.attn.qkv.weight"
    assert m[names[4]] == "model.layers.1.input_layernorm.weight"


def test_stable_diffusion_cpps_own_vision_names_are_taken_too():
    names = ["text_encoders.llm.visual.patch_embed.proj.0.weight", "text_encoders.llm.visual.patch_embed.proj.1.weight",
             "text_encoders.llm.visual.patch_embed.bias", "text_encoders.llm.visual.deepstack_merger_list.2.norm.weight",
             "text_encoders.llm.model.layers.49.self_attn.q_proj.weight"]
    m = L.te_names(names)
    assert [m[n] for n in names] == ["visual.patch_embed.proj.0.weight", "visual.patch_embed.proj.1.weight",
                                     "visual.patch_embed.proj.bias", "visual.deepstack_merger_list.2.norm.weight",
                                     "model.layers.49.self_attn.q_proj.weight"]
    assert tuple(m[n] for n in names[:2]) in L.PATCH_SPLITS  # the loader stacks these two


def test_split_vision_qkv_is_grouped_for_the_fused_layer():
    names = ["visual.blocks.0.attn.q.weight", "visual.blocks.0.attn.k.weight", "visual.blocks.0.attn.v.weight",
             "visual.blocks.0.attn.q.bias", "visual.blocks.1.attn.qkv.weight"]
    groups = L.split_qkv_groups(names)
    assert groups == {"visual.blocks.0.attn.qkv.weight": tuple(names[:3])}  # the bias lacks k and v


def test_detection_check_says_what_comfyui_would_miss():
    full = list(L.te_names(LLAMA_TE).values()) + list(L.te_names(MMPROJ).values())
    assert L.te_missing(full, "te.gguf") is None
    lm_only = list(L.te_names(LLAMA_TE).values())
    assert "no Qwen3-VL vision tower" in L.te_missing(lm_only, "te.gguf") and "mmproj" in L.te_missing(lm_only, "te.gguf")
    short = [n for n in full if not n.startswith("model.layers.49.")]
    assert "has 49 language-model layers where" in L.te_missing(short, "te.gguf")
    assert "not a Qwen3-VL text encoder" in L.te_missing(["visual.blocks.0.attn.qkv.weight"], "clip.gguf")


def test_the_mmproj_beside_a_text_encoder_is_found_by_its_name():
    te = "qwen3vl_32b_minimax_h3-Q4_K_M.gguf"
    assert L.model_stem(te) == "qwen3vl_32b_minimax_h3"
    assert L.model_stem("Qwen3-VL-32B-BF16.gguf") == "qwen3-vl-32b"
    listing = [te, "mmproj-qwen3vl_32b_minimax_h3-F16.gguf", "mmproj-other-F16.gguf", "notes.txt"]
    assert L.find_mmproj(te, listing)[0] == "mmproj-qwen3vl_32b_minimax_h3-F16.gguf"
    assert L.find_mmproj(te, [te, "mmproj-F16.gguf"])[0] == "mmproj-F16.gguf"  # the only one there
    found, note = L.find_mmproj(te, [te, "mmproj-a.gguf", "mmproj-b.gguf"])
    assert found is None and "2 mmproj files" in note
    assert L.find_mmproj(te, [te])[0] is None
