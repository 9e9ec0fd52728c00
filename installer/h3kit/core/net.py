"""Can a host be reached at all? A connect probe with a bound on its time, asked once per host and run.

pip waits `--timeout` (180 s here by default) times its retries on a host
that does not answer, and a download loop retries with backoff, so a blocked
host (a proxy that allows only PyPI, a firewall, no DNS) used to cost minutes
before anyone said which host it was. `unreachable(url)` opens one TCP
connection to the host, or to the proxy the environment names for that URL
(requests' and pip's own rule), within `PROBE_SECONDS`, and returns why it
failed or None. Name lookup has no timeout of its own, so the whole probe
runs in a thread that is waited for at most that long.

The answer is kept for the rest of the process: a host that did not answer
is reported once, and every later source on it is skipped at once.
A reachable host can still refuse a request; that is the caller's to read.
"""

from __future__ import annotations

import re
import socket
import threading
import urllib.request
from pathlib import Path
from urllib.parse import urlsplit

PROBE_SECONDS = 5.0
_answers: dict[tuple[str, int], str | None] = {}
_lock = threading.Lock()


def is_local(url: str) -> bool:
    """A path or file:// URL: no network involved."""
    parts = urlsplit(url)
    return parts.scheme in ("", "file") or (len(parts.scheme) == 1 and url[1:2] == ":")  # C:\wheels


DEFAULT_PORTS = {"https": 443, "http": 80, "ssh": 22, "git": 9418}
_SCP_LIKE = re.compile(r"^[\w.-]+@([\w.-]+):(?!//)")  # git's user@host:path


def host_of(url: str) -> str:
    """'https://download.pytorch.org/whl/cpu' -> 'download.pytorch.org' (the text people recognise)."""
    scp = _SCP_LIKE.match(url)
    return scp.group(1) if scp else (urlsplit(url).hostname or url)


def _endpoint(url: str) -> tuple[str, int] | None:
    """Where a connection for `url` goes: the proxy the environment names for it, else its own host and port."""
    scp = _SCP_LIKE.match(url)
    if scp:
        return scp.group(1), 22
    parts = urlsplit(url)
    host = parts.hostname
    if not host:
        return None
    proxies = urllib.request.getproxies()
    proxy = proxies.get(parts.scheme) or proxies.get("all")
    if proxy and not urllib.request.proxy_bypass(host):
        p = urlsplit(proxy if "://" in proxy else f"http://{proxy}")
        if p.hostname:
            return p.hostname, p.port or (443 if p.scheme == "https" else 80)
    return host, parts.port or DEFAULT_PORTS.get(parts.scheme.split("+")[-1], 80)


def _connect(host: str, port: int, timeout: float, out: list) -> None:
    try:
        socket.create_connection((host, port), timeout=timeout).close()
        out.append(None)
    except socket.gaierror:
        out.append("its name does not resolve")
    except ConnectionRefusedError:
        out.append("the connection was refused")
    except (socket.timeout, TimeoutError):
        out.append(f"no answer within {timeout:g} s")
    except OSError as exc:
        out.append(exc.strerror or type(exc).__name__)


def unreachable(url: str, timeout: float = PROBE_SECONDS) -> str | None:
    """Why `url`'s host (or its proxy) cannot be connected to, in a few words; None when it answers.

    A local path or file:// URL is unreachable only when it does not exist. At most `timeout`
    seconds per host and process; later calls for the same host return the first answer at once.
    """
    if is_local(url):
        path = Path(urlsplit(url).path if url.startswith("file:") else url)
        return None if path.exists() else f"{path} does not exist"
    end = _endpoint(url)
    if end is None:
        return "it names no host"
    with _lock:
        if end in _answers:
            return _answers[end]
    out: list = []
    worker = threading.Thread(target=_connect, args=(*end, timeout, out), daemon=True)
    worker.start()
    worker.join(timeout + 0.5)
    why = out[0] if out else f"no answer within {timeout:g} s"
    with _lock:
        _answers[end] = why
    return why


def forget() -> None:
    """Drop the remembered answers (a long-lived process, or a test that changes what listens)."""
    with _lock:
        _answers.clear()
