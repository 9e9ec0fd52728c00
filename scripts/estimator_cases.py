"""The installed-workflow check of scripts/validate_estimator.py: `h3kit calibrate --quick` against the workflow
the pack installed, for a DiT that fits the page cache and one that does not.

For each case, in one private hard-linked copy of the real ComfyUI (tests/comfy_h3, never written to):
a random-weight DiT at H3's real block width (scripts/make_h3_dit.py: hidden 5376, 56 heads of 128, FFN
14336; `blocks` deep) under the plan's DiT name, the tiny text encoder and VAEs under theirs, then, as a
user would, `h3kit install --skip-calibrate --no-models`, `h3kit calibrate --quick` (`calibrations`
times: the spread of the fit), and the installed text-to-video workflow (the pack's streamed loader) at
the same canvas, STEPS sampling steps, twice: the first run is cold (the file just written was dropped
from the page cache), the second warm. Seconds per step measured: the warm run's sampler bar
(ComfyUI's tqdm), which covers the STEPS steps and nothing else. The plan is this machine's (its real
RAM), so the page-cache case is the one a user here would be in.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
STEPS = 3
CANVAS, FRAMES = (64, 64), 22  # the smallest canvas and clip the plan takes: a real-width step in tens of seconds
TEXT_DIM = 48  # the tiny text encoder's width (tests/support/comfy_h3/make_tiny_h3.py TE hidden_size)
# "past the cache": the same 4 blocks read past the page cache (config page_cache: bypass), the way a DiT larger
# than RAM is read, so the bypass path is checked at the cost of a 4-block file (#45: it was 0.63 there)
CASES = [{"case": "fits the page cache", "slug": "fits", "blocks": 4},
         {"case": "4 blocks read past the page cache", "slug": "bypass", "blocks": 4, "page_cache": "bypass"},
         {"case": "does not fit the page cache", "slug": "nofit", "blocks": 30}]
CONFIG = f"""overrides:
  dit_weights: h3-dit-pruned-bf16
  text_encoder_weights: h3-te-qwen3vl32b-int8_convrot
  vae_weights: h3-vae-video-fp16
  stream_dit: "on"
  preset: balanced  # no LoRA: the tiny files have none, and the DiT's streaming is what this measures
  canvas: [{CANVAS[0]}, {CANVAS[1]}]
  frames: {FRAMES}
  steps: {STEPS}
"""
CLI_TIMEOUT = 3600


def say(msg: str) -> None:
    print(f"validate_estimator: {msg}", file=sys.stderr, flush=True)


def h3kit(home: Path, *args: str, timeout: float = CLI_TIMEOUT, ok=(0,)) -> dict:
    """Run the h3kit CLI of this checkout with `--json`; its document (RuntimeError with stderr when it fails)."""
    env = {**os.environ, "H3KIT_HOME": str(home), "PYTHONPATH": str(ROOT / "installer")}
    done = subprocess.run([sys.executable, "-m", "h3kit", *args, "--json"], capture_output=True, text=True,
                          timeout=timeout, env=env)
    if done.returncode not in ok:
        raise RuntimeError(f"h3kit {args[0]} exited {done.returncode}: {done.stderr[-1500:]}")
    return json.loads(done.stdout) if done.stdout.strip() else {}


def write_dit(python: Path, path: Path, blocks: int) -> dict:
    """The random real-width DiT (make_h3_dit.py, block by block, dropped from the page cache once written)."""
    if path.exists():
        path.unlink()
    done = subprocess.run([str(python), str(ROOT / "scripts" / "make_h3_dit.py"), "--out", str(path), "--blocks",
                           str(blocks), "--text-dim", str(TEXT_DIM), "--json"], capture_output=True, text=True,
                          timeout=CLI_TIMEOUT)
    if done.returncode != 0:
        raise RuntimeError(f"make_h3_dit.py exited {done.returncode}: {done.stderr[-1500:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def part_names(plan: dict) -> dict:
    """{part: path under models/} of the plan's files (tests/comfy_h3 PART_OF names the parts)."""
    sys.path.insert(0, str(ROOT / "tests" / "support"))
    from comfy_h3 import PART_OF

    from h3kit.data import catalog as catalog_mod

    cat = catalog_mod.load()
    files = {part: cat.weight(plan["settings"][key]).file for key, part in PART_OF.items()}
    return {part: f"{f.folder}/{f.name}" for part, f in files.items()}


