"""The whole chain, in order: fingerprint -> find ComfyUI -> build -> format probe and plan -> deploy
and verify -> models -> calibrate.

The machine is fingerprinted once, the ComfyUI found once and inspected once,
and the plan made once by the one plan maker (h3kit.steps.planning: the
found ComfyUI's format probe as evidence and its version, before any
download); that typed `Planned` goes to deploy and to the calibration, which
measures it in the same ComfyUI and re-applies the pack with its calibrated
values: the second and last plan (h3kit.calibrate.handover). No ComfyUI found: everything that does not need
one still runs (the report says what this machine can do), then exit 3 naming
--comfyui. Each step's module is imported at the top: an import error is
loud, never a skipped step.
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

from h3kit import calibrate
from h3kit.calibrate.handover import Found, Planned
from h3kit.comfyui import deploy, h3_support
from h3kit.comfyui.apps import HOW_TO_ADD
from h3kit.comfyui.running import missing_flags
from h3kit.comfyui import locate as comfyui_locate
from h3kit.comfyui.setup import new_comfyui, offer_new_comfyui
from h3kit.core.errors import H3kitError, NotReady, VerificationFailed
from h3kit.core.session import Outcome
from h3kit.core.session import Session
from h3kit.data import catalog
from h3kit.data.plan_doc import Plan, PlanSettings
from h3kit.models import ensure_models
from h3kit.native.build import build, find_library
from h3kit.steps import ends_short, next_steps
from h3kit.steps.common import (
    Fingerprinted,
    check_profile,
    exclusive,
    exclusive_home,
    fingerprinted,
    generated_files,
    load_config,
    locate,
    loud,
    model_folders,
    remember_comfyui,
    torch_findings,
)
from h3kit.comfyui.versions import state as state_mod
from h3kit.steps.version_record import record_after_install
from h3kit.steps.planning import plan_for
from h3kit.steps.install_result import SCHEMA, ComfyFound, InstallResult
from h3kit.steps.options import ComfyTarget, InstallOptions

__all__ = ["SCHEMA", "run"]


def run(options: InstallOptions, ctx: Session) -> Outcome:
    """The chain. Nothing is written before the locks are held: the fingerprint, the search for ComfyUI, the
    format probe's cache and the plan only read; the build (h3kit's cache), a new ComfyUI and the deploy write,
    each under its lock."""
    notes: list[str] = []
    warnings: list[str] = []
    config = load_config(ctx)
    check_profile(config, options.profile)  # a bad name stops the install before anything is set up
    machine = fingerprinted(ctx, options.fingerprint_file, notes)
    fingerprint = machine.fingerprint
    target = options.comfyui
    if options.new_comfyui and not ctx.dry_run:
        with exclusive_home(ctx, "install"):
            # its own venv runs it, whatever --comfyui-python named
            target = ComfyTarget(str(new_comfyui(ctx, options.new_comfyui, options.comfyui_source, fingerprint)))
    try:
        install = locate(target, ctx, config, need_write=True)
    except NotReady as missing:
        install = _offered(options, ctx, config, machine, target, notes, warnings, missing)
    with exclusive(ctx, install, "install"):
        library = _build(ctx, notes, warnings)
        found = _inspected(ctx, install, fingerprint, warnings)  # the one inspection, handed to all after it
        planned = _plan(options, ctx, config, machine, notes, Found(install, found.info))  # before any download
        outcome, final = _into(options, ctx, config, planned, library, install, notes, warnings, found)
    last = list(final.warnings) if final else []  # the plan's (what falls short, how long a clip takes)
    outcome.warnings = [w for w in outcome.warnings if w not in last] + last
    return outcome


def _plan(options: InstallOptions, ctx: Session, config, machine: Fingerprinted, notes: list[str],
          found: Found | None) -> Planned:
    """The install's one plan, for the ComfyUI `found` and its one inspection (None: none found); made without an
    earlier calibration's values when a calibration runs after it."""
    return plan_for(ctx, config, machine, notes, profile=options.profile, found=found,
                    for_calibration=not (options.skip_calibrate or ctx.dry_run))


