"""Where the locks of h3kit.core.lock live: in h3kit's state folder, never inside a ComfyUI.

One lock per ComfyUI (named like its install record, so two spellings of one
folder share it) and one for h3kit's own home (its cache and records).
"""

from __future__ import annotations

import os
from pathlib import Path

from h3kit.comfyui.manifest import slug_for


def lock_path(state_dir: Path, target: str | os.PathLike) -> Path:
    """The lock file of one ComfyUI."""
    return Path(state_dir) / "locks" / f"{slug_for(Path(target))}.lock"


def home_lock_path(state_dir: Path) -> Path:
    return Path(state_dir) / "locks" / "h3kit-home.lock"
