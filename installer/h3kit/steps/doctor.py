"""`h3kit doctor`'s step: check everything in order, then make the fixes h3kit can make itself (--fix).

The checks, in order: the config reads; ComfyUI is found and its Python
starts; torch fits the hardware (h3kit.plan.torch_build); it can run MiniMax
H3 (version, H3's files, what H3's nodes import, PyAV's H.264/AAC encoders:
h3kit.comfyui.h3_support); which weight formats run (the format probe, which
the plan is then made with); the install record reads; the pack is present
and intact; the launcher's flags are accepted; whether ComfyUI's dynamic VRAM
(comfy-aimdo) is on with those flags, and whether the plan assumed the same;
the native library loads; the profile file matches the config; the model
files (h3kit.models).

--fix, in this order: a torch build that does not fit is reinstalled; a
ComfyUI without H3 moves to a release with it (after a yes); a stale profile
or launcher is re-applied (h3kit.steps.apply). `undo` puts back what earlier
fixes changed, newest first.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from h3kit import models
from h3kit.calibrate import format_probe
from h3kit.calibrate.handover import Found
from h3kit.comfyui import doctor, h3_support
from h3kit.comfyui import locate as comfyui_locate
from h3kit.comfyui import manifest as mf
from h3kit.comfyui.setup import fix_torch
from h3kit.comfyui.versions.upgrade import below_h3, kind_of, undo_recorded, upgrade_to_h3
from h3kit.comfyui.setup.torch_source import taken_findings
from h3kit.core.errors import EXIT_NOT_READY, EXIT_VERIFY_FAILED, H3kitError, NotReady
from h3kit.core.session import Session
from h3kit.data import catalog
from h3kit.data.format_evidence import FormatProbe
from h3kit.steps import apply
from h3kit.steps.common import (Fingerprinted, exclusive, fingerprinted, load_config, locate, model_folders,
                                torch_findings)
from h3kit.steps.planning import Probing, plan_for
from h3kit.steps.options import ApplyOptions, ComfyTarget, DoctorOptions

SCHEMA = "h3kit.doctor/1"


@dataclass
class DoctorReport:
    """What the checks found, in order (each {check, status: ok|warn|fail, message, fix?}), and what --fix did."""

    findings: list[dict]
    notes: list[str]
    install: comfyui_locate.ComfyInstall | None  # None: no ComfyUI found, so only the first checks ran
    probe: FormatProbe | None = None

    @property
    def failed(self) -> list[dict]:
        return [f for f in self.findings if f["status"] == "fail"]

    @property
    def exit_code(self) -> int:
        """3 when no ComfyUI was found to check, 4 when a check of a found one failed, else 0."""
        if not self.failed:
            return 0
        return EXIT_NOT_READY if self.install is None else EXIT_VERIFY_FAILED

    def to_json(self) -> dict:
        doc = {"schema": SCHEMA, "comfyui": str(self.install.path) if self.install else None,
               "findings": self.findings, "notes": self.notes, "ok": not self.failed}
        if self.probe is not None:
            doc["format_probe"] = self.probe.to_json()
        return doc


@dataclass(frozen=True)
class UndoReport:
    """What `doctor --undo` put back (or, with --dry-run, would), newest first."""

    comfyui: str
    undone: list[dict]  # each {action: torch|comfyui, ...}, as h3kit.comfyui.setup.undo_recorded returns them

    def to_json(self) -> dict:
        torch = next((d for d in self.undone if d["action"] == "torch"), None)
        return {"schema": SCHEMA, "comfyui": self.comfyui, "undo": torch or self.undone[0], "undone": self.undone}


def run(options: DoctorOptions, ctx: Session) -> DoctorReport:
    findings: list[dict] = []
    notes: list[str] = []
    try:
        config = load_config(ctx)
    except H3kitError as exc:
        config = None
        findings.append(doctor.finding("config.valid", "fail", exc.message, exc.fix))
    machine = fingerprinted(ctx, options.fingerprint_file, notes)
    try:
        install = locate(options.comfyui, ctx, config, need_write=False)
    except H3kitError as exc:
        findings.append(doctor.finding("comfyui.found", "fail", exc.message, exc.fix))
        return DoctorReport(findings, notes, None)
    findings.append(doctor.finding("comfyui.found", "ok", f"ComfyUI at {install.path} (found by {install.source})."))
    if not options.fix:
        return _check(options, ctx, config, machine, install, findings, notes)
    with exclusive(ctx, install, "doctor --fix"):
        return _check(options, ctx, config, machine, install, findings, notes)


def _check(options: DoctorOptions, ctx: Session, config, machine: Fingerprinted, install, findings: list[dict],
           notes: list[str]) -> DoctorReport:
    fingerprint, info = machine.fingerprint, None
    try:
        info = comfyui_locate.inspect(install)
        findings.append(doctor.finding("comfyui.python", "ok",
                                       f"Python {info.get('python_version')} at {install.python} starts."))
        findings += torch_findings(fingerprint, info)
    except NotReady as exc:
        findings.append(doctor.finding("comfyui.python", "fail", exc.message, exc.fix))
    findings.append(h3_support.finding(h3_support.check(install, catalog.load(), comfyui_locate.run_python), install,
                                       catalog.load()))
    # the one plan, after the probe of the ComfyUI it checks (none when its Python does not start)
    probing = Probing.NONE if info is None else Probing.FRESH if options.fresh_probe else Probing.MEASURE
    planned = plan_for(ctx, config, machine, notes, found=Found(install, info), probing=probing, findings=findings)
    probe, plan = planned.probe, planned.plan
    if probe is not None:
        findings.append(format_probe.result_finding(probe))
    record = _record(ctx, install, findings)
    findings += taken_findings(record)
    findings += doctor.pack_findings(install, record)
    if install.python is not None:
        findings += doctor.launcher_findings(install, record, ctx.locations.cache_dir)
        findings += doctor.dynamic_vram_findings(install, info, record, plan)
        findings += doctor.native_findings(install)
    findings += drift_findings(ctx, install, info, fingerprint, plan)
    findings += doctor.running_flags_findings(install, plan)
    findings += doctor.profile_findings(install, plan) if install.node_dir.is_dir() else []
    if plan is not None:
        findings += models.doctor_findings(plan, install.path, model_folders(install))
    if options.fix and not ctx.dry_run:
        _finish_moves(ctx, install, notes)
        _fix_torch(ctx, install, fingerprint, findings, notes)
    if options.fix:  # before apply, which then follows the new ComfyUI; a refusal stops here, findings attached
        try:
            _fix_comfyui(ctx, install, findings, notes)
        except H3kitError as exc:
            exc.details = {**exc.details, **DoctorReport(findings, notes, install).to_json()}
            raise
    if options.fix and not ctx.dry_run:
        _reapply(options.comfyui, ctx, findings, notes)
    return DoctorReport(findings, notes, install, probe)


def drift_findings(ctx: Session, install, info, fingerprint, plan) -> list[dict]:
    """What changed since the last working state (h3kit.comfyui.versions.drift), with what it means here: the
    catalog's known-bad releases for this machine, the pack's comfy.* names against the checked-out tree, and
    the planned files' version needs."""
    from h3kit.comfyui.versions import api_check, drift
    from h3kit.comfyui.versions import history as history_mod
    from h3kit.comfyui.versions import state as state_mod
    from h3kit.steps.versions import machine_of

    try:
        hist = history_mod.load(ctx.locations.state_dir, install.path)
    except H3kitError as exc:
        return [doctor.finding("comfyui.drift", "warn", exc.message, exc.fix)]
    now = state_mod.take(ctx, install, info=info)
    refusal = None
    if now.git is not None and install.node_dir.is_dir():
        try:
            refusal = api_check.check_target(Path(install.path), "HEAD").refusal
        except H3kitError as exc:
            ctx.log.info("comfy.* check skipped: %s", exc.message)
    files = tuple(f for f in (getattr(plan.settings, k, None) for k in ("dit_weights", "text_encoder_weights",
                                                                        "vae_weights")) if f) if plan else ()
    found = drift.findings(now, hist.last_working(), catalog.load().comfyui_versions, machine_of(fingerprint),
                           api_refusal=refusal, file_names=files)
    if hist.in_flight:
        found.append(doctor.finding("comfyui.move", "fail", f"An h3kit {hist.in_flight['op']} of this ComfyUI was "
                                    f"interrupted at '{hist.in_flight.get('step')}'.",
                                    "h3kit doctor --fix (or the next 'h3kit update' / 'h3kit rollback') finishes it"))
    return found


