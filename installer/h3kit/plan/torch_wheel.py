"""Which PyTorch build belongs on this machine: the choice, from the fingerprint and the wheel table.

`choose(fingerprint)` is a pure function of the machine's `Fingerprint`
(h3kit.data.fingerprint) and the data in `profiles/torch_builds.yaml`. Its search order,
first match wins:

1. macOS: Apple Silicon -> the default arm64 wheels (MPS); an x86_64 Python
   under Rosetta -> refuse, naming the native-Python fix; an Intel Mac ->
   refuse (no current wheels).
2. An NVIDIA GPU -> the newest CUDA wheel tag that both the driver and the
   GPU's compute capability can run; none for the driver -> refuse naming the
   minimum driver; none for the GPU -> CPU wheels with a warning.
3. An AMD GPU -> Linux: the ROCm index when the wheels carry the card's gfx
   target, else AMD's per-architecture wheels; Windows: ROCm-on-Windows for
   RDNA3/4, else torch-directml.
4. An Intel GPU -> the XPU index.
5. Nothing usable -> CPU wheels.

The choice document (`h3kit.torch_choice/1`) is plain data so install,
doctor and the README can print it.
"""

from __future__ import annotations

import re

from h3kit.core.units import gib
from h3kit.data.fingerprint import Fingerprint, Gpu, biggest
from h3kit.data.torch_builds import load as builds_table

SCHEMA = "h3kit.torch_choice/1"
PYPI = "pypi"
PACKAGES = ("torch", "torchvision", "torchaudio")


# -- small helpers over versions ---------------------------------------------

def version_tuple(text: str | None) -> tuple[int, ...] | None:
    """'580.65.06' -> (580, 65, 6); '12.8' -> (12, 8); junk -> None."""
    if not text:
        return None
    parts = re.findall(r"\d+", str(text))
    return tuple(int(p) for p in parts[:4]) if parts else None


def _cc_tuple(text: str | None) -> tuple[int, int] | None:
    v = version_tuple(text)
    if not v:
        return None
    return (v[0], v[1] if len(v) > 1 else 0)


def _index_url(table: dict, tag: str) -> str:
    return f"{table['index_base'].rstrip('/')}/{tag}"


def _base_choice(table: dict, build: str, backend: str, index_url: str | None, gpu: Gpu | None) -> dict:
    return {
        "schema": SCHEMA,
        "status": "ok",
        "build": build,
        "backend": backend,
        "index_url": index_url,  # None: the default index (PyPI)
        "packages": dict(table["release"]),
        # PyTorch's own indexes label their wheels (+cu130, +rocm7.2, +xpu, +cpu); PyPI's carry no label.
        "local_tag": build if index_url and index_url.startswith(table["index_base"]) else None,
        "gpu": gpu.name if gpu else None,
        "rationale": [],
        "warnings": [],
        "fix": None,
    }


def _refuse(choice: dict, sentence: str, fix: str) -> dict:
    choice["status"] = "refuse"
    choice["rationale"].append(sentence)
    choice["fix"] = fix
    return choice


def requirements(choice: dict, *, local: bool = False) -> list[str]:
    """['torch==2.14.1', 'torchvision==0.29.1', 'torchaudio>=2.11'] (or torch-directml).

    local=True pins exact versions to the build's local tag (torch==2.14.1+cu130), so
    a folder of wheels holding several builds of one version cannot hand over the wrong one.
    """
    tag = choice.get("local_tag") if local else None
    return [name + (f"{spec}+{tag}" if tag and spec.startswith("==") else spec)
            for name, spec in choice["packages"].items()]


def pip_index_args(choice: dict) -> list[str]:
    return ["--index-url", choice["index_url"]] if choice.get("index_url") else []


# -- the choice -----------------------------------------------------------------

def choose(fingerprint: Fingerprint, table: dict | None = None) -> dict:
    """The torch build for this machine (see the module docstring for the order)."""
    t = table if table is not None else builds_table()
    if fingerprint.system == "darwin":
        return _choose_apple(fingerprint, t)
    for vendor, chooser in (("nvidia", _choose_nvidia), ("amd", _choose_amd), ("intel", _choose_intel)):
        gpus = fingerprint.gpus_of(vendor)
        if gpus:
            return chooser(fingerprint, biggest(gpus), t)
    choice = _base_choice(t, "cpu", "cpu", _index_url(t, "cpu"), None)
    choice["rationale"].append(
        "No NVIDIA, AMD or Intel GPU was found, so ComfyUI gets PyTorch's CPU wheels "
        f"({_index_url(t, 'cpu')}), which skip the GPU runtime downloads."
    )
    return choice


