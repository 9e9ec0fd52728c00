"""h3kit's GGUF loaders in a real ComfyUI >= 0.31 (opt-in: H3KIT_COMFYUI_DIR), on tiny random-weight H3 files.

The files are written the way stable-diffusion.cpp writes H3's GGUFs (no KV
field at all; tests/support/comfy_h3/make_tiny_gguf.py, quantized by gguf-py's own
code), beside safetensors of the same weights: the bf16 ones the GGUF was
made from, and the values the GGUF holds, dequantized. Through the server,
h3kit's workflows with stock ComfyUI-GGUF's loaders fail on them (its
refusal is the message asserted), with h3kit's H3kitUnetLoaderGGUF /
H3kitCLIPLoaderGGUF they run: the sampled latent equals UNETLoader /
CLIPLoader on the dequantized values within float rounding, and differs
from the bf16 original by the GGUF type's error (measured, printed,
bounded). The text encoder is a Qwen3-VL "32B" layout in llama.cpp names
with its vision tower in an mmproj GGUF found beside it (and, second, one
file in ComfyUI names with the tower inside), run in the image-to-video
graph so the tower encodes the first frame. The streamed loader runs the
GGUF DiT like UNETLoader on the dequantized values.

ComfyUI is a throwaway copy; ComfyUI-GGUF is unpacked into it from a local
git repository (H3KIT_COMFYUI_GGUF_GIT, default the project's mirror) and
gguf-py is pip-installed into a temporary folder on ComfyUI's PYTHONPATH,
never into ComfyUI's venv. Measured figures go to $H3KIT_GGUF_FIGURES
(JSON) when set.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

import comfy_h3

REPO = Path(__file__).resolve().parents[2]
REAL, PYTHON, WHY = comfy_h3.h3_comfyui()
PACK_GIT = Path(os.environ.get("H3KIT_COMFYUI_GGUF_GIT") or "/work/.mirror/city96+ComfyUI-GGUF/repo")
pytestmark = [pytest.mark.native, pytest.mark.comfyui, pytest.mark.slow, pytest.mark.skipif(REAL is None, reason=WHY),
              pytest.mark.skipif(not (PACK_GIT / "HEAD").is_file() and not (PACK_GIT / ".git").exists(),
                                 reason=f"no ComfyUI-GGUF git repository at {PACK_GIT} (set H3KIT_COMFYUI_GGUF_GIT)")]

sys.path.insert(0, str(REPO / "scripts"))
import bench_streaming as bench  # noqa: E402

# gguf-py quantizes these itself (gguf.quants.quantize); rows of the tiny DiT are whole 32-value blocks
QTYPES = ("Q8_0", "Q5_0", "Q4_0")
# max |latent - latent from the bf16 original| / max |latent|, two steps: 4-8x what was measured (2.5e-4,
# 1.9e-3, 5.0e-3 on ComfyUI 0.33.0, --cpu)
BOUND = {"Q8_0": 0.002, "Q5_0": 0.01, "Q4_0": 0.02}
EXACT = 1e-3  # the same values through ComfyUI-GGUF's ops and through UNETLoader: float rounding only
DIT_DIMS = {"num_layers": 4}
# the K types (the catalog's q6_k, q5_k_m, q4_k_m, q3_k_m, q2_k): random blocks (gguf-py cannot quantize to
# them), so only "the same values" is checked, held and streamed; rows of 256 values need a wider DiT
KTYPES = ("Q6_K", "Q5_K", "Q4_K", "Q3_K", "Q2_K")
K_DIMS = {"num_layers": 3, "hidden_size": 256, "num_attention_heads": 8, "attention_head_dim": 32,
          "ffn_hidden_size": 256}
STREAM = {"preload_bytes": 0, "shard_size_bytes": 0, "prefetch_blocks": 2}
FIGURES: dict = {}
COMPARE = r"""
import json, sys, torch
from safetensors.torch import load_file
a, b = load_file(sys.argv[1]), load_file(sys.argv[2])
diff = max(float((a[k].double() - b[k].double()).abs().max()) for k in a)
scale = max(float(a[k].double().abs().max()) for k in a)
print(json.dumps({"max_abs": diff, "max_rel": diff / scale, "identical": all(torch.equal(a[k], b[k]) for k in a)}))
"""
NO_PACK = r"""
import importlib.util, os, sys
comfy, name = sys.argv[1:3]
sys.path.insert(0, comfy)
os.chdir(comfy)
from comfy.cli_args import args
args.cpu = True
pack_dir = os.path.join(comfy, "custom_nodes", "ComfyUI-h3kit")
spec = importlib.util.spec_from_file_location("h3kpack", os.path.join(pack_dir, "__init__.py"),
                                              submodule_search_locations=[pack_dir])
