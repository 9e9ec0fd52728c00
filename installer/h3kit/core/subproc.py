"""Running other programs: always an argument list, always a timeout, never raising.

Every subprocess h3kit starts goes through `run`. It returns a `ToolResult`
whose `status` is one of the probe states of the contract:

- `ok`       the program ran and exited 0;
- `missing`  the program could not be found or started;
- `timeout`  it ran past the timeout and was killed (with its children);
- `error`    it exited non-zero (callers that parse output also use `error`
             for output they cannot read).

Callers decide what a status means for them; nothing here raises for a
program that misbehaves.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Sequence

DEFAULT_TIMEOUT = 5.0


@dataclass
class ToolResult:
    argv: list[str]
    status: str  # ok | missing | timeout | error
    returncode: int | None = None
    stdout: str = ""
    stderr: str = ""
    seconds: float = 0.0
    detail: str = ""
    extra: dict = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.status == "ok"


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP to h3kit, raised in the main thread so it unwinds exactly as Ctrl-C does: the child
    that `run` waits for is killed with its process group (pip and git run in their own sessions, so a signal
    to h3kit's group never reaches them), ComfyUI servers stop, records stay consistent; the CLI exits 130."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _terminated(signum, frame):  # noqa: ARG001 - signal handler signature
    raise Terminated(signum)


def interrupt_on_signals():
    """Make SIGTERM and SIGHUP interrupt h3kit like Ctrl-C (main thread only; where the OS has them).

    Returns a function that puts the earlier handlers back (the CLI runs in-process in tests)."""
    before = {}
    if threading.current_thread() is threading.main_thread():
        for name in ("SIGTERM", "SIGHUP"):
            sig = getattr(signal, name, None)
            if sig is not None:
                try:
                    before[sig] = signal.signal(sig, _terminated)
                except (ValueError, OSError):
                    pass

    def restore() -> None:
        for sig, handler in before.items():
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)

    return restore


def _kill_tree(proc: subprocess.Popen) -> None:
    try:
        if os.name == "posix":
            os.killpg(proc.pid, signal.SIGKILL)
        else:
            proc.kill()
    except (ProcessLookupError, PermissionError, OSError):
        pass


def run(
    argv: Sequence[str | os.PathLike],
    *,
    timeout: float = DEFAULT_TIMEOUT,
    env: Mapping[str, str] | None = None,
    cwd: str | os.PathLike | None = None,
    input_text: str | None = None,
) -> ToolResult:
    """Run `argv` (a list, never a shell string) with a hard timeout; never raises."""
    args = [os.fspath(a) for a in argv]
    start = time.monotonic()
    kwargs: dict = {}
    if os.name == "posix":
        kwargs["start_new_session"] = True  # so a timeout kills grandchildren too
    elif sys.platform == "win32":
        kwargs["creationflags"] = getattr(subprocess, "CREATE_NO_WINDOW", 0)
    try:
        proc = subprocess.Popen(
            args,
            stdin=subprocess.PIPE if input_text is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=dict(env) if env is not None else None,
            cwd=os.fspath(cwd) if cwd is not None else None,
            **kwargs,
        )
    except (FileNotFoundError, NotADirectoryError) as exc:
        return ToolResult(args, "missing", seconds=time.monotonic() - start, detail=str(exc))
    except (PermissionError, OSError) as exc:
        return ToolResult(args, "missing", seconds=time.monotonic() - start, detail=f"cannot start: {exc}")
    try:
        out, err = proc.communicate(input=input_text.encode() if input_text is not None else None, timeout=timeout)
    except KeyboardInterrupt:
        # The child runs in its own session, so Ctrl-C (or SIGTERM/SIGHUP to h3kit: Terminated) never reached
        # it: stop it and its children too, then let the interrupt go on to the CLI (exit 130).
        _kill_tree(proc)
        try:
            proc.wait(timeout=5)
        except (subprocess.TimeoutExpired, OSError):
            pass
        raise
    except subprocess.TimeoutExpired:
        _kill_tree(proc)
        try:
            out, err = proc.communicate(timeout=2)
        except (subprocess.TimeoutExpired, OSError, ValueError):
            out, err = b"", b""
        return ToolResult(
            args, "timeout", None, _decode(out), _decode(err), time.monotonic() - start,
            f"no answer within {timeout:g} s",
        )
    seconds = time.monotonic() - start
    status = "ok" if proc.returncode == 0 else "error"
    detail = "" if status == "ok" else f"exit code {proc.returncode}: {_first_line(_decode(err) or _decode(out))}"
    return ToolResult(args, status, proc.returncode, _decode(out), _decode(err), seconds, detail)


def _decode(data: bytes | None) -> str:
    if not data:
        return ""
    for enc in ("utf-8", "mbcs" if sys.platform == "win32" else "latin-1"):
        try:
            return data.decode(enc)
        except (UnicodeDecodeError, LookupError):
            continue
    return data.decode("utf-8", errors="replace")


def _first_line(text: str, limit: int = 200) -> str:
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line[:limit]


def which(name: str, extra_dirs: Sequence[str | os.PathLike] = ()) -> str | None:
    """Resolve a program to an absolute path: PATH first, then `extra_dirs`.

    Never resolves to the current directory (on Windows `shutil.which` would
    look there first, which lets a planted executable run), and never returns
    a relative path.
    """
    cwd = Path.cwd().resolve()
    path_dirs = [d for d in os.environ.get("PATH", "").split(os.pathsep) if d]
    safe_dirs = []
    for d in list(path_dirs) + [os.fspath(x) for x in extra_dirs]:
        p = Path(d)
        if not p.is_absolute():
            continue
        try:
            if p.resolve() == cwd:
                continue
        except OSError:
            continue
        safe_dirs.append(str(p))
    found = shutil.which(name, path=os.pathsep.join(safe_dirs)) if safe_dirs else None
    return str(Path(found).absolute()) if found else None
