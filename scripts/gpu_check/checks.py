"""The GPU check's checks, in the order scripts/gpu_check/run.py runs them; each returns (one line, figures).

Each takes the run's `Ctx` and raises `Skip(reason)` when it cannot run (the reason is recorded, never
dropped). The measuring is the project's own: h3kit's CLI, its format probe, scripts/bench_streaming.py's
ComfyUI copy, graphs and latent comparison, scripts/make_h3_dit.py and make_h3_te.py's random weights,
tests/support/comfy_h3/make_tiny_gguf.py's GGUF files and the planner's memory model (plan/budget.py).
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(REPO / "scripts"), str(REPO / "tests" / "support"), str(REPO / "installer")]
import bench_streaming as bench  # noqa: E402

HERE = Path(__file__).resolve().parent
DIT_FILE = "h3real{blocks}_dit_bf16.safetensors"
TE_FILE = "h3real{layers}_te_bf16.safetensors"
# The streamed loader as a plan hands it on when nothing is kept resident: every block through the ring.
STREAM = {"preload_bytes": 0, "shard_size_bytes": 0, "prefetch_blocks": 2, "page_cache": "use"}
CANVAS, FRAMES = (64, 64), 22
COMPARE = r"""
import json, sys, torch
from safetensors.torch import load_file
a, b = load_file(sys.argv[1]), load_file(sys.argv[2])
diff = max(float((a[k].double() - b[k].double()).abs().max()) for k in a)
scale = max(float(a[k].double().abs().max()) for k in a)
print(json.dumps({"identical": all(torch.equal(a[k], b[k]) for k in a), "max_abs": diff,
                  "max_rel": diff / max(scale, 1e-30), "finite": all(bool(torch.isfinite(a[k]).all()) for k in a)}))
"""


class Skip(Exception):
    """A check that cannot run here; the message is its named reason."""


@dataclass
class Ctx:
    device: str  # cuda | cpu
    real: Path  # the ComfyUI the copy is made from
    python: Path  # its Python
    work: Path
    home: Path  # H3KIT_HOME of every h3kit call
    gguf_pack: Path | None
    sizes: dict
    env: dict = field(default_factory=dict)  # what ComfyUI's processes get on top of this one's environment
    results: dict = field(default_factory=dict)  # name -> record, as run.py keeps them
    comfy: Path | None = None
    library: Path | None = None
    notes: list = field(default_factory=list)

    def launch(self) -> list[str]:
        web = self.work / "web"  # the server needs no page: ComfyUI serves this empty folder
        web.mkdir(parents=True, exist_ok=True)
        return (["--cpu"] if self.device == "cpu" else []) + ["--front-end-root", str(web)]

    def proc_env(self) -> dict:
        return {**os.environ, **self.env}

    def figures(self, name: str) -> dict:
        rec = self.results.get(name) or {}
        if rec.get("status") != "ok":
            raise Skip(f"it needs the {name} check's figures, and that check has none "
                       f"({rec.get('reason') or 'it did not run'})")
        return rec["figures"]


def gib(n) -> str:
    return "-" if n is None else f"{n / 2**30:.2f} GiB"


def cli(ctx: Ctx, *argv: str, timeout: float = 600) -> dict:
    """`h3kit ARGV --json` in this Python with the run's H3KIT_HOME: the JSON document, or Skip with its error."""
    env = {**ctx.proc_env(), "H3KIT_HOME": str(ctx.home)}
    done = subprocess.run([sys.executable, "-m", "h3kit", *argv, "--json"], capture_output=True, text=True,
                          timeout=timeout, env=env)
    try:
        doc = json.loads(done.stdout)
    except ValueError:
        doc = None
    if done.returncode != 0 or doc is None:
        raise Skip(f"h3kit {argv[0]} exited {done.returncode}: {(done.stderr.strip().splitlines() or [''])[-1][:300]}")
    return doc


# --- h3kit's own view of the machine -----------------------------------------------------------------------

