"""Shared fixtures. Every test gets its own H3KIT_HOME so nothing touches the real home."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "tests" / "fixtures"
# The test files sit in one folder per layer (tests/plan, tests/comfyui, ...); what several of them share
# (servers, tiny ComfyUIs, venv and wheel helpers) is in tests/support, importable by module name from any
# of them, as tests/ itself is (pytest puts this file's folder on sys.path).
SUPPORT = REPO / "tests" / "support"
if str(SUPPORT) not in sys.path:
    sys.path.insert(0, str(SUPPORT))


@pytest.fixture(scope="session")
def native_build(tmp_path_factory) -> Path | None:
    """The native library compiled once per test session, the first time a test asks (a test marked `native`,
    or one of the fixtures below): the folder of its variants, or None when it cannot be built here."""
    from native_support import build_into

    try:
        return build_into(tmp_path_factory.mktemp("native-once"))
    except Exception:  # no compiler here: the tests that need one say so themselves
        return None


@pytest.fixture(scope="session")
def native_build_dir(native_build) -> Path:
    """The session's build folder, for tests that cannot run without it (a build that failed fails them)."""
    if native_build is None:
        pytest.fail("the native library could not be built in this session (see 'h3kit build')")
    return native_build


# The fixtures that hand a test the compiled library (the last two are further down); a test that asks for one
# needs the library as much as a test marked `native` does.
NATIVE_FIXTURES = frozenset({"native_build", "native_build_dir", "native_library", "native_library_env"})


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects, which it must see the mark for
def pytest_collection_modifyitems(items):
    """Mark `native` each test that asks for the library through a fixture, so `-m "not native"` leaves out every
    test that would make the session compile: scripts/test.sh --fast compiles nothing."""
    for item in items:
        asks = NATIVE_FIXTURES.intersection(getattr(item, "fixturenames", ()))
        if asks and item.get_closest_marker("native") is None:
            # by_fixture: the fixture hands it the library, so h3kit_home copies no build into its home (and
            # compiles none when H3KIT_NATIVE_LIB names a library)
            item.add_marker(pytest.mark.native(by_fixture=True))


@pytest.fixture(autouse=True)
def _fresh_host_probes():
    """h3kit.core.net remembers each host's answer for the process; a test's closed port may be another's server."""
    from h3kit.core import net

    net.forget()
    yield
    net.forget()


@pytest.fixture(autouse=True)
def h3kit_home(tmp_path_factory, monkeypatch, request) -> Path:
    """A fresh H3KIT_HOME per test; for a test marked `native`, holding a copy of the session's native build.

    The copy is the build folder only (no current.json), so `h3kit build` in
    the test still runs its self-test and writes its own record, but does not
    compile again. Only tests marked `native` (by hand, or for asking for a
    library fixture) make the session compile at all, so a run of the
    arithmetic tests, or `-m "not native"`, compiles nothing. A test that is not
    marked but compiles into its home anyway (an install that builds) is an
    error here: left alone it would compile once per test and slow the suite.
    Tests of the compile step itself are marked `fresh_native` and may.
    """
    home = tmp_path_factory.mktemp("h3kit-home")
    monkeypatch.setenv("H3KIT_HOME", str(home))
    native = request.node.get_closest_marker("native")
    copied = native is not None and not native.kwargs.get("by_fixture")
    if copied:
        folder = request.getfixturevalue("native_build")
        if folder is not None:
            shutil.copytree(folder, home / "cache" / "native" / folder.name)
    yield home
    if not copied and request.node.get_closest_marker("fresh_native") is None:
        cache = os.path.join(home, "cache", "native")  # os, not pathlib: a test may have patched Path's reads
        built = [d for d in (os.listdir(cache) if os.path.isdir(cache) else [])
                 if os.path.isfile(os.path.join(cache, d, "build.json"))]
        assert not built, ("this test compiled the native library in its H3KIT_HOME: mark it "
                           "@pytest.mark.native so it gets the session's build instead")


# What a test sees of this machine when h3kit probes it in-process (`this_machine()`: install, plan, doctor,
# calibrate without --fingerprint): the real probe with RAM and free disk set to these, so no plan a test makes
# depends on how much memory or disk the box running the suite has (a full disk made installs "short by 0.1 GB"
# on a fresh clone), nor the free disk a new ComfyUI's set-up asks for. The real figures are read by the tests
# of the probe (tests/fingerprint/, or marked `real_machine`) and by `h3kit fingerprint` (`collect`), which
# shows them. The GPUs are fixed too, for `collect` as well (below).
MACHINE_RAM_BYTES = 64 * 2**30
MACHINE_FREE_DISK_BYTES = 10**12


