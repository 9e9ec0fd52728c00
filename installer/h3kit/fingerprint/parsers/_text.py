"""Small text helpers every parser shares: units, N/A fields, numbers that may be missing."""

from __future__ import annotations

import re

MIB = 1024 * 1024


GIB = 1024 * MIB


class ParseError(ValueError):
    """The text is not what the tool is documented to print."""


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
