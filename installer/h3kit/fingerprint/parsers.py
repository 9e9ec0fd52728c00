"""Pure functions from a tool's text output to data.

One function per tool output, no I/O, no platform checks: each is tested on
recorded real output under tests/fixtures/fingerprint/ (SOURCES.md says
where each recording came from). A parser raises `ParseError` when the text is
not what the tool prints; the probe runner turns that into an `error` probe
carrying the first bytes of the output.

Sizes come back in bytes, versions as strings ("580.95.05", "13.0"),
compute capabilities as "8.9".
"""

from __future__ import annotations

import csv
import io
import json
import plistlib
import re

MIB = 1024 * 1024
GIB = 1024 * MIB


class ParseError(ValueError):
    """The text is not what the tool is documented to print."""


# ---------------------------------------------------------------- NVIDIA


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


# ---------------------------------------------------------------- AMD


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


# ---------------------------------------------------------------- Linux, generic


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


def parse_cpuinfo(text: str) -> dict:
    """/proc/cpuinfo: model name and SIMD flags, lower-case. x86 lists `flags`;
    arm64 lists `Features` (asimd is NEON, asimddp the dot product, sve SVE)."""
    model = None
    flags: set[str] = set()
    found = False
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if not sep:
            continue
        key = key.strip().lower()
        if key in ("model name", "hardware", "cpu model") and model is None and value.strip():
            model = value.strip()
        elif key in ("flags", "features"):
            found = True
            flags.update(value.lower().split())
    if not found:
        raise ParseError("no 'flags' or 'Features' line")
    return {"model": model, "flags": normalise_flags(flags)}


_ARM_ALIASES = {"asimd": "neon", "asimddp": "dotprod", "i8mm": "i8mm", "bf16": "bf16", "sve": "sve", "sve2": "sve2",
                "asimdhp": "fp16", "fphp": "fp16"}
_X86_KEEP = {"sse2", "ssse3", "sse4_1", "sse4_2", "avx", "avx2", "fma", "f16c", "bmi2", "avx512f", "avx512bw",
             "avx512vl", "avx512dq", "avx512cd", "avx512_vnni", "avx512_bf16", "avx512vnni", "avx512bf16",
             "avx512_fp16", "avx_vnni", "amx_tile", "amx_int8", "amx_bf16", "neon", "sve", "sve2", "dotprod",
             "i8mm", "bf16", "fp16"}


def normalise_flags(raw) -> list[str]:
    """Keep the flags that matter for kernels and builds, under the contract's names."""
    out = set()
    for flag in raw:
        flag = flag.strip().lower().replace(".", "_")
        flag = _ARM_ALIASES.get(flag, flag)
        flag = {"sse4.1": "sse4_1", "sse4.2": "sse4_2", "avx512vnni": "avx512_vnni", "avx512bf16": "avx512_bf16",
                "avx1.0": "avx", "fma3": "fma"}.get(flag, flag)
        if flag in _X86_KEEP:
            out.add(flag)
    return sorted(out)


def parse_rotational(text: str) -> str:
    """/sys/block/DEV/queue/rotational: "0" solid state, "1" spinning."""
    value = text.strip()
    if value == "0":
        return "ssd"
    if value == "1":
        return "hdd"
    raise ParseError(f"expected 0 or 1, got {value[:20]!r}")


def is_wsl(proc_version: str) -> bool:
    """/proc/version of a WSL kernel names Microsoft (WSL1 "Microsoft", WSL2 "microsoft-standard-WSL2")."""
    return "microsoft" in proc_version.lower()


# ---------------------------------------------------------------- macOS


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


# ---------------------------------------------------------------- Windows


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


# ---------------------------------------------------------------- compilers


def parse_compiler_version(text: str) -> str:
    """First line of `cc --version`, `zig version`, or cl's banner; the version number in it."""
    for line in text.splitlines():
        m = re.search(r"(?<![\w.])(\d+\.\d+(?:\.\d+)*)", line)
        if m:
            return m.group(1)
    raise ParseError("no version number")


# ---------------------------------------------------------------- helpers


def _na_to_none(value: str) -> str | None:
    value = value.strip()
    return None if not value or value.startswith(("[N/A]", "N/A", "[Not Supported]", "[Unknown")) else value


def _number_or_none(value: str) -> float | None:
    try:
        return float(value.strip())
    except ValueError:
        return None


def _first_int(fields: dict, *names: str) -> int | None:
    for name in names:
        value = fields.get(name)
        if value is not None and str(value).strip().isdigit():
            return int(str(value).strip())
    return None


def _first_str(fields: dict, *names: str) -> str | None:
    for name in names:
        value = fields.get(name)
        if value and str(value).strip() not in ("N/A", ""):
            return str(value).strip()
    return None


def _card_sort_key(key: str):
    digits = "".join(ch for ch in key if ch.isdigit())
    return (not key.startswith("card"), int(digits) if digits else 0, key)


def _size_text_bytes(text) -> int | None:
    """"8 GB", "1536 MB" as bytes (Apple's binary units)."""
    if not text:
        return None
    m = re.match(r"\s*([\d.]+)\s*([KMGT]B)", str(text))
    if not m:
        return None
    scale = {"KB": 1024, "MB": MIB, "GB": GIB, "TB": 1024 * GIB}[m.group(2)]
    return int(float(m.group(1)) * scale)
