"""The `--published` check of scripts/validate_estimator.py: h3kit's plan against runs people published.

For each run in profiles/published_runs.yaml (h3kit.data.published_runs): a fingerprint of its machine
(`machine_fingerprint`; on a Mac the GPU share is Metal's working set of the RAM, as h3kit's own macOS
probe counts it), a plan with the run's setup forced the way config.yaml overrides would force it (canvas
and frames as both the limits and the workflow's opening values, steps, cfg, the files, the preset whose
LoRA the run used), and h3kit's estimate next to each published figure: seconds per step, seconds per clip,
peak GPU memory. Within 1.5x either way is PASS; beyond, the run's `reason` is printed (OFF), and a run
without one is a FAIL (exit 1).
"""

from __future__ import annotations

import json

LIMIT = 1.5  # an estimate within this factor of the published figure, either way, passes
VENDOR = {"cuda": "nvidia", "mps": "apple", "rocm": "amd", "xpu": "intel"}
FIGURES = (("seconds_per_step", "s/step"), ("seconds_per_clip", "s/clip"), ("peak_gpu_bytes", "peak GPU"))


def machine_fingerprint(m: dict):
    """A Fingerprint of a reported machine: backend, gpu, gpu_memory, ram (sizes), compute_capability,
    cuda_driver, unified_memory (Apple: gpu_memory may be left out; Metal's share of `ram` is taken)."""
    from h3kit.data.fingerprint import Fingerprint
    from h3kit.data.yamlio import parse_size
    from h3kit.fingerprint._darwin import usable_gpu_share

    ram = parse_size(m["ram"])
    mac = m["backend"] == "mps"
    unified = bool(m.get("unified_memory", mac))
    gpu_memory = parse_size(m["gpu_memory"]) if m.get("gpu_memory") is not None else usable_gpu_share(ram, None)[0]
    return Fingerprint.from_json({
        "schema": "h3kit.fingerprint/1",
        "os": {"system": "darwin" if mac else "linux", "release": "", "wsl": False},
        "arch": "arm64" if mac else "x86_64", "rosetta": False,
        "cpu": {"model": m["gpu"] if mac else "reported machine", "physical_cores": 8, "logical_cores": 16,
                "flags": ["neon"] if mac else ["avx2"]},
        "memory": {"total_bytes": ram, "available_bytes": ram, "swap_total_bytes": 0},
        "disks": [{"path": "/", "total_bytes": 2 * 10**12, "free_bytes": 10**12, "kind": "ssd"}],
        "gpus": [{"vendor": VENDOR.get(m["backend"], "nvidia"), "name": m["gpu"], "memory_total_bytes": gpu_memory,
                  "memory_free_bytes": None, "unified_memory": unified,
                  "driver_version": None if mac else "580.82.07", "cuda_driver_version": m.get("cuda_driver"),
                  "compute_capability": m.get("compute_capability"), "backend": m["backend"]}],
        "compilers": [], "probes": [],
    })


def _machine_dict(m) -> dict:
    return {"backend": m.backend, "gpu": m.gpu, "gpu_memory": m.gpu_memory_bytes, "ram": m.ram_bytes,
            "compute_capability": m.compute_capability, "cuda_driver": m.cuda_driver,
            "unified_memory": m.unified_memory}


def overrides(cat, setup) -> dict:
    """The config.yaml overrides that force this run's setup on the planner."""
    presets = cat.presets or {}
    preset = next((name for name, p in presets.items() if p.lora == setup.lora and (setup.lora or name == "balanced")),
                  None)
    out = {"dit_weights": setup.dit, "canvas": list(setup.canvas), "max_canvas": list(setup.canvas),
           "frames": setup.frames, "max_frames": setup.frames, "steps": setup.steps, "cfg": setup.cfg}
    if preset:
        out["preset"] = preset
    if setup.text_encoder:
        out["text_encoder_weights"] = setup.text_encoder
    if setup.vae:
        out["vae_weights"] = setup.vae
    return out


def _table_row(source: str) -> str:
    """The throughput row a table-made timing names ("table: <row> (...)")."""
    return source[len("table: "):].split(" (")[0] if source.startswith("table: ") else source


