#!/usr/bin/env python3
"""Stock UNETLoader vs h3kit's streamed loader (H3kitStreamedDiTLoader) in a real ComfyUI.

    python scripts/bench_streaming.py --json [--workdir DIR] [--comfyui DIR] [--steps 3]
    python scripts/bench_streaming.py --floor --json [--blocks 30] [--prefetch-blocks 2]

With --floor it measures a streamed step at H3's real block width against
its floor instead (compute alone, the disk alone): see
scripts/bench_streaming_floor.py. Without it:

Generates a random-weight H3-architecture DiT (bf16, 24 blocks, hidden 2048:
2.64 GB; see --blocks/--hidden/--ffn) plus the tiny text encoder and VAEs of
tests/support/comfy_h3, in a private copy of the ComfyUI (hard links; the ComfyUI
itself is never written to) under --workdir, deploys h3kit's node pack there
with a freshly built native library, and runs h3kit's text-to-video graph
(same prompt, seed, steps, cfg 1) once with UNETLoader and once with the
streamed loader, each in its own ComfyUI process. Per process: a warm-up
prompt (loads everything, fills the page cache); then, both processes up,
rounds of a stock prompt and a streamed prompt in turns (same seed within a
round), every model call timed by a wrapper node of this benchmark's own
(ComfyUI's model_function_wrapper; cfg 1 is one call per step). The fastest
call of each is its step time (the median is printed beside it): on a shared
machine the fastest is the one other work disturbed least. Then the DiT
file's pages are dropped from the page cache (posix_fadvise DONTNEED,
checked with mincore; only where that fails does root drop the whole cache,
and the JSON says which) and one more step runs in the streamed process,
shown beside the disk-bound floor (bytes read per step / the read speed of
the weight file measured cold).

Prints one JSON document (--json) with latents identical or the max abs
difference, peak RSS of each ComfyUI process (psutil, sampled from outside)
and their ratio (target <= 0.30), seconds per step and their ratio (target
<= 1.3), the cold figures and the fraction of step time spent waiting for
reads. Exit 1 when a target is missed, 3 when the environment is not ready.
Run it alone: `flock /tmp/h3kit-bench.lock python scripts/bench_streaming.py`.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO / "tests" / "support"), str(REPO / "installer"), str(REPO / "scripts")]

RSS_TARGET, STEP_TARGET = 0.30, 1.3
PACK = "ComfyUI-h3kit"
TINY = {"dit": None, "text_encoder": "text_encoders/h3tiny_qwen3vl_te_bf16.safetensors",
        "taeh3": "vae/h3tiny_taeh3_fp16.safetensors", "video_vae": None,
        "audio_vae": "vae/h3tiny_audio_vae_fp32.safetensors"}
# The DiT of FACTS.md's measurement: 24 blocks of hidden 2048 in bf16 is 2.64 GB with these dims.
BENCH_DIT = {"hidden_size": 2048, "num_layers": 24, "num_attention_heads": 16, "attention_head_dim": 128,
             "ffn_hidden_size": 4096, "text_dim": 48, "time_embed_hidden_size": 256, "time_embed_dim": 256,
             "timestep_input_dim": 256, "rope_inv_freq_len": 16}

# Run by ComfyUI's Python (it has torch): the DiT written tensor by tensor, so memory stays at one tensor.
GEN_DIT = r"""
import json, math, struct, sys, importlib.util
import torch
spec = importlib.util.spec_from_file_location("make_tiny_h3", sys.argv[1])
mk = importlib.util.module_from_spec(spec); spec.loader.exec_module(mk)
out, dims, seed = sys.argv[2], json.loads(sys.argv[3]), int(sys.argv[4])
class Lazy(mk.KeyBuilder):
    def w(self, name, *shape, fan_in=None, scale=1.0, dtype=None):
        fan_in = fan_in or (math.prod(shape[1:]) if len(shape) > 1 else shape[0])
        self.sd[name] = ("randn", shape, dtype or self.dtype, scale / math.sqrt(max(1, fan_in)))
    def const(self, name, value, *shape, dtype=None):
        self.sd[name] = ("full", shape, dtype or self.dtype, float(value))
    def tensor(self, name, t, dtype=None):
        self.sd[name] = ("given", tuple(t.shape), dtype or self.dtype, t)
