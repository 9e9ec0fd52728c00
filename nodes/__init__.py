"""h3kit's node pack for ComfyUI (installed and removed by `h3kit install` / `h3kit uninstall`).

Thin on purpose: node classes declare inputs and call into `h3kit_logic`,
which does not import ComfyUI and has its own tests. Importing this package
needs neither torch nor h3kit's native library; a node that needs one says so
when it runs.
"""

from . import h3kit_calibration_node, h3kit_gguf_node, h3kit_streaming_node, h3kit_te_stream_node
from .h3kit_nodes import NODE_CLASS_MAPPINGS, NODE_DISPLAY_NAME_MAPPINGS

_PARTS = (h3kit_calibration_node, h3kit_streaming_node, h3kit_gguf_node, h3kit_te_stream_node)
for _part in _PARTS:
    NODE_CLASS_MAPPINGS = {**NODE_CLASS_MAPPINGS, **_part.NODE_CLASS_MAPPINGS}
    NODE_DISPLAY_NAME_MAPPINGS = {**NODE_DISPLAY_NAME_MAPPINGS, **_part.NODE_DISPLAY_NAME_MAPPINGS}

__all__ = ["NODE_CLASS_MAPPINGS", "NODE_DISPLAY_NAME_MAPPINGS"]
