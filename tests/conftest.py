"""Shared fixtures. Every test gets its own H3KIT_HOME so nothing touches the real home."""

from __future__ import annotations

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


_NATIVE_ONCE: dict = {}


def _native_build_once(tmp_path_factory) -> Path | None:
    """Compile the native library once per test session; the folder of its variants, or None when it cannot."""
    if "folder" not in _NATIVE_ONCE:
        from native_support import build_into

        try:
            _NATIVE_ONCE["folder"] = build_into(tmp_path_factory.mktemp("native-once"))
        except Exception:  # no compiler here: the tests that need one say so themselves
            _NATIVE_ONCE["folder"] = None
    return _NATIVE_ONCE["folder"]


@pytest.fixture(autouse=True)
def _fresh_host_probes():
    """h3kit.core.net remembers each host's answer for the process; a test's closed port may be another's server."""
    from h3kit.core import net

    net.forget()
    yield
    net.forget()


@pytest.fixture(autouse=True)
def h3kit_home(tmp_path_factory, monkeypatch, request) -> Path:
    """A fresh H3KIT_HOME per test, holding a copy of the session's native build.

    The copy is the build folder only (no current.json), so `h3kit build` in
    the test still runs its self-test and writes its own record, but does not
    compile again. Tests of the compile step itself are marked `fresh_native`.
    """
    home = tmp_path_factory.mktemp("h3kit-home")
    monkeypatch.setenv("H3KIT_HOME", str(home))
    if request.node.get_closest_marker("fresh_native") is None and request.node.get_closest_marker("no_native") is None:
        folder = _native_build_once(tmp_path_factory)
        if folder is not None:
            shutil.copytree(folder, home / "cache" / "native" / folder.name)
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


# -- one native library for the calibration tests, built once per session ------------------------

@pytest.fixture(scope="session")
def native_library(tmp_path_factory) -> Path:
    """The native library file for this session: the one H3KIT_NATIVE_LIB names when it exists, else
    built once now into a session H3KIT_HOME cache. A build that fails fails the tests that need it."""
    import os

    found = os.environ.get("H3KIT_NATIVE_LIB")
    if found and Path(found).is_file():
        return Path(found)
    from h3kit.native import build

    old = os.environ.get("H3KIT_HOME")
    os.environ["H3KIT_HOME"] = str(tmp_path_factory.mktemp("native-library-home"))
    try:
        return Path(build.build()["library"])
    finally:
        if old is None:
            os.environ.pop("H3KIT_HOME", None)
        else:
            os.environ["H3KIT_HOME"] = old


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
