"""Setting up ComfyUI's Python for this hardware: a new ComfyUI, or a torch repair, and undoing both.

The front for what other layers call; the work is in these modules:

- `pip`: ComfyUI's interpreter and its pip (always `python -m pip` of that
  interpreter, through `h3kit.core.tools.run_pip`, so the offline and mirror
  options `H3KIT_PIP_FIND_LINKS` / `H3KIT_PIP_NO_INDEX` / `H3KIT_PIP_INDEX_URL`
  hold everywhere): what torch it has, installing a torch build, and
  requirements under a constraints file that pins that build.
- `torch_repair`: `doctor --fix` replaces a torch build that does not fit,
  recording what was there; `doctor --undo` puts it back.
- `create` (with `source`): a new ComfyUI from a git URL, a local
  repository, a folder or an archive, resumable step by step.
- (moving a git checkout to another release, and back, is h3kit.comfyui.versions.)
- `purge`: what `uninstall --purge` removes of a ComfyUI h3kit created, and
  what uninstall puts back (the torch, the checkout and its packages).
"""

from __future__ import annotations

from h3kit.comfyui.setup.create import find_base_python, new_comfyui, offer_new_comfyui
from h3kit.comfyui.setup.pip import probe_torch, setup_table, torch_info_from_probe
from h3kit.comfyui.setup.purge import (
                                     created_comfyui,
                                     purge_comfyui,
                                     purge_on_uninstall,
                                     purge_plan,
                                     restore_on_uninstall,
)
from h3kit.comfyui.setup.source import source_kind
from h3kit.comfyui.setup.torch_repair import (
                                     check_target_env,
                                     fix_torch,
                                     linked_venv,
                                     undo_torch,
)
from h3kit.core.tools import PipOptions

__all__ = ["PipOptions", "check_target_env", "created_comfyui", "find_base_python", "fix_torch", "kind_of",
           "linked_venv", "new_comfyui", "offer_new_comfyui", "probe_torch", "purge_comfyui", "purge_on_uninstall",
           "purge_plan", "restore_on_uninstall", "setup_table", "source_kind",
           "torch_info_from_probe", "undo_torch"]
