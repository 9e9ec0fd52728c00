"""Shared fixtures. Every test gets its own H3KIT_HOME so nothing touches the real home."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "tests" / "fixtures"


@pytest.fixture(autouse=True)
def h3kit_home(tmp_path_factory, monkeypatch) -> Path:
    home = tmp_path_factory.mktemp("h3kit-home")
    monkeypatch.setenv("H3KIT_HOME", str(home))
    return home


@pytest.fixture
def run_cli(capsys):
    """Run the CLI in-process; returns (exit_code, stdout, stderr)."""
    from h3kit.cli import main

    def _run(*argv: str):
        code = main(list(argv))
        out, err = capsys.readouterr()
        return code, out, err

    return _run


@pytest.fixture
def h3kit_exe() -> list[str]:
    """The CLI as a subprocess argv, run by this test's Python."""
    return [sys.executable, "-m", "h3kit"]
