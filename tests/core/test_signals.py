"""Issue 26: SIGTERM and SIGHUP to h3kit stop its git and pip children (which run in their own sessions, out of
reach of a signal to h3kit's group) with the same tree-kill as Ctrl-C, and h3kit exits 130."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from comfy_setup_support import FP_4090


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry.name))
    return found


def _tree(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        for child in _children(todo.pop()):
            out.append(child)
            todo.append(child)
    return out


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.fixture
def silent_server():
    """A TCP server that accepts and never answers: git waits on it until it is killed."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    held = []
    stop = threading.Event()

    def serve():
        sock.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(sock.accept()[0])
            except OSError:
                continue

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{sock.getsockname()[1]}/ComfyUI.git"
    stop.set()
    t.join(5)
    for c in held:
        c.close()
    sock.close()


@pytest.mark.skipif(not Path("/proc/self/stat").exists() or os.name != "posix", reason="needs /proc (Linux)")
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_a_signal_to_h3kit_kills_its_git_child_and_exits_130(tmp_path, silent_server, sig):
    env = {k: v for k, v in os.environ.items() if not k.startswith("H3KIT_TEST_")}
    # pip may read only an empty folder: the new ComfyUI asks for room for that, not for a CUDA download (12 GB)
    (tmp_path / "wheels").mkdir()
    env.update(H3KIT_PIP_NO_INDEX="1", H3KIT_PIP_FIND_LINKS=str(tmp_path / "wheels"))
    proc = subprocess.Popen([sys.executable, "-m", "h3kit", "install", "--new-comfyui", str(tmp_path / "New"),
                             "--comfyui-source", silent_server, "--fingerprint", str(FP_4090), "--yes",
                             "--skip-calibrate", "--no-models"], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        tree: list[int] = []
        while time.monotonic() < deadline and proc.poll() is None:
            tree = _tree(proc.pid)
            if any("git" in Path(f"/proc/{p}/cmdline").read_bytes().decode(errors="replace") for p in tree
                   if Path(f"/proc/{p}/cmdline").exists()):
                break
            time.sleep(0.2)
        assert tree and proc.poll() is None, "git never started"
        time.sleep(0.5)
        tree = _tree(proc.pid)  # git and its remote helper
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    assert f"interrupted by {sig.name}" in err and "Traceback" not in err, err
    time.sleep(0.5)
    assert not [p for p in tree if _alive(p)], "children left running"
