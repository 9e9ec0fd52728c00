"""Doctor's probe of a running ComfyUI (h3kit.comfyui.running.probe) against what may listen on its ports:
tiny threaded servers on loopback that send 1 MiB of `[`, 100 huge headers, a trickle that never ends, or a 302
to another port. Each port has a deadline for the whole exchange, no redirect is followed, only 127.0.0.1 at
ComfyUI's ports is asked, and junk on one port is "not ComfyUI" while a real answer on the other still counts."""

from __future__ import annotations

import json
import socket
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from h3kit.comfyui import doctor, running
from within import within

STATS = {"system": {"os": "linux", "comfyui_version": "0.33.0", "python_version": "3.11.7",
                    "argv": ["main.py", "--listen", "127.0.0.1", "--reserve-vram", "2"]}, "devices": []}


def _comfyui(conn: socket.socket, stop: threading.Event) -> None:
    body = json.dumps(STATS).encode()
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json; charset=utf-8\r\n"
                 b"Content-Length: %d\r\n\r\n" % len(body) + body)
    stop.wait(0.5)  # an HTTP/1.1 server may keep the connection: the length ends the answer, not the close


def _brackets(conn: socket.socket, stop: threading.Event) -> None:
    conn.sendall(b"HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n\r\n" + b"[" * (1 << 20))


def _huge_headers(conn: socket.socket, stop: threading.Event) -> None:
    conn.sendall(b"HTTP/1.0 200 OK\r\n" + b"".join(b"X-Junk-%d: %s\r\n" % (i, b"j" * 60000) for i in range(100))
                 + b"\r\n" + json.dumps(STATS).encode())


def _trickle(conn: socket.socket, stop: threading.Event) -> None:
    conn.sendall(b"HTTP/1.0 200 OK\r\n")
    while not stop.wait(0.05):
        conn.sendall(b"X")  # one header byte at a time, for ever


class Server:
    """A loopback TCP server that hands each connection to `behave` on its own thread; counts connections."""

    def __init__(self, behave):
        self.behave, self.stop, self.connections = behave, threading.Event(), 0
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _handle(self, conn: socket.socket) -> None:
        with conn:
            try:
                conn.recv(4096)
                self.behave(conn, self.stop)
            except OSError:
                pass

    def close(self) -> None:
        self.stop.set()
        self.sock.close()


@pytest.fixture
def servers(monkeypatch):
    made: list[Server] = []

    def make(behave) -> Server:
        made.append(Server(behave))
        monkeypatch.setattr(running, "ALLOWED_PORTS", frozenset(s.port for s in made), raising=False)
        return made[-1]

    monkeypatch.setattr(running, "PROBE_TIMEOUT", 1.0)
    yield make
    for s in made:
        s.close()


def _probe_within(seconds: float, ports) -> list:
    return within(seconds, running.probe, ports, timeout=running.PROBE_TIMEOUT)


@pytest.mark.parametrize("junk", [_brackets, _huge_headers, _trickle], ids=["1 MiB of [", "100 huge headers", "trickle"])
def test_junk_on_one_port_and_comfyui_on_the_other(servers, junk):
    bad, good = servers(junk), servers(_comfyui)
    start = time.monotonic()
    found = _probe_within(6, (bad.port, good.port))
    assert [(r.port, r.version) for r in found] == [(good.port, "0.33.0")]
    assert time.monotonic() - start < 3  # one deadline per port, in all
    assert bad.connections == 1


def test_a_redirect_is_not_followed_and_is_not_comfyui(servers):
    good = servers(_comfyui)

    def redirect(conn, stop):
        conn.sendall(b"HTTP/1.0 302 Found\r\nLocation: http://127.0.0.1:%d/system_stats\r\n\r\n" % good.port)

    moved = servers(redirect)
    assert _probe_within(6, (moved.port,)) == []
    assert good.connections == 0


def test_only_comfyuis_ports_on_loopback_are_asked(servers, monkeypatch):
    good = servers(_comfyui)
    monkeypatch.setattr(running, "ALLOWED_PORTS", frozenset({8188, 8000}), raising=False)
    assert _probe_within(6, (good.port,)) == [] and good.connections == 0
    assert running.PORTS == (8188, 8000) and running.HOST == "127.0.0.1"


def test_an_answer_past_the_body_cap_is_not_comfyui(servers, monkeypatch):
    monkeypatch.setattr(running, "MAX_BODY_BYTES", 64, raising=False)
    good = servers(_comfyui)
    assert _probe_within(6, (good.port,)) == []


def test_doctor_checks_the_comfyui_beside_junk(servers, monkeypatch):
    bad, good = servers(_brackets), servers(_comfyui)
    monkeypatch.setattr(running, "PORTS", (bad.port, good.port))
    install = SimpleNamespace(app=None, code_dir=None, path=Path("/any/ComfyUI"))
    plan = SimpleNamespace(settings=SimpleNamespace(comfyui_args=["--reserve-vram", "2", "--cpu"]))
    [finding] = doctor.running_flags_findings(install, plan)
    assert finding["status"] == "fail" and f"the ComfyUI on port {good.port} was started without --cpu" in \
        finding["message"]
