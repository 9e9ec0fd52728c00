"""The DiT's width and depth read from the file's header, as ComfyUI's detection reads them (comfy/model_detection.py)."""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path

import pytest

from h3kit.calibrate import arch
from h3kit.data import catalog as catalog_mod


def h3_shapes(hidden=256, heads=2, head_dim=128, ffn=672, blocks=3, refiner=2, text_dim=48, t_dim=128) -> dict:
    """Tensor name -> shape of an H3 DiT layout (the keys make_tiny_h3.py writes), torch order."""
    inner = heads * head_dim
    s = {"video_patch_proj.weight": (hidden, 96), "video_patch_proj.bias": (hidden,),
         "audio_patch_proj.weight": (hidden, 32), "condition_proj.weight": (hidden, text_dim),
         "time_embedder.proj_in.weight": (hidden, 256), "time_embedder.proj_out.weight": (t_dim, hidden),
         "rope.inv_freq": (16,), "final_layer.video_out.weight": (96, hidden), "final_layer.audio_out.weight": (32, hidden)}
    for p, n in (("blocks", blocks), ("token_refiner.blocks", refiner)):
        for i in range(n):
            s[f"{p}.{i}.attn.qkv_proj.weight"] = (3 * inner, hidden)
            s[f"{p}.{i}.attn.q_norm.weight"] = (head_dim,)
            s[f"{p}.{i}.attn.out_proj.weight"] = (hidden, inner)
            s[f"{p}.{i}.mlp.fc1.weight"] = (2 * ffn, hidden)
            s[f"{p}.{i}.mlp.fc2.weight"] = (hidden, ffn)
    return s


def write_safetensors(path: Path, shapes: dict, metadata: dict | None = None, dtype="BF16") -> Path:
    """A real safetensors file (header + zero bytes), written with the standard library."""
    header, offset = {}, 0
    for name, shape in shapes.items():
        n = 2 * max(1, __import__("math").prod(shape))
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + n]}
        offset += n
    if metadata:
        header["__metadata__"] = metadata
    raw = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)) + raw)
        f.truncate(8 + len(raw) + offset)  # sparse: no real bytes needed for the header reader
    return path


def _gguf_str(s: str) -> bytes:
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


