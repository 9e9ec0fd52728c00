"""Work folders of a calibration run that a killed run cannot leave behind for good.

A calibration's files (the runner's job and result, random weights, a
throwaway ComfyUI's output) live in `<cache>/calibrate/<kind>-<pid>-<start>`:
the pid and start time of the h3kit process that made the folder. The
folder goes away when the run ends; when h3kit is killed instead (SIGKILL,
a closed terminal, a power cut), the next calibration finds folders whose
process is gone and removes them (issue 16 item 9). The start time is in the
name because a pid alone is reused: a folder belongs to a live run only when
that pid is alive *and* started at that time.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
from pathlib import Path

import psutil

SUBDIR = "calibrate"
NAME = re.compile(r"^(?P<kind>[a-z]+)-(?P<pid>\d+)-(?P<start>\d+)(-\d+)?$")


def _start_stamp(pid: int) -> int | None:
    try:
        return int(psutil.Process(pid).create_time())
    except (psutil.Error, OSError):
        return None


def owner_alive(pid: int, start: int) -> bool:
    """Is the process that made a folder still running (same pid, same start second)?"""
    stamp = _start_stamp(pid)
    return stamp is not None and abs(stamp - start) <= 1


def remove_stale(cache_dir: Path) -> list[str]:
    """Remove the work folders of calibrations whose process is gone; returns what was removed."""
    root = Path(cache_dir) / SUBDIR
    removed = []
    if not root.is_dir():
        return removed
    for entry in sorted(root.iterdir()):
        m = NAME.match(entry.name)
        if not m or not entry.is_dir() or owner_alive(int(m["pid"]), int(m["start"])):
            continue
        shutil.rmtree(entry, ignore_errors=True)
        if not entry.exists():
            removed.append(str(entry))
    return removed


@contextlib.contextmanager
def work_folder(cache_dir: Path, kind: str = "run"):
    """A fresh folder named for this process, removed on the way out (also on an error or Ctrl-C)."""
    root = Path(cache_dir) / SUBDIR
    root.mkdir(parents=True, exist_ok=True)
    pid = os.getpid()
    base = f"{kind}-{pid}-{_start_stamp(pid) or 0}"
    path, n = root / base, 0
    while True:
        try:
            path.mkdir()
            break
        except FileExistsError:
            n += 1
            path = root / f"{base}-{n}"
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
