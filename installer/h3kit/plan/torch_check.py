"""Whether ComfyUI has the PyTorch build this machine needs, and the doctor's findings about it.

`check(fingerprint, torch_info)` compares what is installed with
torch_wheel.choose(fingerprint); `doctor_findings(fingerprint, comfy_info)`
turns the result into the doctor's findings (one sentence + the command that
fixes it). `build_from_metadata` tells a wheel's build from its metadata,
without importing it.
"""

from __future__ import annotations

import re

from h3kit.data.fingerprint import Fingerprint, biggest
from h3kit.plan.torch_wheel import (
    PACKAGES,
    builds_table,
    choose,
    pip_index_args,
    requirements,
    version_tuple,
)

_LOCAL_BUILD = re.compile(r"\+(cu\d+|rocm[\d.]+|xpu|cpu)", re.I)


def describe_installed(torch_info: dict | None) -> dict:
    """Normalise what an inspection found: {installed, version, build, backend, cuda}.

    Accepts h3kit.comfyui.locate.inspect()'s output or comfy_setup.probe_torch()'s:
    the torch version under 'torch_version' / 'torch.version' / 'version', the
    build under 'torch_build' / 'build' (cuda|rocm|mps|xpu|cpu), the CUDA
    version under 'torch_cuda' / 'cuda'. Missing pieces come from the wheel's
    local version tag (+cu130, +rocm7.2, +xpu, +cpu).
    """
    info = dict(torch_info or {})
    nested = info.get("torch") if isinstance(info.get("torch"), dict) else {}
    version = info.get("torch_version") or nested.get("version") or info.get("version")
    if isinstance(info.get("torch"), str):
        version = version or info["torch"]
    backend = info.get("torch_build") or nested.get("build") or info.get("build")
    cuda = info.get("torch_cuda") or nested.get("cuda") or info.get("cuda")
    local = _LOCAL_BUILD.search(version or "")
    tag = local.group(1).lower() if local else None
    if tag and not backend:
        backend = "cuda" if tag.startswith("cu") else "rocm" if tag.startswith("rocm") else tag
    if tag and tag.startswith("cu") and not cuda:
        cuda = f"{tag[2:-1]}.{tag[-1]}"
    if not tag and backend == "cuda" and cuda:
        tag = "cu" + "".join(str(x) for x in version_tuple(cuda)[:2])
    return {"installed": bool(version), "version": version, "build": tag or backend,
            "backend": backend, "cuda": cuda}


def check(fingerprint: Fingerprint, torch_info: dict | None, table: dict | None = None) -> list[dict]:
    """Mismatches between installed torch and choose(fingerprint), each {kind, status, message}.

    Empty when torch is what the machine should have (or an acceptable
    equivalent: an older CUDA tag the driver and GPU still run).
    """
    t = table if table is not None else builds_table()
    choice = choose(fingerprint, t)
    have = describe_installed(torch_info)
    if choice["status"] == "refuse":
        return [{"kind": "machine", "status": "fail", "message": choice["rationale"][-1], "choice": choice}]
    if not have["installed"]:
        why = f" ({info_error})" if (info_error := (torch_info or {}).get("torch_error")) else ""
        return [{"kind": "missing", "status": "fail", "choice": choice,
                 "message": f"ComfyUI's Python has no working PyTorch{why}; this machine needs the {choice['build']} build."}]
    want = choice["backend"]
    got = have["backend"] or "unknown"
    mixed = companion_mismatches(torch_info or {})
    if mixed:
        return [{"kind": "companions", "status": "fail", "choice": choice,
                 "message": f"torch {have['version']} is installed with {', '.join(mixed)} of another build; "
                            "mixed builds fail at import (e.g. 'operator torchvision::nms does not exist')."}]
    if want != got:
        if want == "cpu" and got in ("cuda", "rocm", "xpu"):
            return []  # a GPU build also runs on the CPU; not worth a reinstall
        return [{"kind": "backend", "status": "fail", "choice": choice,
                 "message": f"ComfyUI has torch {have['version']}, a {got} build, but {choice['gpu'] or 'this machine'} "
                            f"needs the {choice['build']} build (torch {choice['packages'].get('torch', '').lstrip('=')} from "
                            f"{choice['index_url'] or 'PyPI'})."}]
    if want != "cuda" or not have["cuda"]:
        return []
    return _check_cuda_tag(fingerprint, choice, have, t)


def local_tag(version: str | None) -> str | None:
    m = _LOCAL_BUILD.search(version or "")
    return m.group(1).lower() if m else None


def companion_mismatches(torch_info: dict) -> list[str]:
    """torchvision/torchaudio whose build label differs from torch's ('torchaudio 2.11.0+cu130' next to +cpu torch).

    Needs the per-package versions ('packages', from comfy_setup.probe_torch); a
    package without a label (from PyPI) is not compared.
    """
    packages = torch_info.get("packages") or {}
    tag = local_tag(packages.get("torch"))
    if not tag:
        return []
    return [f"{name} {version}" for name, version in sorted(packages.items())
            if name in PACKAGES[1:] and local_tag(version) not in (None, tag)]


