"""The whole chain, in order: fingerprint -> plan -> build -> find ComfyUI -> deploy and
verify -> models -> calibrate.

No ComfyUI found: everything that does not need one still runs (the report
says what this machine can do), then exit 3 naming --comfyui. Each step's
module is imported at the top: an import error is loud, never a skipped step.
"""

from __future__ import annotations

from pathlib import Path

from h3kit import calibrate
from h3kit.comfyui import deploy, h3_support
from h3kit.comfyui.apps import HOW_TO_ADD
from h3kit.comfyui.running import missing_flags
from h3kit.comfyui import locate as comfyui_locate
from h3kit.comfyui.setup import new_comfyui, offer_new_comfyui
from h3kit.core.errors import H3kitError, NotReady, VerificationFailed
from h3kit.core.session import Outcome
from h3kit.core.session import Session
from h3kit.data import catalog
from h3kit.data.plan_doc import Plan
from h3kit.models import ensure_models
from h3kit.native.build import build, find_library
from h3kit.steps import next_steps
from h3kit.steps.common import (
    current_plan,
    exclusive,
    exclusive_home,
    generated_files,
    load_config,
    locate,
    loud,
    model_folders,
    remember_comfyui,
    saved_plan,
    torch_findings,
)
from h3kit.steps.format_probe import probed_plan
from h3kit.steps.options import ComfyTarget, InstallOptions

SCHEMA = "h3kit.install/1"



def run(options: InstallOptions, ctx: Session) -> Outcome:
    """The chain. Nothing is written before the locks are held: fingerprint, plan and the search for
    ComfyUI only read; the build (h3kit's cache), a new ComfyUI and the deploy write, each under its lock."""
    notes: list[str] = []
    warnings: list[str] = []
    config = load_config(ctx)
    fingerprint, plan = (saved_plan(config, options.profile, notes, options.fingerprint_file)
                         if options.fingerprint_file else current_plan(ctx, config, options.profile, notes))
    settings = plan.settings.to_json() if plan else {}
    profile = plan.profile if plan else (options.profile or "none")
    target = options.comfyui
    if options.new_comfyui and not ctx.dry_run:
        with exclusive_home(ctx, "install"):
            # its own venv runs it, whatever --comfyui-python named
            target = ComfyTarget(str(new_comfyui(ctx, options.new_comfyui, options.comfyui_source, fingerprint)))
    try:
        install = locate(target, ctx, config, need_write=True)
    except NotReady as missing:
        offer = not target.path and options.offer_new_comfyui
        with exclusive_home(ctx, "install"):
            created = offer_new_comfyui(ctx, fingerprint, options.comfyui_source,
                                        searched=comfyui_locate.searched_places(),
                                        min_version=h3_support.requirements(catalog.load())[0]) if offer else None
            if created is None:
                _build(ctx, notes, warnings)
                warnings += list(plan.warnings) if plan else []
                return _without_comfyui(options, ctx, (fingerprint, plan), profile, notes, warnings, missing)
        install = locate(ComfyTarget(str(created)), ctx, config, need_write=True)
    with exclusive(ctx, install, "install"):
        library = _build(ctx, notes, warnings)
        plan = probed_plan(ctx, config, install, fingerprint, plan, notes, profile=options.profile,
                           saved=bool(options.fingerprint_file))  # before any download
        settings, profile = (plan.settings.to_json(), plan.profile) if plan else (settings, profile)
        outcome = _into(options, ctx, config, fingerprint, plan, settings, profile, library, install, notes, warnings)
    last = list(plan.warnings) if plan else []  # the plan's (what falls short, how long a clip takes)
    outcome.warnings = [w for w in outcome.warnings if w not in last] + last
    return outcome


