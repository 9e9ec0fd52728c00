"""Windows tools' output: PowerShell lists, WMI sizes, media types, PnP vendor ids."""

from __future__ import annotations

import re

from ._text import ParseError


def parse_powershell_list(text: str) -> list[dict[str, str]]:
    """PowerShell `Format-List` output: blocks of `Key : Value` separated by blank
    lines; long values wrap onto lines indented under the value column."""
    records: list[dict[str, str]] = []
    current: dict[str, str] = {}
    last_key = None
    for raw in text.splitlines():
        line = raw.rstrip()
        if not line.strip():
            if current:
                records.append(current)
                current, last_key = {}, None
            continue
        key, sep, value = line.partition(" : ")
        if not sep and line.rstrip().endswith(" :"):
            key, sep, value = line.rstrip()[:-2], " :", ""
        if sep and key.strip() and not line.startswith(" "):
            last_key = key.strip()
            current[last_key] = value.strip()
        elif last_key is not None and line.startswith(" "):
            current[last_key] += line.strip()  # continuation of a wrapped value
        else:
            raise ParseError(f"not a 'Key : Value' line: {line[:60]!r}")
    if current:
        records.append(current)
    return records


def qword_memory_size(value) -> int | None:
    """HardwareInformation.qwMemorySize as read from the registry: REG_QWORD (int) on
    most drivers, REG_BINARY (8 little-endian bytes) on some, or PowerShell's text
    for either ("25769803776" or "{0, 0, 0, 0, 6, 0, 0, 0}")."""
    if value is None:
        return None
    if isinstance(value, int):
        return value if value > 0 else None
    if isinstance(value, (bytes, bytearray)):
        return int.from_bytes(bytes(value[:8]), "little") or None
    text = str(value).strip()
    if text.isdigit():
        return int(text) or None
    if text.startswith("{") and text.endswith("}"):
        try:
            return int.from_bytes(bytes(int(b) for b in text[1:-1].split(",")[:8]), "little") or None
        except ValueError:
            return None
    return None


def parse_media_type(text: str) -> str:
    """`Get-PhysicalDisk`'s MediaType for the disk under a drive letter: SSD, HDD, or
    Unspecified (virtual disks, some NVMe enclosures, Storage Spaces)."""
    words = text.split()
    if not words:
        raise ParseError("empty")
    kinds = {"ssd": "ssd", "hdd": "hdd", "unspecified": "unknown", "scm": "ssd"}
    if words[0].lower() not in kinds:
        raise ParseError(f"unknown media type {words[0][:30]!r}")
    return kinds[words[0].lower()]


def vendor_from_pnp(pnp_device_id: str, compatibility: str = "") -> str | None:
    """Win32_VideoController's PNPDeviceID `PCI\\VEN_10DE&DEV_2684...` names the vendor."""
    m = re.search(r"VEN_([0-9A-Fa-f]{4})", pnp_device_id or "")
    vid = m.group(1).lower() if m else ""
    by_id = {"10de": "nvidia", "1002": "amd", "8086": "intel"}
    if vid in by_id:
        return by_id[vid]
    comp = (compatibility or "").lower()
    for word, vendor in (("nvidia", "nvidia"), ("advanced micro", "amd"), ("amd", "amd"), ("intel", "intel")):
        if word in comp:
            return vendor
    return None
