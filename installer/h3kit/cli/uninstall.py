"""`h3kit uninstall`: remove exactly what h3kit installed, nothing else (rules in h3kit.comfyui.uninstall)."""

from __future__ import annotations

from h3kit.cli.context import Context, Outcome
from h3kit.comfyui import manifest as mf
from h3kit.comfyui import uninstall as un
from h3kit.comfyui.deploy import disabled_copy
from h3kit.core.errors import EXIT_VERIFY_FAILED, BadInput, H3kitError
from h3kit.steps.common import exclusive, load_config, locate

HELP = "remove exactly what h3kit installed, nothing else"


def add_arguments(p) -> None:
    p.add_argument("--comfyui", metavar="PATH", help="the ComfyUI folder h3kit was installed into")
    p.add_argument("--comfyui-python", metavar="PATH", help="the Python that runs that ComfyUI (not needed to uninstall)")
    p.add_argument("--purge", action="store_true", help="also remove config, cache, reports and h3kit's own venv")


def run(args, ctx: Context) -> Outcome:
    try:
        config = load_config(ctx)
    except H3kitError:
        config = None  # a broken config must not stop an uninstall
    install = locate(args, ctx, config, need_write=not ctx.dry_run)
    with exclusive(ctx, install, "uninstall"):
        return _uninstall(args, ctx, install)


def _uninstall(args, ctx: Context, install) -> Outcome:
    path = mf.manifest_path(ctx.locations.state_dir, install.path)
    try:
        record = mf.load_for(ctx.locations.state_dir, install.path)
    except BadInput as corrupt:
        return _without_record(ctx, install, corrupt)
    if record is None:
        return _without_record(ctx, install, BadInput(
            f"h3kit has no install record for {install.path} (looked for {path}), so it will not guess what to remove.",
            "Run the same command with --dry-run to see what it would remove; delete those yourself if you agree."))
    disabled = disabled_copy(install, record)
    if disabled is not None:  # ComfyUI-Manager disabled it: the same pack under the other name
        record.rebase(install.node_dir, disabled)
        ctx.progress(f"The node pack is disabled (renamed to {disabled} by ComfyUI-Manager); removing it there.")
    if not ctx.dry_run and not ctx.confirm(f"Remove h3kit from {install.path}?", default=True):
        return Outcome({"schema": "h3kit.uninstall/1", "cancelled": True}, "Nothing removed.")
    from h3kit.comfyui.setup import purge_on_uninstall, restore_on_uninstall

    torch_notes = restore_on_uninstall(ctx, record)
    result = un.remove(record, install, ctx.locations.state_dir, dry_run=ctx.dry_run)
    purged = un.purge(ctx.locations, ctx.dry_run) if args.purge else []
    if not ctx.dry_run:
        un.forget_record(record, result)
    comfyui_purge = purge_on_uninstall(ctx, record) if args.purge else None
    if comfyui_purge and comfyui_purge.get("removed"):  # kept by the replay above, then purged
        result.kept = [k for k in result.kept if not k["path"].startswith(comfyui_purge["removed"])]
    doc = {"schema": "h3kit.uninstall/1", "comfyui": str(install.path), "dry_run": ctx.dry_run, **result.to_json(),
           "purged": purged, "torch": torch_notes, "comfyui_purge": comfyui_purge,
           "disabled_pack": str(disabled) if disabled else None}
    verb = "Would remove" if ctx.dry_run else "Removed"
    lines = [f"{verb} {len(result.removed)} files and folders h3kit installed in {install.path}."]
    lines += [f"  {'would remove' if ctx.dry_run else 'removed'} the staging folder an interrupted install left: {p}"
              for p in result.staging_cleaned]
    lines += [f"  moved to backup (changed or added by you): {b['path']} -> {b['backup']}" for b in result.backed_up]
    lines += [f"  kept: {k['path']} ({k['why']})" for k in result.kept]
    lines += [f"  purged: {p}" for p in purged]
    lines += [f"  undone (doctor --fix): {n}" for n in torch_notes]
    if comfyui_purge and comfyui_purge.get("removed"):
        lines.append(f"  removed the ComfyUI h3kit created: {comfyui_purge['removed']}")
        lines += [f"  kept your files in {k}" for k in comfyui_purge.get("kept", [])]
    if result.behind_links:
        links = sorted({b["link"] for b in result.behind_links})
        lines.append(f"Left {len(result.behind_links)} recorded files alone because {', '.join(links)} "
                     "is now a link to somewhere else; h3kit never follows links. Remove the link yourself if "
                     "you want, then run uninstall again.")
        return Outcome(doc, "\n".join(lines), EXIT_VERIFY_FAILED)
    return Outcome(doc, "\n".join(lines))


def _without_record(ctx: Context, install, problem: BadInput) -> Outcome:
    if not ctx.dry_run:
        return _staging_only(ctx, install, problem)
    guessed = un.guess(install)
    doc = {"schema": "h3kit.uninstall/1", "comfyui": str(install.path), "dry_run": True, "record": None,
           "problem": problem.message, "would_remove": guessed}
    text = (f"{problem.message}\nWithout a record h3kit removes nothing. These are h3kit's names in this ComfyUI:\n"
            + ("\n".join(f"  {p}" for p in guessed) or "  (none found)"))
    return Outcome(doc, text)


def _staging_only(ctx: Context, install, problem: BadInput) -> Outcome:
    """No record: remove only the staging folders an interrupted install left (they carry h3kit's mark);
    anything else under h3kit's names is refused, since without a record h3kit will not guess."""
    from h3kit.comfyui.deploy import clean_staging

    cleaned = clean_staging(install)
    said = "".join(f"\nRemoved the staging folder an interrupted install left: {p}" for p in cleaned)
    if un.guess(install) or not cleaned:
        problem.message += said
        raise problem
    doc = {"schema": "h3kit.uninstall/1", "comfyui": str(install.path), "dry_run": False, "record": None,
           "removed": [], "staging_cleaned": cleaned, "backed_up": [], "kept": [], "missing": [], "behind_links": []}
    return Outcome(doc, f"h3kit has no install record for {install.path}; nothing else of h3kit's is there." + said)
