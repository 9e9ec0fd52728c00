"""h3kit.core.subproc: a Ctrl-C while a child runs stops the child and its children, then goes on."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time

import pytest

from h3kit.core import subproc

GRANDCHILD = """
import subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
open(sys.argv[1], "w").write(str(child.pid))
time.sleep(60)
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie counts as gone
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[1][0] != "Z"
    except OSError:
        return True


@pytest.mark.skipif(os.name != "posix", reason="process groups and SIGINT to ourselves are POSIX")
def test_ctrl_c_kills_the_child_tree_and_reraises(tmp_path):
    pid_file = tmp_path / "grandchild.pid"

    def interrupt_when_started():
        for _ in range(200):
            if pid_file.exists() and pid_file.read_text():
                break
            time.sleep(0.05)
        os.kill(os.getpid(), signal.SIGINT)

    threading.Thread(target=interrupt_when_started, daemon=True).start()
    with pytest.raises(KeyboardInterrupt):
        subproc.run([sys.executable, "-c", GRANDCHILD, str(pid_file)], timeout=30)
    grandchild = int(pid_file.read_text())
    for _ in range(100):
        if not _alive(grandchild):
            break
        time.sleep(0.05)
    assert not _alive(grandchild), "the grandchild outlived the Ctrl-C"
