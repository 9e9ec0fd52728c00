"""Code that runs inside ComfyUI's interpreter, not in h3kit's own venv.

Each folder here is a self-contained package that deploy copies into the node
pack under the same name, and that h3kit also starts with ComfyUI's Python as
`python <folder>` (its `__main__.py` finds the package from its own path):

- `h3k_native`: the ctypes bridge to libh3kit (also `h3kit.native`'s kernels);
- `h3k_calibration_runner`: the measurements calibration takes in ComfyUI's Python.
- `h3k_safetensors`: the one safetensors header reader, with its checks (the streamed
  loader's and calibration's `h3kit.calibrate.arch`).

The rule, checked by tests/repo/test_architecture.py: standard library only at
import time (numpy and torch only inside the functions that measure), and
never `import h3kit` -- h3kit is not installed where this code runs. The node
pack itself lives at the top of the repository in `nodes/` under the same rule.
"""

from pathlib import Path

HERE = Path(__file__).resolve().parent
PACKAGES = ("h3k_native", "h3k_calibration_runner", "h3k_safetensors")
NATIVE_BRIDGE = HERE / "h3k_native"
CALIBRATION_RUNNER = HERE / "h3k_calibration_runner"
SAFETENSORS = HERE / "h3k_safetensors"


def package_files() -> dict[str, bytes]:
    """Relative path inside the node pack -> bytes, for every bundled package."""
    files: dict[str, bytes] = {}
    for name in PACKAGES:
        root = HERE / name
        for path in sorted(root.rglob("*.py")):
            files[path.relative_to(HERE).as_posix()] = path.read_bytes()
    return files
