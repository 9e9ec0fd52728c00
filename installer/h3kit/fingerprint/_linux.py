"""Linux (and WSL) back end.

Sources, in the order they are trusted:
- NVIDIA: nvidia-smi (PATH, then /usr/bin, /usr/local/bin, and /usr/lib/wsl/lib
  where WSL puts the Windows driver's copy), libcuda.so.1 for the CUDA version.
- AMD: rocm-smi (PATH, then /opt/rocm/bin) for names and memory; sysfs
  /sys/class/drm/cardN/device (vendor 0x1002, mem_info_vram_total/used) when
  rocm-smi is absent, and always for the gfx target from the KFD topology.
- Intel Arc: sysfs vendor 0x8086 cards other than the integrated GPU, which
  always sits at PCI 0000:00:02.0; named by lspci, sized by VRAM files or the
  largest prefetchable BAR (equal to VRAM with resizable BAR).

SYSFS_PATH and PROCFS_PATH can be pointed at a recorded tree, as psutil's
PROCFS_PATH can, so tests read fake sysfs trees.
"""

from __future__ import annotations

import os
import platform
import re
from pathlib import Path

from h3kit.fingerprint import _common, parsers
from h3kit.fingerprint._probe import Missing, Probe, tool

SYSTEM = "linux"
SYSFS_PATH = "/sys"
PROCFS_PATH = "/proc"
WSL_LIB = "/usr/lib/wsl/lib"

_INTEGRATED_INTEL_SLOT = "0000:00:02.0"


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None


# ---------------------------------------------------------------- sysfs readers


def read_drm_cards(sysfs: str | os.PathLike | None = None) -> list[dict]:
    """Every DRM card under SYSFS/class/drm with its PCI vendor, slot and memory files."""
    root = Path(sysfs or SYSFS_PATH) / "class" / "drm"
    if not root.is_dir():
        raise Missing(f"{root} does not exist")
    cards = []
    for card in sorted(root.iterdir(), key=lambda p: (len(p.name), p.name)):
        if not re.fullmatch(r"card\d+", card.name):
            continue  # connectors such as card0-DP-1
        dev = card / "device"
        vendor = (_read(dev / "vendor") or "").strip().lower()
        if not vendor:
            continue
        slot = None
        for line in (_read(dev / "uevent") or "").splitlines():
            if line.startswith("PCI_SLOT_NAME="):
                slot = line.split("=", 1)[1].strip().lower()
        if slot is None:
            slot = dev.resolve().name.lower()
        renders = []
        if (dev / "drm").is_dir():
            renders = [int(p.name[7:]) for p in (dev / "drm").iterdir() if re.fullmatch(r"renderD\d+", p.name)]
        resource = _read(dev / "resource")
        try:
            bar = parsers.largest_bar_bytes(resource) if resource else None
        except parsers.ParseError:
            bar = None
        cards.append({
            "card": card.name,
            "vendor_id": vendor,
            "slot": slot,
            "vram_total": _int_file(dev / "mem_info_vram_total"),
            "vram_used": _int_file(dev / "mem_info_vram_used"),
            "product_name": (_read(dev / "product_name") or "").strip() or None,
            "render_minors": renders,
            "bar_bytes": bar,
        })
    return cards


def read_kfd_nodes(sysfs: str | os.PathLike | None = None) -> list[dict]:
    """GPU nodes of the ROCm kernel driver's topology: gfx target per render minor."""
    root = Path(sysfs or SYSFS_PATH) / "class" / "kfd" / "kfd" / "topology" / "nodes"
    nodes = []
    if root.is_dir():
        for node in sorted(root.iterdir()):
            text = _read(node / "properties")
            if not text:
                continue
            try:
                props = parsers.parse_kfd_properties(text)
            except parsers.ParseError:
                continue
            if props["gfx_target"]:
                nodes.append(props)
    return nodes


def _int_file(path: Path) -> int | None:
    text = (_read(path) or "").strip()
    return int(text) if text.isdigit() else None


def sysfs_probe(_timeout: float) -> dict:
    return {"cards": read_drm_cards(), "kfd": read_kfd_nodes()}


# ---------------------------------------------------------------- assembling GPUs


def amd_and_intel_gpus(values: dict) -> list[dict]:
    """AMD and discrete Intel GPUs from rocm-smi, sysfs and lspci, merged per card."""
    sysfs = values.get("sysfs drm") or {"cards": [], "kfd": []}
    rocm = {c["card"]: c for c in values.get("rocm-smi") or []}
    names = {d["slot"]: parsers.marketing_name(d["name"]) for d in values.get("lspci") or []}
    gfx_by_render = {n["drm_render_minor"]: n["gfx_target"] for n in sysfs["kfd"]}
    gpus = []
    seen_rocm = set()
    for card in sysfs["cards"]:
        gfx = next((gfx_by_render[m] for m in card["render_minors"] if m in gfx_by_render), None)
        if card["vendor_id"] == "0x1002":
            r = rocm.get(card["card"], {})
            seen_rocm.add(card["card"])
            total = r.get("memory_total_bytes") or card["vram_total"]
            if not total:
                continue
            free = r.get("memory_free_bytes")
            if free is None and card["vram_total"] and card["vram_used"] is not None:
                free = card["vram_total"] - card["vram_used"]
            gpus.append(_gpu("amd", r.get("name") or card["product_name"] or names.get(card["slot"]) or "AMD GPU",
                             total, free, "rocm", gfx_target=r.get("gfx_target") or gfx))
        elif card["vendor_id"] == "0x8086" and card["slot"] != _INTEGRATED_INTEL_SLOT:
            total = card["vram_total"] or card["bar_bytes"]
            if not total:
                continue
            free = card["vram_total"] - card["vram_used"] if card["vram_total"] and card["vram_used"] is not None else None
            gpus.append(_gpu("intel", names.get(card["slot"]) or card["product_name"] or "Intel GPU", total, free, "xpu",
                             memory_source="vram" if card["vram_total"] else "pci-bar"))
    # rocm-smi cards sysfs did not list (a container without /sys/class/drm).
    for key, r in rocm.items():
        if key not in seen_rocm and r.get("memory_total_bytes"):
            gpus.append(_gpu("amd", r["name"], r["memory_total_bytes"], r["memory_free_bytes"], "rocm",
                             gfx_target=r.get("gfx_target")))
    return gpus


