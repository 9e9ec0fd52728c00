"""profiles/torch_builds.yaml: the PyTorch release, its wheel indexes and what each CUDA tag needs.

The table is read as plain data (h3kit.plan.torch_wheel walks it); it is
cached by path because doctor and install ask for the choice several times.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import yaml

from h3kit.core.paths import asset_dir


@lru_cache(maxsize=4)
def _load(path: str) -> dict:
    with open(path, encoding="utf-8") as f:
        return yaml.safe_load(f)


def load(path: str | Path | None = None) -> dict:
    """The parsed torch_builds.yaml (cached)."""
    p = Path(path) if path is not None else asset_dir("profiles") / "torch_builds.yaml"
    return _load(str(p))
