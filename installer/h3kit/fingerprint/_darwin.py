"""macOS back end.

Sources: /usr/sbin/sysctl (CPU brand, memory size, arm64 hardware, Rosetta,
SIMD features, the GPU wired-memory limit), /usr/sbin/system_profiler
SPDisplaysDataType -json (GPU name, cores, Metal family; VRAM of the discrete
cards in Intel Macs), /usr/sbin/diskutil info -plist (SSD or not). The
absolute paths come first so a tool of the same name earlier on PATH is not
used.

Unified memory: Metal lets the GPU keep only its "recommended working set"
resident, less than all of RAM. ggml-metal's logs of
recommendedMaxWorkingSetSize show about 2/3 of RAM up to 32 GiB and about 3/4
above (e.g. 21845 MB of 32 GiB on an M1 Max, 49152 MB of 64 GiB), unless
`iogpu.wired_limit_mb` (macOS 14+) was raised by the user, which then wins.

Rosetta: an x86_64 Python on an arm64 Mac sees `sysctl.proc_translated: 1`.
PyTorch's MPS backend is not available there, so the GPU is reported with
backend null and rosetta true.
"""

from __future__ import annotations

import platform

from h3kit.core import subproc
from h3kit.fingerprint import _common, parsers
from h3kit.fingerprint._probe import Missing, Probe, ProbeFailed, tool

SYSTEM = "darwin"

SYSCTL_NAMES = (
    "machdep.cpu.brand_string", "hw.memsize", "hw.optional.arm64", "sysctl.proc_translated",
    "hw.physicalcpu", "hw.logicalcpu", "machdep.cpu.features", "machdep.cpu.leaf7_features",
    "hw.optional.neon", "hw.optional.arm.FEAT_DotProd", "hw.optional.arm.FEAT_BF16",
    "hw.optional.arm.FEAT_I8MM", "hw.optional.neon_fp16", "iogpu.wired_limit_mb",
)
_ARM_FEATURES = {"hw.optional.arm.FEAT_DotProd": "dotprod", "hw.optional.arm.FEAT_BF16": "bf16",
                 "hw.optional.arm.FEAT_I8MM": "i8mm", "hw.optional.neon_fp16": "fp16", "hw.optional.neon": "neon"}

# Share of RAM Metal recommends as the GPU working set (see the module docstring).
SMALL_MAC_SHARE = 2 / 3
LARGE_MAC_SHARE = 3 / 4
LARGE_MAC_BYTES = 32 * parsers.GIB


def usable_gpu_share(memsize: int, wired_limit_mb: int | None) -> tuple[int, float, str]:
    """(usable bytes, share of RAM, where the number came from)."""
    if wired_limit_mb and wired_limit_mb > 0:
        usable = min(memsize, wired_limit_mb * parsers.MIB)
        return usable, usable / memsize, "iogpu.wired_limit_mb"
    share = LARGE_MAC_SHARE if memsize > LARGE_MAC_BYTES else SMALL_MAC_SHARE
    return int(memsize * share), share, "metal-recommended-working-set"


def cpu_from_sysctl(values: dict[str, str]) -> dict:
    arm = values.get("hw.optional.arm64") == "1"
    flags: set[str] = set()
    if arm and values.get("sysctl.proc_translated") != "1":
        flags.add("neon")
        flags.update(flag for key, flag in _ARM_FEATURES.items() if values.get(key) == "1")
    else:
        # Under Rosetta the process sees the x86 features Rosetta emulates (no AVX).
        flags.update((values.get("machdep.cpu.features", "") + " " + values.get("machdep.cpu.leaf7_features", "")).split())
    return {
        "model": values.get("machdep.cpu.brand_string") or platform.processor() or "unknown",
        "physical_cores": _int(values.get("hw.physicalcpu")),
        "logical_cores": _int(values.get("hw.logicalcpu")),
        "flags": parsers.normalise_flags(flags),
    }