def _gpu(vendor: str, name: str, total: int, free: int | None, backend: str, **extra) -> dict:
    return {"vendor": vendor, "name": name, "memory_total_bytes": int(total),
            "memory_free_bytes": int(free) if free is not None else None, "unified_memory": False,
            "driver_version": None, "cuda_driver_version": None, "compute_capability": None,
            "backend": backend, **extra}


# ---------------------------------------------------------------- CPU, OS, disks


def cpu_probe(_timeout: float) -> dict:
    import psutil

    text = _read(Path(PROCFS_PATH) / "cpuinfo")
    if text is None:
        raise Missing(f"{PROCFS_PATH}/cpuinfo cannot be read")
    info = parsers.parse_cpuinfo(text)
    flags = set(info["flags"])
    if _arch() == "arm64":
        flags.add("neon")  # mandatory in AArch64; some kernels list only "asimd"
    return {"model": info["model"] or platform.processor() or "unknown",
            "physical_cores": psutil.cpu_count(logical=False), "logical_cores": psutil.cpu_count(logical=True),
            "flags": sorted(flags)}


def wsl_probe(_timeout: float) -> dict:
    text = _read(Path(PROCFS_PATH) / "version") or ""
    return {"wsl": parsers.is_wsl(text) or Path(WSL_LIB).is_dir(), "kernel": text.strip()[:200]}


def disk_kind(path: str, _timeout: float) -> str:
    """SSD or HDD from the rotational flag of the block device holding `path`
    (or of its parent disk, for a partition). Overlay, tmpfs and network
    filesystems have no block device: unknown."""
    st = os.stat(path)
    major, minor = os.major(st.st_dev), os.minor(st.st_dev)
    dev = Path(SYSFS_PATH) / "dev" / "block" / f"{major}:{minor}"
    if not dev.exists():
        return "unknown"
    dev = dev.resolve()
    for candidate in (dev / "queue" / "rotational", dev.parent / "queue" / "rotational"):
        text = _read(candidate)
        if text is not None:
            try:
                return parsers.parse_rotational(text)
            except parsers.ParseError:
                return "unknown"
    return "unknown"


def _distribution() -> str | None:
    """PRETTY_NAME from os-release ("Debian GNU/Linux 12 (bookworm)"), when there is one."""
    try:
        return platform.freedesktop_os_release().get("PRETTY_NAME")
    except OSError:
        return None


def _arch() -> str:
    machine = platform.machine().lower()
    return "arm64" if machine in ("aarch64", "arm64") else "x86_64" if machine in ("x86_64", "amd64") else machine


# ---------------------------------------------------------------- the back end's interface


def probes(disk_paths) -> list[Probe]:
    smi = _common.resolve("nvidia-smi", then=("/usr/bin", "/usr/local/bin", WSL_LIB))
    rocm_smi = _common.resolve("rocm-smi", then=("/opt/rocm/bin",))
    lspci = _common.resolve("lspci", then=("/usr/bin", "/usr/sbin", "/sbin", "/bin"))
    return [
        *_common.nvidia_probes(smi, ("libcuda.so.1", f"{WSL_LIB}/libcuda.so.1")),
        Probe("rocm-smi", lambda t: tool(rocm_smi, ["--showproductname", "--showmeminfo", "vram", "--json"], t,
                                          parsers.parse_rocm_smi_json, name="rocm-smi")),
        Probe("sysfs drm", sysfs_probe),
        Probe("lspci", lambda t: tool(lspci, ["-D", "-nn"], t, parsers.parse_lspci, name="lspci")),
        Probe("cpu", cpu_probe),
        Probe("wsl", wsl_probe),
        *_common.disk_probes(disk_paths, disk_kind),
        *_common.unix_compiler_probes(),
    ]


def notes_for(values: dict, gpus: list[dict]) -> list[str]:
    """Sentences for things a person should know that the GPU list cannot say."""
    notes = []
    pci_vendors = {d["vendor_id"] for d in values.get("lspci") or []}
    pci_vendors |= {c["vendor_id"] for c in (values.get("sysfs drm") or {}).get("cards", [])}
    if "0x10de" in pci_vendors and not any(g["vendor"] == "nvidia" for g in gpus):
        notes.append("An NVIDIA GPU is on the PCI bus but nvidia-smi did not report it: "
                     "install or repair the NVIDIA driver, then run 'h3kit fingerprint' again.")
    for g in gpus:
        if g.get("memory_source") == "pci-bar":
            notes.append(f"{g['name']}: memory is the PCI BAR size ({g['memory_total_bytes'] / parsers.GIB:.1f} GiB); "
                         "without resizable BAR the card's real VRAM is larger.")
    return notes


def describe(values: dict) -> dict:
    wsl = (values.get("wsl") or {}).get("wsl", False)
    gpus = _common.nvidia_gpus(values) + amd_and_intel_gpus(values)
    return {
        "os": {"system": SYSTEM, "release": platform.release(), "wsl": bool(wsl), "distribution": _distribution()},
        "arch": _arch(),
        "rosetta": False,
        "cpu": values.get("cpu"),
        "gpus": gpus,
        "notes": notes_for(values, gpus),
    }