def _into(options: InstallOptions, ctx: Session, config, fingerprint, plan, settings: dict, profile: str, library, install,
          notes: list[str], warnings: list[str]) -> Outcome:
    """Everything from inspecting the found ComfyUI on, under its lock (h3kit.steps.common.exclusive)."""
    info = comfyui_locate.inspect(install)
    ctx.progress(f"ComfyUI {info.get('comfyui_version') or '?'} at {install.path}; Python {info.get('python_version')}, "
                 f"torch {info.get('torch') or 'missing'} ({info.get('torch_build') or '-'})")
    for line in loud(torch_findings(fingerprint, info)):
        ctx.progress("WARNING: " + line)
        warnings.append(line)
    doc = {"schema": SCHEMA, "comfyui": {"path": str(install.path), "python": str(install.python),
                                         "version": info.get("comfyui_version"), "layout": install.layout,
                                         "found_by": install.source, "torch": info.get("torch"),
                                         "torch_build": info.get("torch_build")},
           "node_dir": str(install.node_dir), "profile": profile, "launchers": [], "manifest": None,
           "verified": False, "report": None, "library": str(library) if library else None, "notes": notes}
    if ctx.dry_run:
        doc["dry_run"] = True
        return Outcome(doc, f"Would install the node pack into {install.node_dir} with profile '{profile}' "
                            "and write a launcher; nothing changed (--dry-run).", 0, warnings)

    result = deploy.deploy(install, settings=settings, profile=profile, library=library,
                           state_dir=ctx.locations.state_dir, cache_dir=ctx.locations.cache_dir, progress=ctx.progress,
                           generated=generated_files(plan))
    notes += result.notes
    doc["manifest"] = str(result.manifest.path)
    doc["launchers"] = [result.launcher["path"]] if result.launcher.get("path") else []
    doc["launcher"] = result.launcher
    doc["backed_up"] = result.backed_up
    if result.launcher.get("dropped"):
        warnings.append(f"flags this ComfyUI does not accept were left out of the launcher: {' '.join(result.launcher['dropped'])}")
    if not result.launcher.get("path"):
        notes.append(result.launcher.get("detail", "no launcher written"))
    ctx.progress("Verifying: importing the pack with ComfyUI's Python...")
    try:
        doc.update(deploy.verify(install))
    except VerificationFailed as exc:
        exc.details = doc
        raise
    remember_comfyui(ctx, config, install, notes)
    ctx.progress("Checking that this ComfyUI can run MiniMax H3...")
    support = h3_support.check(install, catalog.load(), comfyui_locate.run_python)
    doc["h3"] = support.to_json()
    _after_deploy(options, ctx, (fingerprint, plan), install, doc, notes, support)
    if not support.ready:
        # Installed and verified, but this ComfyUI cannot load H3: no weights were fetched for it.
        raise NotReady(f"h3kit is installed in {install.node_dir}, but {_lower_first(h3_support.problem(support))} "
                       "No model weights were downloaded, since this ComfyUI cannot load them.",
                       h3_support.fix(support, install, catalog.load()) + "; then run the install again",
                       details=doc)
    if plan is not None and plan.fits is False:
        # Installed and verified, but the contract's "machine below the floor":
        # exit 3 with what is short, after everything that helps the user ran.
        short = plan.blocked or "; ".join(plan.warnings[:2]) or "the plan does not fit"
        raise NotReady(f"h3kit is installed in {install.node_dir}, but this machine is below what the model needs "
                       f"even at the smallest settings. {short}",
                       plan.shortfall_fix or "Read 'h3kit plan' for the shortfall.", details=doc)
    if (refused := _refused(options, ctx, plan)):
        raise NotReady(f"h3kit is installed in {install.node_dir}; no model file was downloaded. {refused}",
                       "Run 'h3kit plan' to see why; change config.yaml and run 'h3kit install' again, or pass "
                       "--allow-unverified.", details=doc)
    app_start = None
    if install.app:
        flags = app_flags(install, plan, doc.get("launcher") or {})
        doc["app"] = {"name": install.app, "launch_args": list(install.launch_args), "flags_to_add": flags,
                      "how": HOW_TO_ADD[install.app]}
        app_start = next_steps.app_start_line(install.app, flags, HOW_TO_ADD[install.app])
    closing = next_steps.lines(doc["launchers"][0] if doc["launchers"] else None, plan,
                               {"estimates": doc.get("calibration_estimates")},
                               cpu_only=not (fingerprint and fingerprint.gpus), app_start=app_start)
    doc["next_steps"] = closing
    text = (f"h3kit installed into {install.node_dir} (profile '{profile}', verified)."
            + "".join(f"\nnote: {n}" for n in notes) + "\n" + "\n".join(closing))
    return Outcome(doc, text, 0, warnings)


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


