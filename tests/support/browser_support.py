"""Headless Chromium for the report tests: where it is, and one way to start it (no network, fresh profile)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path


def chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


NO_CHROMIUM = "no chromium (Debian: apt-get install -y chromium)"


def headless(profile: Path, *args: str) -> subprocess.CompletedProcess:
    """Chromium with no network, no first-run work and a fresh profile."""
    argv = [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
            "--no-first-run", "--disable-component-update", "--disable-sync", f"--user-data-dir={profile}", *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=90)
