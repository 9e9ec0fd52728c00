"""CPU, disks and OS text: /proc/cpuinfo, SIMD flags, rotational bits, WSL, compiler banners."""

from __future__ import annotations

import re

from ._text import ParseError

_X86_KEEP = {"sse2", "ssse3", "sse4_1", "sse4_2", "avx", "avx2", "fma", "f16c", "bmi2", "avx512f", "avx512bw",
             "avx512vl", "avx512dq", "avx512cd", "avx512_vnni", "avx512_bf16", "avx512vnni", "avx512bf16",
             "avx512_fp16", "avx_vnni", "amx_tile", "amx_int8", "amx_bf16", "neon", "sve", "sve2", "dotprod",
             "i8mm", "bf16", "fp16"}


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


def parse_compiler_version(text: str) -> str:
    """First line of `cc --version`, `zig version`, or cl's banner; the version number in it."""
    for line in text.splitlines():
        m = re.search(r"(?<![\w.])(\d+\.\d+(?:\.\d+)*)", line)
        if m:
            return m.group(1)
    raise ParseError("no version number")
