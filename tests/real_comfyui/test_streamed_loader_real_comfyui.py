"""H3kitStreamedDiTLoader in a real ComfyUI >= 0.31 (opt-in: H3KIT_COMFYUI_DIR), on tiny random-weight H3 files.

Through the server: h3kit's text-to-video graph with the streamed loader
gives the same latent as with UNETLoader, with and without a LoRA; a cut
short file, a garbage file and a file that disappears mid-run each fail
their prompt with one sentence naming the file (and the block), and the
next prompt runs. In ComfyUI's Python directly (faster, and where the
timing of a change can be chosen): resident blocks, several chunks per
block, the staged copy path, a file that shrinks between two blocks and a
read the native streamer finds short. The ComfyUI is a throwaway copy.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import threading
import time
from pathlib import Path

import pytest

import comfy_h3

REPO = Path(__file__).resolve().parents[2]
REAL, PYTHON, WHY = comfy_h3.h3_comfyui()
pytestmark = [pytest.mark.native, pytest.mark.comfyui, pytest.mark.slow, pytest.mark.skipif(REAL is None, reason=WHY)]

_spec = importlib.util.spec_from_file_location("bench_streaming", REPO / "scripts" / "bench_streaming.py")
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)

DIT = "h3tiny4_dit_bf16.safetensors"
WIDE = "h3wide_dit_bf16.safetensors"  # blocks over 1 MiB: several chunks per block
LORA = "h3tiny_lora.safetensors"
STREAM = {"preload_bytes": 0, "shard_size_bytes": 0, "prefetch_blocks": 2}
MAKE_LORA = r"""
import sys, torch
from safetensors.torch import save_file
g = torch.Generator().manual_seed(1)
sd = {}
def lora(name, out_f, in_f, r=4):
    sd[f"diffusion_model.{name}.lora_up.weight"] = (torch.randn(out_f, r, generator=g) * 0.5).to(torch.bfloat16)
    sd[f"diffusion_model.{name}.lora_down.weight"] = (torch.randn(r, in_f, generator=g) * 0.5).to(torch.bfloat16)
lora("blocks.0.attn.qkv_proj", 192, 64)   # streamed blocks
lora("blocks.2.mlp.fc1", 256, 64)
lora("condition_proj", 64, 48)             # a weight ComfyUI loads itself
save_file(sd, sys.argv[1])
"""
# Run by ComfyUI's Python: stock and streamed models side by side, calling apply_model like the sampler does.
PROBE = r"""
import importlib.util, json, os, sys
comfy_dir, pack_dir, dit, mode, read_mode = sys.argv[1:6]
sys.path.insert(0, comfy_dir)
from comfy.cli_args import args
args.cpu = True
import torch
import comfy.sd, comfy.utils, comfy.model_management as mm
import comfy.ldm.minimax.model as h3
spec = importlib.util.spec_from_file_location("h3kpack", os.path.join(pack_dir, "__init__.py"),
                                              submodule_search_locations=[pack_dir])
pack = importlib.util.module_from_spec(spec); sys.modules["h3kpack"] = pack; spec.loader.exec_module(pack)
from h3kpack.h3kit_streaming import load as hs, logic as hsl

def call(patcher, t):
    g = torch.Generator().manual_seed(0)
    m = patcher.model
    dm = m.diffusion_model
    x, shapes = comfy.utils.pack_latents([torch.randn(1, dm.latents_dim, 2, 4, 4, generator=g),
                                          torch.randn(1, dm.audio_latents_dim, 2, 5, generator=g)])
    m.latent_shapes = shapes
    payload = {"seed": 0, "audio_scale": m.audio_scale(), "layout": h3.PackedLayout(8, 2, 4, 4, 5)}
    return m.apply_model(x=x, t=torch.tensor([t]), c_crossattn=torch.randn(1, 8, 48, generator=g) * 0.5,
                         latent_shapes=shapes, minimax_payload=payload, transformer_options={})

