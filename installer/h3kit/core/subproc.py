"""Running other programs: always an argument list, always a timeout, never raising.

Every subprocess h3kit starts goes through `run`. It returns a `ToolResult`
whose `status` is one of the probe states of the contract:

- `ok`       the program ran and exited 0;
- `missing`  the program could not be found or started;
- `timeout`  it ran past the timeout and was killed (with its children);
- `error`    it exited non-zero (callers that parse output also use `error`
             for output they cannot read).

Callers decide what a status means for them; nothing here raises for a
program that misbehaves. Nor does one cost h3kit unbounded memory: of each
output stream `run` keeps the first HEAD_BYTES and the last TAIL_BYTES, with
a line saying how much was dropped between them (a `folder_paths.py` that
prints without end took h3kit to 2 GB in 9 s when all of it was kept).
"""

from __future__ import annotations

import collections
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
HEAD_BYTES = 1 << 20  # of each output stream, what run keeps from the start ...
TAIL_BYTES = 1 << 20  # ... and from the end (a tool's verdict, a marked JSON line, is printed last)
READ_BYTES = 1 << 16


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


class _Capture:
    """One output stream of a child, read by its own thread: the first `head` bytes and the last `tail` bytes,
    and a count of those in between, which are dropped. A child that prints without end costs h3kit at most
    head + tail + one read, not all it printed. The thread owns the pipe and closes it at end of file (never
    while it may still read: a closed descriptor's number is reused)."""

    def __init__(self, stream, head: int, tail: int):
        self.head_cap, self.tail_cap = head, tail
        self.head = bytearray()
        self.tail: collections.deque = collections.deque()
        self.tail_len = self.total = 0
        self.lock = threading.Lock()  # a grandchild may hold the pipe past the timeout: the thread still reads
        self.thread = threading.Thread(target=self._pump, args=(stream,), daemon=True)
        self.thread.start()

    def _pump(self, stream) -> None:
        try:
            while True:
                block = os.read(stream.fileno(), READ_BYTES)
                if not block:
                    break
                with self.lock:
                    self._keep(block)
        except (OSError, ValueError):
            pass
        finally:
            try:
                stream.close()
            except OSError:
                pass

    def _keep(self, block: bytes) -> None:
        self.total += len(block)
        room = self.head_cap - len(self.head)
        if room > 0:
            self.head += block[:room]
            block = block[room:]
        if block:
            self.tail.append(block)
            self.tail_len += len(block)
            while self.tail and self.tail_len - len(self.tail[0]) >= self.tail_cap:
                self.tail_len -= len(self.tail.popleft())

    def text(self) -> tuple[str, int]:
        """The kept output as text, with a line where bytes were dropped; and how many were."""
        with self.lock:
            head, tail, total = bytes(self.head), b"".join(self.tail), self.total
        tail = tail[len(tail) - min(len(tail), self.tail_cap):]
        dropped = total - len(head) - len(tail)
        if not dropped:
            return _decode(head + tail), 0
        mark = (f"\n[... h3kit dropped {dropped} bytes of this output here, keeping the first {len(head)} "
                f"and the last {len(tail)} ...]\n")
        return _decode(_whole_chars(head, at_end=True)) + mark + _decode(_whole_chars(tail, at_end=False)), dropped


def _whole_chars(data: bytes, at_end: bool) -> bytes:
    """`data` without the piece of a UTF-8 character a cut left at its end (or start)."""
    if at_end:
        for back in range(1, min(4, len(data)) + 1):
            lead = data[-back]
            if lead < 0x80:
                break
            if lead >= 0xC0:  # the start of a character: whole only if its length fits in what is left
                need = 2 if lead < 0xE0 else 3 if lead < 0xF0 else 4
                return data if need == back else data[:-back]
        return data
    skip = 0
    while skip < min(3, len(data)) and 0x80 <= data[skip] < 0xC0:
        skip += 1
    return data[skip:]


