"""Probes every platform shares: NVIDIA, libcuda, memory, disks, compilers.

Back ends build their probe lists from these plus their own, and pass in
where their tools usually live (the search orders are written down there).
"""

from __future__ import annotations

import ctypes
import importlib.util
import os
import sys
from pathlib import Path
from typing import Callable, Sequence

from h3kit.core import subproc
from h3kit.fingerprint import parsers
from h3kit.fingerprint._probe import Missing, Probe, tool

NVIDIA_QUERY = ["--query-gpu=name,memory.total,memory.free,driver_version,compute_cap",
                "--format=csv,noheader,nounits"]


def resolve(name: str, first: Sequence[str | os.PathLike] = (), then: Sequence[str | os.PathLike] = ()) -> str | None:
    """An absolute path for a tool: the files in `first` that exist, then PATH, then
    the directories in `then`. Never the current directory (see subproc.which)."""
    for candidate in first:
        p = Path(candidate)
        if p.is_absolute() and p.is_file():
            return str(p)
    return subproc.which(name, extra_dirs=then)


# ---------------------------------------------------------------- NVIDIA


def nvidia_probes(smi_path: str | None, libcuda_names: Sequence[str]) -> list[Probe]:
    """The GPU list from nvidia-smi's CSV query; the driver's CUDA version from the
    banner of plain nvidia-smi and, independently, from cuDriverGetVersion."""
    probes = [
        Probe("nvidia-smi", lambda t: tool(smi_path, NVIDIA_QUERY, t, parsers.parse_nvidia_smi_query, name="nvidia-smi")),
        Probe("nvidia-smi header", lambda t: tool(smi_path, [], t, parsers.parse_nvidia_smi_header, name="nvidia-smi")),
    ]
    if libcuda_names:
        probes.append(Probe("libcuda", lambda t: cuda_driver_version(libcuda_names)))
    return probes


def cuda_driver_version(library_names: Sequence[str]) -> str:
    """cuDriverGetVersion from the first driver library that loads. It needs no
    cuInit and no GPU context, so it is cheap; comfy-cli reads it the same way."""
    errors = []
    for name in library_names:
        try:
            lib = ctypes.CDLL(name)
        except OSError as exc:
            errors.append(f"{name}: {exc}")
            continue
        version = ctypes.c_int(0)
        try:
            rc = lib.cuDriverGetVersion(ctypes.byref(version))
        except AttributeError:
            errors.append(f"{name}: no cuDriverGetVersion")
            continue
        if rc != 0:
            errors.append(f"{name}: cuDriverGetVersion returned {rc}")
            continue
        text = parsers.cuda_version_from_int(version.value)
        if text:
            return text
    raise Missing("no CUDA driver library loads (" + "; ".join(errors)[:300] + ")")


def nvidia_gpus(values: dict) -> list[dict]:
    """Contract GPU entries from the nvidia probes' values."""
    header = values.get("nvidia-smi header") or {}
    cuda = header.get("cuda_driver_version") or values.get("libcuda")
    gpus = []
    for g in values.get("nvidia-smi") or []:
        gpus.append({
            "vendor": "nvidia",
            "name": g["name"],
            "memory_total_bytes": g["memory_total_bytes"],
            "memory_free_bytes": g["memory_free_bytes"],
            "unified_memory": False,
            "driver_version": g["driver_version"] or header.get("driver_version"),
            "cuda_driver_version": cuda,
            "compute_capability": g["compute_capability"],
            "backend": "cuda",
        })
    return gpus


# ---------------------------------------------------------------- memory and disks


def memory(_timeout: float) -> dict:
    import psutil

    vm = psutil.virtual_memory()
    swap = psutil.swap_memory()
    return {"total_bytes": int(vm.total), "available_bytes": int(vm.available), "swap_total_bytes": int(swap.total)}


def disk_probes(paths: Sequence[str], kind_of: Callable[[str, float], str]) -> list[Probe]:
    """One probe per folder (a hung network mount then stalls only its own)."""
    return [Probe(f"disk {p}", lambda t, p=p: disk(p, t, kind_of)) for p in paths]


def disk(path: str, timeout: float, kind_of: Callable[[str, float], str]) -> dict:
    import psutil

    p = Path(path).expanduser()
    # A folder that does not exist yet (the models folder before install) is sized
    # by its nearest existing parent: that is where its files will land.
    probe_at = p
    while not probe_at.exists() and probe_at.parent != probe_at:
        probe_at = probe_at.parent
    try:
        usage = psutil.disk_usage(str(probe_at))
    except (OSError, PermissionError) as exc:
        raise Missing(f"{p}: {exc}") from None
    try:
        kind = kind_of(str(probe_at), timeout)
    except Exception:  # the kind is a nicety; size is what the planner needs
        kind = "unknown"
    return {"path": str(p), "total_bytes": int(usage.total), "free_bytes": int(usage.free), "kind": kind}


# ---------------------------------------------------------------- compilers


def compiler_probe(name: str, path: str | None, args: Sequence[str] = ("--version",)) -> Probe:
    def run(timeout: float) -> dict:
        version = tool(path, list(args), timeout, parsers.parse_compiler_version, name=name)
        return {"name": name, "path": path, "version": version}

    return Probe(f"compiler {name}", run)


def zig_path() -> str | None:
    """The zig binary shipped by the `ziglang` wheel (what `python -m ziglang` runs),
    found without importing or starting it."""
    try:
        spec = importlib.util.find_spec("ziglang")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for folder in spec.submodule_search_locations:
        for exe in ("zig.exe", "zig") if sys.platform == "win32" else ("zig",):
            candidate = Path(folder) / exe
            if candidate.is_file():
                return str(candidate)
    return None


def unix_compiler_probes() -> list[Probe]:
    probes = [compiler_probe(n, resolve(n, then=("/usr/bin", "/usr/local/bin", "/opt/homebrew/bin")))
              for n in ("cc", "gcc", "clang")]
    probes.append(compiler_probe("zig", zig_path(), ("version",)))
    return probes


def compilers(values: dict) -> list[dict]:
    return [v for k, v in values.items() if k.startswith("compiler ") and v]


def disks(values: dict, paths: Sequence[str]) -> list[dict]:
    return [values[f"disk {p}"] for p in paths if f"disk {p}" in values]
