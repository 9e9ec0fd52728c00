"""Calibration's estimate against a measured run of the real H3 workflow, in a real ComfyUI on this machine.

    flock /tmp/h3kit-heavy.lock python scripts/validate_estimator.py [--json] [--comfyui DIR] [--calibrations N]
        [--only fits|nofit] [--keep DIR]                        # calibrate --quick vs the installed workflow
    python scripts/validate_estimator.py --held [--json] [--comfyui DIR] [--cases SPEC]   # the older check
    python scripts/validate_estimator.py --reports [--json]     # the planner against published reports
    python scripts/validate_estimator.py --published [--json]   # time and memory against published runs

By default (scripts/estimator_cases.py): `h3kit calibrate --quick` against the workflow the pack
installed (its streamed loader, the same canvas, 3 steps), for a real-width random DiT that fits this
machine's page cache and one that does not, each from `h3kit install` on; exits 1 when an estimate is
more than 25% off the measured step or the quick runs' seconds per step, one block's cost or the
per-step fixed cost spread more than 15%.

`--held`: for each random-weight H3 DiT (default: hidden 1024 x 8 blocks and hidden
2048 x 16 blocks, H3's head_dim and FFN ratio), in a private hard-linked copy
of the ComfyUI in --comfyui / H3KIT_COMFYUI_DIR (never written to):

1. estimate, as `h3kit calibrate` does: the width and depth read from the
   file's header (h3kit.calibrate.arch), the calibration runner in ComfyUI's
   Python timing ComfyUI's own H3 transformer a few blocks deep (`h3_model`)
   at the token counts calibrate picks (estimates.measure_points),
   then seconds per step through plan.timing.estimate_clip and peak RSS by
   the calibration's memory formula (h3kit.calibrate.estimates);
2. measure: ComfyUI started with --cpu, the test graph (UNETLoader with that
   file, the tiny text encoder and VAEs, MiniMaxH3ImageToVideo, KSampler)
   queued once cold (2 steps), then warm with 1 and 2 steps: seconds per step
   is the fastest of ComfyUI's three sampler progress bars (other work on a
   shared machine only slows a run; every bar and the difference of the warm
   runs, by ComfyUI's own timestamps, are in --json), peak RSS the server's,
   sampled with psutil from outside every 0.2 s over all runs.

The text rows of the sequence are the prompt's real token count (read with
ComfyUI's H3 tokenizer) in both, so the check is the estimator's, not the
catalog's prompt-length assumption. Prints a table (or --json) and exits 1
when any difference is above 25%. The "Estimate vs measured" table in docs/calibrate.md
is this script's output. `--reports` keeps the older check of the planner's
memory figures against published user reports (docs/plan.md). `--published` (scripts/published_check.py)
plans every run of profiles/published_runs.yaml with its setup forced and prints the estimate next to the
published seconds per step, per clip and peak GPU memory; exit 1 when one is more than 1.5x off with no
stated reason (docs/calibrate.md "Estimates against published runs").
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

GIB = 2**30
ROOT = Path(__file__).resolve().parent.parent
LIMIT_PCT = 25.0
QUICK = os.environ.get("H3KIT_VALIDATE_QUICK") == "1"  # 1: the --quick measurement instead of the full one
PROMPT = "a red fox runs through snow at dusk, wind howling over the hills, the camera following low and close"
# hidden x blocks, canvas; heads and FFN follow H3's ratios (head_dim 128, ffn = hidden x 14336 / 5376).
CASES = [{"hidden": 1024, "blocks": 8, "canvas": [256, 256], "frames": 39},
         {"hidden": 2048, "blocks": 16, "canvas": [256, 256], "frames": 22}]
TE, TAEH3, AUDIO_VAE = ("h3tiny_qwen3vl_te_bf16.safetensors", "h3tiny_taeh3_fp16.safetensors",
                        "h3tiny_audio_vae_fp32.safetensors")
TOKENIZE = r"""
import json, sys
from comfy.cli_args import args
args.cpu = True
from comfy.text_encoders.minimax import MiniMaxH3Tokenizer
out = MiniMaxH3Tokenizer().tokenize_with_weights(sys.argv[1])
print(json.dumps({"text_tokens": sum(len(b) for v in out.values() for b in v[:1])}))
"""


# ----------------------------------------------------------------- the older check: planner vs user reports
def machine_fingerprint(m: dict):
    """A reported machine's Fingerprint (scripts/published_check.py; Macs: Metal's share of unified memory)."""
    if str(ROOT / "scripts") not in sys.path:
        sys.path.insert(0, str(ROOT / "scripts"))
    from published_check import machine_fingerprint as fingerprint_of

    return fingerprint_of(m)


def rows() -> list[dict]:
    """The planner's memory estimate for each published report in the catalog (`measured:`)."""
    from h3kit.data import catalog as catalog_mod
    from h3kit.data.config import Config
    from h3kit.data.settings import typed
    from h3kit.data.yamlio import parse_size
    from h3kit.plan import make_plan

    cat = catalog_mod.load()
    profiles = catalog_mod.load_profiles(cat)
    out = []
    for point in cat.measured:
        config = Config(overrides=typed(point.settings))  # as config.yaml's overrides would be, once loaded
        plan = make_plan(machine_fingerprint(point.machine), cat, profiles, config=config)
        for what, reported in point.reported.items():
            st = plan.settings
            # DiT bytes on the GPU at a time: the resident blocks plus the two shard buffers in flight.
            on_gpu = st.preload_bytes + (0 if st.streaming.resident else 2 * st.shard_size_bytes)
            estimate = plan.estimates.peak_gpu_bytes if what == "peak_gpu" else on_gpu
            rep = parse_size(reported)
            out.append({"id": point.id, "quantity": "peak GPU" if what == "peak_gpu" else "DiT on GPU",
                        "reported_gb": rep / 1e9, "estimate_gb": estimate / 1e9,
                        "error_pct": 100.0 * (estimate - rep) / rep, "profile": plan.profile, "fits": plan.fits})
    return out


