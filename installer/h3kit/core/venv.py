"""Where a virtual environment keeps its Python, on every platform."""

from __future__ import annotations

from pathlib import Path

# Order matters: bin/python3 first (some venvs lack bin/python), Windows last.
CANDIDATES = ("bin/python3", "bin/python", "Scripts/python.exe")


def venv_python(venv: str | Path) -> Path | None:
    """The interpreter inside `venv`, or None when it has none."""
    for rel in CANDIDATES:
        p = Path(venv) / rel
        if p.is_file():
            return p
    return None
