"""The streamed text encoder's shape check (nodes/h3kit_streaming/te_logic.py `te_layout_problem`): no torch.

Every tensor of the file is checked against the layout ComfyUI builds for
MiniMax H3's encoder -- Qwen3-VL-32B's at 5120 wide, a test's tiny encoder at
the dims most of its own tensors agree on -- before ComfyUI's load sees the
file, whose torch error ("Error(s) in loading state_dict for
MiniMaxQwen3VL") names neither file nor tensor. The headers are real
safetensors files from scripts/make_h3_te.py's layout (sparse: no data
written), three of them crafted as a hostile-input campaign crafted them: the
embedding table one column narrow, the table 3-D, a layer weight one row
short. The same files through a real ComfyUI: test_te_layout_real_comfyui.py.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from pack_support import pack_module

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "scripts"))
import make_h3_te  # noqa: E402
from make_h3_dit import header_bytes  # noqa: E402

T = pack_module("h3kit_streaming.te_logic")
TINY_LM = {"hidden": 48, "ffn": 96, "heads": 1, "kv_heads": 1, "head_dim": 128, "vocab": 151936}
TINY_VISION = {"hidden": 32, "ffn": 64, "depth": 3, "deepstack": 3, "patch": 16, "temporal": 2, "merge": 2,
               "positions": 2304}
EMBED = "model.embed_tokens.weight"
DOWN = "model.layers.2.mlp.down_proj.weight"


def write_header(path: Path, layout, changed: dict | None = None) -> Path:
    """A safetensors file of `layout` (make_h3_te.layout's rows) with `changed` {name: shape}, its data a hole."""
    rows = [(n, d, tuple((changed or {}).get(n, s)), fill, std) for n, d, s, fill, std in layout]
    head, data = header_bytes(rows, {})
    with open(path, "wb") as f:
        f.write(head)
        f.truncate(len(head) + data)
    return path


def problem(path: Path) -> str | None:
    tensors = T.te_tensors(path)["tensors"]
    return T.te_layout_problem(path.name, {n: e["shape"] for n, e in tensors.items()}, with_tower=True)


@pytest.fixture
def tiny(monkeypatch):
    """make_h3_te's layout at the tiny dims of the tests' tiny encoder (tests/support/comfy_h3/make_tiny_h3.py)."""
    monkeypatch.setattr(make_h3_te, "LM", TINY_LM)
    monkeypatch.setattr(make_h3_te, "VISION", TINY_VISION)
    return make_h3_te.layout(50)


def test_the_layout_is_qwen3_vl_32bs_as_make_h3_te_writes_it():
    assert T.QWEN3VL_32B_LM == make_h3_te.LM
    shapes = {n: list(s) for n, _, s, _, _ in make_h3_te.layout(50)}
    assert T.te_config(shapes) == make_h3_te.LM
    assert T.te_layout_problem("te.safetensors", shapes, with_tower=True) is None


def test_make_h3_tes_random_files_pass_at_real_width_and_tiny(tmp_path, tiny):
    assert problem(write_header(tmp_path / "tiny.safetensors", tiny)) is None
    assert T.te_config({n: list(s) for n, _, s, _, _ in tiny}) == TINY_LM


def test_a_real_width_file_with_fewer_layers_passes(tmp_path):
    assert problem(write_header(tmp_path / "te8.safetensors", make_h3_te.layout(4))) is None


CRAFTED = [
    ("narrow", {EMBED: [151936, 5119]}, EMBED, [151936, 5119], [151936, 5120]),
    ("3d", {EMBED: [1, 151936, 5120]}, EMBED, [1, 151936, 5120], [151936, 5120]),
    ("short", {DOWN: [5119, 25600]}, DOWN, [5119, 25600], [5120, 25600]),
]


@pytest.mark.parametrize("tag, changed, tensor, shape, want", CRAFTED, ids=[c[0] for c in CRAFTED])
def test_crafted_real_width_files_are_one_sentence_naming_file_tensor_and_shapes(tmp_path, tag, changed, tensor,
                                                                                  shape, want):
    f = write_header(tmp_path / f"qwen3vl_{tag}.safetensors", make_h3_te.layout(4), changed)
    said = problem(f)
    assert said == (f"qwen3vl_{tag}.safetensors does not have the layout ComfyUI builds for MiniMax H3's text "
                    f"encoder: {tensor} has shape {shape} where Qwen3-VL-32B (hidden 5120, MLP 25600, 64 heads and 8 "
                    f"KV heads of 128, vocabulary 151936) has {want}; the file is damaged or not MiniMax H3's "
                    "encoder: re-download it.")


@pytest.mark.parametrize("tag, changed, tensor", [
    ("narrow", {EMBED: [151936, 47]}, EMBED),
    ("3d", {EMBED: [1, 151936, 48]}, EMBED),
    ("short", {"model.layers.0.self_attn.q_proj.weight": [127, 48]}, "model.layers.0.self_attn.q_proj.weight"),
    ("kv", {"model.layers.49.self_attn.k_proj.weight": [256, 48]}, "model.layers.49.self_attn.k_proj.weight"),
])
def test_crafted_tiny_files_name_the_odd_tensor_not_the_layout(tmp_path, tiny, tag, changed, tensor):
    said = problem(write_header(tmp_path / f"tiny_{tag}.safetensors", tiny, changed))
    assert said.startswith(f"tiny_{tag}.safetensors does not have the layout ComfyUI builds for MiniMax H3's text "
                           f"encoder: {tensor} has shape {changed[tensor]} where this tiny Qwen3-VL encoder (hidden "
                           "48, MLP 96, 1 heads and 1 KV heads of 128, vocabulary 151936) has "), said


def test_a_5120_wide_file_of_other_dims_is_held_to_qwen3_vl_32b(tmp_path):
    """ComfyUI's config is fixed-size: a consistent file at 5120 wide but another MLP still does not load."""
    rows = [(n, d, tuple(25000 if x == 25600 else x for x in s), f, sd) for n, d, s, f, sd in make_h3_te.layout(2)]
    said = problem(write_header(tmp_path / "other.safetensors", rows))
    assert "model.layers.0.mlp.gate_proj.weight has shape [25000, 5120] where Qwen3-VL-32B" in said


def test_a_wrong_vision_tensor_is_named_too(tmp_path):
    name = "visual.blocks.3.attn.proj.weight"
    said = problem(write_header(tmp_path / "vis.safetensors", make_h3_te.layout(2), {name: [1152, 1151]}))
    assert f"{name} is [1152, 1151] where ComfyUI builds [1152, 1152]" in said


def test_head_dim_is_comfyuis_constant_even_when_a_tiny_file_agrees_on_another(tmp_path, tiny):
    """ComfyUI's Qwen3 configs fix head_dim at 128 (the tests' test node too): 64-wide q/k norms never load."""
    norms = {n: [64] for n, _, s, _, _ in tiny if n.endswith(("q_norm.weight", "k_norm.weight"))}
    said = problem(write_header(tmp_path / "hd64.safetensors", tiny, norms))
    assert "model.layers.0.self_attn.q_norm.weight has shape [64] where this tiny Qwen3-VL encoder" in said
    assert said.endswith("has [128]; the file is damaged or not MiniMax H3's encoder: re-download it.")