def _offered(options: InstallOptions, ctx: Session, config, machine: Fingerprinted, target: ComfyTarget,
             notes: list[str], warnings: list[str], missing: NotReady):
    """No ComfyUI found: the one set up now when the person takes the offer, else the install ends here
    (planned and calibrated for this machine all the same) with exit 3."""
    offer = not target.path and options.offer_new_comfyui
    with exclusive_home(ctx, "install"):
        created = offer_new_comfyui(ctx, machine.fingerprint, options.comfyui_source,
                                    searched=comfyui_locate.searched_places(),
                                    min_version=h3_support.requirements(catalog.load())[0]) if offer else None
        if created is None:
            _build(ctx, notes, warnings)
            planned = _plan(options, ctx, config, machine, notes, None)
            warnings += list(planned.plan.warnings) if planned.plan else []
            _without_comfyui(options, ctx, planned, notes, warnings, missing)
    return locate(ComfyTarget(str(created)), ctx, config, need_write=True)


def _inspected(ctx: Session, install, fingerprint, warnings: list[str]):
    """The install's one inspection of the ComfyUI it found (h3kit.comfyui.versions.state), torch checked against
    the machine; NotReady when ComfyUI's Python does not start."""
    found = state_mod.take(ctx, install, info=comfyui_locate.inspect(install))
    info = found.info
    ctx.progress(f"ComfyUI {info.get('comfyui_version') or '?'} at {install.path}; Python {info.get('python_version')}, "
                 f"torch {info.get('torch') or 'missing'} ({info.get('torch_build') or '-'})")
    for line in loud(torch_findings(fingerprint, info)):
        ctx.progress("WARNING: " + line)
        warnings.append(line)
    return found


def comfy_found(install, found) -> ComfyFound:
    """The install document's `comfyui` part, from the one inspection."""
    info = found.info
    return ComfyFound(str(install.path), str(install.python), info.get("comfyui_version"), install.layout,
                      install.source, info.get("torch"), info.get("torch_build"))


def _into(options: InstallOptions, ctx: Session, config, planned: Planned, library, install,
          notes: list[str], warnings: list[str], found) -> tuple[Outcome, Plan | None]:
    """Everything from inspecting the found ComfyUI on, under its lock (h3kit.steps.common.exclusive); the outcome
    and the plan the pack holds at the end (calibration's re-applied one, else install's)."""
    plan = planned.plan
    profile = plan.profile if plan else (options.profile or "none")
    result = InstallResult(profile, comfyui=comfy_found(install, found),
                           node_dir=str(install.node_dir), library=str(library) if library else None, notes=notes)
    if ctx.dry_run:
        result.dry_run = True
        return Outcome(result.to_json(), f"Would install the node pack into {install.node_dir} with profile "
                       f"'{profile}' and write a launcher; nothing changed (--dry-run).", 0, warnings), plan
    _deploy(ctx, planned, library, install, result, warnings)
    remember_comfyui(ctx, config, install, notes)
    ctx.progress("Checking that this ComfyUI can run MiniMax H3...")
    support = h3_support.check(install, catalog.load(), comfyui_locate.run_python)
    result.h3 = support.to_json()
    after = _after_deploy(options, ctx, planned, install, result, support)
    final = after.plan or plan
    _refuse_after(options, ctx, plan, install, result, support)
    deployed = state_mod.refreshed(ctx, install, found, pip_ran=options.with_loaders)
    notes.append(record_after_install(ctx, install, deployed))
    app_start = None
    if install.app:
        flags = app_flags(install, final, result.launcher or {})
        result.app = {"name": install.app, "launch_args": list(install.launch_args), "flags_to_add": flags,
                      "how": HOW_TO_ADD[install.app]}
        app_start = next_steps.app_start_line(install.app, flags, HOW_TO_ADD[install.app])
    figure = next_steps.clip_figure(final)
    result.clip_time = figure.to_json() if figure else None
    result.next_steps = next_steps.lines(result.launchers[0] if result.launchers else None, final,
                                         cpu_only=not (planned.fingerprint and planned.fingerprint.gpus),
                                         app_start=app_start)
    if after.short is not None:  # all but some weights: what is in place, what is not, the command that finishes
        raise ends_short.summary(options, ctx, install, result, final, after.folders, after.short)
    text = (f"h3kit installed into {install.node_dir} (profile '{final.profile if final else profile}', verified)."
            + "".join(f"\nnote: {n}" for n in notes) + "\n" + "\n".join(result.next_steps))
    return Outcome(result.to_json(), text, 0, warnings), final