def _finish_moves(ctx: Session, install, notes: list[str]) -> None:
    """An update or rollback a crash left half-done is settled first (h3kit.steps.versions.finish_in_flight)."""
    from h3kit.comfyui.versions import history as history_mod
    from h3kit.core.tools import PipOptions
    from h3kit.steps.versions import finish_in_flight

    done = finish_in_flight(ctx, install, history_mod.load(ctx.locations.state_dir, install.path),
                            PipOptions.from_env())
    if done:
        notes.append(done)


def _record(ctx: Session, install, findings) -> mf.Manifest | None:
    try:
        return mf.load_for(ctx.locations.state_dir, install.path)
    except H3kitError as exc:
        findings.append(doctor.finding("record.readable", "fail", exc.message, exc.fix))
        return None


def _reapply(target: ComfyTarget, ctx: Session, findings, notes) -> None:
    """The fixes h3kit can make itself: a stale profile or launcher is re-applied."""
    if any(f["check"] == "pack.present" and f["status"] != "ok" for f in findings):
        return  # nothing to re-apply before 'h3kit install', or while the pack is disabled (that finding names it)
    stale = [f for f in findings if f["check"] in ("profile.current", "launcher.flags") and f["status"] != "ok"]
    if stale:
        outcome = apply.run(ApplyOptions(comfyui=target), ctx)
        notes.append(outcome.text)
        for f in stale:
            f["status"], f["message"] = "ok", f"fixed by h3kit apply: {f['message']}"


