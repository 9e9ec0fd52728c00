#!/usr/bin/env python3
"""h3kit's one cross-platform bootstrap: private venv, install h3kit, run it.

install.sh / install.bat / install.command and the everyday shims in
scripts/ only find a Python >= 3.10 and hand over to this file, so all the
logic lives in one place that is tested on every platform the same way.

What it does, in order:

1. Find h3kit's state folder exactly as h3kit itself does (H3KIT_HOME/state
   when set, else the platform's user state folder -- the same places
   platformdirs gives, computed here with the standard library because
   nothing else is installed yet).
2. Create a private environment there (`<state>/venv`), never inside ComfyUI.
   A venv when the `venv` module works; on interpreters without it (the
   Windows portable build's `python_embeded`) a plain `--target` folder run
   through a small launcher script.
3. Install h3kit into it: from a wheelhouse folder when one is present
   (`--wheelhouse`, or `wheelhouse/` beside this checkout) with no network
   at all, else from this checkout. A stamp of the source's hash makes a
   second run skip pip when nothing changed.
4. Run `h3kit install` with the arguments it did not recognise (or, with
   `--run CMD`, `h3kit CMD ...`: what the calibrate/apply/uninstall shims use).
5. Offer to put an `h3kit` command on the PATH, and say where the config is.

Only the standard library is used. Every subprocess has an argument list and
a timeout; the log is `<state>/logs/bootstrap.log`.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

MIN_PYTHON = (3, 10)
CHECKOUT = Path(__file__).resolve().parent.parent
STAMP = "h3kit-bootstrap.json"
PIP_TIMEOUT = 30 * 60  # a slow network and a cold cache, not a hang
VENV_TIMEOUT = 5 * 60
# `h3kit install` may download tens of GB of weights; its own steps carry
# their own, tighter timeouts. This bound only stops a process that was
# forgotten for days.
H3KIT_TIMEOUT = 48 * 3600
SOURCE_PARTS = ("pyproject.toml", "installer", "profiles", "payload", "nodes")


# ---------------------------------------------------------------- locations
def state_dir(environ=None, platform: str | None = None, home: Path | None = None) -> Path:
    """h3kit's state folder; must agree with h3kit.core.paths.locations() (a test checks)."""
    env = os.environ if environ is None else environ
    platform = platform or sys.platform
    home = home or Path.home()
    if env.get("H3KIT_HOME"):
        return Path(env["H3KIT_HOME"]).expanduser().absolute() / "state"
    if platform == "win32":
        base = env.get("LOCALAPPDATA") or str(home / "AppData" / "Local")
        return Path(base) / "h3kit"
    if platform == "darwin":
        return home / "Library" / "Application Support" / "h3kit"
    xdg = env.get("XDG_STATE_HOME", "").strip()
    return (Path(xdg) if xdg and Path(xdg).is_absolute() else home / ".local" / "state") / "h3kit"


def config_file(environ=None, platform: str | None = None, home: Path | None = None) -> Path:
    env = os.environ if environ is None else environ
    platform = platform or sys.platform
    home = home or Path.home()
    if env.get("H3KIT_HOME"):
        return Path(env["H3KIT_HOME"]).expanduser().absolute() / "config.yaml"
    if platform == "win32":
        return Path(env.get("LOCALAPPDATA") or str(home / "AppData" / "Local")) / "h3kit" / "config.yaml"
    if platform == "darwin":
        return home / "Library" / "Application Support" / "h3kit" / "config.yaml"
    xdg = env.get("XDG_CONFIG_HOME", "").strip()
    return (Path(xdg) if xdg and Path(xdg).is_absolute() else home / ".config") / "h3kit" / "config.yaml"


# ---------------------------------------------------------------- logging
class Log:
    def __init__(self, path: Path):
        self.path = path
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._file = open(path, "a", encoding="utf-8")
        except OSError:
            self._file = None

    def write(self, text: str) -> None:
        if self._file:
            self._file.write(f"{time.strftime('%Y-%m-%d %H:%M:%S')} {text}\n")
            self._file.flush()

    def say(self, text: str) -> None:
        print(text, file=sys.stderr, flush=True)
        self.write(text)


class BootstrapError(Exception):
    def __init__(self, message: str, fix: str, code: int = 3):
        super().__init__(message)
        self.message, self.fix, self.code = message, fix, code