def _feed(proc: subprocess.Popen, data: bytes) -> None:
    try:
        proc.stdin.write(data)
    except (OSError, ValueError):
        pass  # the child stopped reading (exited): what it got is what it wanted
    finally:
        try:
            proc.stdin.close()
        except OSError:
            pass


def _start(args: list[str], env, cwd, with_input: bool) -> subprocess.Popen:
    kwargs: dict = {}
    if os.name == "posix":
        kwargs["start_new_session"] = True  # so a timeout kills grandchildren too
    elif sys.platform == "win32":
        kwargs["creationflags"] = getattr(subprocess, "CREATE_NO_WINDOW", 0)
    return subprocess.Popen(
        args,
        stdin=subprocess.PIPE if with_input else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=dict(env) if env is not None else None,
        cwd=os.fspath(cwd) if cwd is not None else None,
        **kwargs,
    )


def _wait(proc: subprocess.Popen, captures: list[_Capture], timeout: float) -> bool:
    """Wait for the child to exit and its output to end, within `timeout`; False when it did not. A Ctrl-C (or
    Terminated) kills the child and its children, which run in their own session and never got the signal."""
    deadline = time.monotonic() + timeout
    try:
        proc.wait(timeout=timeout)
        for cap in captures:  # a grandchild may still hold the pipe open
            cap.thread.join(max(0.0, deadline - time.monotonic()))
        return not any(cap.thread.is_alive() for cap in captures)
    except subprocess.TimeoutExpired:
        return False
    except KeyboardInterrupt:
        _kill_tree(proc)
        try:
            proc.wait(timeout=5)
        except (subprocess.TimeoutExpired, OSError):
            pass
        raise


def run(
    argv: Sequence[str | os.PathLike],
    *,
    timeout: float = DEFAULT_TIMEOUT,
    env: Mapping[str, str] | None = None,
    cwd: str | os.PathLike | None = None,
    input_text: str | None = None,
) -> ToolResult:
    """Run `argv` (a list, never a shell string) with a hard timeout; never raises. Of each output stream the
    first HEAD_BYTES and the last TAIL_BYTES are kept (`extra["dropped_bytes"]` counts the rest)."""
    args = [os.fspath(a) for a in argv]
    start = time.monotonic()
    try:
        proc = _start(args, env, cwd, input_text is not None)
    except (FileNotFoundError, NotADirectoryError) as exc:
        return ToolResult(args, "missing", seconds=time.monotonic() - start, detail=str(exc))
    except (PermissionError, OSError) as exc:
        return ToolResult(args, "missing", seconds=time.monotonic() - start, detail=f"cannot start: {exc}")
    captures = [_Capture(proc.stdout, HEAD_BYTES, TAIL_BYTES), _Capture(proc.stderr, HEAD_BYTES, TAIL_BYTES)]
    if input_text is not None:
        threading.Thread(target=_feed, args=(proc, input_text.encode()), daemon=True).start()
    finished = _wait(proc, captures, timeout)
    if not finished:
        _kill_tree(proc)
        for cap in captures:
            cap.thread.join(2)
        try:
            proc.wait(timeout=2)
        except (subprocess.TimeoutExpired, OSError):
            pass
    (out, out_dropped), (err, err_dropped) = captures[0].text(), captures[1].text()
    extra = {"dropped_bytes": {"stdout": out_dropped, "stderr": err_dropped}} if out_dropped or err_dropped else {}
    seconds = time.monotonic() - start
    if not finished:
        return ToolResult(args, "timeout", None, out, err, seconds, f"no answer within {timeout:g} s", extra)
    status = "ok" if proc.returncode == 0 else "error"
    detail = "" if status == "ok" else f"exit code {proc.returncode}: {_first_line(err or out)}"
    return ToolResult(args, status, proc.returncode, out, err, seconds, detail, extra)


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
