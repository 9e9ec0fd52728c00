"""One calibration run, start to finish: the steps in order, each result into one document.

A step that cannot run says why (in the part's `reason` and in `skipped`)
instead of failing the run. A dry run measures what it can with what is
already there and changes nothing: no build, no file under H3KIT_HOME, no
report, no config, no pack.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from h3kit import __version__
from h3kit.calibrate import estimates
from h3kit.calibrate import report
from h3kit.calibrate import repeatability
from h3kit.calibrate import streamed_pass
from h3kit.calibrate import with_model as real_model
from h3kit.calibrate.arch import arch_for
from h3kit.calibrate.decisions import calibrated_values, decide, prefetch_figures
from h3kit.calibrate.disk import PROBE_BYTES, measure_disk
from h3kit.calibrate.handover import Calibrated, Planned
from h3kit.calibrate.native_estimate import (
    NATIVE_KINDS,
    check_scaled,
    measured_rates,
    native_appendix,
    scaled_dit_config,
)
from h3kit.calibrate.pack_summary import write_pack_summary
from h3kit.bundled.h3k_calibration_runner.job import TILE_CANDIDATES, Job, Result
from h3kit.calibrate.runner_client import BRIDGE, h3_job, not_measured, run_runner
from h3kit.calibrate.workdir import remove_stale, work_folder
from h3kit.comfyui import deploy, workflows
from h3kit.core.errors import NotReady
from h3kit.core.session import Session
from h3kit.data import catalog as catalog_mod
from h3kit.data import config as config_mod
from h3kit.data.plan_doc import Plan
from h3kit.data.settings import KEYS as SETTINGS_KEYS
from h3kit.data.fingerprint import Fingerprint
from h3kit.native import build
from h3kit.plan import make_plan, timing



def _load_config(ctx: Session, cat, profiles: dict):
    return config_mod.load(ctx.locations, catalog=cat, profile_names=sorted(profiles))


def native_library(ctx: Session) -> tuple[Path | None, str | None]:
    """The native library: H3KIT_NATIVE_LIB (the bridge's own override), the cache, else built now.

    A dry run never builds. Returns (path, None) or (None, why not).
    """
    override = os.environ.get("H3KIT_NATIVE_LIB")
    if override:
        return (Path(override), None) if Path(override).exists() else \
            (None, f"H3KIT_NATIVE_LIB names {override}, which does not exist")
    lib = build.find_library()
    if lib is not None:
        return lib, None
    if ctx.dry_run:
        return None, "the native library is not built yet, and a dry run builds nothing (run 'h3kit build')"
    ctx.progress("building the native library (first run)...")
    try:
        return Path(build.build()["library"]), None
    except NotReady as exc:
        return None, f"the native library could not be built: {exc.message}"


def run_with_model(wanted: bool, install, cat, *, plan: Plan | None = None, fingerprint: Fingerprint | None = None,
                   ctx: Session | None = None) -> dict:
    """The optional real-workflow run (h3kit.calibrate.with_model), or plainly why it did not run."""
    ctx = ctx or Session()
    if not wanted:
        return real_model.not_run("pass --with-model to run the smallest real workflow")
    if install is None:
        return real_model.not_run("--with-model needs a ComfyUI (pass --comfyui PATH)")
    if ctx.dry_run:
        return real_model.not_run("a dry run starts no ComfyUI")
    return real_model.run(install, plan or Plan(), fingerprint or Fingerprint(), cat, cache_dir=ctx.locations.cache_dir,
                          progress=ctx.progress)


def _measure(ctx: Session, python: str, lib: Path | None, job: Job, quick: bool, comfyui_dir: str | None) -> Result:
    """The runner's result. Its work folder is under the cache, named for this process (a killed run's
    folder is removed by the next calibration); a dry run writes nothing there and uses the system's temp."""
    folder = tempfile.TemporaryDirectory(prefix="h3kit-calib-") if ctx.dry_run else \
        work_folder(ctx.locations.cache_dir, "run")
    with folder as tmp:
        return run_runner(ctx, python, BRIDGE, lib, job, quick, Path(tmp), comfyui=comfyui_dir)