def _choose_apple(fingerprint: Fingerprint, t: dict) -> dict:
    gpu = (fingerprint.gpus_of("apple") or [None])[0]
    choice = _base_choice(t, "mps", "mps", None, gpu)
    if fingerprint.rosetta:
        return _refuse(
            choice,
            "This Python is an x86_64 program running under Rosetta on an Apple Silicon Mac; "
            "x86_64 PyTorch cannot use the GPU (MPS) and has no current wheels.",
            "Use a native arm64 Python: install one from python.org (universal2) or with "
            "'arch -arm64 brew install python', then re-run the installer from a native terminal "
            "with 'arch -arm64 ./install.command'.",
        )
    if fingerprint.arch != "arm64":
        last = t["apple"]["last_intel_mac_torch"]
        return _refuse(
            choice,
            f"This is an Intel Mac; PyTorch stopped publishing macOS x86_64 wheels after {last}, "
            "which is too old for current ComfyUI.",
            "Run ComfyUI on an Apple Silicon Mac or a Linux/Windows PC; h3kit cannot install a "
            "current PyTorch here.",
        )
    memory = gpu.memory_total_bytes if gpu else fingerprint.memory.total_bytes
    choice["rationale"].append(
        f"Apple Silicon with {_card_gib(memory)} of unified memory: the default macOS arm64 wheels from PyPI "
        "carry the Metal (MPS) backend, so no special index is needed."
    )
    return choice


def _cc_supported(cc: tuple[int, int], targets: list[str]) -> bool:
    """Same major version and a minor not above the GPU's (SASS is forward-compatible within a major)."""
    for target in targets:
        tc = _cc_tuple(target)
        if tc and tc[0] == cc[0] and tc[1] <= cc[1]:
            return True
    return False


def _driver_allows(row: dict, system: str, driver: tuple | None, driver_cuda: tuple | None) -> bool:
    if driver_cuda is not None:
        return driver_cuda[:2] >= version_tuple(row["cuda"])[:2]
    minimum = (row.get("min_driver") or {}).get("windows" if system == "windows" else "linux")
    if driver is None or minimum is None:
        return False
    return driver >= version_tuple(minimum)


def _min_driver_text(row: dict, system: str) -> str:
    key = "windows" if system == "windows" else "linux"
    minimum = (row.get("min_driver") or {}).get(key)
    return f"driver {minimum}" if minimum else f"a driver that reports CUDA {row['cuda']}"


def _choose_nvidia(fingerprint: Fingerprint, gpu: Gpu, t: dict) -> dict:
    system = fingerprint.system
    rows = t["cuda_tags"]
    cc = _cc_tuple(gpu.compute_capability)
    driver = version_tuple(gpu.driver_version)
    driver_cuda = version_tuple(gpu.cuda_driver_version)
    name = gpu.name or "NVIDIA GPU"
    choice = _base_choice(t, None, "cuda", None, gpu)
    for_gpu = [r for r in rows if cc is None or _cc_supported(cc, r["compute_capabilities"])]
    for_driver = [r for r in for_gpu if _driver_allows(r, system, driver, driver_cuda)]
    driver_text = gpu.driver_version or "unknown"
    cuda_text = gpu.cuda_driver_version or "unknown"
    if not for_gpu:
        oldest = rows[-1]
        choice.update(build="cpu", backend="cpu", index_url=_index_url(t, "cpu"), local_tag="cpu")
        choice["rationale"].append(
            f"{name} has compute capability {gpu.compute_capability}, below the oldest the current "
            f"PyTorch wheels carry ({oldest['tag']}: {oldest['compute_capabilities'][0]}), so ComfyUI gets "
            "the CPU wheels."
        )
        choice["warnings"].append(f"{name} is too old for current PyTorch; ComfyUI will run on the CPU.")
        return choice
    if not for_driver:
        lowest = for_gpu[-1]
        return _refuse(
            choice,
            f"The NVIDIA driver {driver_text} (CUDA {cuda_text}) is too old for every PyTorch CUDA wheel "
            f"that runs on {name}; the oldest usable one, {lowest['tag']}, needs "
            f"{_min_driver_text(lowest, system)} or newer.",
            f"Install NVIDIA {_min_driver_text(lowest, system)} or newer "
            f"({t['nvidia_driver_url']}), reboot, then run the installer again.",
        )
    best = for_driver[0]
    choice.update(build=best["tag"], index_url=_index_url(t, best["tag"]), local_tag=best["tag"])
    why_driver = (f"the driver reports CUDA {cuda_text}" if driver_cuda is not None
                  else f"driver {driver_text} is at least {_min_driver_text(best, system)[len('driver '):]}")
    cc_text = f"compute capability {gpu.compute_capability}" if cc else "an unknown compute capability"
    choice["rationale"].append(
        f"{name} ({_card_gib(gpu.memory_total_bytes)}, {cc_text}): {best['tag']} is the newest CUDA "
        f"wheel it can use because {why_driver} (>= {best['cuda']}) and the wheels carry its architecture."
    )
    newer_for_gpu = [r for r in for_gpu if r is not best and rows.index(r) < rows.index(best)]
    if newer_for_gpu:
        nearest = newer_for_gpu[-1]
        choice["rationale"].append(
            f"{nearest['tag']} would need {_min_driver_text(nearest, system)} or newer; "
            f"updating the driver lets h3kit move to it."
        )
    blocked = [f"{feature} (CUDA {needs})" for feature, needs in (t.get("cuda_features") or {}).items()
               if version_tuple(best["cuda"]) < version_tuple(needs)]
    if blocked:
        choice["warnings"].append(
            f"{best['tag']} wheels cannot load {', '.join(blocked)} weights; the planner must pick another format."
        )
    if cc is None:
        choice["warnings"].append(f"The compute capability of {name} is unknown; assuming the wheels carry it.")
    return choice