pack = importlib.util.module_from_spec(spec); sys.modules["h3kpack"] = pack; spec.loader.exec_module(pack)
try:
    pack.NODE_CLASS_MAPPINGS["H3kitUnetLoaderGGUF"]().load(name)
    print("loaded")
except Exception as exc:
    print(type(exc).__name__ + ": " + str(exc))
"""


def _unpack_pack(dest: Path) -> None:
    """ComfyUI-GGUF's files from the git repository (a bare mirror or a checkout) into `dest`."""
    git_dir = PACK_GIT if (PACK_GIT / "HEAD").is_file() else PACK_GIT / ".git"
    done = subprocess.run(["git", f"--git-dir={git_dir}", "archive", "--format=tar", "HEAD"], capture_output=True,
                          timeout=120, check=True)
    dest.mkdir(parents=True)
    with tarfile.open(fileobj=io.BytesIO(done.stdout)) as tar:
        tar.extractall(dest, filter="data")


def _gguf_py(where: Path) -> Path:
    """gguf-py in a folder of its own (ComfyUI's numpy and the rest are the venv's)."""
    done = subprocess.run([str(PYTHON), "-m", "pip", "install", "--no-deps", "--quiet", "--target", str(where), "gguf"],
                          capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        pytest.skip(f"gguf-py could not be installed for ComfyUI's Python: {done.stderr[-500:]}")
    return where


def _make(kind: str, qtype: str, out: Path, name: str, env: dict, *extra: str) -> dict:
    argv = [str(PYTHON), str(REPO / "tests" / "support" / "comfy_h3" / "make_tiny_gguf.py"), kind, "--qtype", qtype,
            "--out", str(out), "--name", name, *extra]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=600, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def comfy(tmp_path_factory, native_library):
    root = tmp_path_factory.mktemp("gguf")
    where = bench.make_comfy(REAL, root / "comfy", native_library, PYTHON)
    _unpack_pack(where / "custom_nodes" / "ComfyUI-GGUF")
    env = {**os.environ, "PYTHONPATH": str(_gguf_py(root / "gguf-py"))}
    made = {q: _make("dit", q, where / "models" / "diffusion_models", f"h3g_{q.lower()}", env,
                     "--dit", json.dumps(DIT_DIMS)) for q in QTYPES}
    made.update({q: _make("dit", q, where / "models" / "diffusion_models", f"h3k_{q.lower()}", env,
                          "--dit", json.dumps(K_DIMS)) for q in KTYPES})
    made["te"] = _make("te", "Q8_0", where / "models" / "text_encoders", "h3te", env)
    FIGURES["tensor_types"] = {k: v["types"] for k, v in made.items()}
    return {"dir": where, "env": env, "root": root}


@pytest.fixture(scope="module")
def server(comfy):
    from h3kit.comfyui import client

    with client.ComfyServer(comfy["dir"], PYTHON, ["--cpu"], comfy["root"] / "server", env=comfy["env"]) as s:
        s.start(timeout=300)
        yield s
    if os.environ.get("H3KIT_GGUF_FIGURES"):
        Path(os.environ["H3KIT_GGUF_FIGURES"]).write_text(json.dumps(FIGURES, indent=2), encoding="utf-8")


def _run(server, api) -> dict:
    from h3kit.comfyui import client

    return client.run_workflow(server, api, timeout=900)


def _latent(server, api, prefix: str) -> Path:
    ran = _run(server, api)
    assert ran["ran"], ran["message"] + server.log_tail(3000)
    return bench.latest_latent(server.workdir, prefix)


def _compare(a: Path, b: Path) -> dict:
    return json.loads(bench.run_py(PYTHON, COMPARE, a, b, timeout=600))


def test_loader_inputs_match_the_workflow_table(server):
    from h3kit.data import comfy_nodes

    table, info = comfy_nodes.load(), server.object_info()
    for node in ("H3kitUnetLoaderGGUF", "H3kitCLIPLoaderGGUF"):
        order = info[node]["input_order"]
        assert order["required"] + order.get("optional", []) == [i["name"] for i in table[node]["inputs"]]
    assert "h3g_q8_0.gguf" in info["H3kitUnetLoaderGGUF"]["input"]["required"]["unet_name"][0]
    assert "h3g_q8_0.gguf" in info["H3kitStreamedDiTLoader"]["input"]["required"]["unet_name"][0]
    assert "mmproj-h3te-f16.gguf" in info["H3kitCLIPLoaderGGUF"]["input"]["optional"]["mmproj_name"][0]


def test_stock_loaders_refuse_the_files_stable_diffusion_cpp_writes(server):
    dit = _run(server, bench.graph("h3g_q8_0.gguf", None, 1, dit_loader="UnetLoaderGGUF", prefix="stock/dit"))
    assert not dit["ran"] and "Unknown model architecture" in dit["message"], dit["message"]
    te = _run(server, bench.graph("h3g_q8_0_orig.safetensors", None, 1, text_encoder=("h3te.gguf", "CLIPLoaderGGUF"),
                                  prefix="stock/te"))
    assert not te["ran"] and "incompatible with llama.cpp" in te["message"], te["message"]
    FIGURES["stock_refusals"] = {"UnetLoaderGGUF": dit["message"][-300:], "CLIPLoaderGGUF": te["message"][-300:]}


@pytest.mark.parametrize("qtype", QTYPES)
def test_h3kit_dit_loader_runs_the_gguf_like_the_same_weights_from_safetensors(server, qtype):
    stem = f"h3g_{qtype.lower()}"
    got = _latent(server, bench.graph(f"{stem}.gguf", None, 2, seed=3, dit_loader="H3kitUnetLoaderGGUF",
                                      prefix=f"{stem}/gguf"), f"{stem}/gguf")
    held = _latent(server, bench.graph(f"{stem}_deq.safetensors", None, 2, seed=3, prefix=f"{stem}/deq"), f"{stem}/deq")
    orig = _latent(server, bench.graph(f"{stem}_orig.safetensors", None, 2, seed=3, prefix=f"{stem}/orig"),
                   f"{stem}/orig")
    same, error = _compare(held, got), _compare(orig, got)
    FIGURES.setdefault("dit", {})[qtype] = {"vs_dequantized_safetensors": same, "vs_bf16_original": error}
    print(f"\n{qtype} DiT: vs its values in safetensors {same}; vs the bf16 original {error}")
    assert same["max_rel"] <= EXACT, same
    assert error["max_rel"] <= BOUND[qtype], error
    assert error["max_abs"] > same["max_abs"]  # the quantization is really there, and it is what differs


@pytest.mark.parametrize("qtype", KTYPES)
def test_k_type_gguf_dits_run_held_and_streamed_like_their_values_in_safetensors(server, qtype):
    stem = f"h3k_{qtype.lower()}"
    held = _latent(server, bench.graph(f"{stem}_deq.safetensors", None, 2, seed=6, prefix=f"{stem}/deq"),
                   f"{stem}/deq")
    figures = {}
    for tag, stream, loader in (("held", None, "H3kitUnetLoaderGGUF"), ("streamed", STREAM, "UNETLoader")):
        got = _latent(server, bench.graph(f"{stem}.gguf", stream, 2, seed=6, dit_loader=loader, prefix=f"{stem}/{tag}"),
                      f"{stem}/{tag}")
        figures[tag] = _compare(held, got)
        assert figures[tag]["max_rel"] <= EXACT, (tag, figures[tag])
    FIGURES.setdefault("dit_k_types", {})[qtype] = figures
    print(f"\n{qtype} DiT (random blocks): vs its values in safetensors {figures}")


def test_h3kit_clip_loader_runs_the_te_gguf_and_its_mmproj_like_safetensors(server):
    dit = "h3g_q8_0_orig.safetensors"
    runs = {"llama_names_mmproj": ("h3te.gguf", "H3kitCLIPLoaderGGUF"),
            "comfyui_names_one_file": ("h3te_hf.gguf", "H3kitCLIPLoaderGGUF"),
            "deq": ("h3te_deq.safetensors", "CLIPLoader"), "orig": ("h3te_orig.safetensors", "CLIPLoader")}
    latents = {tag: _latent(server, bench.graph(dit, None, 2, seed=4, text_encoder=te, kind="i2v", prefix=f"te/{tag}"),
                            f"te/{tag}") for tag, te in runs.items()}
    log = server.log_tail(200000)
    assert "vision tower from mmproj-h3te-f16.gguf" in log and "vision tower inside the file" in log
    figures = {}
    for tag in ("llama_names_mmproj", "comfyui_names_one_file"):
        figures[tag] = {"vs_dequantized_safetensors": _compare(latents["deq"], latents[tag]),
                        "vs_bf16_original": _compare(latents["orig"], latents[tag])}
        assert figures[tag]["vs_dequantized_safetensors"]["max_rel"] <= EXACT, figures[tag]
        assert figures[tag]["vs_bf16_original"]["max_rel"] <= BOUND["Q8_0"], figures[tag]
    FIGURES["text_encoder_Q8_0"] = figures
    print(f"\nQ8_0 text encoder (i2v): {figures}")


def test_streamed_text_encoder_runs_the_te_gguf_like_cliploader_on_its_values(comfy):
    """The streamed encoder on both GGUF layouts (llama.cpp names + mmproj, ComfyUI names with the tower inside),
    text and image prompts, against CLIPLoader on the GGUF's values in fp32: the layers are dequantized to bf16
    (the weights they were made from), so the conditioning differs by bf16 rounding only."""
    done = subprocess.run([str(PYTHON), str(REPO / "tests" / "support" / "comfy_h3" / "te_stream_probe.py"),
                           str(comfy["dir"]), "ring", "h3te_deq.safetensors", "h3te.gguf", "h3te_hf.gguf"],
                          capture_output=True, text=True, timeout=900, env=comfy["env"])
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    FIGURES["streamed_text_encoder_Q8_0_rel"] = {k: v.get("rel") for k, v in got.items()}
    for name in ("h3te.gguf", "h3te_hf.gguf"):
        assert got[name]["mode"] == "ring" and got[name]["rel"] < 0.02, (name, got[name])  # bf16: 2^-8 per weight
        assert got[name]["after"] == {"layer_elements": 0, "buffers": 0, "streamer_open": False}
        assert got[name]["stats"]["blocks_read"] == 50 and got[name]["stats"]["finished"]


def test_streamed_text_encoder_reads_quantized_embedding_rows_as_the_whole_table_dequantized(comfy, tmp_path):
    """The q4_k_m/q2_k_m encoders the 16 GB plans stream hold a quantized token table: each prompt row is read on
    its own (whole ggml blocks) and equals that row of the table dequantized whole by ComfyUI-GGUF."""
    done = subprocess.run([str(PYTHON), str(REPO / "tests" / "support" / "comfy_h3" / "te_rows_probe.py"),
                           str(comfy["dir"]), str(tmp_path)], capture_output=True, text=True, timeout=600,
                          env=comfy["env"])
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert set(got) == {"Q8_0", "Q4_K", "Q6_K"}
    for qtype, r in got.items():
        assert r["equal"] and r["finite"], (qtype, r)


def test_streamed_loader_runs_a_gguf_dit_like_unetloader_on_its_values(server, comfy):
    stats = comfy["dir"] / "custom_nodes" / bench.PACK / "h3kit_streaming_stats.json"
    streamed = _latent(server, bench.graph("h3g_q8_0.gguf", STREAM, 2, seed=5, prefix="st/gguf", timed="st_gguf"),
                       "st/gguf")
    held = _latent(server, bench.graph("h3g_q8_0_deq.safetensors", None, 2, seed=5, prefix="st/deq"), "st/deq")
    same = _compare(held, streamed)
    assert same["max_rel"] <= EXACT, same
    doc = json.loads(stats.read_text())
    assert doc["file"].endswith("h3g_q8_0.gguf") and doc["blocks"] == DIT_DIMS["num_layers"] and doc["finished"]
    assert doc["read_mode"] == "ring" and doc["bytes_read"] > 0 and doc["blocks_read"] >= 2 * DIT_DIMS["num_layers"]
    # step time: the same GGUF held whole by h3kit's GGUF loader, timed the same way
    _latent(server, bench.graph("h3g_q8_0.gguf", None, 2, seed=5, dit_loader="H3kitUnetLoaderGGUF",
                                prefix="st/heldgguf", timed="held_gguf"), "st/heldgguf")
    times = {t: min(bench.call_times(server.workdir, t)) for t in ("st_gguf", "held_gguf")}
    FIGURES["streamed_q8_0"] = {"vs_dequantized_safetensors": same, "step_s": times, "stats": doc}
    print(f"\nstreamed Q8_0 GGUF: {same}; fastest step streamed {times['st_gguf']:.4f} s, held {times['held_gguf']:.4f} s")


def test_a_lora_applies_to_a_gguf_dit_held_and_streamed_as_to_its_values_in_safetensors(server, comfy):
    from test_streamed_loader_real_comfyui import LORA, MAKE_LORA

    (comfy["dir"] / "models" / "loras").mkdir(parents=True, exist_ok=True)
    bench.run_py(PYTHON, MAKE_LORA, comfy["dir"] / "models" / "loras" / LORA)
    runs = {"deq": ("h3g_q8_0_deq.safetensors", None, "UNETLoader"), "held": ("h3g_q8_0.gguf", None, "H3kitUnetLoaderGGUF"),
            "streamed": ("h3g_q8_0.gguf", STREAM, "UNETLoader")}
    got = {tag: _latent(server, bench.graph(f, st, 2, seed=7, lora=LORA, dit_loader=loader, prefix=f"lora/{tag}"),
                        f"lora/{tag}") for tag, (f, st, loader) in runs.items()}
    plain = _latent(server, bench.graph("h3g_q8_0_deq.safetensors", None, 2, seed=7, prefix="lora/none"), "lora/none")
    figures = {tag: _compare(got["deq"], got[tag]) for tag in ("held", "streamed")}
    FIGURES["lora_q8_0"] = figures
    for tag, f in figures.items():
        assert f["max_rel"] <= EXACT, (tag, f)
    assert _compare(got["deq"], plain)["max_abs"] > 1e-3  # the LoRA really changed the output


def test_without_comfyui_gguf_the_loader_says_how_to_install_it(comfy, tmp_path):
    bare = comfy_h3.make_test_comfyui(REAL, tmp_path / "bare")
    bench.install_pack(bare, None)
    (bare / "models" / "diffusion_models" / "h3g_q8_0.gguf").write_bytes(
        (comfy["dir"] / "models" / "diffusion_models" / "h3g_q8_0.gguf").read_bytes())
    out = bench.run_py(PYTHON, NO_PACK, bare, "h3g_q8_0.gguf", timeout=600)
    assert out.startswith("GGUFError: ") and "ComfyUI-GGUF" in out and "h3kit models fetch --with-loaders" in out, out
    assert "Traceback" not in out