def fingerprint(ctx: Ctx) -> tuple[str, dict]:
    doc = cli(ctx, "fingerprint", timeout=120)
    (ctx.work / "fingerprint.json").write_text(json.dumps(doc), encoding="utf-8")
    gpus = [{k: g.get(k) for k in ("vendor", "name", "memory_total_bytes", "memory_free_bytes", "driver_version",
                                   "cuda_driver_version", "compute_capability", "backend")} for g in doc["gpus"]]
    smi = [{k: p.get(k) for k in ("name", "status", "seconds", "detail")} for p in doc.get("probes", [])
           if "nvidia" in p.get("name", "").lower()]
    figures = {"gpus": gpus, "nvidia_probes": smi, "ram_total_bytes": doc["memory"]["total_bytes"],
               "cpu": doc["cpu"].get("model"), "logical_cores": doc["cpu"].get("logical_cores")}
    if ctx.device == "cuda" and not any(g["vendor"] == "nvidia" for g in gpus):
        raise Skip(f"the fingerprint found no NVIDIA GPU on a CUDA machine (nvidia-smi probes: {smi})")
    line = "; ".join(f"{g['name']} {gib(g['memory_total_bytes'])}, driver {g['driver_version']}, CUDA "
                     f"{g['cuda_driver_version']}, CC {g['compute_capability']}" for g in gpus) or \
        f"no GPU (nvidia-smi: {', '.join(p['status'] for p in smi) or 'not probed'})"
    return line, figures


def plan(ctx: Ctx) -> tuple[str, dict]:
    doc = cli(ctx, "plan", "--fingerprint", str(ctx.work / "fingerprint.json"), timeout=120)
    (ctx.work / "plan.json").write_text(json.dumps(doc), encoding="utf-8")
    s, est = doc["settings"], doc["estimates"]
    streaming = s.get("streaming") or {}
    figures = {"profile": doc["profile"], "fits": doc["fits"],
               "settings": {k: s.get(k) for k in ("dit_weights", "quantization", "text_encoder_weights",
                                                  "comfyui_args", "max_canvas", "max_frames")},
               "streaming": {k: streaming.get(k) for k in ("enabled", "dynamic_vram", "prefetch_blocks", "why")},
               "text_encoder_streaming": (s.get("text_encoder_streaming") or {}).get("enabled"),
               "budget": doc["budget"], "estimates": {k: est.get(k) for k in ("peak_gpu_bytes", "peak_ram_bytes")},
               "warnings": doc.get("warnings", [])}
    line = (f"{doc['profile']}: {s.get('dit_weights')} + {s.get('text_encoder_weights')}, streamed DiT "
            f"{streaming.get('enabled')}, peak GPU {gib(est.get('peak_gpu_bytes'))}, RAM {gib(est.get('peak_ram_bytes'))}")
    return line, figures


def format_probe(ctx: Ctx) -> tuple[str, dict]:
    from h3kit.calibrate import format_probe as fp
    from h3kit.comfyui import locate
    from h3kit.core.session import Session
    from h3kit.data.fingerprint import Fingerprint

    comfy = ensure_comfy(ctx)
    session, said = Session(), []
    install = locate.find(str(comfy), None, session, need_write=False)
    probe = fp.format_evidence(session, install, fingerprint=Fingerprint(), findings=said)
    if probe is None:
        raise Skip(f"the format probe gave no result: {[f.get('message') for f in said]}")
    parts = {part: {f: (f"{r.status} {r.seconds or 0:.2f}s" if r.status == "runs" else f"{r.status}: {r.error}")
                    for f, r in rows.items()} for part, rows in probe.parts.items()}
    runs = {part: sum(1 for r in rows.values() if r.status == "runs") for part, rows in probe.parts.items()}
    figures = {"device": probe.device, "backend": probe.backend, "torch": probe.torch, "seconds": probe.seconds,
               "comfyui": probe.comfyui_version, "parts": parts}
    if ctx.device == "cuda" and probe.backend != "cuda":
        raise Skip(f"the probe ran on {probe.device} (backend {probe.backend}), not on the card")
    line = f"{probe.device} ({probe.backend}): " + ", ".join(f"{p} {n}/{len(probe.parts[p])} run" for p, n in runs.items())
    return line, figures


# --- the ComfyUI copy the checks share ---------------------------------------------------------------------

