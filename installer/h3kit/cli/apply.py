"""`h3kit apply`: re-apply the config and profile to the installed node pack and its launcher.

Rewrites h3kit_profile.json (the nodes re-read it at their next run) and the
launcher (its flags take effect when ComfyUI is restarted), then updates the
install record.
"""

from __future__ import annotations

from pathlib import Path

from h3kit.cli.context import Context, Outcome
from h3kit.comfyui import deploy
from h3kit.data import catalog
from h3kit.steps.common import current_plan, exclusive, generated_files, load_config, locate
from h3kit.steps.format_probe import probed_plan

HELP = "re-apply the config and profile to the installed node pack and its launcher"


def add_arguments(p) -> None:
    p.add_argument("--comfyui", metavar="PATH", help="the ComfyUI folder h3kit was installed into")
    p.add_argument("--comfyui-python", metavar="PATH", help="the Python that runs that ComfyUI")
    p.add_argument("--profile", metavar="NAME", help="apply this profile instead of the config's")


def run(args, ctx: Context) -> Outcome:
    notes: list[str] = []
    config = load_config(ctx)
    install = locate(args, ctx, config, need_write=True)
    with exclusive(ctx, install, "apply"):
        return _apply(args, ctx, config, install, notes)


def _apply(args, ctx: Context, config, install, notes: list[str]) -> Outcome:
    fingerprint, plan = current_plan(ctx, config, getattr(args, "profile", None), notes)
    # the plan install made used this ComfyUI's format probe; apply plans with the same evidence
    plan = probed_plan(args, ctx, config, install, fingerprint, plan, notes)
    doc = deploy.apply(install, plan.settings.to_json(), plan.profile, ctx.locations.state_dir,
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
    if launcher.get("dropped"):
        warnings.append(f"flags this ComfyUI does not accept were left out: {' '.join(launcher['dropped'])}")
    text = (f"Applied profile '{doc['profile']}' to {install.node_dir}. The nodes pick it up at their next run; "
            f"restart ComfyUI with {launcher.get('path') or 'its usual launcher'} for new launch flags.")
    text += "".join(f"\nYour edited {Path(b).name} was moved out of the way first (yours, kept): {b}"
                    for b in doc.get("backed_up", []))
    text += "".join(f"\nnote: {n}" for n in doc["notes"])
    return Outcome(doc, text, 0, warnings)
