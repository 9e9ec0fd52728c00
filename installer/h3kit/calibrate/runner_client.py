"""Starting the bundled calibration runner in another Python and following its progress.

The runner (`h3kit.bundled.h3k_calibration_runner`) runs in ComfyUI's
interpreter, so the torch it measures is the torch ComfyUI uses; h3kit talks
to it only through files in a work folder: the job (`plan.json`, a typed
`Job` of the runner's own `job` module) in, the result (`result.json`, its
`Result`) and progress lines (`progress.jsonl`, `{"stage", "done", "total"}`
per line) out. The progress lines become
progress bars on stderr while the runner works.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import sys
import threading
from pathlib import Path

from h3kit import bundled
from h3kit.bundled.h3k_calibration_runner.job import Job, JobSettings, Result
from h3kit.bundled.h3k_calibration_runner.streamed_pass import WARM_CALLS
from h3kit.core.session import Session
from h3kit.core.subproc import run as run_process
from h3kit.data.plan_doc import Plan

RUNNER = bundled.CALIBRATION_RUNNER
BRIDGE = bundled.NATIVE_BRIDGE
# What a run takes on an idle machine besides its timed points: importing ComfyUI, building H3's blocks at
# full width, the native kernels, the device sweep, the VAE's and text encoder's layers (a 2-core CPU spent
# 32 s on all of ComfyUI's H3 in a quick run: tests/fixtures/report/comfy33-cpu-2core.json).
QUICK_SECONDS = 60
FULL_SECONDS = 300
POINT_CAP_S = {True: 4.0, False: 15.0}  # each timed point repeats its call until stable, up to this (h3_model.time_calls)
# The limit is for a machine busy with other work as well (install's own pip, a browser, a second run):
# a fixed 90 s cut a quick run off there, and the report fell back to a table estimate although nothing
# was wrong. Three times the idle estimate still ends a runner that hangs (in about four minutes for
# --quick, twenty for a full run, whose own work is five minutes and more).
BUSY_FACTOR = 3
SLOW_DISK = 100e6  # bytes/s: the cold call's read of the whole file, at a slow disk's rate
FLOOR_S = 90  # the old fixed limit: no job is cut off sooner than before


def not_measured(reason: str) -> Result:
    """The runner's result when it did not start, each part saying why."""
    return Result.not_run(reason)


def runner_limit(job: Job, quick: bool, comfyui: bool) -> tuple[int, str]:
    """(seconds to wait for the runner, what they are based on: a clause for the message); pure.

    The idle estimate is QUICK_SECONDS / FULL_SECONDS plus, when it builds H3 in a ComfyUI, each timed
    point's repeats (up to POINT_CAP_S) with its warm-up and last call (the table's seconds per call at
    that point, `h3_point_seconds` in the job); the limit is BUSY_FACTOR times that, rounded up to ten
    seconds, and never under FLOOR_S."""
    base = QUICK_SECONDS if quick else FULL_SECONDS
    points = list(job.h3_points) if comfyui else []
    calls = list(job.h3_point_seconds)
    idle = base + sum(POINT_CAP_S[quick] + 2 * (calls[i] if i < len(calls) else 0.0) for i in range(len(points)))
    streamed = dict(job.h3_streamed or {}) if comfyui else {}
    if streamed:  # the installed loader's pass: a cold call and the warm ones, the file read at a slow disk's rate
        file_bytes = os.path.getsize(streamed["dit_path"]) if os.path.isfile(streamed.get("dit_path") or "") else 0
        idle += (1 + WARM_CALLS[quick]) * float(streamed.get("expected_call_s") or 0.0) + file_bytes / SLOW_DISK
    limit = max(FLOOR_S, math.ceil(BUSY_FACTOR * idle / 10) * 10)
    timed = f" and {len(points)} timed points of ComfyUI's H3" if points else ""
    timed += " and the streamed pass" if streamed else ""
    basis = (f"{BUSY_FACTOR}x the {idle:.0f} s a {'quick' if quick else 'full'} run of this job takes on an idle "
             f"machine ({base} s of setup and measuring{timed}), for a busy one")
    return limit, basis


