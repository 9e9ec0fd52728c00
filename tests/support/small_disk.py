"""A real small file system for full-disk tests: a tmpfs mounted for one test (root only), and a filler."""

from __future__ import annotations

import contextlib
import os
import subprocess
from pathlib import Path

import pytest


def mount_tmpfs(where: Path, size: str = "2m") -> bool:
    if os.geteuid() != 0:
        return False
    where.mkdir(parents=True, exist_ok=True)
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)], capture_output=True,
                       timeout=30)
    return r.returncode == 0


@contextlib.contextmanager
def small_tmpfs(where: Path, size: str = "2m"):
    """A tmpfs of `size` at `where` for the block; skips the test where it cannot be mounted."""
    if not mount_tmpfs(where, size):
        pytest.skip("needs root and a tmpfs mount")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], capture_output=True, timeout=30)


def fill(disk: Path, leave: int) -> Path:
    """Fill the disk, then give back `leave` bytes; returns the filler file."""
    filler = disk / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT)
    try:
        while True:
            os.write(fd, b"\0" * 4096)
    except OSError:
        pass
    os.ftruncate(fd, max(0, os.fstat(fd).st_size - leave))
    os.close(fd)
    return filler
