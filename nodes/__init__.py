"""h3kit's node pack for ComfyUI (installed and removed by `h3kit install` / `h3kit uninstall`).

Registration only: the node classes live in the feature packages beside
this file (nodes/README.md lists them), the panel's page in
`h3kit_panel/web` (WEB_DIRECTORY), its routes and queue guard are added to
ComfyUI's server by `h3kit_panel.register` (nothing happens outside
ComfyUI). Importing the pack needs neither torch nor h3kit's native library;
a node that needs one says so when it runs.
"""

from .h3kit_calibration import node as calibration
from .h3kit_decode import node as decode
from .h3kit_gguf import node as gguf
from .h3kit_panel import register as register_panel
from .h3kit_streaming import dit_node as streamed_dit, te_node as streamed_text_encoder

NODE_CLASS_MAPPINGS = {}
NODE_DISPLAY_NAME_MAPPINGS = {}
for _part in (decode, calibration, streamed_dit, gguf, streamed_text_encoder):
    NODE_CLASS_MAPPINGS.update(_part.NODE_CLASS_MAPPINGS)
    NODE_DISPLAY_NAME_MAPPINGS.update(_part.NODE_DISPLAY_NAME_MAPPINGS)
WEB_DIRECTORY = "./h3kit_panel/web"
register_panel()

__all__ = ["NODE_CLASS_MAPPINGS", "NODE_DISPLAY_NAME_MAPPINGS", "WEB_DIRECTORY"]
