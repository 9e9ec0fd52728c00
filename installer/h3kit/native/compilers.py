"""Finding a C compiler for the native library.

Search order (followed in `resolve`, first usable one wins):

1. `$CC` when set (it may carry arguments, e.g. `ccache gcc`);
2. `cc`, `clang`, `gcc` on PATH;
3. MSVC `cl.exe`, found with vswhere and run inside the environment that
   `vcvars64.bat` sets up (Windows only);
4. `python -m ziglang cc` -- the `ziglang` package from PyPI, pinned to
   ZIGLANG_PIN and installed into h3kit's own venv on demand, so a machine
   without any compiler still builds.

A candidate that cannot be started or does not answer `--version` is skipped
with a note that says so (a `cc` shim that only asks to install developer
tools is skipped the same way). `resolve(prefer=...)` forces one family
(`cc`, `clang`, `gcc`, `msvc`, `zig`), which is how tests reach the zig path.

The parsers at the bottom are pure functions of the tools' text output and
are tested on recorded outputs.
"""

from __future__ import annotations

import contextlib
import os
import platform
import re
import shlex
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from h3kit.core import subproc
from h3kit.core.errors import BadInput, NotReady

ZIGLANG_PIN = "0.13.0"  # keep equal to the `zig` extra in pyproject.toml (a test checks)
FAMILIES = ("cc", "clang", "gcc", "msvc", "zig")
VERSION_TIMEOUT = 20.0
ZIG_INSTALL_TIMEOUT = 900.0


@dataclass
class Compiler:
    name: str  # gcc | clang | msvc | zig | cc (unknown family)
    argv: list[str]  # command prefix; sources and flags follow
    version: str
    source: str  # where it came from: "$CC", "PATH", "vswhere", "ziglang"
    style: str = "gnu"  # gnu | msvc (flag syntax)
    env: dict | None = None  # full environment to run it in (MSVC), else None

    def describe(self) -> str:
        return f"{self.name} {self.version} ({' '.join(self.argv)}, from {self.source})"

    def to_json(self) -> dict:
        return {"name": self.name, "argv": self.argv, "version": self.version, "source": self.source,
                "style": self.style}


@dataclass
class Resolution:
    compiler: Compiler
    notes: list[str] = field(default_factory=list)  # what was skipped and why, in order


def resolve(env: dict | None = None, *, prefer: str | None = None, install_zig: bool = True,
            progress=None) -> Resolution:
    """The first usable compiler in the search order (or the `prefer`red family)."""
    env = dict(os.environ if env is None else env)
    if prefer is not None and prefer not in FAMILIES:
        raise BadInput(f"unknown compiler {prefer!r}.", f"Use one of: {', '.join(FAMILIES)}.")
    notes: list[str] = []
    steps = [("$CC", _from_cc_env), ("PATH", _from_path), ("vswhere", _from_vswhere), ("ziglang", _from_zig)]
    for source, step in steps:
        if prefer is not None and not _step_can_give(source, prefer):
            continue
        found = step(env, notes, prefer=prefer, install_zig=install_zig, progress=progress)
        if found is not None:
            return Resolution(found, notes)
    wanted = f"the {prefer} compiler" if prefer else "a C compiler"
    raise NotReady(
        f"h3kit could not find {wanted} ({'; '.join(notes) or 'nothing found'}).",
        "Install one (Debian/Ubuntu: sudo apt install build-essential; Fedora: sudo dnf install gcc; "
        "macOS: xcode-select --install; Windows: Visual Studio Build Tools with 'Desktop development "
        "with C++'), or run 'h3kit build --compiler zig' to fetch the ziglang compiler from PyPI.",
    )


def _step_can_give(source: str, prefer: str) -> bool:
    return {"$CC": prefer in ("cc", "clang", "gcc"), "PATH": prefer in ("cc", "clang", "gcc"),
            "vswhere": prefer == "msvc", "ziglang": prefer == "zig"}[source]