def run(patcher, ts=(0.9, 0.5)):
    mm.load_models_gpu([patcher])
    patcher.pre_run()
    try:
        return [call(patcher, t) for t in ts]
    finally:
        patcher.cleanup()

def same(a, b):
    return all(torch.equal(x, y) for x, y in zip(a, b))

def load(path, **kw):
    # "uncached": page_cache "bypass", the ring read past the page cache and widened on the main thread
    p = hs.load_streamed(path, **kw, **({"page_cache": "bypass"} if read_mode == "uncached" else {}))
    # on --cpu the blocks are read in place ("direct"); "ring" takes the way a GPU or MPS device is fed
    p.model.h3kit_stream.direct_ok &= read_mode == "direct"
    return p

def attempt(p, after_block_0):
    # run with `after_block_0` hooked after the first block; the error it leads to (or None) into `out`
    h = p.model.diffusion_model.blocks[0].register_forward_hook(after_block_0)
    try:
        run(p)
        out["error"] = None
    except Exception as exc:
        out["error"], out["type"] = str(exc), type(exc).__name__
    h.remove()

out = {}
stock = run(comfy.sd.load_diffusion_model(dit))
if mode == "variants":
    block = load(dit).model.h3kit_stream.plan["block_bytes"]
    for name, kw in {"resident2": dict(preload_bytes=2 * block + 1), "all_resident": dict(preload_bytes=1 << 40),
                     "deep": dict(prefetch_blocks=8), "shard1m": dict(shard_size_bytes=1 << 20)}.items():
        p = load(dit, **kw)
        out[name] = {"first": same(stock, run(p)), "again": same(stock, run(p)), "plan": p.model.h3kit_stream.plan,
                     "mode": p.model.h3kit_stream.mode, "page_cache": p.model.h3kit_stream.page_cache_state()}
    p = load(dit)
    for specs in p.model.h3kit_stream.specs.values():
        for s in specs:
            s.direct = False  # force the staged copy (used when a tensor is not element-aligned in its chunk)
    out["staged"] = same(stock, run(p))
    out["malloc_graph"] = p.model.h3kit_stream.malloc_graph
    # UNETLoader's fp8 weight_dtype: whatever stock does with it (on --cpu ComfyUI 0.33's H3 refuses fp8 norm
    # scales in its fused RMS/RoPE kernel), the streamed loader does the same
    def outcome(make):
        try:
            return "ran", run(make())
        except Exception as exc:
            return type(exc).__name__, None
    k_stock, stock8 = outcome(lambda: comfy.sd.load_diffusion_model(dit, model_options={"dtype": torch.float8_e4m3fn}))
    holder = {}
    def streamed8():
        holder["p"] = load(dit, weight_dtype="fp8_e4m3fn")
        return holder["p"]
    k_streamed, streamed8_out = outcome(streamed8)
    out["fp8"] = {"stock": k_stock, "streamed": k_streamed, "mode": holder["p"].model.h3kit_stream.mode,
                  "same": k_stock == k_streamed and (stock8 is None or same(stock8, streamed8_out))}
elif mode == "inplace":
    # the campaign's case: the same file rewritten in place (other weights, same size) with its mtime put back
    import shutil
    work = dit + ".work"
    shutil.copy(dit, work)
    p = load(work)
    stream = p.model.h3kit_stream
    was = os.stat(work)
    def rewrite(module, args, output):
        start, end = stream.ranges[1][0]
        with open(work, "r+b") as f:  # every byte of block 1 flipped: other weights, same size
            f.seek(start)
            flipped = bytes(b ^ 0xFF for b in f.read(end - start))
            f.seek(start)
            f.write(flipped)
        os.utime(work, ns=(was.st_atime_ns, was.st_mtime_ns))
        if windows_like:  # ctime is the creation time there: only the first bytes can tell
            stream.stamp = hs.file_stamp(work)
    windows_like = read_mode == "windows"
    attempt(p, rewrite)
