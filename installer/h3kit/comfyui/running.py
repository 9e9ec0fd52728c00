"""The ComfyUI the user is running now: did it get the profile's flags?

Desktop, Stability Matrix and Pinokio start ComfyUI themselves, so h3kit's
launcher is not what starts it there and a flag the plan needs can be lost
without a word. A running ComfyUI answers `GET /system_stats` with its own
`system.argv` (server.py, 0.30-0.38), so doctor asks it: on 127.0.0.1 only,
at the two ports such a ComfyUI listens on (8188, ComfyUI's default, and
8000, the Desktop's), each with a deadline for the whole exchange, no
redirect followed, and the answer's headers and body capped. What answers
there may be anything: junk on one port is "not ComfyUI" and the other port
is still asked. `probe` never raises; `missing_flags` and `argv_finding` are
pure.
"""

from __future__ import annotations

import os
import socket
import time
from dataclasses import dataclass
from pathlib import Path

from h3kit.core import bounded_read
from h3kit.data import comfy_argv

HOST = "127.0.0.1"
PORTS = (8188, 8000)
ALLOWED_PORTS = frozenset(PORTS)  # the only ports asked, whatever a caller passes: ComfyUI's and the Desktop's
PROBE_TIMEOUT = 2.0  # seconds per port, in all (connect, send, every read)
MAX_HEADER_BYTES = 16 << 10
MAX_HEADERS = 64
MAX_BODY_BYTES = 256 << 10  # ComfyUI's answer is about a kilobyte, a few more with a long argv


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
    """Every ComfyUI answering on 127.0.0.1 at those of `ports` that ComfyUI listens on (ALLOWED_PORTS); none:
    []. Each port has `timeout` seconds in all; one that answers anything but ComfyUI's 200 with its JSON in
    time is not ComfyUI, and the next port is still asked. Never raises."""
    found = []
    for port in dict.fromkeys(ports):
        if port not in ALLOWED_PORTS:
            continue
        try:
            body = _get_system_stats(port, time.monotonic() + timeout)
            doc = bounded_read.parse_json(body.decode("utf-8"), f"the answer on port {port}") if body else None
        except (OSError, ValueError, bounded_read.UnreadableFile):  # socket.timeout is an OSError
            continue
        running = parse_system_stats(doc, port)
        if running is not None:
            found.append(running)
    return found


def _get_system_stats(port: int, deadline: float) -> bytes | None:
    """The body of a 200 answer to GET /system_stats on 127.0.0.1:`port`, by `deadline` (time.monotonic), or
    None. HTTP/1.0 by hand: no redirect is followed, and headers and body are capped (http.client raises on
    100 headers, and would wait on a server that trickles them for as long as it trickles)."""
    request = f"GET /system_stats HTTP/1.0\r\nHost: {HOST}:{port}\r\nAccept: application/json\r\n\r\n".encode()
    raw = bytearray()
    with socket.create_connection((HOST, port), timeout=max(0.001, deadline - time.monotonic())) as sock:
        sock.sendall(request)
        while not _complete(raw):
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            sock.settimeout(left)
            block = sock.recv(1 << 16)
            if not block:
                break
            raw += block
            if len(raw) > MAX_HEADER_BYTES + MAX_BODY_BYTES:
                return None
    return _body(bytes(raw))


def _split(raw: bytes) -> tuple[list[bytes], bytes] | None:
    """(status line and header lines, body) once the headers are complete and within the caps, else None."""
    head, sep, body = raw.partition(b"\r\n\r\n")
    if not sep or len(head) > MAX_HEADER_BYTES:
        return None
    lines = head.split(b"\r\n")
    return (lines, body) if len(lines) - 1 <= MAX_HEADERS else None


def _content_length(lines: list[bytes]) -> int | None:
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return int(value.strip()) if value.strip().isdigit() else -1
    return None


def _complete(raw: bytearray) -> bool:
    """Whether `raw` holds all there is to read: junk past the header cap, or the whole body its length names
    (else the server's close ends it)."""
    if b"\r\n\r\n" not in raw:
        return len(raw) > MAX_HEADER_BYTES
    split = _split(bytes(raw))
    if split is None:
        return True
    size = _content_length(split[0])
    return size is not None and (size < 0 or len(split[1]) >= size)


def _body(raw: bytes) -> bytes | None:
    """The body of a whole `200` answer within the caps (a redirect, an error, a cut or chunked answer: None)."""
    split = _split(raw)
    if split is None:
        return None
    lines, body = split
    status = lines[0].split()
    if len(status) < 2 or not status[0].startswith(b"HTTP/1.") or status[1] != b"200":
        return None
    if any(line.partition(b":")[0].strip().lower() == b"transfer-encoding" for line in lines[1:]):
        return None  # an answer to HTTP/1.0 is never chunked; ComfyUI's names its length
    size = _content_length(lines)
    if size is not None and (size < 0 or size > MAX_BODY_BYTES or len(body) < size):
        return None
    body = body[:size] if size is not None else body
    return body if len(body) <= MAX_BODY_BYTES else None


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
    """The planned flags (each with its values, as written) that `argv` lacks or gives another value. Both are
    read as ComfyUI reads its command line (h3kit.data.comfy_argv): of a flag given twice the last counts, a
    shortened flag is the flag it names, and a planned value must match what ComfyUI holds."""
    wanted = comfy_argv.options(planned)
    last = {want.flag: want for want in wanted}
    out = []
    for want in wanted:
        if want.flag not in comfy_argv.APPEND and last[want.flag] is not want:
            continue  # planned twice: ComfyUI would hold the last one only
        got = comfy_argv.values(argv, want.flag)
        if got is None or not _gives(got, want.values, want.flag in comfy_argv.APPEND):
            out.append(" ".join(want.tokens))
    return out


def _gives(got: tuple[str, ...], wanted: tuple[str, ...], every: bool) -> bool:
    """Whether ComfyUI's values `got` hold the `wanted` ones: in order from the first for a flag whose last
    occurrence counts, anywhere for one whose every occurrence counts (another config beside ours is fine)."""
    if every:
        return all(v in got for v in wanted)
    return got[: len(wanted)] == wanted


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
