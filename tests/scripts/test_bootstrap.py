"""The one-click bootstrap, run for real: a real venv, a real wheel, real pip, no network.

The wheelhouse (h3kit's wheel built from this checkout plus its dependencies)
is made once per session; that one step may use the package index, the
installs themselves run with --no-index.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CHECKOUT_PARTS = ("installer", "profiles", "payload", "nodes", "scripts", "pyproject.toml", "README.md",
                  "install.sh", "install.command")


def _load_bootstrap():
    spec = importlib.util.spec_from_file_location("h3kit_bootstrap", REPO / "scripts" / "bootstrap.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


bootstrap = _load_bootstrap()


def _run(argv, env=None, timeout=600, cwd=None):
    return subprocess.run([os.fspath(a) for a in argv], capture_output=True, text=True, timeout=timeout,
                          env=env, cwd=cwd)


@pytest.fixture(scope="session")
def wheelhouse(tmp_path_factory) -> Path:
    wh = tmp_path_factory.mktemp("wheelhouse")
    proc = _run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-build-isolation", "-w", wh, REPO], timeout=900)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert list(wh.glob("h3kit-*.whl")), "no h3kit wheel was built"
    return wh


@pytest.fixture
def odd_checkout(tmp_path) -> Path:
    """A copy of the checkout under a path with a space and non-ASCII characters."""
    root = tmp_path / "my downloads é ü" / "h3kit 0.1"
    root.mkdir(parents=True)
    for part in CHECKOUT_PARTS:
        src = REPO / part
        if src.is_dir():
            shutil.copytree(src, root / part, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.so"))
        else:
            shutil.copy2(src, root / part)
    return root


def _env(home: Path, **extra) -> dict:
    env = dict(os.environ)
    env["H3KIT_HOME"] = str(home)
    env.pop("PYTHONPATH", None)
    env.update(extra)
    return env


def test_state_dir_agrees_with_h3kit_paths(monkeypatch, tmp_path):
    from h3kit.core.paths import locations

    for env in ({"H3KIT_HOME": str(tmp_path / "h")}, {}, {"XDG_STATE_HOME": str(tmp_path / "xdg"),
                                                         "XDG_CONFIG_HOME": str(tmp_path / "xdgc")}):
        for key in ("H3KIT_HOME", "XDG_STATE_HOME", "XDG_CONFIG_HOME"):
            monkeypatch.delenv(key, raising=False)
        for key, value in env.items():
            monkeypatch.setenv(key, value)
        loc = locations()
        assert bootstrap.state_dir() == loc.state_dir, env
        assert bootstrap.config_file() == loc.config_file, env


def test_state_dir_on_other_platforms(tmp_path):
    home = tmp_path
    assert bootstrap.state_dir({}, "darwin", home) == home / "Library" / "Application Support" / "h3kit"
    assert bootstrap.state_dir({"LOCALAPPDATA": "C:\\Users\\Zoë\\AppData\\Local"}, "win32", home) == \
        Path("C:\\Users\\Zoë\\AppData\\Local") / "h3kit"
    assert bootstrap.state_dir({"XDG_STATE_HOME": "relative/not/allowed"}, "linux", home) == home / ".local" / "state" / "h3kit"


def test_install_sh_help_prints_bootstrap_options(tmp_path):
    proc = _run(["bash", REPO / "install.sh", "--help"], env=_env(tmp_path / "home"), timeout=60)
    assert proc.returncode == 0, proc.stderr
    for option in ("--wheelhouse", "--offline", "--setup-only", "--run", "--add-to-path"):
        assert option in proc.stdout
    assert not (tmp_path / "home" / "state" / "venv").exists(), "--help must not create anything but the log"


def test_no_python_found_is_exit_3_with_fix(tmp_path):
    bash = shutil.which("bash")
    proc = _run([bash, REPO / "install.sh"], env={"PATH": str(tmp_path), "H3KIT_HOME": str(tmp_path / "h")}, timeout=60)
    assert proc.returncode == 3
    assert "Python 3.10 or newer" in proc.stderr and "fix:" in proc.stderr


@pytest.mark.slow
def test_offline_install_odd_path_then_fast_rerun(wheelhouse, odd_checkout, tmp_path):
    home = tmp_path / "state home ñ"
    env = _env(home)
    first = _run(["bash", odd_checkout / "install.sh", "--wheelhouse", wheelhouse, "--offline", "--setup-only",
                  "--no-path"], env=env)
    assert first.returncode == 0, first.stdout + first.stderr
    assert "Creating h3kit's private environment" in first.stderr
    venv = home / "state" / "venv"
    python = venv / "bin" / "python"
    assert python.exists()

    # The installed wheel (not the checkout) must carry profiles, payload and nodes.
    probe = _run([python, "-c", "from h3kit.core.paths import asset_dir; import h3kit;"
                  "print(h3kit.__file__); [print(asset_dir(n)) for n in ('profiles', 'payload', 'nodes')]"],
                 env=env, cwd=tmp_path, timeout=60)
    assert probe.returncode == 0, probe.stderr
    lines = probe.stdout.splitlines()
    assert "site-packages" in lines[0]
    for line, name in zip(lines[1:], ("profiles", "payload", "nodes")):
        assert line.endswith(os.path.join("_assets", name)), line
        assert any(Path(line).iterdir()), f"{name} is empty in the wheel"
    # h3kit reaches the ComfyUI-side packages through h3kit.bundled: from the wheel, the pack's own files.
    code = ("from h3kit.bundled import h3k_native, h3k_safetensors, h3k_calibration_runner as runner; "
            "from h3kit import native; "
            "[print(m.__file__) for m in (h3k_native, h3k_safetensors, runner)]; print(native.library_filename('x'))")
    probe = _run([python, "-c", code], env=env, cwd=tmp_path, timeout=60)
    assert probe.returncode == 0, probe.stderr
    *files, libname = probe.stdout.splitlines()
    nodes = os.path.join("_assets", "nodes") + os.sep
    assert [f.split(nodes, 1)[-1] for f in files] == [os.path.join("h3k_native", "__init__.py"),
                                                       os.path.join("h3k_safetensors", "__init__.py"),
                                                       os.path.join("h3k_calibration_runner", "__init__.py")]
    assert all(nodes in f and "site-packages" in f for f in files) and libname.startswith("libh3kit-x")

    version = _run([venv / "bin" / "h3kit", "--version"], env=env, cwd="/", timeout=60)
    assert version.returncode == 0 and version.stdout.startswith("h3kit ")
    as_module = _run([python, "-m", "h3kit", "--help"], env=env, cwd="/", timeout=60)
    assert as_module.returncode == 0 and "uninstall" in as_module.stdout

    second = _run(["bash", odd_checkout / "install.sh", "--wheelhouse", wheelhouse, "--offline", "--setup-only",
                   "--no-path"], env=env)
    assert second.returncode == 0, second.stderr
    assert "Reusing h3kit's private environment" in second.stderr
    assert "up to date" in second.stderr
    log = (home / "state" / "logs" / "bootstrap.log").read_text(encoding="utf-8")
    assert log.count("Installing h3kit into it") == 1, "the second run must not reinstall"

    # Arguments the bootstrap does not know go to 'h3kit install'.
    forwarded = _run(["bash", odd_checkout / "install.sh", "--wheelhouse", wheelhouse, "--offline", "--no-path",
                      "--", "--help"], env=env)
    assert forwarded.returncode == 0, forwarded.stderr
    assert "--skip-calibrate" in forwarded.stdout

    # The everyday shims run the private venv's h3kit without any PATH setup.
    shim = _run(["bash", odd_checkout / "scripts" / "apply.sh", "--help"], env=env)
    assert shim.returncode == 0, shim.stderr
    assert "usage: h3kit apply" in shim.stdout

    # A failed install's fix lines name 'h3kit ...' commands: without h3kit on PATH, the last line says what it is.
    path = os.pathsep.join(d for d in env["PATH"].split(os.pathsep) if not (Path(d) / "h3kit").exists())
    failed = _run(["bash", odd_checkout / "install.sh", "--wheelhouse", wheelhouse, "--offline", "--no-path", "--",
                   "--comfyui", tmp_path / "no ComfyUI here", "--skip-calibrate"], env=dict(env, PATH=path))
    assert failed.returncode in (2, 3), failed.stderr
    assert failed.stderr.strip().splitlines()[-1].startswith(f"'h3kit' in the lines above is \"{python}\" -m h3kit")


@pytest.mark.slow
def test_changed_source_upgrades_in_place(wheelhouse, odd_checkout, tmp_path):
    env = _env(tmp_path / "home")
    args = ["bash", odd_checkout / "install.sh", "--setup-only", "--no-path", "--wheelhouse", wheelhouse, "--offline"]
    assert _run(args, env=env).returncode == 0
    (odd_checkout / "profiles" / "README.md").write_text("changed\n", encoding="utf-8")
    again = _run(args, env=env)
    assert again.returncode == 0, again.stderr
    assert "Reusing" in again.stderr and "Installing h3kit into it" in again.stderr


def test_target_layout_for_interpreters_without_venv(wheelhouse, tmp_path):
    """The Windows portable python_embeded has no venv module: a --target folder plus a launcher."""
    env = _env(tmp_path / "home")
    proc = _run([sys.executable, REPO / "scripts" / "bootstrap.py", "--layout", "target", "--wheelhouse", wheelhouse,
                 "--offline", "--setup-only", "--no-path"], env=env)
    assert proc.returncode == 0, proc.stderr
    root = tmp_path / "home" / "state" / "venv"
    assert (root / "site-packages" / "h3kit").is_dir() and (root / "run_h3kit.py").is_file()
    run = _run([sys.executable, REPO / "scripts" / "bootstrap.py", "--run", "profile", "--help"], env=env)
    assert run.returncode == 0, run.stderr
    assert "usage: h3kit profile" in run.stdout


@pytest.mark.slow
def test_path_launcher_runs_private_h3kit(wheelhouse, tmp_path):
    env = _env(tmp_path / "home", HOME=str(tmp_path / "user"))
    proc = _run([sys.executable, REPO / "scripts" / "bootstrap.py", "--wheelhouse", wheelhouse, "--offline",
                 "--setup-only", "--add-to-path"], env=env)
    assert proc.returncode == 0, proc.stderr
    launcher = tmp_path / "user" / ".local" / "bin" / "h3kit"
    assert launcher.is_file()
    assert "Your config file:" in proc.stderr and str(tmp_path / "home" / "config.yaml") in proc.stderr
    out = _run([launcher, "--version"], env=env, timeout=60)
    assert out.returncode == 0 and out.stdout.startswith("h3kit ")
    record = tmp_path / "home" / "state" / "bootstrap-record.json"
    assert str(launcher) in record.read_text(encoding="utf-8")


def test_run_before_install_says_install_first(tmp_path):
    proc = _run([sys.executable, REPO / "scripts" / "bootstrap.py", "--run", "calibrate"], env=_env(tmp_path / "h"),
                timeout=60)
    assert proc.returncode == 3
    assert "not installed yet" in proc.stderr and "install.sh" in proc.stderr


@pytest.mark.slow
def test_failed_pip_names_the_log(tmp_path):
    empty = tmp_path / "empty wheelhouse"
    empty.mkdir()
    proc = _run([sys.executable, REPO / "scripts" / "bootstrap.py", "--wheelhouse", empty, "--offline", "--setup-only",
                 "--no-path"], env=_env(tmp_path / "h"), timeout=300)
    assert proc.returncode == 3
    assert "error: pip could not install h3kit" in proc.stderr
    assert f"log: {tmp_path / 'h' / 'state' / 'logs' / 'bootstrap.log'}" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_every_everyday_action_has_three_shims():
    """calibrate, apply, update, rollback, history and uninstall: .sh (Linux), .command (Finder), .bat (Explorer;
    CRLF line ends)."""
    for action in ("calibrate", "apply", "update", "rollback", "history", "uninstall"):
        sh = (REPO / "scripts" / f"{action}.sh").read_text()
        assert f"--run {action}" in sh and os.access(REPO / "scripts" / f"{action}.sh", os.X_OK)
        assert f"{action}.sh" in (REPO / "scripts" / f"{action}.command").read_text()
        bat = (REPO / "scripts" / f"{action}.bat").read_bytes()
        assert b"\r\n" in bat and b"\n" not in bat.replace(b"\r\n", b"")
        assert f"--run {action}".encode() in bat and b"pause" in bat and b"find_python.bat" in bat
    install_bat = (REPO / "install.bat").read_bytes()
    assert b"pause" in install_bat and b"scripts\\bootstrap.py" in install_bat
    assert b"python_embeded" in (REPO / "scripts" / "find_python.bat").read_bytes()
    assert b"pip.exe" not in install_bat
    for shim in ("install.sh", "install.bat", "install.command"):
        assert len((REPO / shim).read_text().splitlines()) <= 40, shim