def run_installed(comfy: Path, python: Path, args: list, work: Path) -> dict:
    """The installed text-to-video workflow at STEPS steps, cold then warm: seconds per step from the warm bar."""
    from h3kit.calibrate.with_model import sampler_rates, timed_run, with_steps
    from h3kit.comfyui import workflows
    from h3kit.comfyui.client import ComfyServer

    api = comfy / "custom_nodes" / "ComfyUI-h3kit" / workflows.API_DIR / f"{workflows.NAMES['t2v']}.json"
    workflow = json.loads(api.read_text(encoding="utf-8"))
    runs = []
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    with ComfyServer(comfy, python, list(args), work, env=env) as server:
        server.start()
        for seed in (11, 12):
            r = timed_run(server, with_steps(workflow, STEPS, seed), CLI_TIMEOUT)
            if not r["ran"]:
                raise RuntimeError(f"the installed workflow failed: {r['message']}; {server.log_tail(1500)}")
            runs.append(r["seconds"])
        bars = [rate for n, rate in sampler_rates(server.log_tail(400_000)) if n == STEPS]
        peak = server.peak_rss_bytes
    if len(bars) < 2:
        raise RuntimeError(f"found {len(bars)} finished {STEPS}-step sampler bars in ComfyUI's log, not 2")
    stats_file = comfy / "custom_nodes" / "ComfyUI-h3kit" / "h3kit_streaming_stats.json"
    stats = json.loads(stats_file.read_text(encoding="utf-8")) if stats_file.is_file() else {}
    loader = next((n["inputs"] for n in workflow.values() if n.get("class_type") == "H3kitStreamedDiTLoader"), {})
    return {"seconds_per_step": bars[-1], "cold_seconds_per_step": bars[0], "run_seconds": runs,
            "peak_rss_bytes": peak, "workflow": str(api), "steps": STEPS,
            # what the installed workflow asked of the loader, and what the loader did (its stats file)
            "page_cache_input": loader.get("page_cache"), "read_mode": stats.get("read_mode"),
            "page_cache": stats.get("page_cache")}


def calibration_figures(doc: dict) -> dict:
    """What one `calibrate --quick` says: seconds per step, its fit, its page-cache case."""
    est = doc.get("estimates") or {}
    fit = (doc.get("h3_model") or {}).get("fit") or {}
    st = doc.get("streaming") or {}
    t = est.get("time") or {}
    rows = est.get("tokens") or 0
    per_block = None if not fit else (fit.get("block_fixed_s") or 0.0) + fit.get("block_s_per_token", 0.0) * rows \
        + fit.get("block_s_per_token2", 0.0) * rows ** 2
    return {"seconds_per_step": est.get("seconds_per_step"), "kind": est.get("kind"), "tokens": est.get("tokens"),
            "block_seconds": per_block,  # one block's compute at the workflow's rows
            "block_s_per_token": fit.get("block_s_per_token"), "step_fixed_s": fit.get("step_fixed_s"),
            "block_fixed_s": fit.get("block_fixed_s"), "call_fixed_s": fit.get("call_fixed_s"),
            "pass_overhead": t.get("pass_overhead"), "page_cache": st.get("page_cache"),
            # the installed loader's pass timed whole (calibrate.streamed_pass), and the share composed from parts
            "pass_measured": st.get("pass_measured"), "pass_overhead_composed": st.get("pass_overhead_composed"),
            "io_wait_fraction": st.get("io_wait_fraction"), "disk_gb_per_s": (doc.get("disk") or {}).get("gb_per_s"),
            "direct_read_bytes_per_s": st.get("direct_read_bytes_per_s"),
            "peak_rss_bytes": est.get("peak_ram_bytes"), "duration_seconds": doc.get("duration_seconds"),
            # what the fit was made from, so a test can refit recorded runs (tests/fixtures/calibrate)
            "recorded": {k: (doc.get("h3_model") or {}).get(k) for k in ("points", "attention_points", "fit", "arch")}}


def spread_pct(values) -> float | None:
    """(max - min) / median in percent, over the runs that have the figure."""
    vals = [float(v) for v in values if isinstance(v, (int, float))]
    if len(vals) < 2 or statistics.median(vals) <= 0:
        return None
    return 100.0 * (max(vals) - min(vals)) / statistics.median(vals)