def _deploy(ctx: Session, planned: Planned, library, install, result: InstallResult, warnings: list[str]) -> None:
    """The pack and the launcher from the plan's settings, then the import check in ComfyUI's Python."""
    plan, notes = planned.plan, result.notes
    done = deploy.deploy(install, settings=plan.settings if plan else PlanSettings(), profile=result.profile,
                         library=library, state_dir=ctx.locations.state_dir, cache_dir=ctx.locations.cache_dir,
                         progress=ctx.progress, generated=generated_files(plan))
    notes += done.notes
    result.manifest = str(done.manifest.path)
    result.launchers = [done.launcher["path"]] if done.launcher.get("path") else []
    result.launcher, result.backed_up = done.launcher, done.backed_up
    if done.launcher.get("dropped"):
        warnings.append(f"flags this ComfyUI does not accept were left out of the launcher: "
                        f"{' '.join(done.launcher['dropped'])}")
    if not done.launcher.get("path"):
        notes.append(done.launcher.get("detail", "no launcher written"))
    ctx.progress("Verifying: importing the pack with ComfyUI's Python...")
    try:
        verified = deploy.verify(install)
    except VerificationFailed as exc:
        exc.details = result.to_json()
        raise
    result.verified, result.nodes = bool(verified.get("verified")), verified.get("nodes")


def _refuse_after(options: InstallOptions, ctx: Session, plan: Plan | None, install, result: InstallResult,
                  support: h3_support.H3Support) -> None:
    """Installed and verified, but nothing to run yet: exit 3 with what stops it, after everything that helps ran."""
    if not support.ready:
        # Installed and verified, but this ComfyUI cannot load H3: no weights were fetched for it.
        raise NotReady(f"h3kit is installed in {install.node_dir}, but {_lower_first(h3_support.problem(support))} "
                       "No model weights were downloaded, since this ComfyUI cannot load them.",
                       h3_support.fix(support, install, catalog.load()) + "; then run the install again",
                       details=result.to_json())
    if plan is not None and plan.fits is False:
        # the contract's "machine below the floor"
        short = plan.blocked or "; ".join(plan.warnings[:2]) or "the plan does not fit"
        raise NotReady(f"h3kit is installed in {install.node_dir}, but this machine is below what the model needs "
                       f"even at the smallest settings. {short}",
                       plan.shortfall_fix or "Read 'h3kit plan' for the shortfall.", details=result.to_json())
    if (refused := _refused(options, ctx, plan)):
        raise NotReady(f"h3kit is installed in {install.node_dir}; no model file was downloaded. {refused}",
                       "Run 'h3kit plan' to see why; change config.yaml and run 'h3kit install' again, or pass "
                       "--allow-unverified.", details=result.to_json())


def app_flags(install, plan: Plan | None, launcher: dict) -> list[str]:
    """The plan's flags (those this ComfyUI accepts, when its --help could be read) that the app does not
    already start it with: what the person adds in the app."""
    planned = list(launcher.get("args") or []) if launcher.get("path") else list(plan.settings.comfyui_args if plan else [])
    return missing_flags(install.launch_args, planned)


def _build(ctx: Session, notes: list[str], warnings: list[str]) -> Path | None:

    if ctx.dry_run:
        return find_library()
    ctx.progress("Building the native library...")
    try:
        return Path(build(progress=ctx.progress)["library"])
    except NotReady as exc:
        if exc.details.get("cause") == "environment":
            raise  # a full or read-only h3kit home: the deploy would fail the same way, so say that now
        warnings.append(f"the native library was not built ({exc.message} {exc.fix or ''}); the pack installs without it")
        return None


