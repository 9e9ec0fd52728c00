"""Running the self-test program h3k-selftest-<variant> (beside its library) and reading its one line.

The build runs it on every variant before the build becomes current (through
h3kit's subprocess runner, reading the result with `read_selftest`); the
node pack's calibration runs it through `run_selftest` on the machine that
uses the pack. A program, so a check that crashes takes only itself down.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from ._library import NativeError

SELFTEST_TIMEOUT = 120.0
SKIPPED = 2  # the program's exit status when this CPU lacks features the build needs (payload/selftest.c)


def read_selftest(returncode: int | None, stdout: str, failure: str = "") -> dict:
    """{passed, checks, message} from the program's exit status and last line; `skipped` is added (True)
    when the CPU cannot run that build. `failure`: what went wrong when it printed nothing usable."""
    try:
        doc = json.loads(stdout.strip().splitlines()[-1])
        result = {"passed": returncode == 0 and doc["passed"] is True, "checks": int(doc["checks"]),
                  "message": str(doc["message"])}
    except (ValueError, IndexError, KeyError, TypeError):
        return {"passed": False, "checks": 0,
                "message": f"the self-test program gave no result ({failure or f'exit status {returncode}'})"}
    if returncode == SKIPPED:
        result["skipped"] = True
    elif returncode != 0 and not result["message"]:
        result["message"] = f"the self-test program exited with status {returncode}"
    return result


def run_selftest(program: Path) -> dict:
    """Run one self-test program (a list of arguments, a timeout) and read its result."""
    if not program.is_file():
        raise NativeError(f"the self-test program {program.name} is not beside its library in {program.parent}; "
                          "rebuild with 'h3kit build --force' and re-apply the pack (h3kit apply).")
    try:
        res = subprocess.run([str(program)], capture_output=True, text=True, errors="replace",
                             timeout=SELFTEST_TIMEOUT, cwd=program.parent, check=False)
    except subprocess.TimeoutExpired:
        return read_selftest(None, "", f"it ran past {SELFTEST_TIMEOUT:.0f} s")
    except OSError as exc:
        return read_selftest(None, "", f"it could not be started: {exc}")
    return read_selftest(res.returncode, res.stdout, res.stderr.strip()[-400:] or f"exit status {res.returncode}")