def _probe_gnu(argv: list[str], source: str, env: dict | None = None) -> Compiler | str:
    """A Compiler when `argv --version` answers, else the reason it did not."""
    res = subproc.run(argv + ["--version"], timeout=VERSION_TIMEOUT, env=env)
    if not res.ok:
        return res.detail or res.status
    family, version = parse_version(res.stdout + res.stderr)
    if family is None:
        return "its --version output names no known C compiler"
    return Compiler(family, argv, version, source)


def _from_cc_env(env, notes, *, prefer, **_):
    value = env.get("CC", "").strip()
    if not value:
        return None
    try:
        argv = shlex.split(value, posix=os.name != "nt")
    except ValueError:
        notes.append(f"CC={value} is not a valid command line")
        return None
    exe = subproc.which(argv[0]) if not os.path.isabs(argv[0]) else (argv[0] if os.path.exists(argv[0]) else None)
    if exe is None:
        notes.append(f"CC={value} was not found")
        return None
    got = _probe_gnu([exe] + argv[1:], "$CC")
    if isinstance(got, str):
        notes.append(f"CC={value} did not run ({got})")
        return None
    if prefer not in (None, "cc", got.name):
        return None
    return got


def _from_path(env, notes, *, prefer, **_):
    names = ("cc", "clang", "gcc") if prefer in (None, "cc") else (prefer,)
    for name in names:
        exe = subproc.which(name)
        if exe is None:
            continue
        got = _probe_gnu([exe], "PATH")
        if isinstance(got, str):
            notes.append(f"{name} ({exe}) did not run ({got})")
            continue
        return got
    if prefer is None:
        notes.append("no cc, clang or gcc on PATH")
    return None


def _from_vswhere(env, notes, *, prefer, **_):
    if sys.platform != "win32":
        return None
    root = env.get("ProgramFiles(x86)") or r"C:\Program Files (x86)"
    vswhere = Path(root) / "Microsoft Visual Studio" / "Installer" / "vswhere.exe"
    if not vswhere.is_file():
        notes.append("no Visual Studio found (vswhere.exe is missing)")
        return None
    res = subproc.run([vswhere, "-latest", "-products", "*", "-requires",
                       "Microsoft.VisualStudio.Component.VC.Tools.x86.x64", "-property", "installationPath"],
                      timeout=VERSION_TIMEOUT)
    install = parse_vswhere_path(res.stdout) if res.ok else None
    if install is None:
        notes.append("Visual Studio has no C++ build tools (vswhere found none)")
        return None
    arch = "arm64" if platform.machine().lower() in ("arm64", "aarch64") else "64"
    vcvars = Path(install) / "VC" / "Auxiliary" / "Build" / f"vcvars{arch}.bat"
    res = subproc.run(["cmd.exe", "/d", "/s", "/c", f'"{vcvars}" >nul && set'], timeout=120.0)
    if not res.ok:
        notes.append(f"{vcvars} failed ({res.detail})")
        return None
    vs_env = parse_set_output(res.stdout)
    cl = subproc.which("cl.exe", extra_dirs=vs_env.get("PATH", vs_env.get("Path", "")).split(os.pathsep))
    if cl is None:
        notes.append("vcvars ran but cl.exe is not on its PATH")
        return None
    banner = subproc.run([cl], timeout=VERSION_TIMEOUT, env=vs_env)
    version = parse_msvc_banner(banner.stdout + banner.stderr) or "unknown"
    return Compiler("msvc", [cl], version, "vswhere", style="msvc", env=vs_env)


def _in_venv() -> bool:
    return sys.prefix != getattr(sys, "base_prefix", sys.prefix)


def _zig_version() -> str | None:
    res = subproc.run([sys.executable, "-m", "ziglang", "version"], timeout=VERSION_TIMEOUT)
    return res.stdout.strip() if res.ok and res.stdout.strip() else None


