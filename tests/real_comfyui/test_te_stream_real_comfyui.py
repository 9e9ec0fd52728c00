"""H3kitStreamedTextEncoderLoader in a real ComfyUI >= 0.31 (opt-in: H3KIT_COMFYUI_DIR), on tiny random files.

In ComfyUI's Python (tests/support/comfy_h3/te_stream_probe.py): the tiny
Qwen3-VL "32B" encoder (50 layers, ComfyUI's classes at tiny width) through
the streamed loader gives the conditioning and token tags of ComfyUI's own
CLIPLoader bit for bit -- a text prompt and an image prompt (the vision
tower), twice each -- read in place on the CPU, through the ring (the way a
GPU is fed) and past the page cache; once the encode is over it holds no
layer weights, no buffers and no open streamer, and its stats say every
layer was read once. ComfyUI's quantized safetensors and a file that is no
text encoder are refused in one sentence. GGUF encoders are checked beside
the other GGUF loaders (test_gguf_loaders_real_comfyui.py).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

import comfy_h3

REPO = Path(__file__).resolve().parents[2]
REAL, PYTHON, WHY = comfy_h3.h3_comfyui()
pytestmark = [pytest.mark.native, pytest.mark.comfyui, pytest.mark.slow, pytest.mark.skipif(REAL is None, reason=WHY)]
PROBE = REPO / "tests" / "support" / "comfy_h3" / "te_stream_probe.py"
TE = "h3tiny_qwen3vl_te_bf16.safetensors"
QUANTIZED = "h3tiny_te_int8.safetensors"
NOT_TE = "h3tiny_not_a_te.safetensors"
LAYERS = 50
MAKE_ODD_FILES = r"""
import sys, torch
from safetensors.torch import load_file, save_file
te, quantized, not_te = sys.argv[1:4]
sd = load_file(te)
sd["model.layers.0.self_attn.q_proj.comfy_quant"] = torch.tensor(list(b'{"format": "int8_tensorwise"}'), dtype=torch.uint8)
save_file(sd, quantized)
save_file({"blocks.0.attn.qkv_proj.weight": torch.zeros(4, 4, dtype=torch.bfloat16)}, not_te)
"""


def probe(comfy: Path, case: str, *files: str, env=None) -> dict:
    done = subprocess.run([str(PYTHON), str(PROBE), str(comfy), case, TE, *files], capture_output=True, text=True,
                          timeout=900, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def comfy(tmp_path_factory, native_library):
    import sys
    sys.path.insert(0, str(REPO / "scripts"))
    import bench_streaming as bench

    where = bench.make_comfy(REAL, tmp_path_factory.mktemp("te-stream") / "comfy", native_library, PYTHON)
    folder = where / "models" / "text_encoders"
    bench.run_py(PYTHON, MAKE_ODD_FILES, folder / TE, folder / QUANTIZED, folder / NOT_TE)
    return where


@pytest.mark.parametrize("case, mode", [("direct", "direct"), ("ring", "ring"), ("bypass", "uncached")])
def test_streamed_encoder_gives_cliploaders_conditioning_bit_for_bit(comfy, case, mode):
    got = probe(comfy, case, TE)[TE]
    assert got["equal"] == [True, True] and got["rel"] == 0.0, got
    assert got["mode"] == mode
    # nothing of the encoder stays once the encode is over: the sampler gets the memory back
    assert got["after"] == {"layer_elements": 0, "buffers": 0, "streamer_open": False}
    stats = got["stats"]
    assert stats["finished"] and stats["blocks"] == LAYERS and stats["blocks_read"] == LAYERS
    # one read of every layer per prompt (the ring also reads the next prompt's first layer ahead)
    assert LAYERS * stats["block_bytes"] <= stats["bytes_read"] <= (LAYERS + 1) * stats["block_bytes"]


def test_what_it_does_not_stream_is_one_sentence_naming_the_loader_to_use(comfy):
    got = probe(comfy, "direct", QUANTIZED, NOT_TE)
    assert got[QUANTIZED]["refused"].startswith(f"{QUANTIZED} is a quantized ComfyUI text encoder")
    assert "CLIPLoader" in got[QUANTIZED]["refused"]
    assert got[NOT_TE]["refused"].startswith(f"{NOT_TE} has no Qwen3-VL language model")


def _graph(bench, loader: str, kind: str, prefix: str) -> dict:
    """h3kit's graph as its workflow writer makes it, the encoder streamed as a plan that streams it says."""
    stream = {"page_cache": "use", "prefetch_layers": 1} if loader != "CLIPLoader" else None
    api = bench.graph("h3tiny_dit_bf16.safetensors", None, 2, seed=5, kind=kind, prefix=prefix,
                      text_encoder=(TE, "CLIPLoader"), te_stream=stream)
    assert {n["class_type"] for n in api.values()} >= {loader}
    return api


@pytest.mark.parametrize("kind", ["t2v", "i2v"])
def test_h3kits_workflow_through_the_streamed_encoder_gives_cliploaders_frames(comfy, kind, tmp_path):
    """Through the server: h3kit's text- and image-to-video graphs sample the same latent with either loader."""
    import sys
    sys.path.insert(0, str(REPO / "scripts"))
    import bench_streaming as bench
    from h3kit.comfyui import client

    if not (comfy / "models" / "diffusion_models" / "h3tiny_dit_bf16.safetensors").is_file():
        bench.write_dit(PYTHON, comfy, "h3tiny_dit_bf16.safetensors", {"num_layers": 2})
    latents = {}
    with client.ComfyServer(comfy, PYTHON, ["--cpu"], tmp_path / "server") as server:
        server.start(timeout=300)
        from h3kit.data import comfy_nodes
        info = server.object_info()["H3kitStreamedTextEncoderLoader"]["input"]
        table = comfy_nodes.load()["H3kitStreamedTextEncoderLoader"]["inputs"]
        assert [i["name"] for i in table] == [*info["required"], *info.get("optional", {})]  # what the writer fills
        for loader in ("CLIPLoader", "H3kitStreamedTextEncoderLoader"):
            ran = client.run_workflow(server, _graph(bench, loader, kind, f"{kind}/{loader}"), timeout=900)
            assert ran["ran"], ran["message"] + server.log_tail(3000)
            latents[loader] = bench.latest_latent(server.workdir, f"{kind}/{loader}")
        assert "h3kit streamed text encoder: " in server.log_tail(200000)
    same = bench.compare(PYTHON, latents["CLIPLoader"], latents["H3kitStreamedTextEncoderLoader"])
    assert same["identical"], same