elif mode in ("shrink", "short_read"):
    import shutil
    work = dit + ".work"
    shutil.copy(dit, work)
    p = load(work)
    stream = p.model.h3kit_stream
    def cut(module, args, output):
        with open(work, "r+b") as f:
            f.truncate(stream.ranges[1][0][0] + 10)  # blocks 1 and after now lie past the end
        if mode == "short_read":
            stream.stamp = hs.file_stamp(work)  # past the stat check: the native read itself must come up short
            stream.heads = {}  # and past the first-bytes check
    attempt(p, cut)
    shutil.copy(dit, work)
    stream.stamp = hs.file_stamp(work)
    stream.heads = hsl.block_heads(work, stream.ranges)
    out["recovered"] = same(stock, run(p))
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def comfy(tmp_path_factory, native_library):
    where = bench.make_comfy(REAL, tmp_path_factory.mktemp("streamed") / "comfy", native_library, PYTHON)
    bench.write_dit(PYTHON, where, DIT, {"num_layers": 4})
    bench.write_dit(PYTHON, where, WIDE, {"num_layers": 3, "hidden_size": 256, "ffn_hidden_size": 512})
    (where / "models" / "loras").mkdir(parents=True, exist_ok=True)
    bench.run_py(PYTHON, MAKE_LORA, where / "models" / "loras" / LORA)
    return where


@pytest.fixture(scope="module")
def server(comfy, tmp_path_factory):
    from h3kit.comfyui import client

    work = tmp_path_factory.mktemp("streamed-server")
    with client.ComfyServer(comfy, PYTHON, ["--cpu"], work) as s:
        s.start(timeout=300)
        yield s


def _run(server, api, timeout=600) -> dict:
    from h3kit.comfyui import client

    return client.run_workflow(server, api, timeout=timeout)


def _latent(server, prefix: str) -> Path:
    return bench.latest_latent(server.workdir, prefix)


def test_loader_inputs_match_the_workflow_table(server):
    from h3kit.data import comfy_nodes

    info = server.object_info()["H3kitStreamedDiTLoader"]
    order = list(info["input_order"]["required"]) + list(info["input_order"].get("optional") or [])
    table = comfy_nodes.load()["H3kitStreamedDiTLoader"]["inputs"]
    assert order == [i["name"] for i in table]
    # page_cache is optional: an API prompt saved before it existed still validates
    assert [i["name"] for i in table if i.get("optional")] == list(info["input_order"]["optional"]) == ["page_cache"]
    assert info["input"]["optional"]["page_cache"][0] == ["use", "bypass"]
    assert DIT in info["input"]["required"]["unet_name"][0]
    assert info["input"]["required"]["weight_dtype"][0] == ["default", "fp8_e4m3fn", "fp8_e4m3fn_fast", "fp8_e5m2"]


def test_streamed_latent_equals_stock_and_stats_are_written(server, comfy):
    stats = comfy / "custom_nodes" / bench.PACK / "h3kit_streaming_stats.json"
    for tag, stream in (("stock", None), ("streamed", STREAM)):
        ran = _run(server, bench.graph(DIT, stream, 2, seed=5, prefix=f"same/{tag}"))
        assert ran["ran"], ran["message"] + server.log_tail(3000)
    same = bench.compare(PYTHON, _latent(server, "same/stock"), _latent(server, "same/streamed"))
    assert same["identical"], same
    doc = json.loads(stats.read_text())
    assert doc["file"].endswith(DIT) and doc["blocks"] == 4 and doc["steps"] == 2 and doc["finished"]
    assert doc["bytes_read"] >= 2 * 4 * doc["block_bytes"] * 0.9 and doc["prefetch_blocks"] == 2
    assert doc["compute_s"] > 0 and doc["wait_s"] >= 0 and doc["resident_blocks"] == 0