def device_of(fingerprint: Fingerprint, plan: Plan) -> str:
    """Where the plan's DiT computes: cpu with --cpu or no GPU, else the GPU's backend (directml counts as cuda)."""
    if "--cpu" in plan.settings.comfyui_args:
        return "cpu"
    backend = fingerprint.backend
    return {"directml": "cuda"}.get(backend, backend)


def installed_graph(install, plan: Plan, cat) -> dict | None:
    """The text-to-video workflow the pack installed (else the one it would install), API format."""
    try:
        return real_model.workflow_for(install, plan, cat)[0]
    except (KeyError, ValueError, TypeError, OSError):
        return None


def workflow_prompt(graph: dict) -> str | None:
    """The prompt of that workflow's H3 node."""
    node = next((n for n in graph.values() if n.get("class_type") == "MiniMaxH3ImageToVideo"), None)
    prompt = ((node or {}).get("inputs") or {}).get("prompt")
    return prompt if isinstance(prompt, str) else None


def with_text_rows(cat, h3_model: dict):
    """The catalog with the text rows the runner counted from the workflow's prompt (else as it is), so the
    estimate is for the sequence the installed workflow runs, not the catalog's assumed prompt length."""
    canvas = (h3_model or {}).get("canvas") or {}
    rows = canvas.get("text_tokens")
    if not canvas.get("text_tokens_from") or not isinstance(rows, int) or getattr(cat, "sequence", None) is None:
        return cat
    return dataclasses.replace(cat, sequence=dataclasses.replace(cat.sequence, text_tokens=rows))


def installed_weights(cat, plan: Plan, install) -> dict | None:
    """The plan's weight files with the sizes of the files in the ComfyUI (a file not there keeps the catalog's)."""
    if install is None:
        return None
    ids, out = plan.settings.weight_ids(), {}
    for part in ("dit", "text_encoder", "vae", "audio_vae"):
        w = cat.weight(ids.get(part) or "")
        path = Path(install.path) / "models" / (w.file.folder or "") / (w.file.name or "") \
            if w is not None else None
        out[part] = dataclasses.replace(w, bytes=path.stat().st_size) if path is not None and path.is_file() else w
    return out


def _estimates(cat, plan: Plan, fingerprint: Fingerprint, measured: dict, arch: dict, device: str, appendix: dict,
               disk: dict, weights: dict | None = None) -> tuple[dict, dict | None]:
    """(doc["estimates"], doc["streaming"]): from the runner's h3_model, or the throughput table when it
    measured nothing; when the plan streams and the disk was measured, the time counts what streaming
    costs as measured (waiting for the disk, and on a CPU the in-place read) instead of the plan's share."""
    day = datetime.now(timezone.utc).date().isoformat()
    est = estimates.clip_estimate(cat, plan, fingerprint, measured.get("h3_model"), arch, day=day, device=device,
                             native_appendix=appendix, weights=weights)
    fitted = (measured.get("h3_model") or {}).get("fit") or {}
    streaming = prefetch_figures(plan, est, disk, cpu=device == "cpu", fingerprint=fingerprint,
                                 block_fixed_s=fitted.get("block_fixed_s") or 0.0)
    whole = streamed_pass.measured_share(measured.get("streamed_pass"), est.get("timing"), arch, cat)
    if whole is not None:  # the installed loader's pass, timed whole, over the share composed from its parts
        streaming = {**(streaming or {"enabled": True}), "pass_overhead_composed": (streaming or {}).get(
            "pass_overhead"), "pass_overhead": whole["pass_overhead"], "pass_measured": whole}
    if streaming is not None and streaming.get("pass_overhead") is not None:
        est = estimates.clip_estimate(cat, plan, fingerprint, measured.get("h3_model"), arch, day=day, device=device,
                                 native_appendix=appendix, pass_overhead=streaming["pass_overhead"], weights=weights)
    return est, streaming


