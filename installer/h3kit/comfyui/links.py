"""Folders of a ComfyUI that were already links when h3kit installed (custom_nodes shared between ComfyUIs).

Uninstall never follows a link that appeared after the install (h3kit.comfyui.uninstall): the pack
folder replaced by a link to a checkout elsewhere is not h3kit's to touch. A link that was there when
h3kit installed, and still points where it pointed, is the user's own layout: the install wrote
through it, so uninstall may remove what it wrote there. `deploy` records them in the record's extra
`links` ({path: link text}); `same_as_recorded` tells the two apart.
"""

from __future__ import annotations

import os
from pathlib import Path


def linked_folders(install) -> dict[str, str]:
    """{path: link text} for the ComfyUI folders h3kit writes through that are links now."""
    out = {}
    for p in (install.custom_nodes,):
        if p.is_symlink():
            out[str(p.absolute())] = os.readlink(p)
    return out


def same_as_recorded(link: Path, recorded: dict | None) -> bool:
    """True when `link` was a link at install time and still names the same place."""
    want = (recorded or {}).get(str(Path(link).absolute()))
    try:
        return want is not None and os.readlink(link) == want
    except OSError:
        return False
