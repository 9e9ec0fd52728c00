"""The one place where h3kit reaches the code that runs in ComfyUI's Python: `h3kit.bundled.<package>`.

Everything that runs inside ComfyUI's interpreter lives in one folder,
`nodes/` at the top of the repository (`h3kit/_assets/nodes` in the wheel):
the node pack exactly as deploy copies it into `custom_nodes/ComfyUI-h3kit`,
its nodes in feature packages (`h3kit_*`, which h3kit never imports) and
these packages beside them, which stand on their own:

- `h3k_native`: the ctypes bridge to libh3kit (also `h3kit.native`'s kernels);
- `h3k_calibration_runner`: the measurements calibration takes in ComfyUI's
  Python (h3kit starts it as `python <folder>`; its disk helpers are
  calibration's too);
- `h3k_safetensors`: the one safetensors header reader, with its checks (the
  streamed loader's and `h3kit.calibrate.arch`'s);
- `h3k_gguf`: the one GGUF header reader, with its checks (the held and the
  streamed GGUF loaders' and `h3kit.calibrate.arch`'s);
- `h3k_profile`: the pack's profile file, h3kit_profile.json, as a typed
  value (deploy writes its bytes, the nodes read it);
- `h3k_loader`: what the streamed loaders read and how (the read past the
  page cache, the prefetch cap, the streamable formats), for the planner and
  calibration as for the nodes;
- `h3k_cost`: what a run costs at a canvas, frames and steps (tokens,
  activations, decoded video, a clip's time), for the planner as for the
  pack's panel, routes and queue guard.

This package's search path is that folder, so `from h3kit.bundled import
h3k_native` imports the very file deploy ships, from a checkout and from the
wheel alike; the paths below are for starting a package with another Python.
The rule for that folder, checked by tests/repo/test_architecture.py: standard
library only at import time (numpy and torch only inside the functions that
use them), and never `import h3kit` -- h3kit is not installed where it runs.
"""

from h3kit.core.paths import asset_dir

PACK_SOURCE = asset_dir("nodes")
__path__ = [str(PACK_SOURCE)]  # submodules are found in nodes/, not beside this file
PACKAGES = ("h3k_native", "h3k_calibration_runner", "h3k_safetensors", "h3k_gguf", "h3k_profile", "h3k_loader",
            "h3k_cost")
NATIVE_BRIDGE = PACK_SOURCE / "h3k_native"
CALIBRATION_RUNNER = PACK_SOURCE / "h3k_calibration_runner"
SAFETENSORS = PACK_SOURCE / "h3k_safetensors"
GGUF = PACK_SOURCE / "h3k_gguf"