def _minutes_for(cat, arch: dict, est: dict):
    def minutes(canvas, frames, steps, cfg):
        work = {"canvas": list(canvas), "frames": frames, "steps": steps, "cfg": cfg,
                "pass_overhead": (est.get("time") or {}).get("pass_overhead", 0.0)}
        return estimates.clip_time(arch, est["timing"], work, cat, timing)["minutes_per_clip"]
    return minutes


def _write_config(ctx: Session, cfg, values: dict) -> str:
    path = cfg.raw or ctx.locations.config_file
    config_mod.write_section(path, "calibrated", values)
    return str(path)


def _apply(ctx: Session, install, planned: Planned, cat, profiles: dict) -> tuple[dict, Plan | None]:
    """The second plan: the measured plan's profile, evidence and ComfyUI again, now with the config's new calibrated
    values, applied to the pack by the same code as `h3kit apply`; (the `applied` entry, that plan or None)."""
    if install is None:
        return {"status": "skipped", "reason": "no ComfyUI known"}, None
    try:
        plan = make_plan(planned.fingerprint, cat, profiles, profile=planned.plan.profile,
                         config=_load_config(ctx, cat, profiles), evidence=planned.evidence,
                         comfyui_version=planned.comfyui_version)
        doc = deploy.apply(install, plan.settings, plan.profile, ctx.locations.state_dir,
                           ctx.locations.cache_dir, generated=workflows.pack_files(plan, cat, plan.profile))
    except NotReady as exc:
        return {"status": "skipped", "reason": exc.message}, None
    return {"status": "applied", "profile_file": doc.get("profile_file"),
            "message": f"Applied profile '{doc['profile']}' to {install.node_dir}."}, plan


@dataclass
class _Run:
    """What one calibration run holds from its start to its report (the catalog read once, the plan it measures)."""

    ctx: Session
    quick: bool
    cat: object
    profiles: dict
    cfg: object
    install: object | None
    comfy_info: dict | None
    why_no_comfy: str | None
    planned: Planned
    skipped: list[str] = field(default_factory=list)

    @property
    def plan(self) -> Plan:
        return self.planned.plan

    @property
    def fingerprint(self) -> Fingerprint:
        return self.planned.fingerprint


NO_COMFYUI = "no ComfyUI is known (pass --comfyui PATH or set comfyui_path in the config)"


def calibrate(ctx: Session, planned: Planned, *, quick: bool = True, with_model: bool = False,
              write_config: bool = True, skipped: tuple[str, ...] = ()) -> Calibrated:
    """Calibrate `planned` (a command's one plan, h3kit.steps.planning: install's, or `h3kit calibrate`'s own)
    as it is, in the ComfyUI it was made for, write the report and re-apply the pack; the document and the plan
    re-applied. `skipped`: what the command could not do before it (the format probe), first in the report's
    list. With `ctx.dry_run` nothing is built or written and `report_files` holds None.
    """
    started = time.perf_counter()
    state = _start(ctx, quick, planned, skipped)
    lib, measured, setup = _measure_all(state)
    doc = _document(state, lib, measured, setup, with_model)
    doc["duration_seconds"] = round(time.perf_counter() - started, 3)
    if ctx.dry_run:
        return Calibrated(doc, None)
    applied = None
    if write_config:
        doc["config_written"] = _write_config(ctx, state.cfg, doc["calibrated"])
        doc["applied"], applied = _apply(ctx, state.install, state.planned, state.cat, state.profiles)
    doc["repeatability"] = repeatability.compare(doc, repeatability.earlier_reports(ctx.locations.reports_dir))
    report.write(doc, ctx.locations.reports_dir)
    doc["pack_summary"] = write_pack_summary(ctx, state.install, doc)
    return Calibrated(doc, applied)


def _start(ctx: Session, quick: bool, planned: Planned, skipped: tuple[str, ...]) -> _Run:
    """The catalog, the config, and the ComfyUI and plan to measure, as handed over: that ComfyUI is neither
    found nor inspected again."""
    if not ctx.dry_run:
        with contextlib.suppress(OSError):
            for gone in remove_stale(ctx.locations.cache_dir):
                ctx.log.info("removed the work folder of a calibration that did not finish: %s", gone)
    cat = catalog_mod.load()  # the catalog and profiles, read once for the whole run
    profiles = catalog_mod.load_profiles(cat)
    cfg = _load_config(ctx, cat, profiles)
    found = planned.comfyui
    install, info = (found.install, found.info) if found is not None else (None, None)
    return _Run(ctx, quick, cat, profiles, cfg, install, info, None if found is not None else NO_COMFYUI, planned,
                list(skipped))