def plan_run(cat, profiles, run):
    from h3kit.data.config import Config
    from h3kit.data.settings import typed
    from h3kit.plan import make_plan

    config = Config(overrides=typed(overrides(cat, run.setup)))
    return make_plan(machine_fingerprint(_machine_dict(run.machine)), cat, profiles, config=config)


def verdict(ratio: float, reason: str | None) -> str:
    if 1.0 / LIMIT <= ratio <= LIMIT:
        return "PASS"
    return "OFF" if reason else "FAIL"


def rows() -> dict:
    """{"rows": one per (run, published figure), "not_found": the runs cited that could not be found}."""
    from h3kit.data import catalog as catalog_mod
    from h3kit.data import published_runs

    cat = catalog_mod.load()
    profiles = catalog_mod.load_profiles(cat)
    ids = {"dit": [w.id for w in cat.dit], "text_encoder": [w.id for w in cat.text_encoder],
           "vae": [w.id for w in cat.vae], "lora": [w.id for w in cat.lora]}
    table = published_runs.load(ids=ids)
    out = []
    for run in table.runs:
        plan = plan_run(cat, profiles, run)
        est = plan.estimates
        estimate = {"seconds_per_step": est.seconds_per_step, "seconds_per_clip": est.time.seconds_per_clip,
                    "peak_gpu_bytes": est.peak_gpu_bytes}
        for key, label in FIGURES:
            published = getattr(run.published, key)
            if published is None:
                continue
            value = estimate[key]
            ratio = value / published if value else None
            out.append({"id": run.id, "engine": run.setup.engine, "gpu": run.machine.gpu, "figure": key,
                        "label": label, "published": published, "estimate": value, "ratio": ratio,
                        "verdict": verdict(ratio, run.reason) if ratio else ("OFF" if run.reason else "FAIL"),
                        "reason": run.reason, "throughput_row": _table_row(str(plan.settings.timing.get("source", ""))),
                        "profile": plan.profile, "fits": plan.fits, "dit": run.setup.dit_file or run.setup.dit,
                        "canvas": list(run.setup.canvas), "frames": run.setup.frames, "steps": run.setup.steps,
                        "tokens": est.time.tokens, "source": run.source})
    missing = [{"id": n.id, "claim": n.claim, "cited_as": n.cited_as, "why": n.why} for n in table.not_found]
    return {"rows": out, "not_found": missing}


def _show(key: str, value) -> str:
    if value is None:
        return "-"
    return f"{value / 1e9:.1f} GB" if key == "peak_gpu_bytes" else f"{value:.1f} s"


def print_table(doc: dict) -> None:
    print("| run | GPU | canvas x frames, steps | figure | published | h3kit | h3kit / published | verdict |")
    print("|---|---|---|---|---|---|---|---|")
    for r in doc["rows"]:
        said = r["verdict"] + (f": {r['reason']}" if r["verdict"] == "OFF" else "")
        ratio = f"{r['ratio']:.2f}" if r["ratio"] else "-"
        print(f"| {r['id']} | {r['gpu']} ({r['throughput_row']}) | {r['canvas'][0]}x{r['canvas'][1]}x{r['frames']}, "
              f"{r['steps']} | {r['label']} | {_show(r['figure'], r['published'])} | {_show(r['figure'], r['estimate'])} "
              f"| {ratio} | {said} |")
    for n in doc["not_found"]:
        print(f"| {n['id']} | - | - | - | {n['claim']} | - | - | not found: {n['why']} ({n['cited_as']}) |")


def main(as_json: bool) -> int:
    doc = rows()
    if as_json:
        print(json.dumps(doc, indent=2))
    else:
        print_table(doc)
    failed = [r for r in doc["rows"] if r["verdict"] == "FAIL"]
    if failed:
        import sys

        print(f"validate_estimator: {len(failed)} estimate(s) more than {LIMIT:g}x off a published run with no "
              f"stated reason: {', '.join(sorted({r['id'] for r in failed}))}", file=sys.stderr)
        return 1
    return 0
