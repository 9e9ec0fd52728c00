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


def _number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and x == x


def gib_of(used: float | None, total: float | None, unknown: str = "?") -> str:
    """`14.2 of 16.0 GiB` (`14.2 GiB` without a total): a peak against what the card or machine has."""
    if not _number(used):
        return unknown
    if not _number(total) or total <= 0:
        return gib(used)
    return f"{used / 2**30:.1f} of {total / 2**30:.1f} GiB"


def human_rate(bytes_per_s: float | None, unknown: str = "unknown") -> str:
    """`1.80 GB/s`, `950 MB/s`: a read or copy speed in the same decimal units as file sizes."""
    if not _number(bytes_per_s) or bytes_per_s < 0:
        return unknown
    return human_bytes(bytes_per_s) + "/s"


def percent(fraction: float | None, signed: bool = False, unknown: str = "-") -> str:
    """A fraction as `4%` (`0.4%` below one percent); `signed` gives `+12%` / `-8%` for a difference."""
    if not _number(fraction):
        return unknown
    p = 100.0 * fraction
    text = f"{p:.1f}" if 0 < abs(p) < 1 else f"{p:.0f}"
    if text in ("-0", "-0.0"):
        text = "0"
    return (("+" if p > 0 else "") + text + "%") if signed else text + "%"


def precise_seconds(s: float | None, unknown: str = "-") -> str:
    """Three significant figures where they matter: `28.8 ms`, `12.4 s`, `124 s`; past 10 min as human_seconds."""
    if not _number(s) or s < 0:
        return unknown
    if s == 0:
        return "0 s"
    if s < 1:
        return f"{s * 1000:.3g} ms"
    if s < 600:
        return f"{s:.3g} s"
    return human_seconds(s, unknown)
