"""Numbers for people: bytes, seconds and minutes in one spelling everywhere.

Decimal units (1 GB = 10^9 bytes) because model files are published that way
and users compare against those sizes; `gib` is for memory as cards and
machines report it (nvidia-smi, About This Mac), and only there.
"""

from __future__ import annotations


def human_bytes(n: float | None, unknown: str = "unknown size") -> str:
    """`12.35 GB`, `950 MB`, `512 B`; `unknown` for None or a non-number."""
    if not isinstance(n, (int, float)) or isinstance(n, bool):
        return unknown
    for unit, size in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(n) >= size:
            return f"{n / size:.2f} {unit}"
    return f"{int(n)} B"


def gb(n: float | None, unknown: str = "n/a") -> str:
    """One decimal of GB (`14.2 GB`), the short form tables and plan summaries use."""
    if not isinstance(n, (int, float)) or isinstance(n, bool):
        return unknown
    return f"{n / 1e9:.1f} GB"


def gib(n: float | None, digits: int = 1, unknown: str = "?") -> str:
    """Binary gigabytes (`24 GiB`): memory as cards and Macs report it, so a person recognises their 24 GB card."""
    if not isinstance(n, (int, float)) or isinstance(n, bool):
        return unknown
    return f"{n / 2**30:.{digits}f} GiB"


def human_seconds(s: float | None, unknown: str = "unknown") -> str:
    """`0.42 s`, `38 s`, `11 min`, `2 h 05 min`, `3.1 days`: never `8.51e+03 s`."""
    if not isinstance(s, (int, float)) or isinstance(s, bool) or s != s or s < 0:
        return unknown
    if s < 10:
        return f"{s:.2f} s"
    if s < 90:
        return f"{s:.0f} s"
    if s < 90 * 60:
        return f"{s / 60:.0f} min"
    if s < 48 * 3600:
        h, m = divmod(int(round(s / 60)), 60)
        return f"{h} h {m:02d} min"
    return f"{s / 86400:.1f} days"