def ensure_comfy(ctx: Ctx) -> Path:
    """The hard-linked ComfyUI copy (bench_streaming.make_comfy: tiny TE and VAEs, the pack with a native library
    built for this run, the benchmark's nodes) with this check's peak node and ComfyUI-GGUF; made once."""
    if ctx.comfy is not None:
        return ctx.comfy
    try:
        ctx.library = bench.build_library(ctx.home)
    except Exception as exc:  # noqa: BLE001 -- the pack runs without it, slower: said in the JSON
        ctx.notes.append(f"the native library could not be built ({exc}); the pack runs without it")
    comfy = bench.make_comfy(ctx.real, ctx.work / "comfy", ctx.library, ctx.python)
    node = comfy / "custom_nodes" / "gpu_check_peak"
    node.mkdir(parents=True, exist_ok=True)
    shutil.copy(HERE / "peak_node.py", node / "__init__.py")
    if ctx.gguf_pack is not None and not (comfy / "custom_nodes" / "ComfyUI-GGUF").exists():
        shutil.copytree(ctx.gguf_pack, comfy / "custom_nodes" / "ComfyUI-GGUF")
    ctx.comfy = comfy
    return comfy


def prune(api: dict, keep: list[str]) -> dict:
    """Only the nodes `keep` needs: the check compares sampled latents, so no decode and no MP4."""
    need, todo = set(), list(keep)
    while todo:
        k = todo.pop()
        if k in need:
            continue
        need.add(k)
        todo += [v[0] for v in api[k]["inputs"].values() if isinstance(v, list) and len(v) == 2 and isinstance(v[0], str)]
    return {k: v for k, v in api.items() if k in need}


def check_graph(dit: str, stream: dict | None, steps: int, seed: int, tag: str, **kw) -> dict:
    """bench_streaming.graph with every model call timed (tag), the peak node after the sampler, pruned."""
    api = bench.graph(dit, stream, steps, seed, prefix=f"{tag}/x", timed=tag, canvas=CANVAS, frames=FRAMES, **kw)
    sampled = next(k for k, n in api.items() if n["class_type"] == "SamplerCustomAdvanced")
    api["902"] = {"class_type": "GpuCheckPeak", "inputs": {"samples": [sampled, 0], "tag": tag}}
    return prune(api, ["900", "902"])


def peaks(workdir: Path) -> dict:
    log = workdir / "output" / "gpu_check_peak.jsonl"
    rows = [json.loads(x) for x in log.read_text().splitlines()] if log.is_file() else []
    return {r["tag"]: r for r in rows}


def compare(ctx: Ctx, a: Path, b: Path) -> dict:
    return json.loads(bench.run_py(ctx.python, COMPARE, a, b, timeout=300))


def prompt(server, api: dict, tag: str) -> dict:
    from h3kit.comfyui import client

    ran = client.run_workflow(server, api, timeout=900)
    if not ran["ran"]:
        raise Skip(f"the {tag} prompt failed in ComfyUI: {ran['message']} ... {server.log_tail(600)}")
    return {"seconds": ran["seconds"], "latent": str(bench.latest_latent(server.workdir, f"{tag}/x")),
            "peak": peaks(server.workdir).get(tag), "peak_rss_bytes": ran["peak_rss_bytes"],
            "call_seconds": [round(s, 4) for s in bench.call_times(server.workdir, tag)]}


# --- the real-width DiT: ComfyUI holding it vs h3kit's streamed loader --------------------------------------