def gpus_from(values: dict[str, str], displays: list[dict]) -> list[dict]:
    memsize = _int(values.get("hw.memsize")) or 0
    rosetta = values.get("sysctl.proc_translated") == "1"
    arm = values.get("hw.optional.arm64") == "1"
    gpus = []
    apple_seen = False
    for d in displays:
        if d["vendor"] == "apple":
            apple_seen = True
            gpus.append(_apple_gpu(d["name"], memsize, values, rosetta, d["gpu_cores"], d["metal"]))
        elif d["vendor"] in ("amd", "intel", "nvidia") and d["vram_bytes"]:
            # Discrete cards in Intel Macs: MPS runs on AMD ones; integrated Intel
            # graphics (VRAM "dynamic") have no size here and are left out.
            gpus.append({"vendor": d["vendor"], "name": d["name"], "memory_total_bytes": d["vram_bytes"],
                         "memory_free_bytes": None, "unified_memory": False, "driver_version": None,
                         "cuda_driver_version": None, "compute_capability": None,
                         "backend": "mps" if d["vendor"] == "amd" else None, "metal": d["metal"]})
    if arm and not apple_seen and memsize:
        # system_profiler timed out or failed: the SoC still has its GPU.
        gpus.append(_apple_gpu(values.get("machdep.cpu.brand_string") or "Apple GPU", memsize, values, rosetta, None, None))
    return gpus


def _apple_gpu(name, memsize, values, rosetta, cores, metal) -> dict:
    usable, share, source = usable_gpu_share(memsize, _int(values.get("iogpu.wired_limit_mb")))
    return {
        "vendor": "apple", "name": name, "memory_total_bytes": usable, "memory_free_bytes": None,
        "unified_memory": True, "driver_version": None, "cuda_driver_version": None,
        "compute_capability": None, "backend": None if rosetta else "mps",
        "unified_memory_total_bytes": memsize, "usable_share": round(share, 4), "usable_share_source": source,
        "gpu_cores": cores, "metal": metal,
    }


def _int(text) -> int | None:
    try:
        return int(str(text).strip())
    except (TypeError, ValueError):
        return None


def disk_kind(path: str, timeout: float) -> str:
    diskutil = _common.resolve("diskutil", first=("/usr/sbin/diskutil",))
    if diskutil is None:
        raise Missing("diskutil not found")
    result = subproc.run([diskutil, "info", "-plist", path], timeout=timeout)
    if not result.ok:
        raise ProbeFailed(result.status, result.detail)
    return parsers.parse_diskutil_plist(result.stdout.encode("utf-8"))


def probes(disk_paths) -> list[Probe]:
    sysctl = _common.resolve("sysctl", first=("/usr/sbin/sysctl",))
    profiler = _common.resolve("system_profiler", first=("/usr/sbin/system_profiler",))
    return [
        # Names without -n, so each value keeps its name; -i skips names this
        # macOS does not know (FEAT_* on Intel, proc_translated before Big Sur),
        # as archspec does (archspec/archspec#233). Should a sysctl lack -i and
        # exit 1 after printing the known names, accept_error_output keeps them.
        Probe("sysctl", lambda t: tool(sysctl, ["-i", *SYSCTL_NAMES], t, parsers.parse_sysctl, name="sysctl",
                                       accept_error_output=True)),
        Probe("system_profiler", lambda t: tool(profiler, ["SPDisplaysDataType", "-json"], t,
                                                parsers.parse_system_profiler_displays, name="system_profiler")),
        *_common.disk_probes(disk_paths, disk_kind),
        *_common.unix_compiler_probes(),
    ]


def describe(values: dict) -> dict:
    s = values.get("sysctl") or {}
    arm = s.get("hw.optional.arm64") == "1" or platform.machine() == "arm64"
    rosetta = s.get("sysctl.proc_translated") == "1"
    notes = ["This Python is an x86_64 build running under Rosetta on an arm64 Mac: PyTorch cannot use the GPU "
             "(MPS) from it. Use an arm64 Python (python.org universal2 installer or Homebrew in /opt/homebrew)."
             ] if rosetta else []
    return {
        "os": {"system": SYSTEM, "release": platform.mac_ver()[0] or platform.release(), "wsl": False},
        "arch": "arm64" if arm else "x86_64",
        "rosetta": rosetta,
        "cpu": cpu_from_sysctl(s) if s else None,
        "gpus": gpus_from(s, values.get("system_profiler") or []),
        "notes": notes,
    }
