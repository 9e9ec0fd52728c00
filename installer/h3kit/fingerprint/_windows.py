"""Windows back end.

Tool search order (never the current directory: a planted nvidia-smi.exe
there must not run):
- nvidia-smi: %SystemRoot%\\System32\\nvidia-smi.exe (DCH drivers), then
  %ProgramFiles%\\NVIDIA Corporation\\NVSMI\\nvidia-smi.exe (older drivers),
  then PATH without the current directory;
- powershell: %SystemRoot%\\System32\\WindowsPowerShell\\v1.0\\powershell.exe, then PATH;
- nvcuda.dll from System32 for cuDriverGetVersion;
- vswhere: %ProgramFiles(x86)%\\Microsoft Visual Studio\\Installer\\vswhere.exe.

Video memory: Win32_VideoController.AdapterRAM is a uint32 and stops at
4 GiB, so the size comes from the 64-bit HardwareInformation.qwMemorySize in
the display-adapter class key of the registry, matched on the driver
description (sebhildebrandt/systeminformation#534, Jinjinov/Hardware.Info#40).
"""

from __future__ import annotations

import os
import platform
from pathlib import Path

from h3kit.fingerprint import _common, parsers
from h3kit.fingerprint._probe import Missing, Probe, tool

SYSTEM = "windows"
DISPLAY_CLASS_KEY = r"SYSTEM\CurrentControlSet\Control\Class\{4d36e968-e325-11ce-bfc1-08002be10318}"
VIDEO_QUERY = ("Get-CimInstance Win32_VideoController | "
               "Format-List Name,AdapterCompatibility,AdapterRAM,DriverVersion,PNPDeviceID")

# IsProcessorFeaturePresent codes (winnt.h). Every AVX2 CPU shipped also has FMA3,
# which has no code of its own.
_PF_FLAGS = {36: "ssse3", 37: "sse4_1", 38: "sse4_2", 39: "avx", 40: "avx2", 41: "avx512f",
             19: "neon", 43: "dotprod"}


def _system_root() -> Path:
    return Path(os.environ.get("SystemRoot", r"C:\Windows"))


def _program_files(x86: bool = False) -> Path:
    name = "ProgramFiles(x86)" if x86 else "ProgramFiles"
    return Path(os.environ.get(name, r"C:\Program Files (x86)" if x86 else r"C:\Program Files"))


def nvidia_smi_path() -> str | None:
    return _common.resolve("nvidia-smi", first=(
        _system_root() / "System32" / "nvidia-smi.exe",
        _program_files() / "NVIDIA Corporation" / "NVSMI" / "nvidia-smi.exe",
    ))


def read_display_registry() -> list[dict]:
    """DriverDesc and qwMemorySize of each display adapter instance key (0000, 0001...)."""
    import winreg

    entries = []
    try:
        cls = winreg.OpenKey(winreg.HKEY_LOCAL_MACHINE, DISPLAY_CLASS_KEY)
    except OSError as exc:
        raise Missing(f"display class key unreadable: {exc}") from None
    with cls:
        index = 0
        while True:
            try:
                sub = winreg.EnumKey(cls, index)
            except OSError:
                break
            index += 1
            if not sub.isdigit():
                continue  # "Properties" and friends
            try:
                with winreg.OpenKey(cls, sub) as key:
                    entry = {"DriverDesc": _reg_value(winreg, key, "DriverDesc"),
                             "qwMemorySize": parsers.qword_memory_size(
                                 _reg_value(winreg, key, "HardwareInformation.qwMemorySize"))}
            except OSError:
                continue
            entries.append(entry)
    return entries


def _reg_value(winreg, key, name):
    try:
        return winreg.QueryValueEx(key, name)[0]
    except OSError:
        return None


def controller_gpus(controllers: list[dict], registry: list[dict], have_nvidia_smi: bool) -> list[dict]:
    """GPUs from Win32_VideoController records, sized from the registry."""
    sizes = {(e.get("DriverDesc") or "").strip(): e.get("qwMemorySize") for e in registry}
    gpus = []
    for c in controllers:
        name = c.get("Name", "").strip()
        vendor = parsers.vendor_from_pnp(c.get("PNPDeviceID", ""), c.get("AdapterCompatibility", ""))
        if vendor is None or (vendor == "nvidia" and have_nvidia_smi):
            continue  # virtual adapters; NVIDIA cards come from nvidia-smi when it runs
        if vendor == "intel" and "arc" not in name.lower():
            continue  # integrated graphics share RAM and are not a target
        adapter_ram = parsers.qword_memory_size(c.get("AdapterRAM"))
        total = sizes.get(name) or adapter_ram
        if not total:
            continue
        backend = {"nvidia": "cuda", "amd": "directml", "intel": "xpu"}[vendor]
        gpus.append({"vendor": vendor, "name": name, "memory_total_bytes": int(total), "memory_free_bytes": None,
                     "unified_memory": False, "driver_version": c.get("DriverVersion") or None,
                     "cuda_driver_version": None, "compute_capability": None, "backend": backend,
                     "memory_source": "registry" if sizes.get(name) else "adapter-ram-capped-4gib"})
    return gpus


