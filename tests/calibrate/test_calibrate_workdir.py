"""A killed calibration leaves no work folder for good: the next one removes folders of dead processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from h3kit.calibrate import workdir

CHILD = r"""
import sys, time
from pathlib import Path
from h3kit.calibrate.workdir import work_folder
with work_folder(Path(sys.argv[1]), "run") as p:
    (p / "plan.json").write_text("{}")
    print(p, flush=True)
    time.sleep(120)
"""


def test_the_folder_is_named_for_this_process_and_goes_away(tmp_path):
    with workdir.work_folder(tmp_path, "run") as p:
        assert p.parent == tmp_path / workdir.SUBDIR and p.name.startswith(f"run-{os.getpid()}-")
        (p / "x").write_text("x")
        assert workdir.remove_stale(tmp_path) == []  # its owner (this process) is alive
        assert p.is_dir()
    assert not p.exists()


def test_an_error_inside_still_removes_it(tmp_path):
    with pytest.raises(RuntimeError):
        with workdir.work_folder(tmp_path) as p:
            raise RuntimeError("the runner failed")
    assert not p.exists()


@pytest.mark.skipif(os.name == "nt", reason="SIGKILL")
def test_a_killed_calibrations_folder_is_removed_by_the_next_one(tmp_path):
    proc = subprocess.Popen([sys.executable, "-c", CHILD, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        folder = Path(proc.stdout.readline().strip())
        assert folder.is_dir() and (folder / "plan.json").is_file()
        assert workdir.remove_stale(tmp_path) == []  # still running: kept
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    assert folder.is_dir()  # a kill runs no cleanup
    assert workdir.remove_stale(tmp_path) == [str(folder)]
    assert not folder.exists()


def test_a_reused_pid_does_not_keep_an_old_folder(tmp_path):
    """Same pid, another start time: the folder's owner is gone even though the pid is alive."""
    old = tmp_path / workdir.SUBDIR / f"run-{os.getpid()}-{int(time.time()) - 86400}"
    old.mkdir(parents=True)
    other = tmp_path / workdir.SUBDIR / "notes"  # not ours by name: left alone
    other.mkdir()
    assert workdir.remove_stale(tmp_path) == [str(old)]
    assert other.is_dir()