# ----------------------------------------------------------------- the files and the graph
def dit_dims(hidden: int, blocks: int, text_dim: int) -> dict:
    ffn = int(round(hidden * 14336 / 5376 / 32)) * 32
    return {"hidden_size": hidden, "num_layers": blocks, "num_attention_heads": hidden // 128,
            "attention_head_dim": 128, "ffn_hidden_size": ffn, "text_dim": text_dim, "timestep_input_dim": 256,
            "time_embed_hidden_size": hidden, "time_embed_dim": hidden // 2, "rope_inv_freq_len": 16}


def write_files(comfy: Path, python: Path, case: dict, first: bool) -> str:
    sys.path.insert(0, str(ROOT / "tests" / "support"))
    from comfy_h3 import write_tiny_files

    name = f"h3val_{case['hidden']}x{case['blocks']}_bf16.safetensors"
    names = {"dit": f"diffusion_models/{name}"}
    if first:  # the text encoder and VAEs are shared by every case (a part left out is not written)
        names.update(text_encoder=f"text_encoders/{TE}", taeh3=f"vae/{TAEH3}", audio_vae=f"vae/{AUDIO_VAE}")
    write_tiny_files(comfy, python, names, dit_dims(case["hidden"], case["blocks"], text_dim=48))
    return name


def graph(dit: str, canvas, frames: int, steps: int, seed: int) -> dict:
    """The smallest H3 text-to-video graph (FINDINGS 5: t2v_api.json), on the tiny text encoder and VAEs."""
    w, h = canvas
    return {
        "1": {"class_type": "UNETLoader", "inputs": {"unet_name": dit, "weight_dtype": "default"}},
        "2": {"class_type": "CLIPLoader", "inputs": {"clip_name": "h3tiny_qwen3vl_te_bf16.safetensors",
                                                     "type": "minimax", "device": "default"}},
        "3": {"class_type": "VAELoader", "inputs": {"vae_name": "h3tiny_taeh3_fp16.safetensors"}},
        "4": {"class_type": "VAELoader", "inputs": {"vae_name": "h3tiny_audio_vae_fp32.safetensors"}},
        "5": {"class_type": "MiniMaxH3ImageToVideo", "inputs": {"clip": ["2", 0], "vae": ["3", 0], "prompt": PROMPT,
                                                                "width": w, "height": h, "length": frames}},
        "6": {"class_type": "MiniMaxH3SigmaShift", "inputs": {"model": ["1", 0], "shift_video": 12.0, "shift_audio": 3.0}},
        "7": {"class_type": "ConditioningZeroOut", "inputs": {"conditioning": ["5", 0]}},
        "8": {"class_type": "KSampler", "inputs": {"model": ["6", 0], "seed": seed, "steps": steps, "cfg": 1.0,
                                                   "sampler_name": "euler", "scheduler": "simple", "positive": ["5", 0],
                                                   "negative": ["7", 0], "latent_image": ["5", 1], "denoise": 1.0}},
        "9": {"class_type": "VAEDecode", "inputs": {"samples": ["8", 0], "vae": ["3", 0]}},
        "10": {"class_type": "VAEDecodeAudio", "inputs": {"samples": ["8", 0], "vae": ["4", 0]}},
        "11": {"class_type": "CreateVideo", "inputs": {"images": ["9", 0], "fps": 24.0, "audio": ["10", 0]}},
        "12": {"class_type": "SaveVideo", "inputs": {"video": ["11", 0], "filename_prefix": "h3val/t2v",
                                                     "format": "mp4", "format.codec": "h264"}},
    }


def text_tokens(comfy: Path, python: Path) -> int:
    done = subprocess.run([str(python), "-c", TOKENIZE, PROMPT], cwd=comfy, capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        raise RuntimeError(f"the H3 tokenizer did not run: {done.stderr[-800:]}")
    return int(json.loads(done.stdout.strip().splitlines()[-1])["text_tokens"])


# ----------------------------------------------------------------- estimate (the calibration's code) and measure
def estimate(comfy: Path, python: Path, dit_file: Path, case: dict, n_text: int, cat, home: Path) -> dict:
    from h3kit.calibrate import arch as arch_mod
    from h3kit.calibrate import estimates as est_mod
    from h3kit.bundled.h3k_calibration_runner.job import Job
    from h3kit.calibrate.runner_client import BRIDGE, run_runner
    from h3kit.calibrate.workdir import work_folder
    from h3kit.core.session import Session
    from h3kit.plan import timing

    arch = arch_mod.from_file(dit_file)
    plan = held_plan(cat, case)
    # the prompt's real text rows, in the estimate as in the runner
    work_cat = dataclasses.replace(cat, sequence=dataclasses.replace(cat.sequence, text_tokens=n_text))
    work = {"canvas": case["canvas"], "frames": case["frames"], "steps": 2, "cfg": 1.0}
    rows = timing.sequence_tokens(work_cat, case["canvas"][0], case["canvas"][1], case["frames"])
    points = est_mod.measure_points(rows, arch, timing.rates_from_table(fingerprint(), cat, "float32", backend="cpu"),
                                    QUICK)
    job = {"plan": plan.to_json(), "quick": QUICK, "budget": {},
           "h3_arch": {k: v for k, v in arch.items() if k not in ("file_bytes",)},
           "h3_canvas": {"width": case["canvas"][0], "height": case["canvas"][1], "frames": case["frames"],
                         "text_tokens": n_text},
           "h3_device": "cpu", "h3_points": points,
           # only the DiT is compared here: timing full-size VAE and text-encoder layers would only cost time
           "h3_parts": []}
    t0 = time.monotonic()
    with work_folder(home / "cache", "validate") as tmp:
        # the full calibration's measurement (`h3kit calibrate`; --quick times fewer points)
        res = run_runner(Session(), str(python), BRIDGE, None, Job.from_json(job), QUICK, Path(tmp),
                         comfyui=str(comfy)).to_json()
    runner_s = time.monotonic() - t0
    h3 = res.get("h3_model") or {"status": "error", "reason": res.get("reason")}
    if not est_mod.measured(h3):
        raise RuntimeError(f"the runner measured no H3 model: {h3.get('reason')}")
    tim, _ = est_mod.calibrated_timing(h3, {}, "today")
    t = est_mod.clip_time(arch, tim, work, work_cat, timing)
    held = {"text_encoder": (comfy / "models/text_encoders/h3tiny_qwen3vl_te_bf16.safetensors").stat().st_size,
            "vae": 2 * (comfy / "models/vae/h3tiny_taeh3_fp16.safetensors").stat().st_size
            + (comfy / "models/vae/h3tiny_audio_vae_fp32.safetensors").stat().st_size}
    m = est_mod.clip_memory(h3, arch, plan, cat, cpu_fingerprint(), work, t["tokens"], "cpu",
                            weights={"dit": bf16_dit(cat)}, held_parts=held)
    return {"seconds_per_step": t["seconds_per_step"], "peak_rss_bytes": m["peak_rss_bytes"], "tokens": t["tokens"],
            "memory_parts": m["parts"], "fit": h3["fit"], "points": h3.get("points"), "timed_at": points,
            "runner_seconds": round(runner_s, 1),
            "arch": {k: arch.get(k) for k in ("hidden", "heads", "ffn", "blocks_total", "from")}}


def cpu_fingerprint():
    """This machine as the test graph runs it: ComfyUI with --cpu, so no GPU takes a share of the model."""
    return dataclasses.replace(fingerprint(), gpus=())


def bf16_dit(cat):
    """The catalog's bf16 DiT: the random files are bf16, held by ComfyUI's own loader at their header's size."""
    return next(w for w in cat.dit if w.format == "bf16")


def held_plan(cat, case: dict):
    """The typed plan the test graph runs: the CPU profile's plan for this machine, at the case's workload, with
    ComfyUI holding the bf16 DiT itself (UNETLoader, no streaming)."""
    from h3kit.plan import make_plan
    from h3kit.data import catalog as catalog_mod

    plan = make_plan(cpu_fingerprint(), cat, catalog_mod.load_profiles(cat), profile="cpu-only")
    s = plan.settings
    settings = dataclasses.replace(s, comfyui_args=("--cpu",), canvas=tuple(case["canvas"]), frames=case["frames"],
                                   steps=2, cfg=1.0, quantization="bf16", dit_weights=bf16_dit(cat).id,
                                   streaming=dataclasses.replace(s.streaming, enabled=False, streamed=None))
    return dataclasses.replace(plan, settings=settings)


def measure(comfy: Path, python: Path, dit: str, case: dict, work: Path) -> dict:
    from h3kit.calibrate.with_model import step_seconds, timed_run
    from h3kit.comfyui.client import ComfyServer

    with ComfyServer(comfy, python, ["--cpu"], work) as server:
        server.start()
        cold = timed_run(server, graph(dit, case["canvas"], case["frames"], 2, 0), 3600)
        if not cold["ran"]:
            raise RuntimeError(f"the workflow failed: {cold['message']}; log: {server.log_tail(800)}")
        steps = step_seconds(lambda g: timed_run(server, g, 3600), graph(dit, case["canvas"], case["frames"], 2, 0),
                             lambda: server.log_tail(200_000))
        peak = server.peak_rss_bytes
    if steps["status"] != "measured":
        raise RuntimeError(steps["reason"])
    return {"seconds_per_step": steps["seconds_per_step"], "peak_rss_bytes": peak, "cold_seconds": cold["seconds"],
            "one_step_seconds": steps["one_step_seconds"], "two_step_seconds": steps["two_step_seconds"],
            "how": steps["how"], "sampler_seconds_per_step": steps.get("sampler_seconds_per_step"),
            "difference_seconds_per_step": steps.get("difference_seconds_per_step")}


_FINGERPRINT: list = []


def fingerprint():
    """This machine, probed once (the runner's token counts are placed by its table rates, as calibrate does)."""
    if not _FINGERPRINT:
        from h3kit.fingerprint import this_machine

        _FINGERPRINT.append(this_machine())
    return _FINGERPRINT[0]


def pct(est, real) -> float | None:
    return None if not real or est is None else 100.0 * (est - real) / real


def validate(comfy_real: Path, cases: list[dict], keep: Path | None) -> list[dict]:
    sys.path.insert(0, str(ROOT / "tests" / "support"))
    from comfy_h3 import make_test_comfyui

    from h3kit.data import catalog as catalog_mod

    cat = catalog_mod.load()
    python = next(p for p in (comfy_real / "venv/bin/python", comfy_real / ".venv/bin/python") if p.exists())
    root = keep or Path(tempfile.mkdtemp(prefix="h3kit-validate-"))
    comfy = root / "ComfyUI"
    if not comfy.exists():
        make_test_comfyui(comfy_real, comfy)
    n_text = text_tokens(comfy, python)
    out = []
    for i, case in enumerate(cases):
        name = f"h3val_{case['hidden']}x{case['blocks']}_bf16.safetensors"
        shared = (comfy / "models/text_encoders" / TE).is_file()
        if not (comfy / "models/diffusion_models" / name).is_file() or not shared:
            write_files(comfy, python, case, first=not shared)
        print(f"validate_estimator: {name}: the calibration's measurement ...", file=sys.stderr)
        est = estimate(comfy, python, comfy / "models/diffusion_models" / name, case, n_text, cat, root)
        print(f"validate_estimator: estimated {json.dumps(est)}", file=sys.stderr)
        real = measure(comfy, python, name, case, root / f"run-{i}")
        print(f"validate_estimator: measured {json.dumps(real)}", file=sys.stderr)
        out.append({"case": f"hidden {case['hidden']} x {case['blocks']} blocks", "canvas": case["canvas"],
                    "frames": case["frames"], "tokens": est["tokens"], "text_tokens": n_text,
                    "estimated": est, "measured": real,
                    "seconds_per_step_pct": pct(est["seconds_per_step"], real["seconds_per_step"]),
                    "peak_rss_pct": pct(est["peak_rss_bytes"], real["peak_rss_bytes"])})
    return out


def _print_table(table: list[dict]) -> None:
    print("| DiT (random weights) | canvas | tokens | s/step estimated | s/step measured | diff | "
          "peak RSS estimated | peak RSS measured | diff |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in table:
        e, m = r["estimated"], r["measured"]
        print(f"| {r['case']} | {r['canvas'][0]}x{r['canvas'][1]}x{r['frames']} | {r['tokens']} | "
              f"{e['seconds_per_step']:.2f} | {m['seconds_per_step']:.2f} | {r['seconds_per_step_pct']:+.0f}% | "
              f"{e['peak_rss_bytes'] / GIB:.2f} GiB | {m['peak_rss_bytes'] / GIB:.2f} GiB | {r['peak_rss_pct']:+.0f}% |")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--reports", action="store_true", help="the planner against published reports instead")
    ap.add_argument("--published", action="store_true", help="time and memory against profiles/published_runs.yaml")
    ap.add_argument("--comfyui", default=os.environ.get("H3KIT_COMFYUI_DIR"), help="a ComfyUI >= 0.31 with venv/")
    ap.add_argument("--cases", help='JSON list like [{"hidden": 1024, "blocks": 8, "canvas": [256, 256], "frames": 39}]')
    ap.add_argument("--keep", type=Path, help="work in this folder and keep it (files are reused on the next run)")
    ap.add_argument("--held", action="store_true", help="the older check: ComfyUI's own loader, calibration's runner")
    ap.add_argument("--calibrations", type=int, default=3, help="quick calibrations of the fits case (their spread)")
    ap.add_argument("--only", action="append", choices=("fits", "bypass", "nofit"),
                    help="only these page-cache cases (repeatable; estimator_cases.CASES)")
    a = ap.parse_args(argv)
    os.environ.setdefault("H3KIT_HOME", tempfile.mkdtemp(prefix="h3kit-validate-home-"))
    if a.published:
        sys.path.insert(0, str(ROOT / "scripts"))
        import published_check

        return published_check.main(a.json)
    if a.reports:
        table = rows()
        if a.json:
            print(json.dumps(table, indent=2))
            return 0
        print("| report | quantity | reported | estimate | error |")
        print("|---|---|---|---|---|")
        for r in table:
            print(f"| {r['id']} | {r['quantity']} | {r['reported_gb']:.1f} GB | {r['estimate_gb']:.1f} GB | "
                  f"{r['error_pct']:+.0f}% |")
        return 0
    if not a.comfyui or not (Path(a.comfyui) / "comfy_extras" / "nodes_minimax_h3.py").is_file():
        print("validate_estimator: pass --comfyui (or set H3KIT_COMFYUI_DIR) to a ComfyUI >= 0.31 with its venv/",
              file=sys.stderr)
        return 2
    if not a.held:
        return installed(Path(a.comfyui).resolve(), a)
    cases = json.loads(a.cases) if a.cases else CASES
    table = validate(Path(a.comfyui).resolve(), cases, a.keep.resolve() if a.keep else None)
    if a.json:
        print(json.dumps(table, indent=2))
    else:
        _print_table(table)
    worst = max(abs(x) for r in table for x in (r["seconds_per_step_pct"], r["peak_rss_pct"]) if x is not None)
    if worst > LIMIT_PCT:
        print(f"validate_estimator: a difference of {worst:.0f}% is above {LIMIT_PCT:.0f}%", file=sys.stderr)
        return 1
    return 0


SPREAD_LIMIT_PCT = 15.0
SPREAD_FIGURES = ("seconds_per_step", "block_seconds", "step_fixed_s")


def installed(comfy_real: Path, a) -> int:
    """The default check: calibrate --quick vs the installed workflow, both page-cache cases (estimator_cases)."""
    sys.path.insert(0, str(ROOT / "scripts"))
    import estimator_cases as ec

    python = next(p for p in (comfy_real / "venv/bin/python", comfy_real / ".venv/bin/python") if p.exists())
    root = a.keep.resolve() if a.keep else Path(tempfile.mkdtemp(prefix="h3kit-validate-"))
    cases = [c for c in ec.CASES if not a.only or c["slug"] in a.only]
    # the spread is the fits case's (a quick run there takes a minute); the larger file gets one calibration
    table = [ec.run_case(comfy_real, python, root, case, max(1, a.calibrations) if case is ec.CASES[0] else 1,
                         keep_dit=False) for case in cases]
    if a.json:
        print(json.dumps(table, indent=2))
    else:
        ec.print_table(table)
    worst = max(abs(r["seconds_per_step_pct"]) for r in table)
    # the quick runs' spread of the estimate and of the two costs it is made of (per block, per-step fixed)
    spreads = {k: max((r["spread_pct"][k] or 0.0) for r in table) for k in SPREAD_FIGURES}
    spread = max(spreads.values())
    if worst > LIMIT_PCT or spread > SPREAD_LIMIT_PCT:
        print(f"validate_estimator: estimate off by up to {worst:.0f}% (limit {LIMIT_PCT:.0f}%), quick runs "
              f"spread " + ", ".join(f"{k} {v:.0f}%" for k, v in spreads.items())
              + f" (limit {SPREAD_LIMIT_PCT:.0f}%)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
