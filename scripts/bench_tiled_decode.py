"""Peak memory of H3kitTiledVAEDecode against ComfyUI's VAEDecode, by number of frames.

Run with h3kit's Python; it drives a ComfyUI's own Python (one fresh process
per measurement, so each peak RSS is its own):

    python scripts/bench_tiled_decode.py --comfyui /path/to/ComfyUI [--frames 8 32 64] [--size 256]

Uses a randomly initialised TAESD-shaped VAE (tests/fixtures/comfyui/make_test_vae.py),
so nothing is downloaded. Prints one JSON object last: per frame count, how
far peak RSS rose above the baseline (VAE loaded, one frame decoded) during
the decode, in MiB, for both nodes (medians of --repeat runs), next to the
size of the output tensor. 0 means the decode never needed more than one
frame's decode plus memory already held.
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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--comfyui", required=True, type=Path)
    ap.add_argument("--frames", type=int, nargs="+", default=[8, 32, 64])
    ap.add_argument("--size", type=int, default=256)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    python = next(p for p in (args.comfyui / "venv/bin/python", args.comfyui / ".venv/bin/python") if p.exists())
    env = {"PYTHONDONTWRITEBYTECODE": "1", "PATH": "/usr/bin:/bin"}
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