def _gfx_target(gpu: Gpu, t: dict) -> str | None:
    for value in (gpu.detail("gfx_target"), gpu.compute_capability):
        if isinstance(value, str) and value.lower().startswith("gfx"):
            return value.lower()
    name = gpu.name or ""
    for fragment, gfx in (t.get("amd_gfx_by_name") or {}).items():
        if fragment.lower() in name.lower():
            return gfx
    return None


def _choose_amd(fingerprint: Fingerprint, gpu: Gpu, t: dict) -> dict:
    name = gpu.name or "AMD GPU"
    gfx = _gfx_target(gpu, t)
    gfx_text = gfx or "an unknown gfx target"
    if fingerprint.system == "windows":
        win = t["amd_windows"]
        if gfx in win["rocm_gfx_targets"]:
            choice = _base_choice(t, f"rocm-windows-{gfx}", "rocm", win["rocm_index"], gpu)
            choice["packages"] = {f"torch[device-{gfx}]": "", f"torchvision[device-{gfx}]": ""}
            choice["rationale"].append(
                f"{name} ({gfx}) on Windows: AMD publishes ROCm-on-Windows PyTorch wheels for this "
                f"target ({win['rocm_index']})."
            )
            return choice
        choice = _base_choice(t, "directml", "directml", None, gpu)
        choice["packages"] = {win["directml_package"]: ""}
        choice["rationale"].append(
            f"{name} ({gfx_text}) on Windows has no ROCm-on-Windows wheels, so ComfyUI gets "
            f"{win['directml_package']} (DirectX 12), which brings its own torch; start ComfyUI with --directml."
        )
        choice["warnings"].append("DirectML is much slower than CUDA/ROCm and supports fewer operations.")
        return choice
    rocm = t["rocm"]
    if gfx in rocm["gfx_targets"]:
        choice = _base_choice(t, rocm["tag"], "rocm", _index_url(t, rocm["tag"]), gpu)
        choice["rationale"].append(
            f"{name} ({gfx}, {_card_gib(gpu.memory_total_bytes)}) on Linux: PyTorch's {rocm['tag']} wheels "
            f"carry native kernels for {gfx}."
        )
        return choice
    target = gfx or "gfxNNNN"
    choice = _base_choice(t, f"rocm-{target}", "rocm", rocm["per_arch_index"], gpu)
    choice["packages"] = {f"torch[device-{target}]": "", f"torchvision[device-{target}]": ""}
    choice["rationale"].append(
        f"{name} ({gfx_text}) is not among the targets of PyTorch's {rocm['tag']} wheels, so h3kit uses "
        f"AMD's per-architecture wheels ({rocm['per_arch_index']}) instead of HSA_OVERRIDE_GFX_VERSION, "
        "which is known to crash."
    )
    if gfx is None:
        return _refuse(choice, f"The gfx target of {name} is unknown.",
                       "Run 'rocminfo | grep gfx' and report the target, or install PyTorch for ROCm by hand.")
    return choice


def _choose_intel(fingerprint: Fingerprint, gpu: Gpu, t: dict) -> dict:
    tag = t["xpu"]["tag"]
    choice = _base_choice(t, tag, "xpu", _index_url(t, tag), gpu)
    choice["rationale"].append(
        f"{gpu.name or 'Intel GPU'} ({_card_gib(gpu.memory_total_bytes)}): PyTorch's XPU wheels "
        f"({_index_url(t, tag)}) drive Intel Arc and Data Center GPUs."
    )
    return choice


def _card_gib(n: int | None) -> str:
    return gib(n or 0, digits=0)