def run(argv: list, log: Log, timeout: float, what: str, stream: bool = False) -> subprocess.CompletedProcess:
    """Run a step; its output goes to the log (and to the terminal when `stream`)."""
    args = [os.fspath(a) for a in argv]
    log.write(f"run: {args!r}")
    try:
        if stream:
            proc = subprocess.run(args, timeout=timeout)
        else:
            proc = subprocess.run(args, timeout=timeout, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  text=True, encoding="utf-8", errors="replace")
            log.write(proc.stdout or "")
    except subprocess.TimeoutExpired:
        raise BootstrapError(f"{what} did not finish within {timeout / 60:.0f} minutes.",
                             "Check your network connection, then run the installer again; it continues where it stopped.")
    except OSError as exc:
        raise BootstrapError(f"{what} could not start ({exc}).", "Reinstall Python 3.10 or newer and run the installer again.")
    return proc


# ---------------------------------------------------------------- environment
class PrivateEnv:
    """The private environment: a venv, or a --target folder for interpreters without venv."""

    def __init__(self, root: Path, base_python: str):
        self.root = root
        self.base_python = base_python

    @property
    def is_target_layout(self) -> bool:
        return (self.root / "site-packages").is_dir() and not (self.root / "pyvenv.cfg").exists()

    @property
    def python(self) -> Path:
        if self.is_target_layout:
            return Path(self.base_python)
        if os.name == "nt":
            return self.root / "Scripts" / "python.exe"
        return self.root / "bin" / "python"

    def h3kit_argv(self) -> list:
        if self.is_target_layout:
            return [self.python, self.root / "run_h3kit.py"]
        return [self.python, "-m", "h3kit"]

    def stamp(self) -> dict:
        try:
            return json.loads((self.root / STAMP).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}

    def write_stamp(self, data: dict) -> None:
        (self.root / STAMP).write_text(json.dumps(data, indent=2), encoding="utf-8")


def venv_works(env: PrivateEnv, log: Log) -> bool:
    if not env.python.exists():
        return False
    proc = run([env.python, "-c", "import sys; print(sys.version)"], log, 60, "Checking the private environment")
    return proc.returncode == 0


def has_venv_module(python: str, log: Log) -> bool:
    proc = run([python, "-c", "import venv, ensurepip"], log, 60, "Checking the venv module")
    return proc.returncode == 0


def create_env(env: PrivateEnv, log: Log, layout: str) -> None:
    if layout == "auto":
        layout = "venv" if has_venv_module(env.base_python, log) else "target"
    if env.root.exists():
        log.say(f"  the private environment at {env.root} is broken; making it again")
        shutil.rmtree(env.root)
    if layout == "venv":
        proc = run([env.base_python, "-m", "venv", env.root], log, VENV_TIMEOUT, "Creating the private environment")
        if proc.returncode != 0:
            raise BootstrapError(f"Python could not create a virtual environment at {env.root}.",
                                 "On Debian/Ubuntu install the venv module (sudo apt install python3-venv), then run the installer again.")
    else:
        # python_embeded has no venv module; its ._pth file also ignores
        # PYTHONPATH, so the launcher inserts the folder into sys.path itself.
        site = env.root / "site-packages"
        site.mkdir(parents=True)
        (env.root / "run_h3kit.py").write_text(
            "import sys, os\n"
            "sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), 'site-packages'))\n"
            "from h3kit.cli import main\n"
            "sys.exit(main())\n",
            encoding="utf-8",
        )


def source_hash() -> str:
    h = hashlib.sha256()
    for part in SOURCE_PARTS:
        root = CHECKOUT / part
        files = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file()) if root.exists() else []
        for f in files:
            if "__pycache__" in f.parts or f.suffix in (".pyc", ".so", ".dylib", ".dll"):
                continue
            h.update(str(f.relative_to(CHECKOUT)).replace("\\", "/").encode())
            h.update(f.read_bytes())
    return h.hexdigest()