def cpu_probe(_timeout: float) -> dict:
    import ctypes
    import winreg

    import psutil

    model = platform.processor()
    try:
        with winreg.OpenKey(winreg.HKEY_LOCAL_MACHINE, r"HARDWARE\DESCRIPTION\System\CentralProcessor\0") as key:
            model = str(winreg.QueryValueEx(key, "ProcessorNameString")[0]).strip()
    except OSError:
        pass
    present = ctypes.windll.kernel32.IsProcessorFeaturePresent
    flags = {flag for code, flag in _PF_FLAGS.items() if present(code)}
    if "avx2" in flags:
        flags.add("fma")
    return {"model": model or "unknown", "physical_cores": psutil.cpu_count(logical=False),
            "logical_cores": psutil.cpu_count(logical=True), "flags": sorted(flags)}


def msvc_probe(timeout: float) -> dict:
    """cl.exe of the newest Visual Studio with the C++ tools, found by vswhere."""
    vswhere = _common.resolve("vswhere", first=(
        _program_files(x86=True) / "Microsoft Visual Studio" / "Installer" / "vswhere.exe",))
    install = tool(vswhere, ["-latest", "-products", "*", "-requires",
                             "Microsoft.VisualStudio.Component.VC.Tools.x86.x64", "-property", "installationPath"],
                   timeout, lambda text: text.strip(), name="vswhere")
    if not install:
        raise Missing("Visual Studio with the C++ build tools is not installed")
    host = "Hostarm64" if platform.machine().lower() == "arm64" else "Hostx64"
    target = "arm64" if host == "Hostarm64" else "x64"
    for version_dir in sorted((Path(install) / "VC" / "Tools" / "MSVC").glob("*"), reverse=True):
        cl = version_dir / "bin" / host / target / "cl.exe"
        if cl.is_file():
            return {"name": "cl", "path": str(cl), "version": version_dir.name}
    raise Missing(f"no cl.exe under {install}")


def _powershell() -> str | None:
    return _common.resolve("powershell", first=(
        _system_root() / "System32" / "WindowsPowerShell" / "v1.0" / "powershell.exe",))


def disk_kind(path: str, timeout: float) -> str:
    """SSD or HDD of the physical disk holding a drive letter's partition."""
    drive = os.path.splitdrive(os.path.abspath(path))[0].rstrip(":")
    if len(drive) != 1 or not drive.isalpha():
        return "unknown"  # UNC paths: a network share has no media type
    script = f"(Get-Partition -DriveLetter {drive} | Get-Disk | Get-PhysicalDisk).MediaType"
    return tool(_powershell(), ["-NoProfile", "-NonInteractive", "-Command", script], timeout,
                parsers.parse_media_type, name="powershell")


def probes(disk_paths) -> list[Probe]:
    powershell = _powershell()
    return [
        *_common.nvidia_probes(nvidia_smi_path(), (str(_system_root() / "System32" / "nvcuda.dll"), "nvcuda.dll")),
        Probe("video controllers", lambda t: tool(powershell, ["-NoProfile", "-NonInteractive", "-Command", VIDEO_QUERY],
                                                   t, parsers.parse_powershell_list, name="powershell")),
        Probe("display registry", lambda t: read_display_registry()),
        Probe("cpu", cpu_probe),
        *_common.disk_probes(disk_paths, disk_kind),
        Probe("compiler cl", msvc_probe),
        *[_common.compiler_probe(n, _common.resolve(n)) for n in ("gcc", "clang")],
        _common.compiler_probe("zig", _common.zig_path(), ("version",)),
    ]


def describe(values: dict) -> dict:
    machine = platform.machine().lower()
    gpus = _common.nvidia_gpus(values) + controller_gpus(
        values.get("video controllers") or [], values.get("display registry") or [],
        have_nvidia_smi=bool(values.get("nvidia-smi")))
    notes = [f"{g['name']}: memory comes from Win32_VideoController.AdapterRAM, which stops at 4 GiB; "
             "the card may have more." for g in gpus if g.get("memory_source") == "adapter-ram-capped-4gib"]
    return {
        "os": {"system": SYSTEM, "release": platform.version() or platform.release(), "wsl": False},
        "arch": "arm64" if machine == "arm64" else "x86_64",
        "rosetta": False,
        "cpu": values.get("cpu"),
        "gpus": gpus,
        "notes": notes,
    }