def _measure_all(state: _Run) -> tuple[Path | None, dict, dict]:
    """The native library, the runner's measurements and the disk's read speed: (library, measured, setup), where
    setup holds what the measuring was set up with (the scaled DiT, the file's architecture, the device)."""
    ctx, cat, plan, install = state.ctx, state.cat, state.plan, state.install
    lib, why_no_lib = native_library(ctx)
    if why_no_lib:
        state.skipped.append(f"native kernels and the scaled DiT: {why_no_lib}")
    python = (state.comfy_info or {}).get("python") or sys.executable
    if state.why_no_comfy:
        state.skipped.append(f"ComfyUI's Python: {state.why_no_comfy}; ran in h3kit's own Python ({python}), so the "
                             "time per clip is a table estimate")
    dit = scaled_dit_config(cat, plan, state.quick)
    if dit["plan_quantization"] not in NATIVE_KINDS:
        state.skipped.append(f"the plan's quantization {dit['plan_quantization']!r} has no native kernel; "
                             f"the scaled DiT ran in {dit['quantization']}")
    arch, why_catalog = arch_for(cat, cat.weight(plan.settings.dit_weights or ""),
                                 install.path if install is not None else None)
    if why_catalog and install is not None:
        state.skipped.append(f"the DiT file's header: {why_catalog}; H3 was built at the catalog's width")
    device = device_of(state.fingerprint, plan)
    job = _job(state, dit, arch, device)
    ctx.progress(f"calibrate: measuring in {python} ...")
    if lib is None and install is None:  # nothing the runner could measure: no kernels, no ComfyUI to build H3 in
        measured = not_measured(why_no_lib)
    else:
        measured = _measure(ctx, python, lib, job, state.quick, str(install.path) if install is not None else None)
    if lib is None:  # the runner may find a library by itself; without ours the kernel figures are not today's
        skip = {"status": "skipped", "reason": why_no_lib}
        measured = dataclasses.replace(measured, native=skip, inference=skip)
    state.skipped += list(measured.skipped)
    ctx.progress("calibrate: disk read speed...")
    models_dir = Path(install.path) / "models" if install is not None else ctx.locations.cache_dir
    disk = measure_disk(models_dir, PROBE_BYTES["quick" if state.quick else "full"], ctx.locations.cache_dir,
                        create=not ctx.dry_run, library=lib if device == "cpu" else None)
    # the estimates and decisions read the result as its document
    return lib, measured.to_json(), {"dit": dit, "arch": arch, "device": device, "disk": disk, "python": python}


def _job(state: _Run, dit: dict, arch: dict, device: str) -> Job:
    """The runner's job: the plan, the scaled DiT, and where and at which points to build and time ComfyUI's H3."""
    cat, plan, quick = state.cat, state.plan, state.quick
    work = estimates.workload(plan, cat)
    rows = timing.sequence_tokens(cat, work["canvas"][0], work["canvas"][1], work["frames"])
    table = timing.rates_from_table(state.fingerprint, cat, cat.comfyui.dtype_on(device), backend=device)
    points = estimates.measure_points(rows, arch, table, quick)
    graph = installed_graph(state.install, plan, cat) if state.install is not None else None
    streamed = streamed_pass.job_spec(state.install, plan, cat, graph)
    if streamed is not None:  # the runner's time limit: a held call by the table, streaming at most doubling it
        blocks = int(arch.get("blocks_total") or cat.blocks)
        streamed["expected_call_s"] = 2 * estimates.call_seconds(rows, arch, table, blocks, timing)
    return dataclasses.replace(
        h3_job(cat, plan, arch, device, points), scaled_dit=dit, quick=quick, tile_candidates=TILE_CANDIDATES,
        # what one call at each point should take, by the table: the runner's time limit follows it
        h3_point_seconds=tuple(estimates.call_seconds(t, arch, table, estimates.points_blocks(quick), timing)
                               for t in points),
        # the runner counts the rows of the prompt the installed workflow sends
        h3_prompt=workflow_prompt(graph) if graph else None,
        h3_streamed=streamed)


