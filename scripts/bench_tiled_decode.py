"""Peak memory of H3kitTiledVAEDecode against ComfyUI's VAEDecode, by number of frames (or, with --h3, by tile size).

Run with h3kit's Python; it drives a ComfyUI's own Python (one fresh process
per measurement, so each peak RSS is its own):

    python scripts/bench_tiled_decode.py --comfyui /path/to/ComfyUI [--frames 8 32 64] [--size 256]
    python scripts/bench_tiled_decode.py --comfyui /path/to/ComfyUI --h3 [--tiles 128:32 256:64 512:64]

Uses a randomly initialised TAESD-shaped VAE (tests/fixtures/comfyui/make_test_vae.py),
so nothing is downloaded. Prints one JSON object last: per frame count, how
far peak RSS rose above the baseline (VAE loaded, one frame decoded) during
the decode, in MiB, for both nodes (medians of --repeat runs), next to the
size of the output tensor. 0 means the decode never needed more than one
frame's decode plus memory already held.

--h3 (ComfyUI >= 0.31, which has comfy/ldm/minimax/vae.py): a random-weight
MiniMaxH3VideoVAE built through ComfyUI's own VAE loader, with the real
decoder width (32 heads x 64) but --dec-layers transformer blocks (real: 36)
and a small encoder (decode does not use it), decodes one video latent
(--width x --height x --frames, CPU) through ComfyUI's VAEDecode and through
H3kitTiledVAEDecode at each --tiles TILE:OVERLAP (pixels, written into a
copy of the node pack's h3kit_profile.json). Per case: peak RSS growth over
the baseline (VAE loaded and warmed up) in MiB (VmHWM after resetting it
through /proc/self/clear_refs; a 2 ms VmRSS sampler where that is refused),
decode seconds, medians of --repeat fresh processes, ratios to VAEDecode, the
number of tile decodes, and the output against VAEDecode's: bit-identical or
the max / mean absolute difference. Prints one JSON object last.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "tests" / "fixtures" / "comfyui"

MEASURE = r"""
import importlib.util, json, os, resource, sys
comfy_dir, pack, vae_file, which, frames, size = sys.argv[1:7]
sys.argv = [sys.argv[0], "--cpu"]
sys.path.insert(0, comfy_dir)
os.chdir(comfy_dir)
import comfy.options
comfy.options.enable_args_parsing()
import torch, comfy.sd, comfy.utils, nodes
spec = importlib.util.spec_from_file_location("h3kit_pack", os.path.join(pack, "__init__.py"), submodule_search_locations=[pack])
mod = importlib.util.module_from_spec(spec); sys.modules[spec.name] = mod; spec.loader.exec_module(mod)
vae = comfy.sd.VAE(sd=comfy.utils.load_torch_file(vae_file))
latent = {"samples": torch.randn(int(frames), 4, int(size) // 8, int(size) // 8)}
vae.decode(latent["samples"][:1])  # load weights and warm up before the baseline
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
if which == "h3kit":
    out = mod.NODE_CLASS_MAPPINGS["H3kitTiledVAEDecode"]().decode(latent, vae, frames_per_chunk=4)[0]
else:
    out = nodes.VAEDecode().decode(vae, latent)[0]
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print("H3KIT-BENCH " + json.dumps({"peak_growth_mib": (peak - base) / 2**20,
                                   "output_mib": out.numel() * out.element_size() / 2**20}))
"""


H3_SETUP = r"""
import importlib.util, json, sys
maker, out, dims = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
spec = importlib.util.spec_from_file_location("make_tiny_h3", maker)
mk = importlib.util.module_from_spec(spec); spec.loader.exec_module(mk)
mk.VIDEO_VAE.update(ch=dims["vae"]["ch"], ch_mult=list(dims["vae"]["ch_mult"]), dec_num_layers=dims["decoder"]["num_layers"],
                    dec_heads=dims["decoder"]["heads"], dec_dim_head=dims["decoder"]["dim_head"])
sd, cfg = mk.build_video_vae(0)
mk.save(sd, cfg, out, "video_vae")
"""

H3_MEASURE = r"""
import functools, gc, hashlib, importlib.util, json, os, sys, threading, time
comfy_dir, pack, vae_file, which, shape, dims, out_file, extra = sys.argv[1:9]
sys.argv = [sys.argv[0], "--cpu"] + json.loads(extra)
sys.path.insert(0, comfy_dir)
os.chdir(comfy_dir)
import comfy.options
comfy.options.enable_args_parsing()
import torch, comfy.sd, comfy.utils, comfy.ldm.minimax.vae as h3vae, nodes
spec = importlib.util.spec_from_file_location("h3kit_pack", os.path.join(pack, "__init__.py"), submodule_search_locations=[pack])
mod = importlib.util.module_from_spec(spec); sys.modules[spec.name] = mod; spec.loader.exec_module(mod)
dims = json.loads(dims)
saved = (h3vae.MiniMaxH3VideoVAE, h3vae.ViT3DDecoder)
h3vae.ViT3DDecoder = functools.partial(saved[1], **dims["decoder"])  # as tiny_h3_testnode does: ComfyUI builds it at full size
h3vae.MiniMaxH3VideoVAE = functools.partial(saved[0], **dims["vae"])
try:
    vae = comfy.sd.VAE(sd=comfy.utils.load_torch_file(vae_file))
finally:
    h3vae.MiniMaxH3VideoVAE, h3vae.ViT3DDecoder = saved
model = vae.first_stage_model
assert type(model).__name__ == "MiniMaxH3VideoVAE" and vae.handles_tiling
calls = [0]
decode_pixels = model._decode_pixels
def counting(z):
    calls[0] += 1
    return decode_pixels(z)
model._decode_pixels = counting

def status(key):
    for line in open("/proc/self/status"):
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024
    return 0

b, c, t, h, w = (int(x) for x in shape.split("x"))
latent = {"samples": torch.randn(b, c, t, h, w, generator=torch.Generator().manual_seed(0))}
node = mod.NODE_CLASS_MAPPINGS["H3kitTiledVAEDecode"]()
run = (lambda s: node.decode(s, vae)[0]) if which == "h3kit" else (lambda s: nodes.VAEDecode().decode(vae, s)[0])
with torch.inference_mode():  # as ComfyUI's executor runs nodes
    run({"samples": latent["samples"][:, :, :2, :4, :4]})  # load and warm up before the baseline
    gc.collect()
    base = status("VmRSS")
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # resets VmHWM to the current RSS
        sampler = None
    except OSError:
        peak, done = [base], threading.Event()
        def sample():
            while not done.wait(0.002):
                peak[0] = max(peak[0], status("VmRSS"))
        sampler = threading.Thread(target=sample, daemon=True); sampler.start()
    calls[0] = 0
    start = time.perf_counter()
    out = run(latent)
    seconds = time.perf_counter() - start
    if sampler is None:
        top, how = status("VmHWM"), "VmHWM"
    else:
        done.set(); sampler.join(); top, how = max(peak[0], status("VmRSS")), "sampled VmRSS"
out = out.contiguous()
digest = hashlib.sha256(out.numpy().tobytes()).hexdigest()
if out_file != "-":
    torch.save(out, out_file)
print("H3KIT-BENCH " + json.dumps({"peak_growth_mib": (top - base) / 2**20, "seconds": seconds, "tile_decodes": calls[0],
                                   "peak_from": how, "sha256": digest, "shape": list(out.shape),
                                   "output_mib": out.numel() * out.element_size() / 2**20,
                                   "tiles_after": [model.tile_size, model.tile_overlap_min]}))
"""

H3_COMPARE = r"""
import json, sys, torch
ref = torch.load(sys.argv[1])
result = {}
for name, path in json.loads(sys.argv[2]).items():
    out = torch.load(path)
    d = (out.double() - ref.double()).abs()
    result[name] = {"identical": bool(torch.equal(out, ref)), "max_abs_diff": float(d.max()), "mean_abs_diff": float(d.mean())}
print("H3KIT-BENCH " + json.dumps(result))
"""


def _bench_line(p: subprocess.CompletedProcess) -> dict:
    line = next((x for x in p.stdout.splitlines() if x.startswith("H3KIT-BENCH ")), None)
    if line is None:
        raise SystemExit(f"measurement failed (exit {p.returncode}):\n{p.stdout[-2000:]}\n{p.stderr[-4000:]}")
    return json.loads(line.split(" ", 1)[1])


def _h3_main(args, python: Path, env: dict) -> int:
    import shutil

    dims = {"vae": {"ch": 32, "ch_mult": [1, 1, 1, 1, 1, 1]},
            "decoder": {"num_layers": args.dec_layers, "heads": args.dec_heads, "dim_head": args.dec_dim_head}}
    t_lat = 2 if args.frames_h3 <= 5 else (args.frames_h3 - 5) // 17 * 5 + 2
    shape = f"1x24x{t_lat}x{args.height // 16}x{args.width // 16}"
    tiles = [tuple(int(x) for x in spec.split(":")) for spec in args.tiles]
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        vae = tmp / "h3_video_vae.safetensors"
        subprocess.run([str(python), "-c", H3_SETUP, str(REPO / "tests" / "support" / "comfy_h3" / "make_tiny_h3.py"), str(vae),
                        json.dumps(dims)], cwd=args.comfyui, env=env, check=True, capture_output=True, timeout=600)
        cases = [("comfyui", None)] + [("h3kit", tile) for tile in tiles]
        packs = {}
        for _, tile in cases:
            if tile is None:
                continue
            pack = tmp / f"pack-{tile[0]}-{tile[1]}"
            shutil.copytree(REPO / "nodes", pack, ignore=shutil.ignore_patterns("__pycache__"))
            (pack / "h3kit_profile.json").write_text(json.dumps({"profile": "bench", "settings": {
                "vae_tile_size": tile[0], "vae_tile_overlap": tile[1], "vae_temporal_tile": 17, "max_frames": 0}}))
            packs[tile] = pack
        rows, outputs = {}, {}
        for which, tile in cases:
            name = "VAEDecode" if tile is None else f"h3kit {tile[0]}/{tile[1]}"
            pack = packs.get(tile) or packs[tiles[0]]
            runs = []
            for i in range(args.repeat):
                out_file = tmp / f"out-{len(outputs)}.pt" if i == 0 else None
                p = subprocess.run([str(python), "-c", H3_MEASURE, str(args.comfyui), str(pack), str(vae), which, shape,
                                    json.dumps(dims), str(out_file or "-"), json.dumps(args.comfy_arg)],
                                   cwd=args.comfyui, env=env, capture_output=True, text=True, timeout=1800)
                runs.append(_bench_line(p))
                if out_file is not None:
                    outputs[name] = str(out_file)
            row = {"tile_px": None if tile is None else tile[0], "overlap_px": None if tile is None else tile[1],
                   "peak_growth_mib": round(statistics.median(r["peak_growth_mib"] for r in runs), 1),
                   "seconds": round(statistics.median(r["seconds"] for r in runs), 2),
                   "peak_growth_mib_runs": [round(r["peak_growth_mib"], 1) for r in runs],
                   "seconds_runs": [round(r["seconds"], 2) for r in runs],
                   "tile_decodes": runs[0]["tile_decodes"], "deterministic": len({r["sha256"] for r in runs}) == 1,
                   "tiles_after": runs[0]["tiles_after"], "peak_from": runs[0]["peak_from"],
                   "output_mib": round(runs[0]["output_mib"], 1), "output_shape": runs[0]["shape"]}
            rows[name] = row
            print(f"{name}: {row}", file=sys.stderr)
        ref = outputs.pop("VAEDecode")
        p = subprocess.run([str(python), "-c", H3_COMPARE, ref, json.dumps(outputs)], cwd=args.comfyui, env=env,
                           capture_output=True, text=True, timeout=600)
        diffs = _bench_line(p)
    stock = rows["VAEDecode"]
    for name, row in rows.items():
        row.update(diffs.get(name, {"identical": True, "max_abs_diff": 0.0, "mean_abs_diff": 0.0}))
        row["peak_ratio"] = round(row["peak_growth_mib"] / stock["peak_growth_mib"], 3) if stock["peak_growth_mib"] else None
        row["time_ratio"] = round(row["seconds"] / stock["seconds"], 3) if stock["seconds"] else None
    print(json.dumps({"mode": "h3", "canvas": [args.width, args.height], "frames": args.frames_h3, "latent": shape,
                      "decoder": dims["decoder"], "comfyui_args": ["--cpu"] + args.comfy_arg, "repeat": args.repeat,
                      "cases": rows}))
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--comfyui", required=True, type=Path)
    ap.add_argument("--frames", type=int, nargs="+", default=[8, 32, 64])
    ap.add_argument("--size", type=int, default=256)
    ap.add_argument("--repeat", type=int, default=3)
    h3 = ap.add_argument_group("--h3: the MiniMax H3 video VAE by tile size")
    h3.add_argument("--h3", action="store_true")
    h3.add_argument("--tiles", nargs="+", default=["128:32", "256:64", "384:64", "512:64"], metavar="TILE:OVERLAP")
    h3.add_argument("--width", type=int, default=512)
    h3.add_argument("--height", type=int, default=512)
    h3.add_argument("--frames-h3", type=int, default=22, help="decoded frames (17k + 5)")
    h3.add_argument("--dec-layers", type=int, default=1)
    h3.add_argument("--dec-heads", type=int, default=32)
    h3.add_argument("--dec-dim-head", type=int, default=64)
    h3.add_argument("--comfy-arg", action="append", default=[], help="an extra ComfyUI flag, e.g. --use-pytorch-cross-attention")
    args = ap.parse_args()
    python = next(p for p in (args.comfyui / "venv/bin/python", args.comfyui / ".venv/bin/python") if p.exists())
    env = {"PYTHONDONTWRITEBYTECODE": "1", "PATH": "/usr/bin:/bin"}
    if args.h3:
        return _h3_main(args, python, env)
    with tempfile.TemporaryDirectory() as tmp:
        vae = Path(tmp) / "vae.safetensors"
        subprocess.run([str(python), str(FIXTURES / "make_test_vae.py"), str(vae)], cwd=args.comfyui, env=env,
                       check=True, capture_output=True, timeout=300)
        results = {}
        for frames in args.frames:
            row = {}
            for which in ("h3kit", "comfyui"):
                samples, output = [], 0.0
                for _ in range(args.repeat):
                    p = subprocess.run([str(python), "-c", MEASURE, str(args.comfyui), str(REPO / "nodes"), str(vae), which,
                                        str(frames), str(args.size)], cwd=args.comfyui, env=env, capture_output=True,
                                       text=True, timeout=600)
                    line = next(x for x in p.stdout.splitlines() if x.startswith("H3KIT-BENCH "))
                    doc = json.loads(line.split(" ", 1)[1])
                    samples.append(doc["peak_growth_mib"])
                    output = doc["output_mib"]
                row[which] = round(statistics.median(samples), 1)
                row["output_mib"] = round(output, 1)
            results[str(frames)] = row
            print(f"{frames} frames: {row}", file=sys.stderr)
    print(json.dumps({"size": args.size, "repeat": args.repeat, "peak_growth_mib": results}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