mk.KeyBuilder = Lazy
sd, cfg = mk.build_dit(seed, dims)
names = {torch.bfloat16: "BF16", torch.float32: "F32"}
header, off = {"__metadata__": {"h3kit_tiny": json.dumps(cfg), "h3kit_bench": "random weights"}}, 0
for n in sorted(sd):
    kind, shape, dt, arg = sd[n]
    size = math.prod(shape) * torch.empty(0, dtype=dt).element_size()
    header[n] = {"dtype": names[dt], "shape": list(shape), "data_offsets": [off, off + size]}
    off += size
raw = json.dumps(header).encode()
raw += b" " * (-len(raw) % 8)
g = torch.Generator().manual_seed(seed)
with open(out, "wb") as f:
    f.write(struct.pack("<Q", len(raw)) + raw)
    for n in sorted(sd):
        kind, shape, dt, arg = sd[n]
        if kind == "randn":
            t = torch.randn(*shape, generator=g) * arg
        elif kind == "full":
            t = torch.full(shape, arg)
        else:
            t = arg
        t = t.to(dt).contiguous()
        f.write(t.view(torch.uint8).numpy().tobytes() if dt != torch.float32 else t.numpy().tobytes())
print(json.dumps({"bytes": off, "tensors": len(sd)}))
"""
# A node for this benchmark's ComfyUI copy only: ComfyUI's SaveLatent cannot save H3's nested (video, audio)
# latent, so this one saves each part as its own tensor.
SAVE_NODE = r"""
import os, folder_paths, torch
from safetensors.torch import save_file

class BenchSaveLatentParts:
    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"samples": ("LATENT",), "filename_prefix": ("STRING", {"default": "latents/x"})}}
    RETURN_TYPES = ()
    FUNCTION = "save"
    OUTPUT_NODE = True
    CATEGORY = "testing"

    def save(self, samples, filename_prefix):
        s = samples["samples"]
        parts = s.unbind() if getattr(s, "is_nested", False) else [s]
        folder, name, counter, _, _ = folder_paths.get_save_image_path(filename_prefix, folder_paths.get_output_directory())
        os.makedirs(folder, exist_ok=True)
        save_file({f"part{i}": p.detach().to("cpu").contiguous() for i, p in enumerate(parts)},
                  os.path.join(folder, f"{name}_{counter:05}_.latent"))
        return {}

class BenchTimeModel:
    # times every model call (ComfyUI model_function_wrapper) into output/bench_calls.jsonl
    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"model": ("MODEL",), "tag": ("STRING", {"default": "run"})}}
    RETURN_TYPES = ("MODEL",)
    FUNCTION = "wrap"
    CATEGORY = "testing"

    def wrap(self, model, tag):
        import json, time
        log = os.path.join(folder_paths.get_output_directory(), "bench_calls.jsonl")
        def timed(apply_model, args):
            t0 = time.perf_counter()
            out = apply_model(args["input"], args["timestep"], **args["c"])
            with open(log, "a") as f:
                f.write(json.dumps({"tag": tag, "seconds": time.perf_counter() - t0}) + "\n")
            return out
        m = model.clone()
        m.set_model_unet_function_wrapper(timed)
        return (m,)

NODE_CLASS_MAPPINGS = {"BenchSaveLatentParts": BenchSaveLatentParts, "BenchTimeModel": BenchTimeModel}
"""
COMPARE = r"""
import json, sys, torch
from safetensors.torch import load_file
a, b = load_file(sys.argv[1]), load_file(sys.argv[2])
out = {"identical": True, "max_abs_diff": 0.0, "dtype": None, "keys": sorted(a)}
for k in a:
    x, y = a[k], b.get(k)
    if y is None or x.shape != y.shape:
        out.update(identical=False, max_abs_diff=None); break
    if x.numel():
        out["dtype"] = str(x.dtype)
        d = float((x.double() - y.double()).abs().max())
        out["max_abs_diff"] = max(out["max_abs_diff"], d)
        out["identical"] = out["identical"] and bool(torch.equal(x, y))
