"""GPU tools' output: nvidia-smi, rocm-smi, the kfd topology, lspci."""

from __future__ import annotations

import csv
import io
import json
import re

from ._text import (
    MIB,
    ParseError,
    _card_sort_key,
    _first_int,
    _first_str,
    _na_to_none,
    _number_or_none,
)


def parse_nvidia_smi_query(text: str) -> list[dict]:
    """`nvidia-smi --query-gpu=name,memory.total,memory.free,driver_version,compute_cap
    --format=csv,noheader,nounits`: one line per GPU, memory in MiB.

    Drivers before ~510 do not know `compute_cap` and print an error instead
    of lines; those come here as garbage and are reported as such.
    """
    gpus = []
    for row in csv.reader(io.StringIO(text.strip()), skipinitialspace=True):
        if not row or not any(cell.strip() for cell in row):
            continue
        if len(row) != 5:
            raise ParseError(f"expected 5 comma-separated fields per GPU, got {len(row)}")
        name, total, free, driver, cap = (cell.strip() for cell in row)
        total_mib = _number_or_none(total)
        if not name or total_mib is None:
            raise ParseError(f"no GPU name or memory.total in line {','.join(row)!r}")
        free_mib = _number_or_none(free)
        gpus.append({
            "name": name,
            "memory_total_bytes": int(total_mib * MIB),
            "memory_free_bytes": int(free_mib * MIB) if free_mib is not None else None,
            "driver_version": _na_to_none(driver),
            "compute_capability": _na_to_none(cap),
        })
    if not gpus:
        raise ParseError("no GPU lines")
    return gpus


# Drivers up to 5xx print "Driver Version: X  CUDA Version: Y"; 610-series drivers
# print "KMD Version: X  CUDA UMD Version: Y" (club-3090 issue #1229).
_SMI_HEADER = re.compile(
    r"(?:Driver|KMD) Version:\s*(?P<driver>[0-9][0-9.]*)(?:.*?CUDA (?:UMD )?Version:\s*(?P<cuda>[0-9][0-9.]*|N/A))?",
)


def parse_nvidia_smi_header(text: str) -> dict:
    """Plain `nvidia-smi`: the banner line `| NVIDIA-SMI 580.95.05  Driver Version:
    580.95.05  CUDA Version: 13.0 |`. The CUDA version there is the newest CUDA
    the driver supports (what cuDriverGetVersion returns), not an installed toolkit."""
    for line in text.splitlines():
        m = _SMI_HEADER.search(line)
        if m:
            cuda = m.group("cuda")
            return {"driver_version": m.group("driver"), "cuda_driver_version": None if cuda in (None, "N/A") else cuda}
    raise ParseError("no 'Driver Version:' or 'KMD Version:' banner")


def cuda_version_from_int(value: int) -> str | None:
    """cuDriverGetVersion's integer (13000, 12040) as "13.0", "12.4"."""
    if value <= 0:
        return None
    return f"{value // 1000}.{(value % 1000) // 10}"