def h3_job(cat, plan: Plan, arch: dict, device: str, points: list[int] | None = None) -> Job:
    """The job's H3 part (with the plan's settings and budget): what the runner builds ComfyUI's H3 at.

    `h3_arch`: the file's full width and depth (`arch`, from its header or the catalog; `from` says
    which) with its parameter split and stored dtype; `h3_canvas`: the plan's workload, with the text
    rows the time formula counts (the catalog's `sequence.text_tokens`), so the runner measures the
    same sequence `plan.timing.estimate_clip` extrapolates to; `h3_device`: where the plan's ComfyUI
    computes (the runner asks ComfyUI for the dtype itself); `h3_points`: the token counts to time
    (estimates.measure_points), up to the plan's own rows where a call there is affordable."""
    from h3kit.calibrate.estimates import workload

    work = workload(plan, cat)
    keys = ("hidden", "heads", "head_dim", "ffn", "text_dim", "refiner_blocks", "blocks_total", "block_params",
            "other_params", "weight_dtype", "rope_inv_freq_len", "timestep_input_dim", "time_embed_hidden",
            "time_embed_dim", "adaln_curve_grid", "latents_dim", "audio_latents_dim", "from")
    seq = getattr(cat, "sequence", None)
    canvas = {"width": work["canvas"][0], "height": work["canvas"][1], "frames": work["frames"],
              "steps": work["steps"], "cfg": work["cfg"]}
    if seq is not None:
        canvas["text_tokens"] = int(seq.text_tokens)
    return Job(settings=JobSettings.from_json(plan.settings.to_json()), gpu_budget_bytes=plan.budget.gpu_bytes,
               h3_arch={k: arch[k] for k in keys if arch.get(k) is not None}, h3_canvas=canvas, h3_device=device,
               h3_points=tuple(points or ()))


def run_runner(ctx: Session, python: str, bridge: Path, lib: Path | None, job: Job, quick: bool,
               workdir: Path, comfyui: str | None = None) -> Result:
    """Start the runner in `python`, follow its progress file, return its result document.

    With `comfyui` (a ComfyUI folder) the runner imports that ComfyUI to build its H3 transformer.
    Its temporary files go to `workdir` too (TMPDIR), so a killed run leaves them where the next
    calibration cleans up."""
    plan_file = workdir / "plan.json"
    out_file = workdir / "result.json"
    progress_file = workdir / "progress.jsonl"
    plan_file.write_text(json.dumps(job.to_json()), encoding="utf-8")
    progress_file.write_text("", encoding="utf-8")
    argv = [python, str(RUNNER), "--bridge", str(bridge), "--plan", str(plan_file), "--out", str(out_file),
            "--progress", str(progress_file)]
    if lib:
        argv += ["--lib", str(lib)]
    if quick:
        argv.append("--quick")
    if comfyui:
        argv += ["--comfyui", str(comfyui)]
    timeout, basis = runner_limit(job, quick, bool(comfyui))
    env = {**os.environ, "TMPDIR": str(workdir), "TEMP": str(workdir), "TMP": str(workdir)}
    holder = {}
    worker = threading.Thread(target=lambda: holder.update(result=run_process(argv, timeout=timeout, env=env)),
                              daemon=True)
    worker.start()
    _follow(ctx, progress_file, worker)
    res = holder.get("result")
    if res is None or not out_file.exists():
        detail = res.detail if res is not None else "no result"
        limit = f"; the limit was {timeout} s, {basis}" if res is not None and res.status == "timeout" else ""
        return Result.failed(f"the runner did not finish ({detail}{limit}); "
                             f"stderr: {(res.stderr if res else '')[-600:]}")
    result = Result.from_json(json.loads(out_file.read_text(encoding="utf-8")))
    return result if result.stderr_tail is not None else dataclasses.replace(result, stderr_tail=res.stderr[-2000:])


def _progress_bar(total: int, desc: str):
    from tqdm import tqdm

    # stderr only (so --json keeps stdout one document); tqdm turns itself off when stderr is no terminal.
    return tqdm(total=total, desc=desc, unit="step", file=sys.stderr, leave=False, disable=None)


def _follow(ctx: Session, progress_file: Path, worker: threading.Thread) -> None:
    """Turn the runner's progress lines ({"stage", "done", "total"}) into tqdm bars until `worker` ends."""
    bars: dict[str, object] = {}
    seen = 0
    try:
        while True:
            alive = worker.is_alive()
            try:
                lines = progress_file.read_text(encoding="utf-8").splitlines()
            except OSError:
                lines = []
            for line in lines[seen:]:
                try:
                    ev = json.loads(line)
                except ValueError:
                    break  # a line still being written: read it again next time
                seen += 1
                stage = ev.get("stage", "?")
                bar = bars.get(stage)
                if bar is None:
                    for old in bars.values():
                        old.close()
                    bar = bars[stage] = _progress_bar(int(ev.get("total") or 1), stage)
                bar.n = int(ev.get("done") or 0)
                bar.refresh()
                ctx.log.debug("runner: %s", line)
            if not alive:
                break
            worker.join(0.2)
    finally:
        for bar in bars.values():
            bar.close()