print(json.dumps(out))
"""


def run_py(python, code_or_file, *argv, timeout=1800) -> str:
    cmd = [str(python)] + (["-c", code_or_file] if "\n" in code_or_file else [code_or_file]) + [str(a) for a in argv]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        raise RuntimeError(f"{cmd[:3]} failed: {done.stderr[-2000:]}")
    lines = done.stdout.strip().splitlines()
    return lines[-1] if lines else ""


def make_comfy(real: Path, where: Path, library: Path | None, python: Path) -> Path:
    """A hard-linked ComfyUI copy with the tiny TE/VAEs, the test node and h3kit's pack (with `library`)."""
    import comfy_h3

    if not where.exists():
        comfy_h3.make_test_comfyui(real, where)
        comfy_h3.write_tiny_files(where, python, TINY)
    node = where / "custom_nodes" / "bench_save_latent_parts"
    node.mkdir(parents=True, exist_ok=True)
    (node / "__init__.py").write_text(SAVE_NODE, encoding="utf-8")
    install_pack(where, library)
    return where


def install_pack(comfy: Path, library: Path | None) -> Path:
    from h3kit.comfyui import deploy
    from h3kit.data.plan_doc import PlanSettings

    node = comfy / "custom_nodes" / PACK
    shutil.rmtree(node, ignore_errors=True)
    for rel, data in deploy.pack_contents(library, PlanSettings(), "bench").items():
        (node / rel).parent.mkdir(parents=True, exist_ok=True)
        (node / rel).write_bytes(data)
    return node


def build_library(home: Path) -> Path:
    from h3kit.native import build

    old = os.environ.get("H3KIT_HOME")
    os.environ["H3KIT_HOME"] = str(home)
    try:
        return Path(build.build()["library"])
    finally:
        os.environ.pop("H3KIT_HOME", None) if old is None else os.environ.__setitem__("H3KIT_HOME", old)


def write_dit(python: Path, comfy: Path, name: str, dims: dict, seed: int = 0) -> Path:
    """The random-weight DiT under models/diffusion_models (kept when it exists with the same dims)."""
    path = comfy / "models" / "diffusion_models" / name
    stamp = path.with_suffix(".dims.json")
    if path.is_file() and stamp.is_file() and json.loads(stamp.read_text()) == dims:
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    run_py(python, GEN_DIT, REPO / "tests" / "support" / "comfy_h3" / "make_tiny_h3.py", path, json.dumps(dims), seed)
    stamp.write_text(json.dumps(dims))
    return path


def graph(dit: str, stream: dict | None, steps: int, seed: int = 0, lora: str | None = None,
          canvas=(64, 64), frames: int = 22, prefix: str = "h3kit/latent", timed: str | None = None,
          dit_loader: str = "UNETLoader", text_encoder: tuple[str, str] | None = None, kind: str = "t2v",
          te_stream: dict | None = None) -> dict:
    """h3kit's text-to-video (or `kind` i2v) graph (API format) with the DiT through `dit_loader` or the streamed
    loader, the text encoder (file, loader) given or the tiny one through CLIPLoader -- through h3kit's streamed
    text encoder with `te_stream` ({page_cache, prefetch_layers}, as the plan hands them on) -- plus
    BenchSaveLatentParts on the sampled latent."""
    from h3kit.comfyui.workflows import LoadedFile, WorkflowSettings, build
    from h3kit.data import comfy_nodes

    te = LoadedFile(*text_encoder) if text_encoder else LoadedFile(Path(TINY["text_encoder"]).name, "CLIPLoader")
    ws = WorkflowSettings(
        dit=LoadedFile(dit, dit_loader), text_encoder=te,
        vae=LoadedFile(Path(TINY["taeh3"]).name, "VAELoader"),
        audio_vae=LoadedFile(Path(TINY["audio_vae"]).name, "VAELoader"), width=canvas[0], height=canvas[1],
        frames=frames, steps=steps, sampler="euler", scheduler="simple", shift_video=12.0, shift_audio=3.0, fps=24,
        seed=seed, guard_memory=False, lora=LoadedFile(lora, "LoraLoaderModelOnly") if lora else None,
        lora_strength=0.8, stream=stream, te_stream=te_stream)
    api = build(kind, ws, comfy_nodes.load()).to_api()
    sampled = next(k for k, n in api.items() if n["class_type"] == "SamplerCustomAdvanced")
    api["900"] = {"class_type": "BenchSaveLatentParts", "inputs": {"samples": [sampled, 0], "filename_prefix": prefix}}
    if timed:  # every model call timed, between the loader (or LoRA) and the flow shift
        shift = next(n for n in api.values() if n["class_type"] == "MiniMaxH3SigmaShift")
        api["901"] = {"class_type": "BenchTimeModel", "inputs": {"model": shift["inputs"]["model"], "tag": timed}}
        shift["inputs"]["model"] = ["901", 0]
    return api


