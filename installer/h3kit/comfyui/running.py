"""The ComfyUI the user is running now: did it get the profile's flags?

Desktop, Stability Matrix and Pinokio start ComfyUI themselves, so h3kit's
launcher is not what starts it there and a flag the plan needs can be lost
without a word. A running ComfyUI answers `GET /system_stats` with its own
`system.argv` (server.py, 0.30-0.38), so doctor asks it: on loopback only, at
the ports such a ComfyUI listens on (the app's own when known, then 8188,
ComfyUI's default, and 8000, the Desktop's), each with a short timeout.
`probe` never raises; `missing_flags` and `argv_finding` are pure.
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

PORTS = (8188, 8000)
PROBE_TIMEOUT = 2.0


@dataclass(frozen=True)
class Running:
    port: int
    argv: tuple[str, ...]
    version: str | None

    def main_py(self) -> Path | None:
        """The main.py this ComfyUI was started from (argv[0]), when it names one."""
        return Path(self.argv[0]) if self.argv and self.argv[0].endswith("main.py") else None


def parse_system_stats(doc: object, port: int) -> Running | None:
    """The argv and version in a /system_stats answer; None when it is not ComfyUI's."""
    system = doc.get("system") if isinstance(doc, dict) else None
    argv = system.get("argv") if isinstance(system, dict) else None
    if not isinstance(argv, list) or not all(isinstance(a, str) for a in argv):
        return None
    version = system.get("comfyui_version")
    return Running(port, tuple(argv), version if isinstance(version, str) else None)


def probe(ports: tuple[int, ...] = PORTS, timeout: float = PROBE_TIMEOUT) -> list[Running]:
    """Every ComfyUI answering on 127.0.0.1 at `ports` (none: []). Never raises."""
    found = []
    for port in dict.fromkeys(ports):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/system_stats", timeout=timeout) as answer:
                doc = json.loads(answer.read(1 << 20))
        except (OSError, ValueError, urllib.error.URLError):
            continue
        running = parse_system_stats(doc, port)
        if running is not None:
            found.append(running)
    return found


def same_comfyui(running: Running, code_dir: Path) -> bool:
    """Whether `running` was started from the main.py in `code_dir`. An argv[0] that does not say (none, or
    relative to a working folder h3kit cannot see: `python main.py` is how the apps start it) counts as
    this one."""
    main = running.main_py()
    if main is None or not main.is_absolute():
        return True
    try:
        return os.path.samefile(main, Path(code_dir) / "main.py")
    except OSError:
        return False


def missing_flags(argv: tuple[str, ...] | list[str], planned: tuple[str, ...] | list[str]) -> list[str]:
    """The planned flags (each with its values) that `argv` lacks or gives another value."""
    wanted: list[list[str]] = []
    for token in planned:
        if token.startswith("--"):
            wanted.append([token])
        elif wanted:
            wanted[-1].append(token)
    out = []
    for flag, *values in wanted:
        got = _values(list(argv), flag)
        if got is None or (values and got[: len(values)] != values):
            out.append(" ".join([flag, *values]))
    return out


def _values(argv: list[str], flag: str) -> list[str] | None:
    for i, token in enumerate(argv):
        if token == flag:
            rest = []
            for nxt in argv[i + 1:]:
                if nxt.startswith("--"):
                    break
                rest.append(nxt)
            return rest
        if token.startswith(flag + "="):
            return [token.split("=", 1)[1]]
    return None


def argv_finding(running: Running | None, planned: list[str], how_to_add: str) -> dict:
    """The doctor finding `comfyui.running_flags` (None running: a note to start it and check again)."""
    check = "comfyui.running_flags"
    if running is None:
        # Nothing known to be wrong: the flags are checked whenever this ComfyUI is running.
        return {"check": check, "status": "ok", "fix": None,
                "message": "no running ComfyUI answered on 127.0.0.1, so its launch flags were not checked"
                           + (" (start it and run 'h3kit doctor' again)" if planned else "")}
    missing = missing_flags(running.argv, planned)
    if not missing:
        return {"check": check, "status": "ok", "fix": None,
                "message": f"the ComfyUI on port {running.port} runs with the profile's flags ({' '.join(planned) or 'none needed'})"}
    return {"check": check, "status": "fail", "fix": how_to_add,
            "message": f"the ComfyUI on port {running.port} was started without {', '.join(missing)} "
                       f"(its arguments: {' '.join(running.argv[1:]) or 'none'})"}
