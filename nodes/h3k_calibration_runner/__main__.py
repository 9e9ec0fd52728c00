"""`python h3k_calibration_runner --bridge DIR --plan FILE --out FILE [--lib LIB] [--quick] [--progress FILE] [--comfyui DIR]`,
or `python h3k_calibration_runner format-probe --comfyui DIR --out FILE ...` (format_probe.py).

Runs every measurement (each guarded, so one failing part never stops the
others) and writes one JSON result to --out, atomically. With --comfyui
(ComfyUI's folder, this Python being ComfyUI's) it also builds and times
ComfyUI's own H3 transformer (`h3_model`, see h3_model.py); without it, or
without torch, that part says "skipped" and why. Run as a folder or
with `-m`; as a folder it imports its own package from the parent folder.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
import traceback
from pathlib import Path

if __package__:
    from . import _numpy
    from ._numpy import need_numpy
    from . import format_probe
    from .device import measure_device
    from .h3_model import measure_h3_model
    from .job import Job, Result
    from .measure import Progress
    from .native_bench import load_bridge, measure_native
    from .scaled_dit import run_scaled_dit
    from .streamed_pass import measure_streamed_pass
else:  # run as a path (python .../h3k_calibration_runner): import the package from its parent folder
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from h3k_calibration_runner import _numpy
    from h3k_calibration_runner import format_probe
    from h3k_calibration_runner._numpy import need_numpy
    from h3k_calibration_runner.device import measure_device
    from h3k_calibration_runner.h3_model import measure_h3_model
    from h3k_calibration_runner.job import Job, Result
    from h3k_calibration_runner.measure import Progress
    from h3k_calibration_runner.native_bench import load_bridge, measure_native
    from h3k_calibration_runner.scaled_dit import run_scaled_dit
    from h3k_calibration_runner.streamed_pass import measure_streamed_pass


def _runner_info() -> dict:
    return {"python": sys.executable, "python_version": platform.python_version(), "platform": platform.platform(),
            "numpy": getattr(_numpy.np, "__version__", None), "cpu_count": os.cpu_count()}


def _guard(what: str, fn, *args):
    """Run one measurement; a failure becomes {"status": "error", "reason": ...} and never stops the rest."""
    try:
        return fn(*args)
    except Exception as exc:
        return {"status": "error", "reason": f"{what} failed: {type(exc).__name__}: {exc}",
                "traceback": traceback.format_exc(limit=4)}


def _torch_version() -> str | None:
    try:
        import torch
    except Exception:
        return None
    return torch.__version__


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["format-probe"]:
        return format_probe.main(argv[1:])
    ap = argparse.ArgumentParser(prog="h3k_calibration_runner", description="h3kit calibration runner (self-contained)")
    ap.add_argument("--bridge", required=True, help="the folder of the native bridge package (h3k_native)")
    ap.add_argument("--lib", help="the native library, file or folder (else the bridge's own search order)")
    ap.add_argument("--plan", required=True, help="h3kit.plan/1 JSON, or h3kit's job JSON")
    ap.add_argument("--out", required=True, help="where to write the result JSON")
    ap.add_argument("--quick", action="store_true", help="a short run")
    ap.add_argument("--progress", help="append progress lines here")
    ap.add_argument("--comfyui", help="ComfyUI's folder: build and time its own H3 transformer (result key h3_model)")
    args = ap.parse_args(argv)
    progress = Progress(args.progress)
    need_numpy()
    with open(args.plan, encoding="utf-8") as f:
        job = Job.from_json(json.load(f))
    result: dict = {"runner": _runner_info(), "skipped": []}
    started = time.perf_counter()
    try:
        nat = load_bridge(args.bridge, args.lib)
    except Exception as exc:
        nat = None
        why = f"the native bridge could not be loaded ({type(exc).__name__}: {exc})"
        result["native"] = {"status": "error", "reason": why}
        result["skipped"].append(f"native kernels and the scaled DiT: {why}")
    if nat is None:
        result["inference"] = {"status": "skipped", "reason": "no native library"}
    else:
        result["native"] = _guard("native measurement", measure_native, nat, args.quick, progress)
        if job.scaled_dit is None:
            result["inference"] = {"status": "skipped", "reason": "the job names no scaled DiT shape"}
        else:
            result["inference"] = _guard("scaled DiT", run_scaled_dit, nat, job, args.quick, progress)
    device = _guard("device measurement", measure_device, job, args.quick, progress)
    result["device"], result["tiles"] = device if isinstance(device, tuple) else (device, [])
    if result["device"].get("status") != "measured":
        result["skipped"].append(f"device rates and tile sweep: {result['device'].get('reason')}")
    result["h3_model"] = _guard("H3 model measurement", measure_h3_model, job, args.comfyui, args.quick, progress)
    if result["h3_model"].get("status") != "measured":
        result["skipped"].append(f"ComfyUI's H3 model: {result['h3_model'].get('reason')}")
    if job.h3_streamed:  # after the held model is unloaded: the installed loader's pass, timed whole
        result["streamed_pass"] = _guard("streamed pass", measure_streamed_pass, job, args.comfyui, args.quick,
                                         progress, result["h3_model"].get("canvas"))
    result["runner"]["torch"] = _torch_version()
    result["seconds"] = time.perf_counter() - started
    tmp = args.out + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(Result.from_json(json.loads(json.dumps(result, default=str))).to_json(), f, indent=2)
    os.replace(tmp, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