def run_case(real: Path, python: Path, root: Path, case: dict, calibrations: int, keep_dit: bool) -> dict:
    sys.path.insert(0, str(ROOT / "tests" / "support"))
    from comfy_h3 import make_test_comfyui, write_tiny_files

    comfy = root / f"ComfyUI-{case['slug']}"  # a new copy per case and run: each install starts from nothing
    shutil.rmtree(comfy, ignore_errors=True)
    make_test_comfyui(real, comfy)
    home = root / f"home-{case['slug']}"
    shutil.rmtree(home, ignore_errors=True)
    home.mkdir(parents=True)
    extra = f"  page_cache: {case['page_cache']}\n" if case.get("page_cache") else ""
    (home / "config.yaml").write_text(CONFIG + extra, encoding="utf-8")
    plan = h3kit(home, "plan")
    names = part_names(plan)
    write_tiny_files(comfy, python, {k: v for k, v in names.items() if k != "dit"})
    dit_path = comfy / "models" / names["dit"]
    t0 = time.monotonic()
    made = write_dit(python, dit_path, case["blocks"])
    say(f"{case['case']}: wrote {made['bytes'] / 1e9:.1f} GB ({case['blocks']} blocks) in {time.monotonic() - t0:.0f} s")
    try:
        # exit 3: installed, but the real H3 (its text encoder alone is 13-27 GB) is below this machine; the DiT's
        # streaming, which is all this measures, is planned for this machine's real RAM all the same
        h3kit(home, "install", "--comfyui", str(comfy), "--yes", "--skip-calibrate", "--no-models", ok=(0, 3))
        runs = []
        for i in range(calibrations):
            say(f"{case['case']}: h3kit calibrate --quick ({i + 1}/{calibrations}) ...")
            runs.append(calibration_figures(h3kit(home, "calibrate", "--quick", "--comfyui", str(comfy))))
            say(f"{case['case']}: estimated {json.dumps(runs[-1])}")
        say(f"{case['case']}: the installed workflow, {STEPS} steps, cold then warm ...")
        measured = run_installed(comfy, python, plan["settings"].get("comfyui_args") or ["--cpu"],
                                 root / f"run-{case['slug']}")
        say(f"{case['case']}: measured {json.dumps(measured)}")
    finally:
        if not keep_dit:
            dit_path.unlink(missing_ok=True)
    est = runs[-1]["seconds_per_step"]
    return {"case": case["case"], "slug": case["slug"], "blocks": case["blocks"], "dit_bytes": made["bytes"], "canvas": list(CANVAS),
            "frames": FRAMES, "calibrations": runs, "estimated": runs[-1], "measured": measured,
            "seconds_per_step_pct": 100.0 * (est - measured["seconds_per_step"]) / measured["seconds_per_step"],
            "spread_pct": {k: spread_pct(r[k] for r in runs)
                           for k in ("seconds_per_step", "block_seconds", "step_fixed_s", "block_s_per_token")}}


def print_table(table: list[dict]) -> None:
    print("| DiT (random weights, H3's block width) | page cache here | canvas | s/step calibrate --quick | "
          "s/step installed workflow | diff | share streaming adds: timed whole (composed) | "
          "spread of the quick runs (s/step, per block, fixed) |")
    print("|---|---|---|---|---|---|---|---|")
    for r in table:
        e, m, sp = r["estimated"], r["measured"], r["spread_pct"]
        pc = (e.get("page_cache") or {})
        spread = ", ".join("-" if sp[k] is None else f"{sp[k]:.0f}%"
                           for k in ("seconds_per_step", "block_seconds", "step_fixed_s"))
        print(f"| {r['blocks']} blocks, {r['dit_bytes'] / 1e9:.1f} GB | {pc.get('case', '-')} "
              f"(room {pc.get('room_bytes', 0) / 1e9:.1f} GB; loader {m.get('read_mode')}, "
              f"page cache {m.get('page_cache')}) | {r['canvas'][0]}x{r['canvas'][1]}x{r['frames']} | "
              f"{e['seconds_per_step']:.2f} | {m['seconds_per_step']:.2f} | {r['seconds_per_step_pct']:+.0f}% | "
              f"{_share(e.get('pass_overhead'))} ({_share(e.get('pass_overhead_composed'))}) | "
              f"{spread} ({len(r['calibrations'])} runs) |")


def _share(x) -> str:
    return "-" if not isinstance(x, (int, float)) else f"{100 * x:+.0f}%"
