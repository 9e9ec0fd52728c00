"""Backups: a user's own file, moved out of h3kit's way into h3kit's state folder, never deleted.

`backup_root` is one folder per ComfyUI and run (`state/backups/<slug>/<time>`);
`backup_dest` keeps the file's place relative to its base there. A backup made
while h3kit writes into a ComfyUI is recorded before the move
(h3kit.comfyui.journal.Journal.back_up, role `backup`: the user's, left by
uninstall); uninstall's own, made as the record goes away, are not
(`move_to_backup`).
"""

from __future__ import annotations

import os
from pathlib import Path

from h3kit.comfyui.manifest import BACKUP_ROLE, now_iso, slug_for
from h3kit.core import files

__all__ = ["BACKUP_ROLE", "backup_root", "backup_dest", "move_to_backup"]


def backup_root(state_dir: Path, target: str | os.PathLike) -> Path:
    return Path(state_dir) / "backups" / slug_for(Path(target)) / now_iso().replace(":", "")


def backup_dest(path: Path, base: Path, backups: Path) -> Path:
    """Where `path` goes under `backups`: its place relative to `base`, numbered when taken (two in one second)."""
    try:
        rel = Path(path).relative_to(base)
    except ValueError:
        rel = Path(Path(path).name)
    dest = backups / rel
    n = 0
    while dest.exists() or dest.is_symlink():
        n += 1
        dest = backups / rel.with_name(f"{rel.name}.{n}")
    return dest


def move_to_backup(path: Path, base: Path, backups: Path) -> Path:
    """Move `path` (never following a link) under `backups`, keeping its place relative to `base` (unrecorded:
    uninstall's own backups, made as the record goes away)."""
    dest = backup_dest(path, base, backups)
    files.make_dirs(dest.parent)
    files.move(path, dest)  # a symlink is moved as a link
    return dest