def pip_install(env: PrivateEnv, log: Log, wheelhouse: Path | None, offline: bool) -> str:
    """Install or upgrade h3kit in the private env; returns what was installed from."""
    pip = [env.python, "-m", "pip", "install", "--upgrade", "--disable-pip-version-check"]
    if env.is_target_layout:
        pip += ["--target", env.root / "site-packages"]
    if wheelhouse is not None:
        pip += ["--no-index", "--find-links", wheelhouse, "h3kit"]
        origin = f"wheelhouse {wheelhouse}"
    elif offline:
        raise BootstrapError("--offline needs a wheelhouse folder, and none was found.",
                             "Pass --wheelhouse DIR (made with: python -m pip wheel -w DIR <h3kit checkout>).", 2)
    else:
        pip += [CHECKOUT]
        origin = f"source {CHECKOUT}"
    log.say(f"  installing h3kit from {origin} (this can take a minute)")
    proc = run(pip, log, PIP_TIMEOUT, "Installing h3kit")
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout or "").strip().splitlines()[-5:])
        raise BootstrapError(f"pip could not install h3kit:\n{tail}",
                             "Check the network (or pass --wheelhouse DIR for an offline install), then run the installer again.")
    return origin


def find_wheelhouse(arg: str | None) -> Path | None:
    if arg:
        p = Path(arg).expanduser().absolute()
        if not p.is_dir():
            raise BootstrapError(f"The wheelhouse {p} is not a folder.", "Pass a folder holding the h3kit wheel and its dependencies.", 2)
        return p
    default = CHECKOUT / "wheelhouse"
    return default if default.is_dir() and any(default.glob("h3kit-*.whl")) else None


def ensure_env(opts, log: Log) -> PrivateEnv:
    env = PrivateEnv(state_dir() / "venv", sys.executable)
    wheelhouse = find_wheelhouse(opts.wheelhouse)
    fresh = False
    if not venv_works(env, log):
        log.say(f"[1/3] Creating h3kit's private environment in {env.root}")
        create_env(env, log, opts.layout)
        fresh = True
    else:
        log.say(f"[1/3] Reusing h3kit's private environment in {env.root}")
    want = {"source_hash": source_hash(), "wheelhouse": str(wheelhouse) if wheelhouse else None}
    if not fresh and not opts.reinstall and env.stamp() == want:
        log.say("[2/3] h3kit is up to date in it")
        return env
    log.say("[2/3] Installing h3kit into it")
    pip_install(env, log, wheelhouse, opts.offline)
    env.write_stamp(want)
    return env


# ---------------------------------------------------------------- PATH launcher
def user_bin_dir() -> Path:
    if os.name == "nt":
        # On PATH by default for every Windows 10/11 user.
        return Path(os.environ.get("LOCALAPPDATA", str(Path.home() / "AppData" / "Local"))) / "Microsoft" / "WindowsApps"
    return Path.home() / ".local" / "bin"


def write_path_launcher(env: PrivateEnv, log: Log) -> Path | None:
    bindir = user_bin_dir()
    argv = [str(a) for a in env.h3kit_argv()]
    if os.name == "nt":
        target = bindir / "h3kit.cmd"
        body = "@echo off\r\n" + " ".join(f'"{a}"' if a != "-m" else a for a in argv) + " %*\r\n"
    else:
        target = bindir / "h3kit"
        quoted = " ".join("'" + a.replace("'", "'\\''") + "'" for a in argv)
        body = f"#!/bin/sh\n# written by h3kit's installer; removed by 'h3kit uninstall --purge'\nexec {quoted} \"$@\"\n"
    if target.exists():
        if "h3kit's installer" not in target.read_text(encoding="utf-8", errors="replace") and os.name != "nt":
            log.say(f"  {target} exists and is not ours; leaving it alone")
            return None
    bindir.mkdir(parents=True, exist_ok=True)
    target.write_text(body, encoding="utf-8")
    if os.name != "nt":
        target.chmod(0o755)
    record = state_dir() / "bootstrap-record.json"
    record.parent.mkdir(parents=True, exist_ok=True)
    data = {"path_launchers": [{"path": str(target), "sha256": hashlib.sha256(body.encode()).hexdigest()}]}
    record.write_text(json.dumps(data, indent=2), encoding="utf-8")
    on_path = str(bindir) in os.environ.get("PATH", "").split(os.pathsep)
    log.say(f"  wrote {target}" + ("" if on_path else f" (add {bindir} to your PATH to use it)"))
    return target


def offer_path_launcher(env: PrivateEnv, log: Log, opts) -> None:
    if opts.no_path:
        return
    if not opts.add_to_path:
        if not sys.stdin or not sys.stdin.isatty():
            return
        try:
            answer = input("Put an 'h3kit' command on your PATH? [Y/n] ").strip().lower()
        except EOFError:
            return
        if answer not in ("", "y", "yes"):
            return
    write_path_launcher(env, log)