def parse_rocm_smi_json(text: str) -> list[dict]:
    """`rocm-smi --showproductname --showmeminfo vram --json`: an object keyed by
    `card0`, `card1`...; key names changed across ROCm versions, so each field is
    looked up under its known spellings."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ParseError(f"not JSON ({exc.msg})") from None
    if not isinstance(doc, dict):
        raise ParseError("not a JSON object")
    cards = []
    for key in sorted(doc, key=_card_sort_key):
        fields = doc[key]
        if not key.startswith("card") or not isinstance(fields, dict):
            continue  # rocm-smi adds a "system" entry on some versions
        total = _first_int(fields, "VRAM Total Memory (B)", "vram Total Memory (B)")
        used = _first_int(fields, "VRAM Total Used Memory (B)", "vram Total Used Memory (B)")
        name = _first_str(fields, "Card Series", "Card series", "Device Name", "Card Model", "Card model")
        gfx = _first_str(fields, "GFX Version", "gfx_version")
        cards.append({
            "card": key,
            "name": name or key,
            "memory_total_bytes": total,
            "memory_free_bytes": total - used if total is not None and used is not None else None,
            "gfx_target": gfx.lower() if gfx else None,
        })
    if not cards:
        raise ParseError("no 'cardN' entries")
    return cards


def parse_kfd_properties(text: str) -> dict:
    """/sys/class/kfd/kfd/topology/nodes/N/properties: `key value` lines. Returns the
    gfx target ("gfx1100") and the DRM render minor that ties the node to a card;
    CPU nodes have gfx_target_version 0 and give gfx_target None."""
    values: dict[str, int] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].lstrip("-").isdigit():
            values[parts[0]] = int(parts[1])
    if not values:
        raise ParseError("no 'key value' lines")
    version = values.get("gfx_target_version", 0)
    gfx = None
    if version > 0:
        # Encoded as major*10000 + minor*100 + stepping; the name prints minor and
        # stepping as single hex digits (90010 -> gfx90a, 110000 -> gfx1100).
        major, minor, stepping = version // 10000, (version // 100) % 100, version % 100
        gfx = f"gfx{major}{minor:x}{stepping:x}"
    return {"gfx_target": gfx, "drm_render_minor": values.get("drm_render_minor")}


_LSPCI_LINE = re.compile(
    r"^(?P<slot>(?:[0-9a-fA-F]{4}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7])\s+(?P<cls>[^:\[]+?)(?:\s+\[(?P<classid>[0-9a-fA-F]{4})\])?:\s+"
    r"(?P<desc>.*?)(?:\s+\[(?P<vendor>[0-9a-fA-F]{4}):(?P<device>[0-9a-fA-F]{4})\])?"
    r"(?:\s+\(rev [0-9a-fA-F]+\))?(?:\s+\(prog-if [^)]*\]\))?\s*$"
)


_DISPLAY_CLASSES = ("vga compatible controller", "3d controller", "display controller")


_VENDOR_PREFIXES = {"0x10de": ("NVIDIA",), "0x1002": ("Advanced Micro Devices", "AMD", "ATI"), "0x8086": ("Intel",)}


def parse_lspci(text: str) -> list[dict]:
    """`lspci -D -nn` (plain `lspci` and `lspci -v` read too): display controllers
    (PCI class 03xx) with slot, vendor id and name. Indented detail lines are skipped."""
    devices = []
    seen_any = False
    for line in text.splitlines():
        if not line.strip() or line[0].isspace():
            continue
        m = _LSPCI_LINE.match(line.strip())
        if not m:
            continue
        seen_any = True
        classid, cls = m.group("classid"), m.group("cls").strip().lower()
        if not (classid.startswith("03") if classid else cls in _DISPLAY_CLASSES):
            continue
        slot = m.group("slot").lower()
        if slot.count(":") == 1:
            slot = "0000:" + slot  # lspci without -D leaves the domain out
        desc = m.group("desc").strip()
        vendor_id = "0x" + m.group("vendor").lower() if m.group("vendor") else next(
            (vid for vid, prefixes in _VENDOR_PREFIXES.items() if desc.startswith(prefixes)), None)
        devices.append({"slot": slot, "vendor_id": vendor_id,
                        "device_id": "0x" + m.group("device").lower() if m.group("device") else None, "name": desc})
    if not seen_any and text.strip():
        raise ParseError("no 'slot class: name' lines")
    return devices


def marketing_name(lspci_name: str) -> str:
    """`Intel Corporation DG2 [Arc A770]` -> `Intel Arc A770`; AMD's bracketed names likewise."""
    brackets = re.findall(r"\[([^\]]+)\]", lspci_name)
    if brackets:
        vendor = "Intel" if lspci_name.startswith("Intel") else "AMD" if "AMD" in lspci_name or "ATI" in lspci_name else ""
        best = brackets[-1]
        if vendor and not best.startswith(vendor) and not best.startswith(("Radeon", "AMD")):
            return f"{vendor} {best}"
        return best
    return lspci_name


def largest_bar_bytes(resource_text: str) -> int | None:
    """/sys/bus/pci/devices/X/resource: `start end flags` hex triples, one per BAR.
    The largest prefetchable memory BAR of a discrete card with resizable BAR is
    its VRAM (how StabilityMatrix sizes cards on Linux); None when there is none."""
    best = 0
    for line in resource_text.splitlines():
        parts = line.split()
        if len(parts) != 3:
            continue
        try:
            start, end, flags = (int(p, 16) for p in parts)
        except ValueError:
            raise ParseError(f"not hex: {line!r}") from None
        is_memory, prefetchable = flags & 0x200, flags & 0x2000
        if start and end > start and is_memory and prefetchable:
            best = max(best, end - start + 1)
    return best or None
