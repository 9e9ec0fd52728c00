"""`h3kit apply`: re-apply the config and profile to the installed node pack and its launcher.

Rewrites h3kit_profile.json (the nodes re-read it at their next run) and the
launcher (its flags take effect when ComfyUI is restarted), then updates the
install record.
"""

from __future__ import annotations

import json

from h3kit import deploy
from h3kit import manifest as mf
from h3kit.command import Context, Outcome
from h3kit.commands.install import current_plan, load_config, locate
from h3kit.errors import NotReady

HELP = "re-apply the config and profile to the installed node pack and its launcher"


def add_arguments(p) -> None:
    p.add_argument("--comfyui", metavar="PATH", help="the ComfyUI folder h3kit was installed into")
    p.add_argument("--comfyui-python", metavar="PATH", help="the Python that runs that ComfyUI")
    p.add_argument("--profile", metavar="NAME", help="apply this profile instead of the config's")


def run(args, ctx: Context) -> Outcome:
    notes: list[str] = []
    config = load_config(ctx)
    install = locate(args, ctx, config, need_write=True)
    record = mf.load_or_new(ctx.locations.state_dir, install.path)
    if record.find(install.node_dir) is None or not install.node_dir.is_dir():
        raise NotReady(f"h3kit is not installed in {install.path}, so there is nothing to apply.",
                       f'Run h3kit install --comfyui "{install.path}" first.')
    _, plan = current_plan(ctx, config, getattr(args, "profile", None), notes)
    settings, profile = dict(plan["settings"]), plan["profile"]
    before = _current_profile(install)
    doc = {"schema": "h3kit.apply/1", "comfyui": str(install.path), "profile": profile,
           "previous_profile": before.get("profile"), "changed": before.get("settings") != settings
           or before.get("profile") != profile, "notes": notes}
    if ctx.dry_run:
        doc["dry_run"] = True
        return Outcome(doc, f"Would apply profile '{profile}' to {install.node_dir} and rewrite the launcher (--dry-run).")
    path = deploy.rewrite_profile(install, record, settings, profile)
    launcher = deploy.write_launcher(install, record, settings, profile, ctx.locations.state_dir, ctx.locations.cache_dir)
    record.extra.update({"profile": profile, "launcher": launcher})
    record.save()
    doc.update({"profile_file": str(path), "launcher": launcher, "manifest": str(record.path)})
    warnings = []
    if launcher.get("dropped"):
        warnings.append(f"flags this ComfyUI does not accept were left out: {' '.join(launcher['dropped'])}")
    text = (f"Applied profile '{profile}' to {install.node_dir}. The nodes pick it up at their next run; "
            f"restart ComfyUI with {launcher.get('path') or 'its usual launcher'} for new launch flags.")
    return Outcome(doc, text, 0, warnings)


def _current_profile(install) -> dict:
    try:
        return json.loads((install.node_dir / deploy.PROFILE_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