@pytest.fixture(autouse=True)
def _machine_with_room(request, monkeypatch):
    if request.node.get_closest_marker("real_machine") is not None or request.path.parent.name == "fingerprint":
        return
    import h3kit.fingerprint as fingerprint
    from h3kit.calibrate import orchestrate
    from h3kit.data.fingerprint import Fingerprint

    def with_room(timeout: float | None = None, extra_disk_paths=()) -> Fingerprint:
        doc = fingerprint.collect(timeout, extra_disk_paths)
        doc["memory"] = {**(doc.get("memory") or {}), "total_bytes": MACHINE_RAM_BYTES,
                         "available_bytes": MACHINE_RAM_BYTES * 3 // 4}
        for disk in doc.get("disks") or []:
            disk.update(total_bytes=max(disk.get("total_bytes") or 0, 2 * MACHINE_FREE_DISK_BYTES),
                        free_bytes=MACHINE_FREE_DISK_BYTES)
        return Fingerprint.from_json(doc)

    monkeypatch.setattr(fingerprint, "this_machine", with_room)
    # calibration took the name when it was imported
    monkeypatch.setattr(orchestrate, "this_machine", with_room, raising=False)


# The GPUs the suite's machine has: none, on every box. A developer's card or the GPU machine's H100 would
# otherwise turn each in-process plan, install and calibration into that card's, so a test passing on the
# GPU-less CI box could fail there and the other way round. Every in-process fingerprint (`collect`, so
# `h3kit fingerprint` too, and `this_machine`) goes through a back end whose GPU probes report the tool missing
# without running it (a broken driver's nvidia-smi can hang for the whole probe timeout) and whose GPU list is
# empty (the macOS one names the Apple GPU from sysctl alone). The CPU, memory, disk and compiler probes are
# the real ones. Tests of the GPU probes themselves are marked `real_gpus` and see this machine's, or their
# fakes on PATH and recorded sysfs trees; a subprocess (`h3kit_exe`, a script) is not reached by this and sees
# the real machine. tests/fingerprint/test_suite_machine.py checks the names below against the back ends.
GPU_PROBES = {
    "linux": frozenset({"nvidia-smi", "nvidia-smi header", "libcuda", "rocm-smi", "sysfs drm", "lspci"}),
    "darwin": frozenset({"system_profiler"}),
    "windows": frozenset({"nvidia-smi", "nvidia-smi header", "libcuda", "video controllers", "display registry"}),
}
NO_GPU = "the test suite's machine has no GPU (tests/conftest.py; mark the test real_gpus to probe)"


class WithoutGpus:
    """A fingerprint back end: `real`'s probes and description, less its GPUs."""

    def __init__(self, real):
        self.real = real

    def __getattr__(self, name):  # SYSTEM and anything else the front reads
        return getattr(self.real, name)

    def probes(self, disk_paths):
        from h3kit.fingerprint._probe import Probe

        gpu = GPU_PROBES.get(self.real.SYSTEM, frozenset())
        return [Probe(p.name, _no_gpu) if p.name in gpu else p for p in self.real.probes(disk_paths)]

    def describe(self, values):
        return {**self.real.describe(values), "gpus": []}


def _no_gpu(_timeout):
    from h3kit.fingerprint._probe import Missing

    raise Missing(NO_GPU)


@pytest.fixture(autouse=True)
def _machine_without_gpus(request, monkeypatch):
    if request.node.get_closest_marker("real_gpus") is not None:
        return
    import h3kit.fingerprint as fingerprint

    # collect() reads the module's _backend at each call, so this reaches every in-process fingerprint
    monkeypatch.setattr(fingerprint, "_backend", WithoutGpus(fingerprint._backend))


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


# -- one native library for the calibration tests, built once per session ------------------------

@pytest.fixture(scope="session")
def native_library(request) -> Path:
    """The native library file for this session: the one H3KIT_NATIVE_LIB names when it exists, else the
    session's build's. A build that fails fails the tests that need it."""
    import json

    found = os.environ.get("H3KIT_NATIVE_LIB")
    if found and Path(found).is_file():
        return Path(found)
    folder = request.getfixturevalue("native_build_dir")  # compiled only when no library was named
    return Path(json.loads((folder / "build.json").read_text(encoding="utf-8"))["library"])


@pytest.fixture
def native_library_env(native_library, monkeypatch) -> Path:
    """H3KIT_NATIVE_LIB set to the session's library for one test (calibration then builds nothing)."""
    monkeypatch.setenv("H3KIT_NATIVE_LIB", str(native_library))
    return native_library


# -- ComfyUI setup: tiny wheels, pip offline, one venv template (helpers in comfy_setup_support.py) -------------

@pytest.fixture(scope="module")
def wheelhouse(tmp_path_factory) -> Path:
    """A folder of tiny torch/torchvision/torchaudio wheels of several builds, and one of ComfyUI's dependencies."""
    from comfy_setup_support import fill_wheelhouse

    return fill_wheelhouse(tmp_path_factory.mktemp("wheelhouse"))


@pytest.fixture
def offline_pip(wheelhouse, monkeypatch):
    """pip sees only the wheelhouse: no config files, no index, no machine-wide find-links."""
    from comfy_setup_support import pip_only_from

    return pip_only_from(wheelhouse, monkeypatch)


@pytest.fixture(scope="session")
def venv_template(tmp_path_factory) -> Path:
    """One venv with pip, made once; tests get copies (comfy_setup_support.make_venv), which saves ensurepip's
    seconds per test."""
    import subprocess

    path = tmp_path_factory.mktemp("venv-template") / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(path)], check=True, timeout=300)
    return path


@pytest.fixture
def planned(monkeypatch):
    """Install and apply plan with what the test puts in the returned dict (profile, settings), not the machine."""
    plan: dict = {}

    def fake_plan(ctx, config, fingerprint, notes, **_how):
        from h3kit.calibrate.handover import Planned
        from h3kit.data.plan_doc import Plan

        # no fingerprint: the steps take the machine as unknown; the plan is read as a saved plan.json is: what it
        # lacks is None
        return Planned(None, Plan.from_json(plan) if plan else None)

    monkeypatch.setattr("h3kit.steps.install.plan_for", fake_plan)
    monkeypatch.setattr("h3kit.steps.apply.plan_for", fake_plan)
    return plan