def _after_deploy(options: InstallOptions, ctx: Session, planned: tuple, install: comfyui_locate.ComfyInstall,
                  doc: dict, notes: list[str], support: h3_support.H3Support) -> None:
    """`planned` is install's (fingerprint, plan): calibration measures for that profile and that machine."""
    plan = planned[1]
    if not support.ready:
        notes.append("models skipped: this ComfyUI cannot load MiniMax H3 yet, so no weights are downloaded")
        doc["report"] = _calibrate(options, ctx, install.path, notes, doc, planned)
        return
    if plan.fits is False:
        notes.append("models skipped: the plan does not fit this machine, so no weights are downloaded")
        doc["report"] = _calibrate(options, ctx, install.path, notes, doc, planned)
        return
    if _refused(options, ctx, plan):
        notes.append("models skipped: the plan holds files not known to load here, so no weights are downloaded")
        doc["report"] = _calibrate(options, ctx, install.path, notes, doc, planned)
        return
    try:
        folders = model_folders(install, ctx)
        doc["model_folders"] = folders.to_json()
        doc["models"] = ensure_models(ctx, plan, install.path, skip=options.skip_models,
                                      with_loaders=options.with_loaders, allow_unverified=options.allow_unverified,
                                      folders=folders)
    except H3kitError as failed:
        # The pack is installed and verified; the calibration needs no weights, so it still runs
        # (its report says what the machine can do), and the models error is the exit.
        notes.append(f"models not complete: {failed.message}")
        doc["report"] = _calibrate(options, ctx, install.path, notes, doc, planned)
        failed.details = {**doc, **failed.details}
        raise
    doc["report"] = _calibrate(options, ctx, install.path, notes, doc, planned)


def _calibrate(options: InstallOptions, ctx: Session, comfyui_dir: Path | None, notes: list[str],
               doc: dict | None, planned: tuple) -> str | None:
    if options.skip_calibrate or ctx.dry_run:
        notes.append("calibration skipped (--skip-calibrate)" if options.skip_calibrate
                     else "calibration skipped (--dry-run)")
        return None

    ctx.progress("Calibrating (quick)...")
    # The profile install planned and its fingerprint (--fingerprint FILE's too): calibration's re-apply must
    # rewrite the pack with that profile, never with the one it would pick by itself, and need not probe again.
    fingerprint, plan = planned
    result = calibrate.run(ctx, comfyui_dir=comfyui_dir, quick=True, with_model=False, fingerprint=fingerprint,
                           profile=plan.profile if plan else options.profile) or {}
    if doc is not None:
        doc["calibration_estimates"] = result.get("estimates")
    files = result.get("report_files") or {}
    return files.get("md") or files.get("json")


def _without_comfyui(options: InstallOptions, ctx: Session, planned: tuple, profile, notes, warnings,
                     missing: NotReady) -> Outcome:
    """No ComfyUI: still calibrate (the report says what this machine can run), then exit 3."""
    plan = planned[1]
    report = _calibrate(options, ctx, None, notes, None, planned)
    details = {"schema": SCHEMA, "comfyui": None, "profile": profile, "verified": False, "report": report,
               "notes": notes, "warnings": warnings, "plan_fits": plan.fits if plan else None}
    raise NotReady(missing.message + (f" The calibration report is at {report}." if report else ""),
                   missing.fix, details=details)
