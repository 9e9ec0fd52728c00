"""ComfyUI's dynamic VRAM rule: whether ComfyUI itself streams the weights on this machine.

ComfyUI streams weights where its dynamic VRAM (comfy-aimdo) is on: NVIDIA,
or ROCm (HIP) >= 7.14, with torch >= 2.8, unless a launch flag turns it off
(--cpu, --novram, --highvram, --gpu-only, --disable-dynamic-vram;
--enable-dynamic-vram forces it on). The planner's streaming policy
(plan/streaming.py) and doctor's `comfyui.dynamic_vram` line both ask `dynamic_vram`.

At plan time the machine may have no torch yet: the versions assumed are the
ones h3kit installs (profiles/torch_builds.yaml: its torch release, and the
HIP version in its ROCm wheel tag). A caller that probed a real ComfyUI
passes what it found, which beats the assumption.
"""

from __future__ import annotations

import re
from functools import lru_cache

from h3kit.data.fingerprint import Fingerprint
from h3kit.data.torch_builds import load as load_torch_builds
from h3kit.plan import torch_wheel

DYNAMIC_VRAM_TORCH = (2, 8)
DYNAMIC_VRAM_HIP = (7, 14)
# Launch flags under which ComfyUI's enables_dynamic_vram() is false (comfy/cli_args.py).
DYNAMIC_VRAM_OFF_FLAGS = ("--cpu", "--novram", "--highvram", "--gpu-only", "--disable-dynamic-vram")
DYNAMIC_VRAM_FORCE_FLAG = "--enable-dynamic-vram"


def version_tuple(text) -> tuple[int, ...] | None:
    """'2.14.1+cu132' -> (2, 14, 1); '==2.14.1' -> (2, 14, 1); 'rocm7.2' -> (7, 2); junk -> None."""
    if text is None:
        return None
    parts = re.findall(r"\d+", str(text).split("+")[0])
    return tuple(int(p) for p in parts[:3]) if parts else None


@lru_cache(maxsize=1)
def _wheel_table() -> dict | None:
    """profiles/torch_builds.yaml, read once per process so planning again touches no file."""
    try:
        return load_torch_builds()
    except Exception:  # noqa: BLE001 -- a missing or broken table only makes the versions unknown
        return None


def assumed_runtime(fingerprint: Fingerprint, table: dict | None = None) -> dict:
    """The torch (and HIP) h3kit would install on this machine: {"torch", "hip", "source"}."""
    table = table if table is not None else _wheel_table()
    if table is None:
        return {"torch": None, "hip": None, "source": "unknown (profiles/torch_builds.yaml could not be read)"}
    try:
        choice = torch_wheel.choose(fingerprint, table)
    except (KeyError, ValueError, TypeError):
        return {"torch": None, "hip": None, "source": "unknown (no torch build chosen for this machine)"}
    torch = version_tuple((choice.get("packages") or {}).get("torch"))
    build = str(choice.get("build") or "")
    hip = version_tuple(build[len("rocm"):]) if re.fullmatch(r"rocm\d+\.\d+", build) else None
    return {"torch": torch, "hip": hip, "source": f"the torch h3kit installs ({build or 'unknown build'})"}


def dynamic_vram(backend: str, args: list, torch: tuple | None, hip: tuple | None,
                 aimdo: bool | None = None) -> tuple[bool | None, str]:
    """(on?, why) by ComfyUI's own rule (main.py dynamic_vram_supported / cli_args.enables_dynamic_vram);
    None when a version it needs is unknown."""
    forced = DYNAMIC_VRAM_FORCE_FLAG in args
    off = [f for f in DYNAMIC_VRAM_OFF_FLAGS if f in args]
    if aimdo is False:
        return False, "comfy-aimdo does not import in ComfyUI's Python"
    if off and not forced:
        return False, f"{off[0]} in the launch flags turns it off"
    if backend not in ("cuda", "rocm"):  # comfy-aimdo has CUDA and ROCm libraries only, forced or not
        return False, f"ComfyUI has no dynamic VRAM on {backend.upper() if backend != 'cpu' else 'a CPU'}"
    if backend == "rocm" and not forced:
        if hip is None:
            return None, "the ROCm (HIP) version is unknown"
        if hip[:2] < DYNAMIC_VRAM_HIP:
            return False, f"ROCm {'.'.join(map(str, hip[:2]))} < {'.'.join(map(str, DYNAMIC_VRAM_HIP))}"
    if forced:
        return True, f"{DYNAMIC_VRAM_FORCE_FLAG} in the launch flags"
    if torch is None:
        return None, "the torch version is unknown"
    if torch[:2] < DYNAMIC_VRAM_TORCH:
        return False, f"torch {'.'.join(map(str, torch[:2]))} < {'.'.join(map(str, DYNAMIC_VRAM_TORCH))}"
    return True, f"torch {'.'.join(map(str, torch))} on {backend.upper()}"
