#!/usr/bin/env python3
"""The GPU check's run: h3kit's CUDA paths, one after the other, each within its own time limit.

    python scripts/gpu_check/run.py --comfyui DIR --out DIR [--cpu] [--gguf-pack DIR] [--started EPOCH]

Run it through scripts/gpu_check.sh (which makes the environment on the card).
With a Python where h3kit imports; DIR/venv is ComfyUI's Python. The checks
(scripts/gpu_check/checks.py), in order: fingerprint, plan, format_probe,
dit_stream, te_stream, gguf, calibrate, plan_vs_measured. Each prints one line
and gets a record: ok with its figures, or failed / timeout / not_run with
its reason. The whole run keeps to BUDGET_S from --started (the shell's start,
so the environment's setup counts): a check gets what is left when less than
its own limit is, and none starts with under MIN_START_S left.

Writes gpu_check.json (schema h3kit.gpu_check/1) and gpu_check.md to --out.
Exit 0 when every check is ok, 4 when one is not (its reason is in both
files), 2 for bad arguments, 3 when ComfyUI is not there.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import sys
import tempfile
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import checks  # noqa: E402
import report  # noqa: E402

# name: (limit on the card, limit on this 2-core CPU), seconds
LIMITS = {"fingerprint": (60, 90), "plan": (60, 90), "format_probe": (150, 240), "dit_stream": (180, 420),
          "te_stream": (120, 300), "gguf": (120, 240), "calibrate": (150, 300), "plan_vs_measured": (30, 60)}
ORDER = list(LIMITS)
BUDGET_S = {"cuda": 480, "cpu": 900}  # the card: 8 minutes, setup included; here: 15
MIN_START_S = 15
LAST_RESERVE_S = 20
# The real block width at 4 blocks and the real encoder width on both devices; on this 2-core CPU (a real-width
# step takes about 25 s, calibration at the real width over 5 minutes) fewer of the slow parts, and it says so.
CANVAS = [*checks.CANVAS, checks.FRAMES]
SIZES = {
    "cuda": {"dit_blocks": 4, "te_layers": 4, "steps": 2, "calibrate_dit": "real", "canvas": CANVAS,
             "note": "the card's sizes"},
    "cpu": {"dit_blocks": 4, "te_layers": 4, "steps": 1, "calibrate_dit": "tiny", "canvas": CANVAS,
            "note": "smaller than on the card where the CPU would take too long: one timed DiT step (2 there; a "
                    "real-width step takes 10-25 s here) and calibration on the tests' 5 x 512 DiT "
                    "(comfy_h3.CALIBRATION_DIT; there the DiT check's real-width file, over 5 minutes here), so its "
                    "estimate is not set beside the measured step"},
}


class CheckTimeout(BaseException):
    """Raised in the main thread when a check's limit passes (BaseException: no `except Exception` keeps it)."""


def _alarm(signum, frame):
    raise CheckTimeout()


def run_one(ctx: checks.Ctx, name: str, limit: float) -> dict:
    """One check under its limit: {status, seconds, limit_s, line, figures, reason}."""
    fn = getattr(checks, name)
    t0 = time.monotonic()
    rec = {"status": "ok", "limit_s": round(limit), "line": "", "figures": None, "reason": None}
    signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, limit)
    try:
        rec["line"], rec["figures"] = fn(ctx)
    except CheckTimeout:
        rec.update(status="timeout", reason=f"it ran past its limit of {limit:.0f} s")
    except checks.Skip as exc:
        rec.update(status="failed", reason=str(exc))
    except Exception as exc:  # noqa: BLE001 -- a bug in one check must not cost the others their figures
        tb = traceback.format_exc().strip().splitlines()
        rec.update(status="failed", reason=f"{type(exc).__name__}: {exc} (at {tb[-3].strip() if len(tb) > 2 else ''})")
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
    rec["seconds"] = round(time.monotonic() - t0, 1)
    return rec


def say(name: str, rec: dict) -> None:
    text = rec["line"] if rec["status"] == "ok" else rec["reason"]
    print(f"[{rec['status']}] {name} ({rec['seconds']} s of {rec['limit_s']}): {text}", flush=True)


def run_all(ctx: checks.Ctx, deadline: float, names: list[str]) -> None:
    for name in names:
        own = LIMITS[name][0 if ctx.device == "cuda" else 1]
        # the planner's figures come last and take seconds: the checks before them leave that much
        left = deadline - time.monotonic() - (LAST_RESERVE_S if name != ORDER[-1] else 0)
        if left < MIN_START_S:
            rec = {"status": "not_run", "seconds": 0, "limit_s": own, "line": "", "figures": None,
                   "reason": f"the run's budget was spent before it ({left:.0f} s left, {MIN_START_S} s needed)"}
        else:
            rec = run_one(ctx, name, min(own, left))
        ctx.results[name] = rec
        say(name, rec)