def _check_cuda_tag(fingerprint: Fingerprint, choice: dict, have: dict, t: dict) -> list[dict]:
    rows = {r["tag"]: r for r in t["cuda_tags"]}
    have_cuda = version_tuple(have["cuda"])[:2]
    want_cuda = version_tuple(rows[choice["build"]]["cuda"])[:2]
    if have_cuda > want_cuda:
        gpu = biggest(fingerprint.gpus_of("nvidia"))
        return [{"kind": "cuda-too-new", "status": "fail", "choice": choice,
                 "message": f"ComfyUI has torch {have['version']} built for CUDA {have['cuda']}, newer than the "
                            f"NVIDIA driver {gpu.driver_version or '?'} (CUDA {gpu.cuda_driver_version or '?'}) "
                            f"can run; {choice['build']} is the newest build that works here."}]
    if have_cuda < want_cuda:
        needs = [f for f, v in (t.get("cuda_features") or {}).items()
                 if have_cuda < version_tuple(v)[:2] <= want_cuda]
        extra = f"; {', '.join(needs)} weights need CUDA 13.0 or newer" if needs else ""
        return [{"kind": "cuda-older", "status": "warn", "choice": choice,
                 "message": f"ComfyUI has torch {have['version']} built for CUDA {have['cuda']}; it runs, but this "
                            f"driver supports {choice['build']}{extra}."}]
    return []


# -- doctor ---------------------------------------------------------------------

def _quote(arg: str) -> str:
    """Quote an argument for a copy-paste command line (both shells accept double quotes)."""
    return f'"{arg}"' if re.search(r"[\s<>|&^*]", arg) or arg == "" else arg


def fix_command(python: str, choice: dict) -> str:
    """'"<python>" -m pip install --force-reinstall torch==... --index-url URL'."""
    parts = [f'"{python}"', "-m", "pip", "install", "--force-reinstall"]
    parts += [_quote(r) for r in requirements(choice)]
    parts += pip_index_args(choice)
    return " ".join(parts)


def doctor_findings(fingerprint: Fingerprint | None, comfy_info: dict | None) -> list[dict]:
    """The doctor's torch findings: [{check, status, message, fix}] (never raises on odd input)."""
    info = comfy_info or {}
    python = str(info.get("python") or info.get("python_path") or "python")
    if fingerprint is None:
        return [{"check": "torch.build", "status": "warn", "fix": "Run 'h3kit fingerprint' to see what fails.",
                 "message": "h3kit could not fingerprint this machine, so it cannot tell which torch build fits."}]
    try:
        mismatches = check(fingerprint, info)
    except (KeyError, TypeError, ValueError, OSError) as exc:
        return [{"check": "torch.build", "status": "warn", "message": f"h3kit could not compare the torch build ({exc}).",
                 "fix": None}]
    if not mismatches:
        have = describe_installed(info)
        choice = choose(fingerprint)
        return [{"check": "torch.build", "status": "ok",
                 "message": f"ComfyUI's torch {have['version']} ({have['build']}) fits this machine (h3kit's choice here: {choice['build']}).",
                 "fix": None}]
    findings = []
    for m in mismatches:
        choice = m["choice"]
        fix = choice["fix"] if m["kind"] == "machine" else fix_command(python, choice)
        findings.append({"check": "torch.build", "status": m["status"], "message": m["message"], "fix": fix,
                         "kind": m["kind"], "build": choice["build"], "index_url": choice["index_url"],
                         "packages": choice["packages"], "why": choice["rationale"]})
    return findings


_CUDA_REQ = re.compile(r"^(cuda-toolkit|nvidia-cuda-runtime(?:-cu\d+)?)\b[^=<>~!]*==\s*(\d+)\.(\d+)", re.I)
_CU_SUFFIX = re.compile(r"^nvidia-[a-z0-9-]+-cu(\d+)\b", re.I)


def build_from_metadata(version: str, requires: list[str], system: str) -> dict:
    """What build a torch wheel is, from its version and Requires-Dist lines (no import needed).

    A local tag (+cu130, +rocm7.2, +xpu, +cpu) says it outright. Without one
    (a wheel from PyPI) the CUDA runtime it depends on gives it away: Linux
    wheels on PyPI require `cuda-toolkit==13.0.x` or `nvidia-*-cu12`; the
    Windows and macOS PyPI wheels are CPU (macOS: with MPS) builds.
    """
    local = _LOCAL_BUILD.search(version or "")
    if local:
        return describe_installed({"torch_version": version})
    cuda = None
    for line in requires:
        spec = line.split(";")[0].strip()
        m = _CUDA_REQ.match(spec)
        if m:
            cuda = f"{m.group(2)}.{m.group(3)}"
            break
        m = _CU_SUFFIX.match(spec)
        if m and cuda is None:
            cuda = f"{m.group(1)}.x"
    if cuda and system == "linux":
        info = {"torch_version": version, "torch_build": "cuda", "torch_cuda": cuda if "x" not in cuda else None}
        return describe_installed(info)
    backend = "mps" if system == "darwin" else "cpu"
    return describe_installed({"torch_version": version, "torch_build": backend})
