"""What a ComfyUI's Python holds, read from the outside: the H3KIT-INSPECT script, its parsers, and whether
the torch it finds fits the machine.

`INSPECT_SCRIPT` runs inside ComfyUI's interpreter (h3kit.comfyui.locate.inspect
starts it): standard library only, never raises, one JSON line marked
`H3KIT-INSPECT`, because site hooks and custom nodes may print anything else
around it. Everything else here is a pure function of text or of that JSON,
tested on recorded output.

`torch_fit_findings` are the basic checks, used when there is no fingerprint
to plan against; with one, h3kit.plan.torch_build.doctor_findings has the
last word.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from h3kit.data.fingerprint import Fingerprint

INSPECT_TIMEOUT = 90.0  # importing torch on a cold disk takes tens of seconds

# Runs inside ComfyUI's interpreter: stdlib only, never raises, one JSON line.
INSPECT_SCRIPT = r"""
import json, platform, sys
info = {"python": sys.executable, "python_version": platform.python_version(),
        "machine": platform.machine(), "system": platform.system().lower(), "packages": {}}
try:
    from importlib import metadata
    for name in ("torch", "torchvision", "torchaudio"):
        try:
            info["packages"][name] = metadata.version(name)
        except Exception:
            pass
except Exception:
    pass
try:
    import torch
    info["torch"] = torch.__version__
    v = getattr(torch, "version", None)
    info["torch_cuda"] = getattr(v, "cuda", None)
    info["torch_hip"] = getattr(v, "hip", None)
    mps = getattr(getattr(torch, "backends", None), "mps", None)
    info["mps_built"] = bool(mps is not None and mps.is_built())
    xpu = getattr(torch, "xpu", None)
    info["xpu_available"] = bool(xpu is not None and xpu.is_available())
    cuda = getattr(torch, "cuda", None)
    info["cuda_available"] = bool(cuda is not None and cuda.is_available())
except Exception as exc:
    info["torch"] = None
    info["torch_error"] = "%s: %s" % (type(exc).__name__, exc)
print("H3KIT-INSPECT " + json.dumps(info))
"""


# -- reading what it printed ---------------------------------------------------------


def parse_version_file(text: str) -> str | None:
    m = re.search(r"""__version__\s*=\s*["']([^"']+)["']""", text)
    return m.group(1) if m else None


def comfyui_version(path: Path) -> str | None:
    try:
        return parse_version_file((path / "comfyui_version.py").read_text(encoding="utf-8"))
    except OSError:
        return None


def torch_build(info: dict) -> str | None:
    """cuda | rocm | mps | xpu | cpu from the inspect fields (None when torch is absent)."""
    if not info.get("torch"):
        return None
    if info.get("torch_hip"):
        return "rocm"
    if info.get("torch_cuda"):
        return "cuda"
    if info.get("mps_built") and info.get("system") == "darwin":
        return "mps"
    if info.get("xpu_available") or "+xpu" in str(info.get("torch")):
        return "xpu"
    return "cpu"


def marked_json(text: str, marker: str) -> dict | None:
    """The JSON object on the last line starting with `marker` + space.

    The small scripts h3kit runs in ComfyUI's Python print their result that
    way, because site hooks and custom nodes may print anything else around it.
    """
    prefix = marker + " "
    for line in reversed(text.splitlines()):
        if line.startswith(prefix):
            try:
                value = json.loads(line[len(prefix):])
            except ValueError:
                return None
            return value if isinstance(value, dict) else None
    return None


def parse_inspect_output(text: str) -> dict | None:
    """The JSON line INSPECT_SCRIPT prints, with the torch build worked out."""
    info = marked_json(text, "H3KIT-INSPECT")
    if info is not None:
        info["torch_build"] = torch_build(info)
    return info


# -- does torch fit the hardware? ------------------------------------------------------


def _version_tuple(text: str | None) -> tuple[int, ...] | None:
    m = re.match(r"(\d+)\.(\d+)", str(text or ""))
    return (int(m.group(1)), int(m.group(2))) if m else None


def _finding(check: str, status: str, message: str, fix: str | None = None) -> dict:
    return {"check": check, "status": status, "message": message, "fix": fix}


def torch_fit_findings(fingerprint: Fingerprint | None, info: dict) -> list[dict]:
    """Loud findings when ComfyUI's torch build cannot use this machine's hardware."""
    fingerprint = fingerprint or Fingerprint()
    py = info.get("python") or "python"
    build = info.get("torch_build")
    out: list[dict] = []
    if info.get("torch") is None:
        return [_finding("torch.present", "fail", f"ComfyUI's Python cannot import torch ({info.get('torch_error', 'not installed')}).",
                         f'"{py}" -m pip install torch torchvision torchaudio')]
    nvidia, apple = fingerprint.gpus_of("nvidia"), fingerprint.gpus_of("apple")
    if nvidia and build == "cpu":
        driver = _version_tuple(nvidia[0].cuda_driver_version)
        tag = f"cu{driver[0]}{driver[1]}" if driver else "cu128"
        out.append(_finding("torch.build", "fail",
                            f"ComfyUI runs a CPU-only torch ({info['torch']}) on a machine with an NVIDIA {nvidia[0].name or 'GPU'}: "
                            "everything would run on the CPU.",
                            f'"{py}" -m pip install --force-reinstall torch torchvision torchaudio '
                            f"--index-url https://download.pytorch.org/whl/{tag}"))
    if nvidia and build == "cuda":
        built, driver = _version_tuple(info.get("torch_cuda")), _version_tuple(nvidia[0].cuda_driver_version)
        if built and driver and built > driver:
            out.append(_finding("torch.cuda", "fail",
                                f"ComfyUI's torch is built for CUDA {info['torch_cuda']} but the NVIDIA driver supports only CUDA "
                                f"{nvidia[0].cuda_driver_version}.",
                                f"Update the NVIDIA driver, or: \"{py}\" -m pip install --force-reinstall torch torchvision torchaudio "
                                f"--index-url https://download.pytorch.org/whl/cu{driver[0]}{driver[1]}"))
    if fingerprint.rosetta or (apple and info.get("system") == "darwin" and info.get("machine") == "x86_64"):
        out.append(_finding("python.arch", "fail",
                            "ComfyUI's Python is an x86_64 build running under Rosetta on Apple Silicon: no MPS, slow CPU code.",
                            "Install an arm64 Python (python.org universal2 or `brew install python` on arm64), recreate ComfyUI's venv, "
                            "reinstall its requirements."))
    elif apple and build == "cpu":
        out.append(_finding("torch.build", "fail",
                            f"ComfyUI's torch {info['torch']} was built without MPS on an Apple GPU machine.",
                            f'"{py}" -m pip install --force-reinstall torch torchvision torchaudio'))
    if not out:
        out.append(_finding("torch.build", "ok", f"torch {info['torch']} ({build}) fits this machine."))
    return out
