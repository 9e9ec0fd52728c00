"""Building the real native library once per test session (shared by test_native*.py)."""

from __future__ import annotations

import os
from pathlib import Path


def build_into(home: Path) -> Path:
    """Run h3kit.native.build.build with H3KIT_HOME=home; returns the folder of libraries."""
    from h3kit.native import build

    old = os.environ.get("H3KIT_HOME")
    os.environ["H3KIT_HOME"] = str(home)
    try:
        doc = build.build()
    finally:
        if old is None:
            os.environ.pop("H3KIT_HOME", None)
        else:
            os.environ["H3KIT_HOME"] = old
    return Path(doc["library"]).parent
