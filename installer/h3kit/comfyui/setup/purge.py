"""What `h3kit uninstall` does to a ComfyUI setup: `--purge` removes a ComfyUI h3kit created, and what
`doctor --fix` changed (a torch it replaced, a checkout it moved to a release with H3) is put back.

A ComfyUI counts as h3kit's only when the manifest says h3kit created it
(`extra.comfyui_setup.created_by`) and records its folder. Its user-data
folders (models/, output/, ...) are kept, moved beside it, whenever they hold
a file that neither came with ComfyUI's source nor was written by h3kit
itself, unless the person confirms their removal too.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from h3kit.comfyui.setup.create import ROLE, state_path
from h3kit.comfyui.setup.pip import setup_table
from h3kit.comfyui.setup.torch_repair import undo_torch
from h3kit.core.errors import H3kitError
from h3kit.core.units import human_bytes


def created_comfyui(manifest) -> Path | None:
    """The ComfyUI folder this manifest says h3kit created (None when h3kit only installed into one)."""
    setup = manifest.extra.get("comfyui_setup") or {}
    if setup.get("created_by") != "h3kit":
        return None
    entries = [e for e in manifest.by_role(ROLE) if e.kind == "dir" and e.path == setup.get("dir")]
    return Path(entries[0].path) if entries else None


def _size(path: Path) -> int:
    total = 0
    for root, _dirs, files in os.walk(path):
        for f in files:
            try:
                total += os.lstat(os.path.join(root, f)).st_size
            except OSError:
                pass
    return total


def purge_plan(manifest) -> dict | None:
    """What `uninstall --purge` would remove of a ComfyUI h3kit created, and which user folders it keeps.

    A user-data folder is kept when it holds a file that neither came with
    ComfyUI's source nor is one h3kit wrote there itself (models h3kit
    downloaded count as the user's: they are large and slow to fetch again).
    """
    target = created_comfyui(manifest)
    if target is None or not target.is_dir():
        return None
    shipped = set(manifest.extra["comfyui_setup"].get("shipped") or [])
    ours = {Path(e.path).absolute() for e in manifest.entries if e.role != "model"}
    keep = []
    for name in setup_table()["user_data"]:
        area = target / name
        if not area.is_dir():
            continue
        users = [f for f in area.rglob("*") if f.is_file() and f.relative_to(target).as_posix() not in shipped
                 and f.absolute() not in ours]
        if users:
            keep.append({"path": str(area), "files": len(users), "bytes": sum(f.stat().st_size for f in users)})
    return {"comfyui": str(target), "bytes": _size(target), "user_data": keep}


def purge_comfyui(ctx, manifest, *, remove_user_data: bool = False) -> dict:
    """Remove the ComfyUI h3kit created; folders with the user's files move aside unless remove_user_data."""
    removal = purge_plan(manifest)
    if removal is None:
        return {"removed": None, "kept": []}
    target = Path(removal["comfyui"])
    kept = []
    if ctx.dry_run:
        return {"would_remove": str(target), "would_keep": [] if remove_user_data else removal["user_data"]}
    if removal["user_data"] and not remove_user_data:
        keep_root = target.with_name(target.name + "-kept-by-h3kit")
        keep_root.mkdir(exist_ok=True)
        for item in removal["user_data"]:
            src = Path(item["path"])
            dest = keep_root / src.name
            os.replace(src, dest)
            kept.append(str(dest))
    shutil.rmtree(target)
    for e in [e for e in manifest.entries if e.path == str(target) or e.path.startswith(str(target) + os.sep)]:
        manifest.forget(e.path)
    manifest.extra.pop("comfyui_setup", None)
    state = state_path(ctx, target)
    if state.exists():
        state.unlink()
    return {"removed": str(target), "kept": kept}


# -- hooks for `h3kit uninstall` --------------------------------------------------------------

def restore_on_uninstall(ctx, record) -> list[str]:
    """Uninstall undoes what earlier 'doctor --fix' runs changed, newest first: a ComfyUI moved to a release
    with H3 goes back to its commit and packages, a replaced torch is put back; a failure is a note, not a stop."""
    # imported here: versions.upgrade reaches setup.pip, whose package imports this module
    from h3kit.comfyui.versions import upgrade
    from h3kit.comfyui.versions.upgrade import recorded_actions, undo_upgrade

    if created_comfyui(record) is not None:
        return []
    verb = "would restore" if ctx.dry_run else "restored"
    notes = []
    for action in recorded_actions(record):
        what = "ComfyUI checkout that 'doctor --fix' moved" if action == upgrade.RECORD else "torch that 'doctor --fix' replaced"
        try:
            result = undo_upgrade(ctx, None, record) if action == upgrade.RECORD else undo_torch(ctx, record)
        except H3kitError as exc:
            notes.append(f"the {what} was not restored: {exc.message} {exc.fix or ''}".strip())
            continue
        if action == upgrade.RECORD:
            notes.append(f"{verb} the {what}: {result.get('checked_out') or result.get('would_checkout')}")
            continue
        restored = result.get("restored", result.get("would_restore", {}))
        notes.append(f"{verb} {', '.join(f'{n} {v}' for n, v in restored.items())} (replaced by 'doctor --fix')")
    return notes


def purge_on_uninstall(ctx, record) -> dict | None:
    """`uninstall --purge`: show what of a ComfyUI h3kit created would go, ask, remove.

    The user's models and outputs are removed only on an explicit interactive
    yes to a second question; --yes alone moves them beside the folder.
    """
    removal = purge_plan(record)
    if removal is None:
        return None
    lines = [f"h3kit created the ComfyUI in {removal['comfyui']} ({human_bytes(removal['bytes'])}); --purge removes it."]
    lines += [f"  kept unless you say otherwise: {u['path']} ({u['files']} files, {human_bytes(u['bytes'])})"
              for u in removal["user_data"]]
    ctx.progress("\n".join(lines))
    if not ctx.dry_run and not ctx.confirm(f"Remove the ComfyUI in {removal['comfyui']}?", default=False):
        return {"comfyui": removal["comfyui"], "removed": None, "cancelled": True}
    remove_user_data = bool(removal["user_data"]) and not ctx.dry_run and ctx.interactive and ctx.confirm(
        "Also delete your models and outputs listed above?", default=False)
    result = purge_comfyui(ctx, record, remove_user_data=remove_user_data)
    if not ctx.dry_run:
        if record.entries:
            record.save()
        elif record.path is not None and Path(record.path).exists():
            os.unlink(record.path)
    return {"comfyui": removal["comfyui"], "plan": removal, **result}