def write_gguf(path: Path, shapes: dict) -> Path:
    """A GGUF v3 file: one string key, then tensor infos with dims innermost first (F16 data)."""
    body = struct.pack("<4sIQQ", b"GGUF", 3, len(shapes), 1)
    body += _gguf_str("general.architecture") + struct.pack("<I", 8) + _gguf_str("h3")
    offset = 0
    for name, shape in shapes.items():
        body += _gguf_str(name) + struct.pack("<I", len(shape)) + b"".join(struct.pack("<Q", d) for d in reversed(shape))
        body += struct.pack("<IQ", 1, offset)
        offset += -(-2 * __import__("math").prod(shape) // 32) * 32
    pad = -len(body) % 32
    with open(path, "wb") as f:
        f.write(body + b"\0" * pad)
        f.truncate(len(body) + pad + offset)
    return path


def test_safetensors_header_gives_comfyuis_dims(tmp_path):
    path = write_safetensors(tmp_path / "dit.safetensors", h3_shapes())
    a = arch.from_file(path)
    assert (a["hidden"], a["heads"], a["head_dim"], a["ffn"], a["blocks_total"], a["refiner_blocks"], a["text_dim"]) \
        == (256, 2, 128, 672, 3, 2, 48)
    assert a["from"] == f"file header {path}" and a["weight_dtype"] == "bfloat16"
    assert a["time_embed_dim"] == 128 and a["rope_inv_freq_len"] == 16 and a["latents_dim"] == 24
    block = 3 * (3 * 256 * 256 + 128 + 256 * 256 + 2 * 672 * 256 + 256 * 672)
    assert a["block_params"] == block and a["block_file_bytes"] == 2 * block
    assert a["file_bytes"] == path.stat().st_size


def test_a_prefixed_checkpoint_and_metadata_overrides(tmp_path):
    shapes = {f"model.diffusion_model.{k}": v for k, v in h3_shapes(blocks=4).items()}
    meta = {"config": json.dumps({"transformer": {"num_attention_heads": 4, "attention_head_dim": 64}})}
    a = arch.from_file(write_safetensors(tmp_path / "ckpt.safetensors", shapes, meta))
    assert a["blocks_total"] == 4 and a["heads"] == 4 and a["head_dim"] == 64  # as ComfyUI's update() does


def test_gguf_tensor_infos_are_read_in_torch_order(tmp_path):
    a = arch.from_file(write_gguf(tmp_path / "dit.gguf", h3_shapes(hidden=512, heads=4, ffn=1344, blocks=5)))
    assert (a["hidden"], a["heads"], a["ffn"], a["blocks_total"]) == (512, 4, 1344, 5)
    assert a["block_file_bytes"] > 0 and "weight_dtype" not in a


def test_arch_for_uses_the_file_in_the_comfyui_models_folder(tmp_path):
    cat = catalog_mod.load()
    weight = cat.dit[0]
    comfy = tmp_path / "ComfyUI"
    (comfy / "models" / weight.file["folder"]).mkdir(parents=True)
    a, why = arch.arch_for(cat.data, weight, comfy)
    assert a["from"] == "catalog" and a["hidden"] == cat.data["architecture"]["hidden"] and "not in" in why
    write_safetensors(comfy / "models" / weight.file["folder"] / weight.file["name"], h3_shapes(blocks=7))
    a, why = arch.arch_for(cat.data, weight, comfy)
    assert why is None and a["blocks_total"] == 7 and a["from"].startswith("file header")


@pytest.mark.parametrize("content", [b"", b"\xff" * 16, struct.pack("<Q", 10) + b"not json!!"])
def test_an_unreadable_file_falls_back_to_the_catalog_with_the_reason(tmp_path, content):
    cat = catalog_mod.load()
    weight = cat.dit[0]
    target = tmp_path / "models" / weight.file["folder"] / weight.file["name"]
    target.parent.mkdir(parents=True)
    target.write_bytes(content)
    a, why = arch.arch_for(cat.data, weight, tmp_path)
    assert a["from"] == "catalog" and "could not be read" in why


def test_a_non_h3_file_is_refused_with_a_sentence(tmp_path):
    path = write_safetensors(tmp_path / "sd.safetensors", {"conv_in.weight": (320, 4, 3, 3)})
    with pytest.raises(arch.HeaderError, match="not a MiniMax H3 DiT"):
        arch.from_file(path)


def test_held_weights_cast_float_files_and_keep_quantized_ones():
    a = {"blocks_total": 10, "block_params": 1000, "other_params": 100, "block_file_bytes": 2000,
         "other_file_bytes": 200}
    assert arch.held_weight_bytes(a, "bf16", 4) == {"per_block": 400, "other": 400, "total": 4400}
    assert arch.held_weight_bytes(a, "q8_0", 4) == {"per_block": 200, "other": 200, "total": 2200}
    assert arch.held_weight_bytes({"blocks_total": 10, "file_bytes": 1000}, "bf16", 4)["total"] == 2000


@pytest.mark.skipif(not os.environ.get("H3KIT_COMFYUI_DIR"), reason="set H3KIT_COMFYUI_DIR to check a real tiny file")
@pytest.mark.comfyui
def test_the_tiny_h3_file_of_the_real_comfyui():
    files = list((Path(os.environ["H3KIT_COMFYUI_DIR"]) / "models" / "diffusion_models").glob("h3tiny_dit*.safetensors"))
    if not files:
        pytest.skip("no tiny H3 DiT in that ComfyUI")
    a = arch.from_file(files[0])
    assert a["hidden"] > 0 and a["blocks_total"] > 0 and a["heads"] * a["head_dim"] > 0