def call_times(workdir: Path, tag: str) -> list[float]:
    log = workdir / "output" / "bench_calls.jsonl"
    lines = log.read_text().splitlines() if log.is_file() else []
    return [json.loads(x)["seconds"] for x in lines if json.loads(x)["tag"] == tag]


def latest_latent(workdir: Path, prefix: str) -> Path:
    found = sorted((workdir / "output").glob(prefix + "*.latent"), key=lambda p: p.stat().st_mtime)
    if not found:
        raise RuntimeError(f"no latent under {workdir / 'output'} for {prefix}")
    return found[-1]


def compare(python: Path, a: Path, b: Path) -> dict:
    return json.loads(run_py(python, COMPARE, a, b, timeout=600))


def drop_weights(path: Path) -> tuple[bool, str | None, float | None]:
    """Drop the DiT file's pages from the page cache, and only those (calibration's way: posix_fadvise
    DONTNEED, checked with mincore; root may fall back to dropping the whole cache, which also evicts
    torch's own libraries, so it says so): (dropped, how, resident share after)."""
    from h3kit.calibrate.disk import drop_cache

    return drop_cache(str(path), drop_all=True)


def read_speed(path: Path, limit: int = 1 << 30) -> float:
    """Bytes per second reading `path` (call right after drop_weights for the cold figure)."""
    t0, got = time.perf_counter(), 0
    with open(path, "rb", buffering=0) as f:
        while got < limit:
            chunk = f.read(16 << 20)
            if not chunk:
                break
            got += len(chunk)
    return got / max(1e-9, time.perf_counter() - t0)


def measure(comfy: Path, python: Path, workdir: Path, dit: str, stream: dict, rounds: int, steps: int,
            cold: bool) -> tuple[dict, dict]:
    """Both loaders, each in its own ComfyUI process, both up at once and timed in turns (round r: `steps`
    steps with seed 3 + r through stock, then through streamed), so the load other work puts on the machine
    falls on both alike. Every model call is timed (cfg 1: one call per step); then (cold) the DiT file's
    pages are dropped from the page cache and one more step runs streamed."""
    from h3kit.comfyui import client

    runs = {"stock": None, "streamed": stream}
    out = {t: {"loader": "H3kitStreamedDiTLoader" if st else "UNETLoader", "step_seconds": []} for t, st in runs.items()}
    servers = {t: client.ComfyServer(comfy, python, ["--cpu"], workdir / f"run-{t}") for t in runs}
    for server in servers.values():  # call times of an earlier run must not count
        (server.workdir / "output" / "bench_calls.jsonl").unlink(missing_ok=True)
    try:
        def prompt(tag, n, seed, name):
            server = servers[tag]
            api = graph(dit, runs[tag], n, seed, prefix=f"{tag}/{name}", timed=name)
            r = client.run_workflow(server, api, timeout=7200)
            if not r["ran"]:
                raise RuntimeError(f"{tag} prompt {name} failed: {r['message']}\n{server.log_tail(3000)}")
            return call_times(server.workdir, name)

        for tag, server in servers.items():
            server.start(timeout=300)
            prompt(tag, 1, 1, "warm")  # loads everything; the streamed one also fills the page cache
        for r in range(rounds):
            for tag in runs:
                out[tag]["step_seconds"] += [round(c, 3) for c in prompt(tag, steps, 3 + r, f"timed{r}")]
        for tag, o in out.items():
            o.update(seconds_per_step=min(o["step_seconds"]), median_seconds_per_step=statistics.median(o["step_seconds"]),
                     latent=str(latest_latent(servers[tag].workdir, f"{tag}/timed0")))
        out["streamed"]["stats"] = _stats(comfy)
        if cold:
            dropped, how, resident = drop_weights(comfy / "models" / "diffusion_models" / dit)
            out["streamed"].update(cache_dropped=dropped, cache_dropped_how=how, resident_after_drop=resident)
            if dropped:
                out["streamed"]["cold_seconds_per_step"] = prompt("streamed", 1, 99, "cold")[0]
                out["streamed"]["cold_stats"] = _stats(comfy)
        for tag, server in servers.items():
            out[tag]["peak_rss_bytes"] = server.peak_rss_bytes
    finally:
        for server in servers.values():
            server.stop()
    return out["stock"], out["streamed"]