def _from_zig(env, notes, *, prefer, install_zig, progress, **_):
    version = _zig_version()
    if version is None and install_zig:
        version = _install_zig(notes, progress)
    if version is None:
        return None
    argv = [sys.executable, "-m", "ziglang", "cc"]
    got = _probe_gnu(argv, "ziglang")
    if isinstance(got, str):
        notes.append(f"python -m ziglang cc did not run ({got})")
        return None
    return Compiler("zig", argv, f"{version} ({got.name} {got.version})", "ziglang")


def _install_zig(notes, progress) -> str | None:
    """pip-install the pinned ziglang into h3kit's own venv (never into a system Python)."""
    if not _in_venv():
        notes.append("ziglang is not installed and h3kit is not running in its own venv, so it was "
                     f"not installed automatically (pip install 'ziglang=={ZIGLANG_PIN}')")
        return None
    say = progress or (lambda msg: None)
    say(f"No C compiler found; installing ziglang {ZIGLANG_PIN} (about 80 MB) into h3kit's venv {sys.prefix} ...")
    with _heartbeat(say, "still installing ziglang"):
        res = subproc.run([sys.executable, "-m", "pip", "install", "--disable-pip-version-check",
                           f"ziglang=={ZIGLANG_PIN}"], timeout=ZIG_INSTALL_TIMEOUT)
    if not res.ok:
        notes.append(f"installing ziglang {ZIGLANG_PIN} failed ({res.detail or res.status})")
        return None
    say(f"Installed ziglang {ZIGLANG_PIN}.")
    return _zig_version()


@contextlib.contextmanager
def _heartbeat(say, what: str, every: float = 15.0):
    """Say `what` with the seconds so far every `every` seconds until the block ends."""
    done = threading.Event()
    start = time.monotonic()

    def beat():
        while not done.wait(every):
            say(f"{what} ({time.monotonic() - start:.0f} s) ...")

    thread = threading.Thread(target=beat, daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()


# ------------------------------------------------------------ pure parsers


def parse_version(text: str) -> tuple[str | None, str]:
    """(family, version) from `cc --version` output: gcc, clang (Apple's too), or (None, "")."""
    first = text.strip().splitlines()[0] if text.strip() else ""
    m = re.search(r"clang version (\d+(?:\.\d+)*)", text)
    if m:
        return "clang", m.group(1)
    m = re.search(r"Apple LLVM version (\d+(?:\.\d+)*)", text)
    if m:
        return "clang", m.group(1)
    if re.search(r"\b(gcc|GCC|g\+\+)\b", first) or "Free Software Foundation" in text:
        m = re.search(r"\)\s+(\d+\.\d+(?:\.\d+)?)", first) or re.search(r"(\d+\.\d+(?:\.\d+)?)", first)
        return "gcc", m.group(1) if m else "unknown"
    return None, ""


def parse_msvc_banner(text: str) -> str | None:
    """'19.38.33130' from cl.exe's banner ('... Compiler Version 19.38.33130 for x64')."""
    m = re.search(r"Version\s+(\d+\.\d+\.\d+(?:\.\d+)?)", text)
    return m.group(1) if m else None


def parse_vswhere_path(text: str) -> str | None:
    """The first installation path vswhere printed (one per line)."""
    for line in text.splitlines():
        if line.strip():
            return line.strip()
    return None


def parse_set_output(text: str) -> dict:
    """cmd's `set` listing (NAME=value per line) as an environment dict."""
    env = {}
    for line in text.splitlines():
        name, sep, value = line.partition("=")
        if sep and name and not name.startswith("="):
            env[name] = value
    return env


def first_error_lines(text: str, limit: int = 8) -> list[str]:
    """The compiler's first error lines (those naming an error first, then the rest)."""
    lines = [ln.rstrip() for ln in text.splitlines() if ln.strip()]
    errors = [ln for ln in lines if re.search(r"\berror\b", ln, re.IGNORECASE)]
    return (errors or lines)[:limit]