def test_lora_applies_to_streamed_blocks_exactly_like_stock(server):
    for tag, stream in (("stock", None), ("streamed", STREAM)):
        ran = _run(server, bench.graph(DIT, stream, 2, seed=6, lora=LORA, prefix=f"lora/{tag}"))
        assert ran["ran"], ran["message"] + server.log_tail(3000)
    ran = _run(server, bench.graph(DIT, STREAM, 2, seed=6, prefix="lora/none"))
    assert ran["ran"], ran["message"]
    with_lora = bench.compare(PYTHON, _latent(server, "lora/stock"), _latent(server, "lora/streamed"))
    assert with_lora["identical"], with_lora
    without = bench.compare(PYTHON, _latent(server, "lora/stock"), _latent(server, "lora/none"))
    assert not without["identical"] and without["max_abs_diff"] > 1e-3  # the LoRA really changed the output


def _fails_then_recovers(server, api, says: list[str]):
    ran = _run(server, api)
    assert not ran["ran"]
    for part in says:
        assert part in ran["message"], ran["message"]
    assert "Traceback" not in ran["message"]
    good = _run(server, bench.graph(DIT, STREAM, 1, seed=11, prefix="after"))
    assert good["ran"], good["message"] + server.log_tail(2000)


def test_cut_short_file_fails_one_prompt_naming_file_and_block(server, comfy):
    folder = comfy / "models" / "diffusion_models"
    data = (folder / DIT).read_bytes()
    (folder / "cut.safetensors").write_bytes(data[:len(data) * 2 // 3])
    _fails_then_recovers(server, bench.graph("cut.safetensors", STREAM, 1, seed=7),
                         ["cut.safetensors", "cut short", "block", "re-download"])


def test_garbage_file_fails_one_prompt(server, comfy):
    (comfy / "models" / "diffusion_models" / "junk.safetensors").write_bytes(os.urandom(4096))
    _fails_then_recovers(server, bench.graph("junk.safetensors", STREAM, 1, seed=8),
                         ["junk.safetensors", "not a safetensors file"])


def test_file_disappearing_mid_run_fails_naming_file_and_block(server, comfy):
    folder = comfy / "models" / "diffusion_models"
    shutil.copy(folder / WIDE, folder / "vanish.safetensors")
    warm = _run(server, bench.graph("vanish.safetensors", STREAM, 1, seed=9, prefix="vanish/warm"))
    assert warm["ran"], warm["message"]
    stats = comfy / "custom_nodes" / bench.PACK / "h3kit_streaming_stats.json"
    seen = stats.stat().st_mtime_ns

    def remove_when_sampling():
        # the loader and text encoder are cached from the warm prompt, so sampling starts at once;
        # waiting for the prompt to be running, then a little, lands inside the 400 steps
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not server.get("/queue")["queue_running"]:
            time.sleep(0.05)
        time.sleep(1.5)
        (folder / "vanish.safetensors").rename(folder / "vanished.safetensors")

    mover = threading.Thread(target=remove_when_sampling)
    mover.start()
    ran = _run(server, bench.graph("vanish.safetensors", STREAM, 400, seed=10, prefix="vanish/run"))
    mover.join()
    assert not ran["ran"], "the prompt finished before the file was moved away"
    assert "vanish.safetensors" in ran["message"] and "disappeared" in ran["message"], ran["message"]
    assert "block" in ran["message"]
    assert stats.stat().st_mtime_ns != seen  # the interrupted run still reports what it read
    (folder / "vanished.safetensors").rename(folder / "vanish.safetensors")
    again = _run(server, bench.graph("vanish.safetensors", STREAM, 1, seed=12, prefix="vanish/again"))
    assert again["ran"], again["message"]


def _probe(comfy: Path, dit: str, mode: str, read_mode: str) -> dict:
    pack = comfy / "custom_nodes" / bench.PACK
    path = comfy / "models" / "diffusion_models" / dit
    done = subprocess.run([str(PYTHON), "-c", PROBE, str(REAL), str(pack), str(path), mode, read_mode],
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("read_mode", ["direct", "ring", "uncached"])
def test_resident_deep_prefetch_multi_chunk_and_staged_reads_equal_stock(comfy, read_mode):
    out = _probe(comfy, WIDE, "variants", read_mode)
    for name in ("resident2", "all_resident", "deep", "shard1m"):
        assert out[name]["first"] and out[name]["again"], (name, out[name])
    for name in ("resident2", "deep", "shard1m"):  # all_resident never reads after the first pass
        assert out[name]["mode"] == read_mode, (name, out[name]["mode"])
        # "bypassed" wherever the file system takes uncached reads (ext4 here); else the reason it refused
        cache = out[name]["page_cache"]
        assert cache == "used" if read_mode != "uncached" else \
            cache == "bypassed" or cache.startswith("used (bypass refused: cannot open"), out[name]
    assert out["shard1m"]["plan"]["chunks_per_block"] >= 2  # a block over several reads
    assert out["deep"]["plan"]["prefetch_blocks"] == 8 or out["deep"]["plan"]["depth"] == 64
    assert out["staged"]
    # h3kit_streaming.compiler's feature detection, against what this tree holds: 0.33 has comfy/model_prefetch.py but
    # neither pause_malloc_graph (#16148) nor the compiler's flag, so there is nothing to pause ("absent")
    def has(rel, text):
        path = Path(comfy) / rel
        return path.is_file() and text in path.read_text(encoding="utf-8")
    expected = ("paused" if has("comfy/model_prefetch.py", "def pause_malloc_graph")
                else "disabled" if has("comfy/cli_args.py", "disable-comfy-compiler") else "absent")
    assert out["malloc_graph"] == expected
    # fp8 buffers are never read in place (the library widens only into fp32): the ring and torch's cast
    assert out["fp8"]["same"] and out["fp8"]["mode"] == ("uncached" if read_mode == "uncached" else "ring"), out["fp8"]


@pytest.mark.parametrize("read_mode", ["direct", "ring", "uncached"])
@pytest.mark.parametrize("mode, says", [("shrink", "shrank"), ("short_read", "the file ended at offset")])
def test_file_shrinking_between_blocks_is_one_error_and_the_model_recovers(comfy, mode, says, read_mode):
    out = _probe(comfy, WIDE, mode, read_mode)
    assert out["type"] == "StreamError", out
    assert says in out["error"] and ".work" in out["error"], out["error"]
    # the stat check stops block 1; a read the C thread starts after the cut fails at block 1 or, when it had
    # already read block 1 ahead (prefetch), at block 2
    assert re.search(r"block (1|2)\b", out["error"]) if mode == "short_read" else "block 1" in out["error"]
    assert out["recovered"]


@pytest.mark.parametrize("how", ["posix", "windows"])
def test_file_rewritten_in_place_with_size_and_mtime_put_back_is_one_error(comfy, how):
    # posix: ctime tells; windows (the stamp re-taken after the write, as no time there shows it): the first bytes
    out = _probe(comfy, WIDE, "inplace", "windows" if how == "windows" else "direct")
    assert out["type"] == "StreamError", out
    assert "changed while the model was streaming it (at block 1)" in out["error"] and ".work" in out["error"], out


def test_interrupt_mid_sampling_then_the_same_loader_runs_again_like_stock(server):
    first = _run(server, bench.graph(WIDE, STREAM, 1, seed=20, prefix="intr/warm"))
    assert first["ran"], first["message"]

    def interrupt_when_sampling():
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not server.get("/queue")["queue_running"]:
            time.sleep(0.05)
        time.sleep(1.5)
        server.post("/interrupt", {})

    stopper = threading.Thread(target=interrupt_when_sampling)
    stopper.start()
    cut = _run(server, bench.graph(WIDE, STREAM, 400, seed=21, prefix="intr/cut"))
    stopper.join()
    assert not cut["ran"], "the prompt finished before the interrupt"
    for tag, stream in (("stock", None), ("streamed", STREAM)):  # the cached streamed loader, reused
        ran = _run(server, bench.graph(WIDE, stream, 2, seed=22, prefix=f"intr/{tag}"))
        assert ran["ran"], ran["message"] + server.log_tail(2000)
    same = bench.compare(PYTHON, _latent(server, "intr/stock"), _latent(server, "intr/streamed"))
    assert same["identical"], same