def _results(state: _Run, lib: Path | None, measured: dict, setup: dict) -> dict:
    """What the measurements say: rates, the scaled-DiT check, ComfyUI's H3 model, the estimates, the decisions."""
    cat, plan = state.cat, state.plan
    dit, arch, device, disk = setup["dit"], setup["arch"], setup["device"], setup["disk"]
    dit_weight = cat.weight(plan.settings.dit_weights or "")
    native, inference = measured.get("native") or {}, measured.get("inference") or {}
    rates = measured_rates(native, measured.get("device") or {}, disk, inference, dit["quantization"])
    appendix = native_appendix(cat, plan, rates, dit_weight.bytes if dit_weight else None)
    appendix["check"] = check_scaled(dit, inference, rates["native_gflops"])
    runner_failed = measured.get("reason") if measured.get("status") == "error" else None
    h3_model = measured.get("h3_model") or {"status": "error" if runner_failed else "skipped",
                                            "reason": state.why_no_comfy or runner_failed
                                            or "the runner did not report it"}
    if h3_model.get("status") != "measured":
        state.skipped[:] = [s for s in state.skipped if not s.startswith("ComfyUI's H3 model")]
        state.skipped.append(f"ComfyUI's H3 model: {h3_model.get('reason')}; the time per clip is a table estimate")
    est_cat = with_text_rows(cat, h3_model)
    est, streaming = _estimates(est_cat, plan, state.fingerprint, {**measured, "h3_model": h3_model}, arch, device,
                                appendix, disk, installed_weights(cat, plan, state.install))
    est["check"] = appendix["check"]  # the scaled-DiT check chart reads it here
    decisions = decide(plan, measured, est, minutes_for=_minutes_for(est_cat, arch, est), cat=cat, disk=disk,
                       streaming=streaming)
    return {"native": native, "inference": inference, "h3_model": h3_model, "estimates": est,
            "streaming": streaming, "decisions": decisions}


def _document(state: _Run, lib: Path | None, measured: dict, setup: dict, with_model: bool) -> dict:
    """The `h3kit.calibration/1` document, before the config, the pack and the report are written."""
    ctx, plan, got = state.ctx, state.plan, _results(state, lib, measured, setup)
    real = run_with_model(with_model, state.install, state.cat, plan=plan, fingerprint=state.fingerprint, ctx=ctx)
    if real.get("status") == "measured":
        real["compare"] = real_model.compare(real, got["estimates"])
    probe = state.planned.probe
    doc = {
        "schema": report.SCHEMA,
        "created": datetime.now(timezone.utc).replace(microsecond=0).isoformat(),
        "h3kit_version": __version__,
        "quick": state.quick,
        "dry_run": ctx.dry_run,
        "fingerprint": state.fingerprint.to_json(),
        "plan": plan.to_json(),
        "profile": plan.profile,
        "runner": measured.get("runner") or {"python": setup["python"]},
        "comfyui": state.comfy_info,
        "native": got["native"],
        "inference": got["inference"],
        "device": measured.get("device") or {},
        "disk": setup["disk"],
        "tiles": measured.get("tiles") or [],
        "h3_model": got["h3_model"],
        "streamed_pass": measured.get("streamed_pass"),  # the installed loader's pass, timed whole (or absent)
        "format_probe": probe.to_json() if probe is not None else None,
        "estimates": got["estimates"],
        "real_model": real,
        "decisions": got["decisions"],
        "calibrated": calibrated_values(got["decisions"], SETTINGS_KEYS),
        "skipped": state.skipped,
        "duration_seconds": 0.0,
        "report_files": {"json": None, "md": None, "html": None},
    }
    if got["streaming"] is not None:
        doc["streaming"] = got["streaming"]
    return doc
