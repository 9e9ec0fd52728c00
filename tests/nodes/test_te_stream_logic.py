"""The streamed text encoder's pure logic (nodes/h3kit_streaming/te_logic.py): no ComfyUI, no torch.

Names in ComfyUI's form from both file kinds (llama.cpp's GGUF names mapped),
the grouping into streamed layers / vision tower / embedding table / the
rest, where one embedding row lies (a quantized row is whole ggml blocks),
and the one-sentence refusals: ComfyUI's quantized safetensors, a file that
is no Qwen3-VL encoder, a gap in the layers, a token id past the table.
The real-ComfyUI tests are test_te_stream_real_comfyui.py.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from pack_support import pack_module

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "support" / "comfy_h3"))
from gguf_container import write_gguf  # noqa: E402
from test_streamed_loader import write_safetensors  # noqa: E402

T = pack_module("h3kit_streaming.te_logic")
S = pack_module("h3kit_streaming.logic")
Q8_0, F32 = 8, 0

TE = [("model.embed_tokens.weight", "BF16", [10, 8]),
      ("model.layers.0.self_attn.q_proj.weight", "BF16", [8, 8]), ("model.layers.0.input_layernorm.weight", "BF16", [8]),
      ("model.layers.1.self_attn.q_proj.weight", "BF16", [8, 8]), ("model.layers.1.input_layernorm.weight", "BF16", [8]),
      ("visual.blocks.0.attn.qkv.weight", "BF16", [12, 4]), ("visual.deepstack_merger_list.0.norm.weight", "BF16", [16])]


def test_a_safetensors_encoder_groups_into_layers_tower_table_and_rest(tmp_path):
    f = tmp_path / "te.safetensors"
    info = write_safetensors(f, TE + [("model.norm.weight", "BF16", [8])])
    header = T.te_tensors(f)
    layers, vision, rest = T.group_layers(header["tensors"])
    assert layers == {0: ["model.layers.0.self_attn.q_proj.weight", "model.layers.0.input_layernorm.weight"],
                      1: ["model.layers.1.self_attn.q_proj.weight", "model.layers.1.input_layernorm.weight"]}
    assert vision == ["visual.blocks.0.attn.qkv.weight", "visual.deepstack_merger_list.0.norm.weight"]
    assert rest == ["model.norm.weight"]
    T.refuse_unsupported_te(f, header["tensors"])  # a plain bf16 encoder streams
    # row 3 of a 10 x 8 bf16 table: 16 bytes, 48 bytes after the table's start (the first tensor in the file)
    assert T.row_span(header["tensors"][T.EMBED], 3) == (info["data_start"] + 48, info["data_start"] + 64)
    assert T.layer_file_bytes(header["tensors"], layers) == 8 * 8 * 2 + 8 * 2


def test_a_gguf_encoder_in_llama_cpp_names_comes_out_in_comfyuis(tmp_path):
    f = tmp_path / "te.gguf"
    q8_row = bytes(34) * 2  # 64 values: two Q8_0 blocks of 32
    write_gguf(f, {"token_embd.weight": (Q8_0, [5, 64], q8_row * 5),
                   "blk.0.attn_q.weight": (Q8_0, [64, 64], q8_row * 64),
                   "blk.0.attn_norm.weight": (F32, [64], bytes(256)),
                   "v.blk.0.attn_qkv.weight": (F32, [3, 2], bytes(24))})
    header = T.te_tensors(f)
    assert {"model.embed_tokens.weight", "model.layers.0.self_attn.q_proj.weight",
            "model.layers.0.input_layernorm.weight"} <= set(header["tensors"])
    assert header["renamed"]["model.layers.0.self_attn.q_proj.weight"] == "blk.0.attn_q.weight"
    layers, vision, _ = T.group_layers(header["tensors"])
    assert list(layers) == [0] and vision == ["visual.blocks.0.attn.qkv.weight"]
    table = header["tensors"][T.EMBED]
    start, end = T.row_span(table, 4)
    assert end - start == 68 and start == table["start"] + 4 * 68  # a quantized row: its whole ggml blocks
    with pytest.raises(S.StreamError, match="token id 5 is outside the embedding table"):
        T.row_span(table, 5)


@pytest.mark.parametrize("extra, says", [
    ([("model.layers.0.self_attn.q_proj.comfy_quant", "U8", [24])],
     "te.safetensors is a quantized ComfyUI text encoder (model.layers.0.self_attn.q_proj.comfy_quant); h3kit's "
     "streamed text encoder reads plain bf16/fp16/fp32/fp8 safetensors and GGUF files only: use ComfyUI's Load CLIP "
     "(CLIPLoader, type minimax)."),
    ([("model.layers.0.self_attn.q_proj.weight_scale", "F32", [1])], "is a quantized ComfyUI text encoder"),
])
def test_comfyuis_quantized_encoders_are_refused_naming_cliploader(tmp_path, extra, says):
    f = tmp_path / "te.safetensors"
    write_safetensors(f, TE + extra)
    with pytest.raises(S.StreamError) as err:
        T.refuse_unsupported_te(f, T.te_tensors(f)["tensors"])
    assert says in str(err.value)


def test_a_file_that_is_no_text_encoder_is_one_sentence(tmp_path):
    f = tmp_path / "dit.safetensors"
    write_safetensors(f, [("blocks.0.attn.qkv_proj.weight", "BF16", [4, 4])])
    with pytest.raises(S.StreamError, match=r"^dit.safetensors has no Qwen3-VL language model .* pick the H3 text "
                                            r"encoder \(qwen3vl_32b_minimax_h3\*\) instead\.$"):
        T.refuse_unsupported_te(f, T.te_tensors(f)["tensors"])


def test_a_gap_in_the_layers_is_a_damaged_file():
    names = ["model.layers.0.a.weight", "model.layers.2.a.weight"]
    with pytest.raises(S.StreamError, match=r"no model.layers.1\); the file is damaged"):
        T.group_layers(names)