def _fraction(stats: dict | None, key: str) -> float | None:
    return round(stats[key] / stats["run_s"], 4) if stats and stats.get("run_s") else None


def _stats(comfy: Path) -> dict | None:
    p = comfy / "custom_nodes" / PACK / "h3kit_streaming_stats.json"
    return json.loads(p.read_text()) if p.is_file() else None


def _arguments() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/h3kit-bench-streaming"))
    ap.add_argument("--comfyui", type=Path, default=Path(os.environ.get("H3KIT_COMFYUI_DIR") or "/work/comfy33"))
    ap.add_argument("--rounds", type=int, default=3, help="turns of stock then streamed prompts")
    ap.add_argument("--steps", type=int, default=2, help="steps per timed prompt")
    ap.add_argument("--blocks", type=int, help=f"DiT blocks ({BENCH_DIT['num_layers']}; with --floor 30)")
    ap.add_argument("--hidden", type=int, default=BENCH_DIT["hidden_size"])
    ap.add_argument("--ffn", type=int, default=BENCH_DIT["ffn_hidden_size"])
    ap.add_argument("--prefetch-blocks", type=int, default=1)
    ap.add_argument("--preload-bytes", type=int, default=0)
    ap.add_argument("--shard-size-bytes", type=int, default=0)
    ap.add_argument("--no-cold", action="store_true", help="skip the dropped-page-cache run")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--floor", action="store_true", help="at H3's real block width: a streamed step against "
                    "compute alone and the disk alone (scripts/bench_streaming_floor.py)")
    ap.add_argument("--resident-blocks", type=int, default=2, help="--floor: blocks of the compute-alone DiT")
    ap.add_argument("--canvas", type=int, default=64, help="--floor: width and height")
    ap.add_argument("--frames", type=int, default=22, help="--floor: frames")
    ap.add_argument("--page-cache", choices=("use", "bypass", "both"), default="both",
                    help="--floor: the streamed loader's page_cache (both: each in turn; judged on bypass)")
    return ap


