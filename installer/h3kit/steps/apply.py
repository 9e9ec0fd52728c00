"""`h3kit apply`'s step: plan once more, then re-apply the config and profile to the installed pack and its launcher.

Rewrites h3kit_profile.json (the nodes re-read it at their next run) and the
launcher (its flags take effect when ComfyUI is restarted), then updates the
install record. Doctor --fix runs this step for a stale profile or launcher.
"""

from __future__ import annotations

from pathlib import Path

from h3kit.calibrate.handover import Found
from h3kit.comfyui import deploy
from h3kit.core.session import Outcome, Session
from h3kit.core.errors import BadInput
from h3kit.data import catalog
from h3kit.data import config as config_mod
from h3kit.data.settings import AUTO, PRESETS
from h3kit.steps.common import exclusive, fingerprinted, generated_files, load_config, locate
from h3kit.steps.planning import plan_for
from h3kit.steps.version_record import record_inherited
from h3kit.steps.options import ApplyOptions


def run(options: ApplyOptions, ctx: Session) -> Outcome:
    notes: list[str] = []
    config = load_config(ctx)
    if options.preset is not None:
        config = _switch_preset(ctx, config, options.preset, notes)
    install = locate(options.comfyui, ctx, config, need_write=True)
    with exclusive(ctx, install, "apply"):
        return _apply(options, ctx, config, install, notes)


def _switch_preset(ctx: Session, config, preset: str, notes: list[str]):
    """config.yaml's overrides with `preset` (auto: without the key), written unless --dry-run; the config re-read."""
    if preset not in (AUTO,) + PRESETS:
        raise BadInput(f"There is no preset named {preset!r}.", f"Choose one of: {', '.join((AUTO,) + PRESETS)}.")
    path = config.raw or ctx.locations.config_file
    if ctx.dry_run:
        notes.append(f"would set preset: {preset} in {path} (--dry-run)")
        return config
    config_mod.set_in_section(path, "overrides", "preset", None if preset == AUTO else preset)
    notes.append(f"preset: {preset} written to the overrides in {path}")
    return load_config(ctx)


def _apply(options: ApplyOptions, ctx: Session, config, install, notes: list[str]) -> Outcome:
    # one plan, with the evidence install's had: this ComfyUI's format probe and its version
    plan = plan_for(ctx, config, fingerprinted(ctx, None, notes), notes, profile=options.profile,
                    found=Found(install)).plan
    doc = deploy.apply(install, plan.settings, plan.profile, ctx.locations.state_dir,
                       ctx.locations.cache_dir, dry_run=ctx.dry_run, generated=generated_files(plan))
    doc["notes"] = notes + doc.get("notes", [])
    # The flags known to harm H3 reach the launcher when the user insists; apply says so, as plan does.
    harmful = [a for a in plan.settings.comfyui_args if a in catalog.load().avoid_args]
    warnings = [f"comfyui_args {' '.join(harmful)} are known to give black frames with H3 (it computes in bf16): "
                "remove them from overrides in config.yaml and run 'h3kit apply' again."] if harmful else []
    if ctx.dry_run:
        return Outcome(doc, f"Would apply profile '{doc['profile']}' to {install.node_dir} and rewrite the launcher "
                       "(--dry-run).", 0, warnings)
    launcher = doc["launcher"]
    record_inherited(ctx, install, "apply")
    if launcher.get("dropped"):
        warnings.append(f"flags this ComfyUI does not accept were left out: {' '.join(launcher['dropped'])}")
    text = f"Applied profile '{doc['profile']}' to {install.node_dir}. {doc['restart_why']}"
    text += "".join(f"\nYour edited {Path(b).name} was moved out of the way first (yours, kept): {b}"
                    for b in doc.get("backed_up", []))
    text += "".join(f"\nnote: {n}" for n in doc["notes"])
    return Outcome(doc, text, 0, warnings)
