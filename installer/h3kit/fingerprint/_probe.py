"""Running probes: in parallel, each with a deadline, never raising.

A probe is a function `fn(timeout) -> value`. It may run a tool (through
`tool()`, which wraps h3kit.core.subproc.run) or read files. Whatever happens, the
runner records `{name, status, seconds, detail}`:

- `ok`       it returned a value;
- `missing`  the tool or file is not on this machine (`Missing` raised);
- `timeout`  the tool ran past its timeout, or the probe had not finished by
             the shared deadline (threads are daemons, so a stuck one is
             abandoned, not waited for);
- `error`    the tool failed, or its output could not be parsed: `detail`
             carries the first bytes so a bug report shows what came back.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from h3kit.core import subproc
from h3kit.fingerprint.parsers import ParseError

# Grace beyond the per-probe timeout for a subprocess to be killed and reaped.
_JOIN_GRACE_S = 0.75
_FIRST_BYTES = 80


class Missing(Exception):
    """The tool or file this probe needs is not here; not an error."""


class ProbeFailed(Exception):
    """The probe ran but failed; `status` is `error` or `timeout`."""

    def __init__(self, status: str, detail: str):
        super().__init__(detail)
        self.status = status
        self.detail = detail


@dataclass
class Probe:
    name: str
    fn: Callable[[float], Any]


def first_bytes(text: str | bytes, limit: int = _FIRST_BYTES) -> str:
    """The start of some output, printable, for a probe's detail."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", errors="replace")
    shown = text.strip()[:limit]
    return repr(shown) + ("..." if len(text.strip()) > limit else "")


def tool(path: str | None, args: Sequence[str], timeout: float, parse: Callable[[str], Any], *,
         name: str, accept_error_output: bool = False) -> Any:
    """Run a resolved tool and parse its stdout. `path` None means not found.

    `accept_error_output`: parse stdout even after a non-zero exit (sysctl exits 1
    when one of several names is unknown but still prints the others)."""
    if path is None:
        raise Missing(f"{name} not found on PATH or in its usual folders")
    result = subproc.run([path, *args], timeout=timeout)
    if result.status == "missing":
        raise Missing(result.detail)
    if result.status == "timeout":
        raise ProbeFailed("timeout", f"{path}: {result.detail}")
    if result.status == "error" and not (accept_error_output and result.stdout.strip()):
        raise ProbeFailed("error", f"{path}: {result.detail}")
    try:
        return parse(result.stdout)
    except ParseError as exc:
        raise ProbeFailed("error", f"{path}: unreadable output ({exc}): {first_bytes(result.stdout or result.stderr)}") from None


def run_all(probes: Sequence[Probe], timeout: float) -> tuple[dict[str, Any], list[dict]]:
    """Run every probe at once; return ({name: value for ok probes}, [probe records])."""
    results: dict[str, tuple[str, Any, float, str]] = {}
    lock = threading.Lock()

    def worker(probe: Probe) -> None:
        start = time.monotonic()
        try:
            value = probe.fn(timeout)
            outcome = ("ok", value, "")
        except Missing as exc:
            outcome = ("missing", None, str(exc))
        except ProbeFailed as exc:
            outcome = (exc.status, None, exc.detail)
        except ParseError as exc:
            outcome = ("error", None, f"unreadable: {exc}")
        except Exception as exc:  # a probe must never take the fingerprint down
            outcome = ("error", None, f"{type(exc).__name__}: {exc}")
        with lock:
            results[probe.name] = (outcome[0], outcome[1], time.monotonic() - start, outcome[2])

    started = time.monotonic()
    threads = []
    for probe in probes:
        t = threading.Thread(target=worker, args=(probe,), name=f"probe-{probe.name}", daemon=True)
        t.start()
        threads.append(t)
    deadline = started + timeout + _JOIN_GRACE_S
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))

    values: dict[str, Any] = {}
    records = []
    with lock:
        for probe in probes:
            if probe.name in results:
                status, value, seconds, detail = results[probe.name]
                if status == "ok":
                    values[probe.name] = value
            else:
                status, seconds, detail = "timeout", time.monotonic() - started, f"no answer within {timeout:g} s"
            records.append({"name": probe.name, "status": status, "seconds": round(seconds, 3), "detail": detail})
    return values, records
