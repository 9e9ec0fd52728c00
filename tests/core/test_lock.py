"""One h3kit at a time per ComfyUI and per h3kit home (h3kit.core.lock), tested with real second processes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from fixtures.comfyui import comfy_tree
from h3kit.comfyui import locks
from h3kit.core import lock
from h3kit.core.paths import locations

pytestmark = pytest.mark.native  # installs: the session's native library, not a compile per test

FIXTURES = Path(__file__).parents[1] / "fixtures" / "comfyui"

HOLDER = r"""
import sys, time
from pathlib import Path
from h3kit.core import lock
assert lock.acquire(Path(sys.argv[1]), {"command": "test holder"}) is not None
print("held", flush=True)
time.sleep(120)
"""

INSTALL = ("install", "--yes", "--skip-calibrate", "--no-models")


def _holder(path: Path) -> subprocess.Popen:
    """Another process holding the lock at `path` until killed."""
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(path)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "held"
    return proc


def _h3kit(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "h3kit", *argv], capture_output=True, text=True, timeout=300)


def test_second_install_into_the_same_comfyui_stops_with_the_holders_pid(tmp_path):
    comfy = comfy_tree.make_comfyui(tmp_path / "c")
    before = comfy_tree.snapshot(comfy)
    path = locks.lock_path(locations().state_dir, comfy)
    with lock.held(path, "busy", "wait"):  # this test process is the first h3kit
        done = _h3kit(*INSTALL, "--comfyui", str(comfy))
    assert done.returncode == 3, done.stderr
    assert f"another h3kit is installing into this comfyui (pid {os.getpid()})" in done.stderr.lower()
    assert "Traceback" not in done.stderr and "bug" not in done.stderr
    assert comfy_tree.snapshot(comfy) == before  # nothing written by the refused one
    assert comfy not in path.parents and path.parent == locations().state_dir / "locks"


def test_lock_files_live_in_the_state_folder_one_per_comfyui(tmp_path):
    a, b = comfy_tree.make_comfyui(tmp_path / "a"), comfy_tree.make_comfyui(tmp_path / "b")
    state = locations().state_dir
    assert locks.lock_path(state, a) != locks.lock_path(state, b)
    assert all(p.parent == state / "locks" for p in (locks.lock_path(state, a), locks.home_lock_path(state)))


def test_uninstall_apply_and_doctor_fix_wait_their_turn(tmp_path, run_cli):
    comfy = comfy_tree.make_comfyui(tmp_path / "c")
    code, _, err = run_cli(*INSTALL, "--comfyui", str(comfy))
    assert code == 0, err
    holder = _holder(locks.lock_path(locations().state_dir, comfy))
    try:
        for argv in (("uninstall", "--yes"), ("apply",), ("doctor", "--fix", "--yes")):
            code, out, err = run_cli(*argv, "--comfyui", str(comfy))
            assert code == 3, (argv, out, err)
            assert f"another h3kit is installing into this comfyui (pid {holder.pid})" in err.lower(), argv
        code, out, err = run_cli("doctor", "--comfyui", str(comfy), "--json")  # only looking: no lock needed
        assert code != 3 or "another h3kit" not in err
    finally:
        holder.kill()
        holder.wait()
    code, _, err = run_cli("uninstall", "--yes", "--comfyui", str(comfy))
    assert code == 0, err


def test_one_h3kit_home_at_a_time(tmp_path, run_cli):
    comfy = comfy_tree.make_comfyui(tmp_path / "other")
    holder = _holder(locks.home_lock_path(locations().state_dir))
    try:
        code, out, err = run_cli(*INSTALL, "--comfyui", str(comfy), "--json")
    finally:
        holder.kill()
        holder.wait()
    assert code == 3, err
    assert f"(pid {holder.pid})" in json.loads(out)["error"]
    assert not (comfy / "custom_nodes" / "ComfyUI-h3kit").exists()


@pytest.mark.skipif(sys.platform == "win32", reason="SIGKILL")
def test_the_lock_of_a_killed_h3kit_is_taken_over(tmp_path, run_cli):
    comfy = comfy_tree.make_comfyui(tmp_path / "c")
    path = locks.lock_path(locations().state_dir, comfy)
    holder = _holder(path)
    os.kill(holder.pid, signal.SIGKILL)
    holder.wait()
    assert lock.holder(path).get("pid") == holder.pid  # the dead one's pid is still written there
    code, _, err = run_cli(*INSTALL, "--comfyui", str(comfy))
    assert code == 0, err
    assert lock.holder(path) == {}  # released at the end, no stale pid left


def test_a_process_may_take_its_own_lock_again(tmp_path):
    path = tmp_path / "state" / "locks" / "x.lock"
    with lock.held(path, "busy", "wait"):
        with lock.held(path, "busy", "wait"):  # doctor --fix runs apply inside its own run
            pass
        probe = subprocess.run([sys.executable, "-c", "import sys; from pathlib import Path; from h3kit.core import lock;"
                                "sys.exit(0 if lock.acquire(Path(sys.argv[1]), {}) is None else 1)", str(path)])
        assert probe.returncode == 0  # still held after the inner release
    again = _holder(path)  # free again: another process takes it
    again.kill()
    again.wait()


def test_install_takes_the_lock_before_it_writes_anything(tmp_path):
    """The refused install stops before the build writes h3kit's cache, and before anything in ComfyUI."""
    comfy = comfy_tree.make_comfyui(tmp_path / "c")
    before = comfy_tree.snapshot(comfy)
    native = locations().cache_dir / "native"
    cache_before = sorted(p.relative_to(native) for p in native.rglob("*")) if native.is_dir() else []
    holder = _holder(locks.lock_path(locations().state_dir, comfy))
    try:
        done = _h3kit(*INSTALL, "--comfyui", str(comfy))
    finally:
        holder.kill()
        holder.wait()
    assert done.returncode == 3, done.stderr
    assert f"another h3kit is installing into this comfyui (pid {holder.pid})" in done.stderr.lower()
    assert "Building the native library" not in done.stderr
    assert (sorted(p.relative_to(native) for p in native.rglob("*")) if native.is_dir() else []) == cache_before
    assert comfy_tree.snapshot(comfy) == before
    manifests = locations().state_dir / "manifests"
    assert not manifests.exists() or not list(manifests.glob("*.json"))
