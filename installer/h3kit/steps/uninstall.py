"""`h3kit uninstall`'s step: remove exactly what h3kit installed, nothing else (rules in h3kit.comfyui.uninstall).

The answer is the h3kit.uninstall/1 document itself, in one of four shapes
that `cli/uninstall.py` renders: removed (the record replayed: `removed`,
`backed_up`, `kept`, `behind_links`, ...), `cancelled`, no record under
--dry-run (`problem` and the `would_remove` guess), no record otherwise
(only the staging folders an interrupted install left, `record: null`).
"""

from __future__ import annotations

from h3kit.comfyui import manifest as mf
from h3kit.comfyui import uninstall
from h3kit.comfyui.deploy import clean_staging, disabled_copy
from h3kit.comfyui.setup import purge_on_uninstall, restore_on_uninstall
from h3kit.core.errors import BadInput, H3kitError
from h3kit.core.session import Session
from h3kit.steps.common import exclusive, load_config, locate
from h3kit.steps.options import UninstallOptions

SCHEMA = "h3kit.uninstall/1"


def run(options: UninstallOptions, ctx: Session) -> dict:
    try:
        config = load_config(ctx)
    except H3kitError:
        config = None  # a broken config must not stop an uninstall
    install = locate(options.comfyui, ctx, config, need_write=not ctx.dry_run)
    with exclusive(ctx, install, "uninstall"):
        return _uninstall(options, ctx, install)


def _uninstall(options: UninstallOptions, ctx: Session, install) -> dict:
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
        return {"schema": SCHEMA, "cancelled": True}
    torch_notes = restore_on_uninstall(ctx, record)
    result = uninstall.remove(record, install, ctx.locations.state_dir, dry_run=ctx.dry_run)
    purged = uninstall.purge(ctx.locations, ctx.dry_run) if options.purge else []
    if not ctx.dry_run:
        uninstall.forget_record(record, result)
    comfyui_purge = purge_on_uninstall(ctx, record) if options.purge else None
    if comfyui_purge and comfyui_purge.get("removed"):  # kept by the replay above, then purged
        result.kept = [k for k in result.kept if not k["path"].startswith(comfyui_purge["removed"])]
    return {"schema": SCHEMA, "comfyui": str(install.path), "dry_run": ctx.dry_run, **result.to_json(),
            "purged": purged, "torch": torch_notes, "comfyui_purge": comfyui_purge,
            "disabled_pack": str(disabled) if disabled else None}


def _without_record(ctx: Session, install, problem: BadInput) -> dict:
    if not ctx.dry_run:
        return _staging_only(install, problem)
    return {"schema": SCHEMA, "comfyui": str(install.path), "dry_run": True, "record": None,
            "problem": problem.message, "would_remove": uninstall.guess(install)}


def _staging_only(install, problem: BadInput) -> dict:
    """No record: remove only the staging folders an interrupted install left (they carry h3kit's mark);
    anything else under h3kit's names is refused, since without a record h3kit will not guess."""
    cleaned = clean_staging(install)
    if uninstall.guess(install) or not cleaned:
        problem.message += "".join(f"\nRemoved the staging folder an interrupted install left: {p}" for p in cleaned)
        raise problem
    return {"schema": SCHEMA, "comfyui": str(install.path), "dry_run": False, "record": None, "removed": [],
            "staging_cleaned": cleaned, "backed_up": [], "kept": [], "missing": [], "behind_links": []}
