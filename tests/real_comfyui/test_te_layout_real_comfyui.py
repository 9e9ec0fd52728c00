"""H3kitStreamedTextEncoderLoader in a real ComfyUI >= 0.31 on crafted text encoders (opt-in: H3KIT_COMFYUI_DIR).

Three files at Qwen3-VL-32B's real layout (50 layers and the vision tower,
scripts/make_h3_te.py's), each with one tensor crafted as a hostile-input
campaign crafted it: the embedding table one column narrow, the table 3-D, a
layer weight one row short. Their data is a hole (sparse files): the loader
reads only headers before it refuses. Through the server, each prompt stops
with h3kit's one sentence naming the file, the tensor, its shape and the
expected one -- not torch's "Error(s) in loading state_dict for
MiniMaxQwen3VL" from ComfyUI's own load -- and ComfyUI stays up: the tiny
encoder then runs through the same loader. The checker's own tests:
tests/nodes/test_te_layout.py.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import comfy_h3

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "scripts"))
import make_h3_te  # noqa: E402
from make_h3_dit import header_bytes  # noqa: E402

REAL, PYTHON, WHY = comfy_h3.h3_comfyui()
pytestmark = [pytest.mark.native, pytest.mark.comfyui, pytest.mark.slow, pytest.mark.skipif(REAL is None, reason=WHY)]
TE = "h3tiny_qwen3vl_te_bf16.safetensors"
DIT = "h3tiny_dit_bf16.safetensors"
STREAM = {"page_cache": "use", "prefetch_layers": 1}
EMBED = "model.embed_tokens.weight"
DOWN = "model.layers.17.mlp.down_proj.weight"
# file: (the crafted tensor, its shape, the shape ComfyUI builds)
CRAFTED = {"qwen3vl_embed_narrow.safetensors": (EMBED, [151936, 5119], [151936, 5120]),
           "qwen3vl_embed_3d.safetensors": (EMBED, [1, 151936, 5120], [151936, 5120]),
           "qwen3vl_layer_short.safetensors": (DOWN, [5119, 25600], [5120, 25600])}


def write_sparse(path: Path, tensor: str, shape: list[int]) -> None:
    rows = [(n, d, tuple(shape) if n == tensor else s, f, sd) for n, d, s, f, sd in make_h3_te.layout(50)]
    head, data = header_bytes(rows, {})
    with open(path, "wb") as f:
        f.write(head)
        f.truncate(len(head) + data)


@pytest.fixture(scope="module")
def comfy(tmp_path_factory, native_library):
    import bench_streaming as bench

    where = bench.make_comfy(REAL, tmp_path_factory.mktemp("te-layout") / "comfy", native_library, PYTHON)
    for name, (tensor, shape, _) in CRAFTED.items():
        write_sparse(where / "models" / "text_encoders" / name, tensor, shape)
    bench.write_dit(PYTHON, where, DIT, {"num_layers": 2})
    return where


def error_message(server, prompt_id: str) -> str:
    """The node's whole exception message (run_workflow's sentence keeps its first 400 characters)."""
    entry = server.get(f"/history/{prompt_id}")[prompt_id]
    return next(str(data.get("exception_message", "")) for kind, data in entry["status"]["messages"]
                if kind == "execution_error")


def test_crafted_encoders_stop_in_one_sentence_and_comfyui_stays_up(comfy, tmp_path):
    import bench_streaming as bench
    from h3kit.comfyui import client

    def run(server, te: str, seed: int) -> dict:
        api = bench.graph(DIT, None, 1, seed=seed, prefix=f"layout/{seed}", text_encoder=(te, "CLIPLoader"),
                          te_stream=STREAM)
        assert "H3kitStreamedTextEncoderLoader" in {n["class_type"] for n in api.values()}
        return client.run_workflow(server, api, timeout=600)

    with client.ComfyServer(comfy, PYTHON, ["--cpu"], tmp_path / "server") as server:
        server.start(timeout=300)
        for seed, (name, (tensor, shape, want)) in enumerate(CRAFTED.items(), start=1):
            ran = run(server, name, seed)
            assert not ran["ran"], name
            said = error_message(server, ran["prompt_id"])
            assert (f"{name} does not have the layout ComfyUI builds for MiniMax H3's text encoder: {tensor} has "
                    f"shape {shape} where Qwen3-VL-32B (hidden 5120, MLP 25600, 64 heads and 8 KV heads of 128, "
                    f"vocabulary 151936) has {want}; the file is damaged or not MiniMax H3's encoder: "
                    "re-download it.") in said, said
            assert "Error(s) in loading state_dict" not in said and "Traceback" not in said, said
        good = run(server, TE, 9)
        assert good["ran"], good["message"] + server.log_tail(3000)
        assert "h3kit streamed text encoder: " in server.log_tail(200000)
