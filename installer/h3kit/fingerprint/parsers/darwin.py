"""macOS tools' output: sysctl, system_profiler, diskutil."""

from __future__ import annotations

import json
import plistlib
import re

from ._text import ParseError, _size_text_bytes


def parse_sysctl(text: str) -> dict[str, str]:
    """`sysctl NAME...` (without -n, so each value keeps its name): `name: value` lines."""
    values = {}
    for line in text.splitlines():
        name, sep, value = line.partition(":")
        if sep and name.strip() and " " not in name.strip():
            values[name.strip()] = value.strip()
    if not values:
        raise ParseError("no 'name: value' lines")
    return values


def parse_system_profiler_displays(text: str) -> list[dict]:
    """`system_profiler SPDisplaysDataType -json`: the GPUs. Apple Silicon items carry
    `sppci_cores` and a Metal family; Intel Macs' discrete cards carry `spdisplays_vram`."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ParseError(f"not JSON ({exc.msg})") from None
    items = doc.get("SPDisplaysDataType") if isinstance(doc, dict) else None
    if not isinstance(items, list):
        raise ParseError("no 'SPDisplaysDataType' list")
    gpus = []
    for item in items:
        if not isinstance(item, dict):
            continue
        name = item.get("sppci_model") or item.get("_name") or "unknown GPU"
        if name.startswith("kHW_") and name.endswith("Item"):  # early M1 builds: kHW_AppleM1Item
            name = re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[a-z])(?=[0-9])", " ", name[4:-4])
        vendor_raw = str(item.get("spdisplays_vendor") or item.get("sppci_vendor") or "").lower()
        if "apple" in vendor_raw or name.startswith("Apple"):
            vendor = "apple"
        elif "amd" in vendor_raw or "ati" in vendor_raw or "radeon" in name.lower():
            vendor = "amd"
        elif "intel" in vendor_raw or "intel" in name.lower():
            vendor = "intel"
        elif "nvidia" in vendor_raw or "nvidia" in name.lower():
            vendor = "nvidia"
        else:
            vendor = "apple" if "sppci_cores" in item else "unknown"
        cores = item.get("sppci_cores")
        metal = item.get("spdisplays_mtlgpufamilysupport") or item.get("spdisplays_metalfamily") or item.get("spdisplays_metal")
        gpus.append({
            "name": name,
            "vendor": vendor,
            "gpu_cores": int(cores) if str(cores or "").isdigit() else None,
            "metal": str(metal).replace("spdisplays_", "") if metal else None,
            "vram_bytes": _size_text_bytes(item.get("spdisplays_vram") or item.get("_spdisplays_vram")
                                           or item.get("spdisplays_vram_shared")),
        })
    return gpus


def parse_diskutil_plist(data: bytes) -> str:
    """`diskutil info -plist PATH`: SolidState true/false; absent on disk images and network volumes."""
    try:
        doc = plistlib.loads(data)
    except Exception as exc:  # plistlib raises several unrelated types for bad input
        raise ParseError(f"not a property list ({type(exc).__name__})") from None
    if not isinstance(doc, dict):
        raise ParseError("not a dictionary")
    solid = doc.get("SolidState")
    return "ssd" if solid is True else "hdd" if solid is False else "unknown"