def _refused(options: InstallOptions, ctx: Session, plan: Plan | None) -> str | None:
    """The plan's own sentence when it holds a file not known to load here and nobody can be asked about it (--yes,
    no terminal): decided from the plan before the models step, so nothing is downloaded. --allow-unverified and
    --no-models lift it; a plan that does not fit is refused on its own (above)."""
    if plan is None or plan.fits is False or options.skip_models or options.allow_unverified:
        return None
    return plan.blocked if plan.blocked and not ctx.interactive else None


def _lower_first(text: str) -> str:
    return text[:1].lower() + text[1:] if text.startswith("This ") else text


class AfterDeploy(NamedTuple):
    plan: Plan | None  # the plan calibration re-applied, or None
    short: NotReady | None = None  # the models step ran short of room or of a host (ends_short.is_shortfall)
    folders: object = None  # the ComfyUI's model folders the models step used


def _after_deploy(options: InstallOptions, ctx: Session, planned: Planned, install: comfyui_locate.ComfyInstall,
                  result: InstallResult, support: h3_support.H3Support) -> AfterDeploy:
    """The models (when this ComfyUI can load them and the plan fits and holds nothing refused), then the
    calibration of install's plan and fingerprint. A models step short of disk or of a host is kept, not
    raised, so the install records and summarises everything else before it ends with it."""
    plan, notes = planned.plan, result.notes
    skip = ("this ComfyUI cannot load MiniMax H3 yet" if not support.ready
            else "the plan does not fit this machine" if plan.fits is False
            else "the plan holds files not known to load here" if _refused(options, ctx, plan) else None)
    if skip:
        notes.append(f"models skipped: {skip}, so no weights are downloaded")
        return AfterDeploy(_calibrate(options, ctx, result, planned))
    folders = None
    try:
        folders = model_folders(install, ctx)
        result.model_folders = folders.to_json()
        result.models = ensure_models(ctx, plan, install.path, skip=options.skip_models,
                                      with_loaders=options.with_loaders, allow_unverified=options.allow_unverified,
                                      folders=folders)
    except H3kitError as failed:
        # The pack is installed and verified; the calibration needs no weights, so it still runs
        # (its report says what the machine can do), and the models error is the exit.
        notes.append(f"models not complete: {failed.message}")
        applied = _calibrate(options, ctx, result, planned)
        if ends_short.is_shortfall(failed):
            return AfterDeploy(applied, failed, folders)
        failed.details = {**result.to_json(), **failed.details}
        raise
    return AfterDeploy(_calibrate(options, ctx, result, planned), None, folders)


def _calibrate(options: InstallOptions, ctx: Session, result: InstallResult, planned: Planned) -> Plan | None:
    """Calibration of install's own plan and fingerprint (--fingerprint FILE's too), in the ComfyUI install found
    (`planned.comfyui`, None: none): it measures them as they are, and its re-apply keeps their profile. Sets
    result.report; returns the plan re-applied (None: none)."""
    if options.skip_calibrate or ctx.dry_run:
        result.notes.append("calibration skipped (--skip-calibrate)" if options.skip_calibrate
                            else "calibration skipped (--dry-run)")
        return None
    ctx.progress("Calibrating (quick)...")
    done = calibrate.calibrate(ctx, planned, quick=True, with_model=False)
    result.calibration_estimates = done.doc.get("estimates")
    files = done.doc.get("report_files") or {}
    result.report = files.get("md") or files.get("json")
    return done.applied


def _without_comfyui(options: InstallOptions, ctx: Session, planned: Planned, notes, warnings,
                     missing: NotReady) -> None:
    """No ComfyUI: still calibrate (the report says what this machine can run), then exit 3."""
    plan = planned.plan
    result = InstallResult(plan.profile if plan else (options.profile or "none"), notes=notes, warnings=warnings,
                           plan_fits=plan.fits if plan else None)
    _calibrate(options, ctx, result, planned)
    raise NotReady(missing.message + (f" The calibration report is at {result.report}." if result.report else ""),
                   missing.fix, details=result.to_json())
