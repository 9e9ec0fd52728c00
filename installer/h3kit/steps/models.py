"""`h3kit models`' step: the weight files the plan needs: plan | status | fetch | verify | remove.

The plan is made as install made it, by the one plan maker
(h3kit.steps.planning): this machine's (or a saved fingerprint's), for the
chosen ComfyUI's version, with the format probe cached for it as its evidence
(read as it is: this command never starts ComfyUI's Python). The answer is
the action's h3kit.models/1 document and the ComfyUI folder it was about,
which `cli/models.py` renders.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from h3kit import models
from h3kit.calibrate.handover import Found
from h3kit.comfyui.locate import ComfyInstall, app_of, detect_layout, find, find_python, take_app
from h3kit.core.errors import BadInput, NotReady
from h3kit.core.session import Session
from h3kit.data.plan_doc import Plan
from h3kit.steps.common import Fingerprinted, load_config, model_folders
from h3kit.steps.options import ModelsOptions
from h3kit.steps.planning import Probing, plan_for


@dataclass(frozen=True)
class ModelsAnswer:
    doc: dict
    comfyui: Path | None  # the ComfyUI whose models folder the action was about; None: `plan` without one found


def run(options: ModelsOptions, ctx: Session) -> ModelsAnswer:
    config = load_config(ctx)
    if options.action == "remove":
        install = _comfyui(options, ctx, config, required=True)
        plan = _plan(options, ctx, config, install) if options.fingerprint_file else None
        return ModelsAnswer(models.remove(ctx, install.path, plan=plan, folders=model_folders(install, ctx)),
                            install.path)
    if options.action == "plan":
        install = _comfyui(options, ctx, config, required=False)
        comfy = install.path if install else None
        return ModelsAnswer(models.plan_doc(_plan(options, ctx, config, install), comfyui_dir=comfy), comfy)
    install = _comfyui(options, ctx, config, required=True)
    comfy, folders = install.path, model_folders(install, ctx)
    plan = _plan(options, ctx, config, install)
    if options.action == "status":
        return ModelsAnswer(models.status_doc(ctx, plan, comfy, folders=folders), comfy)
    if options.action == "verify":
        return ModelsAnswer(models.verify(ctx, plan, comfy, folders=folders), comfy)
    return ModelsAnswer(_fetch(options, ctx, plan, comfy, folders), comfy)


def _fetch(options: ModelsOptions, ctx: Session, plan: Plan, comfy: Path, folders) -> dict:
    doc: dict = {}
    if options.with_loaders:
        files = models.files_for_plan(plan)
        packs = {f.loader_pack.name: f.loader_pack for f in files if f.loader_pack}
        doc["loader_packs"] = [models.install_loader_pack(ctx, p, comfy) for p in packs.values()]
    if ctx.dry_run:
        doc.update(models.status_doc(ctx, plan, comfy, folders=folders), action="fetch", dry_run=True)
        return doc
    doc.update(models.fetch(ctx, plan, comfy, from_dir=options.from_dir, folders=folders))
    return doc


def _plan(options: ModelsOptions, ctx: Session, config, install: ComfyInstall | None) -> Plan:
    """The plan as install made it, for `install` (None: none found): its version, its cached format probe."""
    notes: list[str] = []  # what the plan maker says goes to the log; the models document has no notes
    plan = plan_for(ctx, config, Fingerprinted.read(options.fingerprint_file), notes, profile=options.profile,
                    found=Found(install) if install is not None else None, probing=Probing.CACHE,
                    progress=False).plan
    for note in notes:
        ctx.log.info("models: %s", note)
    return plan


def _comfyui(options: ModelsOptions, ctx: Session, config, *, required: bool) -> ComfyInstall | None:
    """--comfyui PATH (any folder with main.py or models/: the models step needs no custom_nodes), else the
    usual search (h3kit.comfyui.locate); None when not required and not found."""
    if options.comfyui:
        p = Path(options.comfyui).expanduser()
        if not p.is_dir():
            raise BadInput(f"--comfyui {options.comfyui} is not a folder.",
                           "Pass the ComfyUI folder (the one holding main.py).")
        if not (p / "main.py").is_file() and not (p / "models").is_dir():
            raise BadInput(f"{p} does not look like ComfyUI (no main.py, no models folder).",
                           "Pass the ComfyUI folder itself (the one holding main.py).")
        install = ComfyInstall(p.absolute(), "--comfyui", detect_layout(p.absolute()))
        app = app_of(install.path, {})  # its launch arguments name the shared folders, as the search finds them
        take_app(install, app)
        install.python, install.python_source = find_python(install, config, app=app)
        return install
    try:
        return find(None, config, ctx, need_write=required)
    except (NotReady, BadInput):
        if required:
            raise
        return None