# ---------------------------------------------------------------- main
def parse(argv: list[str]):
    p = argparse.ArgumentParser(
        prog="install",
        description="Install h3kit into a private environment and run 'h3kit install'. "
        "Arguments it does not know (for example --comfyui PATH --profile NAME --yes) go to 'h3kit install'.",
        epilog="Examples: ./install.sh --comfyui ~/ComfyUI   |   install.bat --wheelhouse D:\\h3kit-wheels --yes",
    )
    p.add_argument("--wheelhouse", metavar="DIR", help="install from this folder of wheels, with no network (default: wheelhouse/ beside the installer, when present)")
    p.add_argument("--offline", action="store_true", help="never touch the network (needs a wheelhouse)")
    p.add_argument("--reinstall", action="store_true", help="reinstall h3kit even when it looks up to date")
    p.add_argument("--setup-only", action="store_true", help="prepare the private environment, do not run 'h3kit install'")
    p.add_argument("--run", metavar="COMMAND", help="run 'h3kit COMMAND ...' in the private environment instead of 'install'")
    p.add_argument("--add-to-path", action="store_true", help="put an 'h3kit' command in your user bin folder without asking")
    p.add_argument("--no-path", action="store_true", help="do not offer to put 'h3kit' on your PATH")
    p.add_argument("--layout", choices=["auto", "venv", "target"], default="auto", help=argparse.SUPPRESS)
    return p.parse_known_args(argv)


def split_run(argv: list[str]) -> tuple[list[str], list[str] | None]:
    """`--run COMMAND ARGS...`: everything after COMMAND belongs to h3kit (its --help too)."""
    if "--run" in argv:
        i = argv.index("--run")
        if i + 1 < len(argv):
            return argv[: i + 2], argv[i + 2:]
    return argv, None


def main(argv: list[str] | None = None) -> int:
    own, passed = split_run(sys.argv[1:] if argv is None else list(argv))
    opts, rest = parse(own)
    if passed is not None:
        rest = rest + passed
    if rest[:1] == ["--"]:
        rest = rest[1:]
    log = Log(state_dir() / "logs" / "bootstrap.log")
    log.write(f"bootstrap start: python={sys.executable} argv={argv or sys.argv[1:]!r}")
    try:
        if sys.version_info < MIN_PYTHON:
            raise BootstrapError(f"h3kit needs Python {MIN_PYTHON[0]}.{MIN_PYTHON[1]} or newer; this is {sys.version.split()[0]}.",
                                 "Install a newer Python from python.org and run the installer again.")
        if opts.run:
            env = PrivateEnv(state_dir() / "venv", sys.executable)
            if not venv_works(env, log):
                raise BootstrapError("h3kit is not installed yet.", "Run install.sh (or double-click install.bat / install.command) first.")
            command = [opts.run, *rest]
        else:
            env = ensure_env(opts, log)
            if opts.setup_only:
                log.say(f"h3kit is ready: {' '.join(str(a) for a in env.h3kit_argv())}")
                offer_path_launcher(env, log, opts)
                log.say(f"Your config file: {config_file()}")
                return 0
            log.say("[3/3] Running h3kit install")
            command = ["install", *rest]
        proc = run([*env.h3kit_argv(), *command], log, H3KIT_TIMEOUT, f"h3kit {command[0]}", stream=True)
        if not opts.run:
            offer_path_launcher(env, log, opts)
            log.say(f"Your config file: {config_file()}  (edit it, then run scripts/apply to take effect)")
        if proc.returncode not in (0,):
            log.say(f"h3kit {command[0]} ended with exit code {proc.returncode}. Log files: {log.path.parent}")
            if not shutil.which("h3kit"):
                # The fix lines above name 'h3kit ...' commands; without it on PATH they need the private env's.
                word = " ".join(f'"{a}"' if " " in str(a) else str(a) for a in env.h3kit_argv())
                log.say(f"'h3kit' in the lines above is {word} (not on your PATH; "
                        "'install.sh --setup-only --add-to-path' puts it there).")
        return proc.returncode
    except BootstrapError as exc:
        log.say(f"error: {exc.message}\nfix: {exc.fix}\nlog: {log.path}")
        return exc.code
    except KeyboardInterrupt:
        log.say("interrupted.")
        return 130


if __name__ == "__main__":
    sys.exit(main())