def write_weights(ctx: Ctx, script: str, path: Path, *argv: str) -> dict:
    """scripts/make_h3_dit.py or make_h3_te.py in ComfyUI's Python; kept when a file of the same call is there."""
    stamp = path.with_suffix(".made.json")
    call = [script, *argv]
    if path.is_file() and stamp.is_file() and json.loads(stamp.read_text())["call"] == call:
        return json.loads(stamp.read_text())["made"]
    path.parent.mkdir(parents=True, exist_ok=True)
    done = subprocess.run([str(ctx.python), str(REPO / "scripts" / script), "--out", str(path), *argv, "--json"],
                          capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        raise Skip(f"{script} could not write the weights: {done.stderr.strip()[-400:]}")
    made = json.loads(done.stdout.strip().splitlines()[-1])
    stamp.write_text(json.dumps({"call": call, "made": made}), encoding="utf-8")
    return made


def dit_file(ctx: Ctx) -> tuple[Path, dict]:
    comfy = ensure_comfy(ctx)
    blocks = ctx.sizes["dit_blocks"]
    path = comfy / "models" / "diffusion_models" / DIT_FILE.format(blocks=blocks)
    # text width 48: the tiny text encoder's, so only the DiT is at the real width
    return path, write_weights(ctx, "make_h3_dit.py", path, "--blocks", str(blocks), "--text-dim", "48")


def dit_run(ctx: Ctx, dit: str, tag: str, stream: dict | None) -> dict:
    """One loader in its own ComfyUI process: a warm-up prompt (loads the DiT), then a timed one."""
    from h3kit.comfyui import client

    steps = ctx.sizes["steps"]
    shutil.rmtree(ctx.work / f"dit-{tag}", ignore_errors=True)  # an earlier run's call times must not count
    with client.ComfyServer(ctx.comfy, ctx.python, ctx.launch(), ctx.work / f"dit-{tag}", env=ctx.proc_env()) as server:
        server.start(timeout=300)
        warm = prompt(server, check_graph(dit, stream, 1, 1, f"{tag}_warm"), f"{tag}_warm")
        timed = prompt(server, check_graph(dit, stream, steps, 3, tag), tag)
    calls = timed["call_seconds"]
    if not calls:
        raise Skip(f"the {tag} prompt ran but no model call was timed")
    return {"loader": "H3kitStreamedDiTLoader" if stream else "UNETLoader", "first_prompt_seconds": warm["seconds"],
            "seconds_per_step": min(calls), "median_seconds_per_step": statistics.median(calls),
            "calls": calls, "load_peak": warm["peak"], "sample_peak": timed["peak"],
            "peak_rss_bytes": timed["peak_rss_bytes"], "latent": timed["latent"],
            "stats": bench._stats(ctx.comfy) if stream else None}


def dit_stream(ctx: Ctx) -> tuple[str, dict]:
    path, made = dit_file(ctx)
    runs = {"stock": dit_run(ctx, path.name, "stock", None), "streamed": dit_run(ctx, path.name, "streamed", STREAM)}
    same = compare(ctx, Path(runs["stock"]["latent"]), Path(runs["streamed"]["latent"]))
    st = runs["streamed"]["stats"] or {}
    figures = {"file": {"bytes": made["bytes"], "blocks": made["blocks"], "block_bytes": made["block_bytes"],
                        "dims": made["dims"]}, "canvas": [*CANVAS, FRAMES], "stream": STREAM, "runs": runs,
               "latents": same, "seconds_per_step_ratio": round(runs["streamed"]["seconds_per_step"] /
                                                                 max(1e-9, runs["stock"]["seconds_per_step"]), 3),
               "read_mode": st.get("read_mode"), "blocks_read": st.get("blocks_read"),
               "io_wait_fraction": bench._fraction(st, "wait_s")}
    line = (f"s/step stock {runs['stock']['seconds_per_step']:.3f}, streamed {runs['streamed']['seconds_per_step']:.3f} "
            f"({figures['seconds_per_step_ratio']}x, read {st.get('read_mode')}); peak "
            f"{_peak_text(runs['stock'])} -> {_peak_text(runs['streamed'])}; latents "
            + ("identical" if same["identical"] else f"max rel diff {same['max_rel']:.2e}"))
    return line, figures


def _peak_text(run: dict) -> str:
    p = run.get("sample_peak") or {}
    if p.get("kind") == "cuda_used_bytes":
        return f"GPU {gib(p['peak_bytes'])}"
    return f"RSS {gib(run.get('peak_rss_bytes'))}"


# --- the streamed text encoder at the real width ------------------------------------------------------------

def te_stream(ctx: Ctx) -> tuple[str, dict]:
    comfy = ensure_comfy(ctx)
    layers = ctx.sizes["te_layers"]
    path = comfy / "models" / "text_encoders" / TE_FILE.format(layers=layers)
    made = write_weights(ctx, "make_h3_te.py", path, "--layers", str(layers))
    done = subprocess.run([str(ctx.python), str(HERE / "te_probe.py"), str(comfy), ctx.device, path.name, "1"],
                          capture_output=True, text=True, timeout=900, env=ctx.proc_env())
    if done.returncode != 0:
        raise Skip(f"the text-encoder probe failed: {done.stderr.strip()[-600:]}")
    got = json.loads(done.stdout.strip().splitlines()[-1])
    stats = got.pop("stats") or {}
    figures = dict(got, file={"bytes": made["bytes"], "layers": made["layers"], "layer_bytes": made["layer_bytes"]},
                   stats={k: stats.get(k) for k in ("mode", "read_mode", "blocks_read", "bytes_read", "finished",
                                                     "wait_s", "run_s") if k in stats})
    s, t = got["stock"], got["streamed"]
    line = (f"{got['device']}: load+encode stock {s['load_seconds'] + s['encode_seconds']:.1f} s, streamed "
            f"{t['load_seconds'] + t['encode_seconds']:.1f} s; peak over start {gib(s['peak_over_start_bytes'])} -> "
            f"{gib(t['peak_over_start_bytes'])}; conditioning " +
            ("identical" if got["equal"] else f"max rel diff {got['max_rel']:.2e}"))
    return line, figures


# --- the GGUF loaders against their safetensors runs --------------------------------------------------------

GGUF_RUNS = {  # tag: (DiT file, stream, DiT loader, text encoder (file, loader) or None, seed)
    "dit_deq": ("gc_q8_0_deq.safetensors", None, "UNETLoader", None, 3),
    "dit_gguf": ("gc_q8_0.gguf", None, "H3kitUnetLoaderGGUF", None, 3),
    "dit_gguf_streamed": ("gc_q8_0.gguf", STREAM, "UNETLoader", None, 3),
    "te_deq": ("gc_q8_0_orig.safetensors", None, "UNETLoader", ("gcte_deq.safetensors", "CLIPLoader"), 4),
    "te_gguf": ("gc_q8_0_orig.safetensors", None, "UNETLoader", ("gcte.gguf", "H3kitCLIPLoaderGGUF"), 4),
}
GGUF_PAIRS = {"dit_gguf": "dit_deq", "dit_gguf_streamed": "dit_deq", "te_gguf": "te_deq"}


def gguf_files(ctx: Ctx, comfy: Path) -> None:
    make = REPO / "tests" / "support" / "comfy_h3" / "make_tiny_gguf.py"
    env = ctx.proc_env()
    for kind, folder, name, extra in (("dit", "diffusion_models", "gc_q8_0", ["--dit", json.dumps({"num_layers": 4})]),
                                      ("te", "text_encoders", "gcte", [])):
        if (comfy / "models" / folder / f"{name}.gguf").is_file():
            continue
        done = subprocess.run([str(ctx.python), str(make), kind, "--qtype", "Q8_0", "--out",
                               str(comfy / "models" / folder), "--name", name, *extra],
                              capture_output=True, text=True, timeout=600, env=env)
        if done.returncode != 0:
            raise Skip(f"make_tiny_gguf.py {kind} failed (gguf-py importable in ComfyUI's Python?): "
                       f"{done.stderr.strip()[-400:]}")


def gguf(ctx: Ctx) -> tuple[str, dict]:
    from h3kit.comfyui import client

    comfy = ensure_comfy(ctx)
    if not (comfy / "custom_nodes" / "ComfyUI-GGUF").is_dir():
        raise Skip("ComfyUI-GGUF is not there (no --gguf-pack / H3KIT_COMFYUI_GGUF_GIT)")
    gguf_files(ctx, comfy)
    runs = {}
    shutil.rmtree(ctx.work / "gguf", ignore_errors=True)
    with client.ComfyServer(comfy, ctx.python, ctx.launch(), ctx.work / "gguf", env=ctx.proc_env()) as server:
        server.start(timeout=300)
        for tag, (dit, stream, loader, te, seed) in GGUF_RUNS.items():
            runs[tag] = prompt(server, check_graph(dit, stream, 2, seed, tag, dit_loader=loader, text_encoder=te), tag)
    figures = {"qtype": "Q8_0", "sizes": "tiny random-weight files (make_tiny_gguf.py: 4 DiT blocks of hidden 64)",
               "pairs": {g: dict(compare(ctx, Path(runs[s]["latent"]), Path(runs[g]["latent"])), against=s)
                         for g, s in GGUF_PAIRS.items()},
               "peaks": {t: r["peak"] for t, r in runs.items()}}
    line = ", ".join(f"{g} vs {p['against']}: max rel {p['max_rel']:.1e}" for g, p in figures["pairs"].items())
    return line, figures


# --- calibration's estimate against the measured step -------------------------------------------------------

def calibrate(ctx: Ctx) -> tuple[str, dict]:
    """`h3kit calibrate --quick` on the check's ComfyUI copy, the plan's bf16 DiT file being the real-width file
    the DiT check measured (a hard link under the plan's name; sizes calibrate_dit "tiny": the tests' small DiT),
    at the DiT check's canvas, frames and steps."""
    import comfy_h3
    from h3kit.data import catalog as catalog_mod

    comfy = ensure_comfy(ctx)
    weight = catalog_mod.load().weight("h3-dit-pruned-bf16").file
    target = comfy / "models" / weight.folder / weight.name
    target.parent.mkdir(parents=True, exist_ok=True)
    target.unlink(missing_ok=True)
    if ctx.sizes["calibrate_dit"] == "real":
        path, made = dit_file(ctx)
        os.link(path, target)
        blocks = made["blocks"]
    else:
        comfy_h3.write_tiny_files(comfy, ctx.python, {"dit": f"{weight.folder}/{weight.name}"},
                                  comfy_h3.CALIBRATION_DIT)
        blocks = comfy_h3.CALIBRATION_DIT["num_layers"]
    (ctx.home / "config.yaml").write_text(
        "overrides:\n  dit_weights: h3-dit-pruned-bf16\n"
        f"  canvas: [{CANVAS[0]}, {CANVAS[1]}]\n  frames: {FRAMES}\n  steps: {ctx.sizes['steps']}\n", encoding="utf-8")
    try:
        doc = cli(ctx, "calibrate", "--quick", "--comfyui", str(comfy), timeout=900)
    finally:
        (ctx.home / "config.yaml").unlink(missing_ok=True)  # the later checks plan without these overrides
    est, h3 = doc.get("estimates") or {}, doc.get("h3_model") or {}
    step = (est.get("time") or {}).get("seconds_per_step")
    figures = {"h3_model": {k: h3.get(k) for k in ("status", "arch", "device", "dtype", "why")},
               "estimate": {"kind": est.get("kind"), "seconds_per_step": step, "time": est.get("time"),
                            "timing_source": (est.get("timing") or {}).get("source"), "memory": est.get("memory")},
               "duration_seconds": doc.get("duration_seconds"), "file_blocks": blocks,
               "file": ctx.sizes["calibrate_dit"]}
    measured = ((ctx.results.get("dit_stream") or {}).get("figures") or {}).get("runs", {}).get("stock", {})
    figures["measured_seconds_per_step"] = measured.get("seconds_per_step")
    if ctx.sizes["calibrate_dit"] != "real":
        figures["estimate_over_measured"] = None
        figures["why_no_ratio"] = "calibrated on the small DiT, measured on the real-width one (sizes.note)"
    elif step and measured.get("seconds_per_step"):
        figures["estimate_over_measured"] = round(step / measured["seconds_per_step"], 3)
    arch = h3.get("arch") or {}
    line = f"model {h3.get('status')} ({arch.get('hidden')} x {arch.get('blocks_total')}); estimate " + (
        "-" if step is None else f"{step:.3f}") + " s/step"
    if figures.get("estimate_over_measured") is not None:
        line += f" vs measured {measured['seconds_per_step']:.3f} ({figures['estimate_over_measured']}x)"
    elif figures.get("why_no_ratio"):
        line += f" (no ratio: {figures['why_no_ratio']})"
    return line, figures


# --- the planner's memory figures beside the measured peaks -------------------------------------------------

def _planner_inputs(ctx: Ctx, dit_bytes: int, blocks: int):
    from dataclasses import replace

    from h3kit.calibrate.estimates import _memory_settings
    from h3kit.data import catalog as catalog_mod
    from h3kit.data.fingerprint import Fingerprint
    from h3kit.data.plan_doc import Plan
    from h3kit.plan.budget import make_budget

    ctx.figures("plan")
    fp = Fingerprint.from_json(json.loads((ctx.work / "fingerprint.json").read_text()))
    plan_doc = Plan.from_json(json.loads((ctx.work / "plan.json").read_text()))
    cat = catalog_mod.load()
    cat = replace(cat, architecture=replace(cat.architecture, blocks=blocks))
    settings = _memory_settings(plan_doc, fp)
    budget = make_budget(cat, fp, settings, cpu=ctx.device == "cpu")
    return cat, settings, budget


def planner_peaks(ctx: Ctx, dit: dict, te: dict | None) -> dict:
    """memory_estimate's sample phase for the DiT check's run (held, and streamed as STREAM: nothing resident) and
    the text encoder's encode phase (held, streamed), each without ComfyUI's own process (measured peaks are
    over the process's start), for this machine's budget and the plan's settings."""
    from dataclasses import replace

    from h3kit.plan import te_stream as te_plan
    from h3kit.plan.budget import Choice, Measured, memory_estimate

    cat, settings, budget = _planner_inputs(ctx, dit["file"]["bytes"], dit["file"]["blocks"])
    models = ctx.comfy / "models"

    def sized(kind, rel, fmt=None):
        pool = getattr(cat, kind)
        w = next((w for w in pool if fmt is None or w.format == fmt), pool[0])
        return replace(w, bytes=(models / rel).stat().st_size)

    dit_w = replace(cat.weight("h3-dit-pruned-bf16"), bytes=dit["file"]["bytes"])
    choice = Choice(dit_w, sized("text_encoder", bench.TINY["text_encoder"]), sized("vae", bench.TINY["taeh3"]),
                    sized("audio_vae", bench.TINY["audio_vae"]), CANVAS, FRAMES)
    none = Measured(process_bytes=0)
    held = memory_estimate(cat, budget, settings, choice, None, none)
    streamed = memory_estimate(cat, budget, settings.but(preload_bytes=0, page_cache="use"), choice,
                               STREAM["prefetch_blocks"], none)
    out = {"dit_held": held.phases["sample"], "dit_streamed": streamed.phases["sample"],
           "budget": {"gpu_bytes": budget.gpu_bytes, "ram_bytes": budget.ram_bytes, "backend": budget.backend},
           "dit_streamed_ring_bytes": streamed.ring, "dit_block_bytes": streamed.block}
    if te is not None:
        te_w = replace(next((w for w in cat.text_encoder if w.format == "bf16"), cat.text_encoder[0]),
                       bytes=te["file"]["bytes"])
        for tag, phase in (("te_held", te_plan.held_encode_phase), ("te_streamed", te_plan.encode_phase)):
            g, r = phase(cat, budget, te_w, 0)
            out[tag] = {"gpu_bytes": g, "ram_bytes": r}
    return out


def _measured_over_start(run: dict | None) -> tuple[int | None, str | None]:
    """(bytes over the process's start, what) of a DiT run's sampling prompt (the peak node's window)."""
    p = (run or {}).get("sample_peak") or {}
    if p.get("peak_bytes") is None or p.get("baseline_bytes") is None:
        return None, None
    return p["peak_bytes"] - p["baseline_bytes"], p.get("kind")


def plan_vs_measured(ctx: Ctx) -> tuple[str, dict]:
    dit = ctx.figures("dit_stream")
    te = (ctx.results.get("te_stream") or {}).get("figures") if (ctx.results.get("te_stream") or {}).get(
        "status") == "ok" else None
    planned = planner_peaks(ctx, dit, te)
    key = "gpu_bytes" if ctx.device == "cuda" else "ram_bytes"
    rows = {}
    for tag, run in (("dit_held", dit["runs"]["stock"]), ("dit_streamed", dit["runs"]["streamed"])):
        got, kind = _measured_over_start(run)
        rows[tag] = {"planned_bytes": planned[tag][key], "measured_bytes": got, "measured_as": kind}
    for tag, side in (("te_held", "stock"), ("te_streamed", "streamed")):
        if te is None:
            rows[tag] = {"planned_bytes": None, "measured_bytes": None,
                         "why": f"the te_stream check has no figures ({(ctx.results.get('te_stream') or {}).get('reason')})"}
            continue
        rows[tag] = {"planned_bytes": planned[tag][key], "measured_bytes": te[side]["peak_over_start_bytes"],
                     "measured_as": "cuda_used_bytes" if ctx.device == "cuda" else "rss_bytes"}
    for row in rows.values():
        if row.get("planned_bytes") and row.get("measured_bytes") is not None:
            row["measured_over_planned"] = round(row["measured_bytes"] / row["planned_bytes"], 3)
    figures = {"memory": key, "rows": rows, "planner": planned,
               "note": "planned: plan/budget.py memory_estimate's sample phase (DiT) and plan/te_stream.py's encode "
                       "phase (text encoder) for these files and this machine's budget, without ComfyUI's own process; "
                       "measured: the peak over the process's start (the peak node's baseline, the probe's start)"}
    line = ", ".join(f"{t} {gib(r['measured_bytes'])}/{gib(r['planned_bytes'])}"
                     + (f" ({r['measured_over_planned']}x)" if "measured_over_planned" in r else "")
                     for t, r in rows.items())
    return f"measured/planned {key.split('_')[0].upper()}: {line}", figures