def _fix_torch(ctx: Session, install, fingerprint, findings, notes) -> None:
    """A torch build that does not fit the hardware: reinstall the right one (h3kit.comfyui.setup)."""
    wrong = [f for f in findings if f["check"] == "torch.build" and f["status"] == "fail" and f.get("kind") != "machine"]
    if not wrong or install.python is None or fingerprint is None:
        return
    result = fix_torch(ctx, install.python, fingerprint, mf.load_or_new(ctx.locations.state_dir, install.path))
    if result["changed"]:
        notes.append(f"torch reinstalled: {result['before']} -> {result['after']}; 'h3kit doctor --undo' restores the old one")
        for f in wrong:
            f["status"], f["message"] = "ok", f"fixed: {f['message']}"


def _fix_comfyui(ctx: Session, install, findings, notes) -> None:
    """A ComfyUI without H3: a git checkout moves to the newest release with it (h3kit.comfyui.versions.upgrade),
    after a yes; other layouts get their update action. --dry-run says what would happen."""
    cat = catalog.load()
    h3 = next((f for f in findings if f["check"] == "comfyui.h3"), None)
    if (h3 is not None and h3["status"] != "fail") or not below_h3(install, cat):
        return
    if h3 is None:  # the check did not run: say what --fix found
        h3 = h3_support.finding(h3_support.check_tree(install.path, cat), install, cat)
        findings.append(h3)
    if kind_of(install) != "git":
        try:
            upgrade_to_h3(ctx, install, cat)
        except NotReady as exc:
            h3["fix"] = exc.fix
            notes.append(f"ComfyUI was not updated: {exc.message} Fix: {exc.fix}")
        return
    if not ctx.dry_run and not ctx.confirm(f"Move the ComfyUI checkout in {install.path} to the newest release "
                                           "with MiniMax H3 ('h3kit doctor --undo' goes back)?", default=False):
        notes.append("ComfyUI was not moved (not confirmed); 'h3kit doctor --fix --yes' moves it")
        return
    result = upgrade_to_h3(ctx, install, cat)
    notes += result["notes"]
    if ctx.dry_run:
        notes.append(f"--dry-run: would move ComfyUI in {install.path} from {result['version']} to "
                     f"{result['would_checkout']} ({result['would_version']}) with "
                     f"{', '.join(f'{n} {v}' for n, v in (result.get('would_pin') or {}).items()) or 'torch'} "
                     "pinned; nothing changed")
        return
    to = result["to"]
    notes.append(f"ComfyUI moved from {result['version']} to {to['tag']} ({to['version']}); packages: "
                 f"{'; '.join(result['packages']) or 'unchanged'}; 'h3kit doctor --undo' goes back")
    after = h3_support.finding(h3_support.check(install, cat, comfyui_locate.run_python), install, cat)
    h3.update(after, message=f"fixed: {after['message']}" if after["status"] == "ok" else after["message"])
    for f in findings:  # another version accepts other flags: let apply (next) write the launcher again
        if f["check"] == "launcher.flags" and f["status"] == "ok":
            f.update(status="warn", message=f"ComfyUI moved to {to['version']}: {f['message']}")


def undo(target: ComfyTarget, ctx: Session) -> UndoReport:
    """Undo what earlier --fix runs changed, newest first: a moved ComfyUI checkout, a replaced torch."""
    install = locate(target, ctx, load_config(ctx), need_write=False)
    with exclusive(ctx, install, "doctor --undo"):  # undo moves folders and reinstalls torch: one h3kit at a time
        done = undo_recorded(ctx, install, mf.load_or_new(ctx.locations.state_dir, install.path))
    return UndoReport(str(install.path), done)