def main(argv=None) -> int:
    a = _arguments().parse_args(argv)
    if a.floor:
        import bench_streaming_floor

        a.blocks = a.blocks or 30
        return bench_streaming_floor.run(sys.modules[__name__], a)
    a.blocks = a.blocks or BENCH_DIT["num_layers"]
    import comfy_h3

    os.environ["H3KIT_COMFYUI_DIR"] = str(a.comfyui)
    real, python, why = comfy_h3.h3_comfyui()
    if real is None:
        print(f"bench_streaming: {why}", file=sys.stderr)
        return 3
    dims = dict(BENCH_DIT, num_layers=a.blocks, hidden_size=a.hidden, ffn_hidden_size=a.ffn,
                num_attention_heads=a.hidden // 128)
    a.workdir.mkdir(parents=True, exist_ok=True)
    library = build_library(a.workdir / "home")
    comfy = make_comfy(real, a.workdir / "comfy", library, python)
    t0 = time.perf_counter()
    dit = write_dit(python, comfy, "h3bench_dit_bf16.safetensors", dims)
    stream = {"preload_bytes": a.preload_bytes, "shard_size_bytes": a.shard_size_bytes,
              "prefetch_blocks": a.prefetch_blocks}
    stock, streamed = measure(comfy, python, a.workdir, dit.name, stream, a.rounds, a.steps, cold=not a.no_cold)
    same = compare(python, Path(stock["latent"]), Path(streamed["latent"]))
    doc = _document(a, dims, dit.stat().st_size, stream, stock, streamed, same)
    doc["cold"] = _cold(a, dit, streamed, doc["bytes_read_per_step"])
    doc["targets"] = {"peak_rss_ratio <= 0.30": doc["peak_rss_ratio"] <= RSS_TARGET,
                      "seconds_per_step_ratio <= 1.3": doc["seconds_per_step_ratio"] <= STEP_TARGET,
                      "latents identical": bool(same["identical"])}
    doc["seconds"] = round(time.perf_counter() - t0, 1)
    if a.json:
        print(json.dumps(doc, indent=2))
    else:
        print(f"peak RSS {stock['peak_rss_bytes'] / 1e9:.2f} -> {streamed['peak_rss_bytes'] / 1e9:.2f} GB "
              f"({doc['peak_rss_ratio']:.2f}x), s/step {stock['seconds_per_step']:.2f} -> "
              f"{streamed['seconds_per_step']:.2f} ({doc['seconds_per_step_ratio']:.2f}x), latents "
              f"{doc['latents_note']}, waiting {doc['io_wait_fraction']}")
    return 0 if all(doc["targets"].values()) else 1


def _document(a, dims: dict, file_bytes: int, stream: dict, stock: dict, streamed: dict, same: dict) -> dict:
    """The h3kit.bench_streaming/1 document of the warm turns: stock against streamed."""
    st = streamed["stats"] or {}
    return {"schema": "h3kit.bench_streaming/1", "dit_file_bytes": file_bytes, "dims": dims,
            "steps_timed": a.steps * a.rounds,
            "timing_note": "seconds per step: the fastest model call of each loader (median beside it), both "
                           "processes timed in turns on a shared machine",
            "canvas": [64, 64, 22], "cfg": 1.0, "stream": stream, "latents": same,
            "latents_note": "bit-identical" if same["identical"] else
            f"max abs diff {same['max_abs_diff']} ({same['dtype']}); both compute in the same dtype",
            "stock": stock, "streamed": streamed,
            "peak_rss_ratio": streamed["peak_rss_bytes"] / max(1, stock["peak_rss_bytes"]),
            "seconds_per_step_ratio": streamed["seconds_per_step"] / max(1e-9, stock["seconds_per_step"]),
            "io_wait_fraction": _fraction(st, "wait_s"), "reader_wait_fraction": _fraction(st, "reader_wait_s"),
            "block_hook_fraction": _fraction(st, "load_s"),
            "read_mode": st.get("read_mode"),
            "io_wait_note": "io_wait: share of sampling time the model waited for block weights (read_mode "
                            "direct, the CPU case: reading and widening them on every core while compute "
                            "waits, the next blocks only handed to the OS's read-ahead; ring: what the helper "
                            "thread did not hide); reader_wait: ring only, share the converting thread waited "
                            "for the disk (overlapped with compute)",
            "bytes_read_per_step": st.get("bytes_read", 0) / max(1, st.get("steps", 1))}


def _cold(a, dit: Path, streamed: dict, bytes_per_step: float) -> dict:
    """The streamed run with the weight file's pages dropped first, against the disk's floor; or why not."""
    if not streamed.get("cache_dropped"):
        return {"measured": False, "why": "skipped (--no-cold)" if a.no_cold else
                "not measured: the weight file's pages could not be dropped from the page cache "
                f"({streamed.get('cache_dropped_how') or 'no way here'}; resident after: "
                f"{streamed.get('resident_after_drop')})"}
    drop_weights(dit)
    speed = read_speed(dit)
    return {"measured": True, "disk_bytes_per_s": speed, "dropped_how": streamed["cache_dropped_how"],
            "resident_after_drop": streamed["resident_after_drop"],
            "seconds_per_step": streamed["cold_seconds_per_step"],
            "disk_floor_seconds_per_step": bytes_per_step / speed,
            "io_wait_fraction": _fraction(streamed.get("cold_stats"), "wait_s"),
            "reader_wait_fraction": _fraction(streamed.get("cold_stats"), "reader_wait_s")}


if __name__ == "__main__":
    sys.exit(main())
