"""profiles/comfy_nodes.yaml: the signatures of the ComfyUI nodes h3kit's workflows use.

Read as plain data; h3kit.comfyui.graph needs each node's input order (widget
values are matched by position in the UI format) and its output types.
"""

from __future__ import annotations

from pathlib import Path

from h3kit.core.errors import BadInput
from h3kit.core.paths import asset_dir
from h3kit.data.yamlio import load_yaml

SCHEMA = "h3kit.comfyui-nodes/1"


def load(path: str | Path | None = None) -> dict:
    """node type -> {"inputs": [...], "outputs": [...]}."""
    p = Path(path) if path is not None else asset_dir("profiles") / "comfy_nodes.yaml"
    doc = load_yaml(p)
    data = doc.data if isinstance(doc.data, dict) else {}
    if data.get("schema") != SCHEMA or not isinstance(data.get("nodes"), dict):
        raise BadInput(f"{p} is not h3kit's node signature table ({SCHEMA}).", "Reinstall h3kit (./install.sh).")
    return data["nodes"]