def _arguments() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--comfyui", type=Path, required=True, help="a ComfyUI >= 0.31 tree with its venv/")
    ap.add_argument("--out", type=Path, required=True, help="where gpu_check.json and gpu_check.md go")
    ap.add_argument("--cpu", action="store_true", help="run on the CPU (ComfyUI with --cpu)")
    ap.add_argument("--gguf-pack", type=Path, help="a folder holding ComfyUI-GGUF's files")
    ap.add_argument("--work", type=Path, help="the work folder (default: a new one under the temporary folder)")
    ap.add_argument("--started", type=float, help="when the run began (epoch seconds; default now)")
    ap.add_argument("--env-json", type=Path, help="the setup's record (scripts/gpu_check/setup_env.py)")
    ap.add_argument("--only", help="comma-separated checks to run (the rest are recorded as not run)")
    return ap.parse_args()


def make_ctx(a: argparse.Namespace) -> checks.Ctx:
    import comfy_h3

    os.environ["H3KIT_COMFYUI_DIR"] = str(a.comfyui)
    real, python, why = comfy_h3.h3_comfyui()
    if real is None:
        print(f"gpu_check: {why}", file=sys.stderr)
        raise SystemExit(3)
    work = a.work or Path(tempfile.mkdtemp(prefix="h3kit-gpu-check-"))
    home = work / "home"
    shutil.rmtree(home, ignore_errors=True)  # no cache of an earlier run (the format probe's) may answer
    home.mkdir(parents=True, exist_ok=True)
    os.environ["H3KIT_HOME"] = str(home)  # every h3kit call of this run, in-process too, writes only there
    pack = a.gguf_pack if a.gguf_pack and a.gguf_pack.is_dir() else None
    return checks.Ctx(device="cpu" if a.cpu else "cuda", real=real, python=python, work=work, home=home,
                      gguf_pack=pack, sizes=dict(SIZES["cpu" if a.cpu else "cuda"]))


def main() -> int:
    a = _arguments()
    started = a.started or time.time()
    ctx = make_ctx(a)
    ctx.env.update(gguf_env(ctx))
    os.environ.update(ctx.env)  # the format probe's runner takes this process's environment
    deadline = time.monotonic() - (time.time() - started) + BUDGET_S[ctx.device]
    print(f"gpu_check: {ctx.device} run, work folder {ctx.work}, {deadline - time.monotonic():.0f} s left",
          flush=True)
    only = set(a.only.split(",")) if a.only else set(ORDER)
    for name in ORDER:
        if name not in only:
            ctx.results[name] = {"status": "not_run", "seconds": 0, "limit_s": 0, "line": "", "figures": None,
                                 "reason": "left out with --only"}
    run_all(ctx, deadline, [n for n in ORDER if n in only])
    ctx.results = {n: ctx.results[n] for n in ORDER}
    env = json.loads(a.env_json.read_text()) if a.env_json and a.env_json.is_file() else None
    doc = report.document(ctx, started, BUDGET_S[ctx.device], env, {"python": sys.version.split()[0],
                                                                  "machine": platform.machine()})
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / "gpu_check.json").write_text(json.dumps(doc, indent=1), encoding="utf-8")
    (a.out / "gpu_check.md").write_text(report.markdown(doc), encoding="utf-8")
    print(f"gpu_check: wrote {a.out / 'gpu_check.json'} and gpu_check.md ({doc['seconds']} s)", flush=True)
    return 0 if all(r["status"] == "ok" for r in doc["checks"].values()) else 4


def gguf_env(ctx: checks.Ctx) -> dict:
    """PYTHONPATH for ComfyUI's processes when its Python lacks gguf-py (the real tier's venv here): a folder it
    is installed into for this run, as the GGUF tests do; on the card the carried wheel is in the venv."""
    import subprocess

    if subprocess.run([str(ctx.python), "-c", "import gguf"], capture_output=True, timeout=120).returncode == 0:
        return {}
    target = ctx.work / "gguf-py"
    done = subprocess.run([str(ctx.python), "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(target),
                           "gguf"], capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        ctx.notes.append(f"gguf-py could not be installed for ComfyUI's Python: {done.stderr.strip()[-300:]}")
        return {}
    ctx.notes.append(f"gguf-py installed into {target} for ComfyUI's Python (PYTHONPATH)")
    return {"PYTHONPATH": str(target)}


if __name__ == "__main__":
    sys.exit(main())
