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

from ._text import GIB, MIB, ParseError
from .darwin import parse_diskutil_plist, parse_sysctl, parse_system_profiler_displays
from .gpu import (cuda_version_from_int, largest_bar_bytes, marketing_name, parse_kfd_properties, parse_lspci,
                  parse_nvidia_smi_header, parse_nvidia_smi_query, parse_rocm_smi_json)
from .system import is_wsl, normalise_flags, parse_compiler_version, parse_cpuinfo, parse_rotational
from .windows import parse_media_type, parse_powershell_list, qword_memory_size, vendor_from_pnp

__all__ = ["GIB", "MIB", "ParseError", "cuda_version_from_int", "is_wsl", "largest_bar_bytes", "marketing_name",
           "normalise_flags", "parse_compiler_version", "parse_cpuinfo", "parse_diskutil_plist", "parse_kfd_properties",
           "parse_lspci", "parse_media_type", "parse_nvidia_smi_header", "parse_nvidia_smi_query",
           "parse_powershell_list", "parse_rocm_smi_json", "parse_rotational", "parse_sysctl",
           "parse_system_profiler_displays", "qword_memory_size", "vendor_from_pnp"]
