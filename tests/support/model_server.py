"""A small HTTP file server on 127.0.0.1 for the download tests (no other network).

Each served path has a `Route` that says how to misbehave: cut the
connection after N bytes on the first K requests, ignore `Range`, answer a
fixed status, require a bearer token, add headers. Every request is logged
(path, Range, Authorization) so tests can assert what the client sent.
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class Route:
    data: bytes = b""
    status: int | None = None  # answer this status instead of the data
    ignore_range: bool = False
    cut_after: int | None = None  # drop the socket after this many body bytes ...
    cut_times: int = 1  # ... on this many requests
    token: str | None = None  # require "Authorization: Bearer <token>" (401 without, 403 wrong)
    headers: dict = field(default_factory=dict)
    served: int = 0


@dataclass
class Seen:
    path: str
    range: str | None
    authorization: str | None


class ModelServer:
    def __init__(self):
        self.routes: dict[str, Route] = {}
        self.requests: list[Seen] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.0"

            def log_message(self, *args):  # keep pytest output clean
                pass

            def do_GET(self):
                path = self.path
                if path.startswith("http://"):  # asked through a proxy: absolute URI
                    path = "/" + path.split("/", 3)[3]
                server.requests.append(Seen(path, self.headers.get("Range"), self.headers.get("Authorization")))
                route = server.routes.get(path)
                if route is None:
                    return self._plain(404)
                if route.token is not None:
                    auth = self.headers.get("Authorization")
                    if auth is None:
                        return self._plain(401)
                    if auth != f"Bearer {route.token}":
                        return self._plain(403)
                if route.status is not None:
                    return self._plain(route.status)
                route.served += 1
                data = route.data
                start = 0
                rng = self.headers.get("Range")
                m = re.match(r"bytes=(\d+)-$", rng or "")
                if m and not route.ignore_range:
                    start = int(m.group(1))
                    if start >= len(data):
                        self.send_response(416)
                        self.send_header("Content-Range", f"bytes */{len(data)}")
                        self.send_header("Content-Length", "0")
                        self.end_headers()
                        return
                    self.send_response(206)
                    self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
                else:
                    self.send_response(200)
                body = data[start:]
                self.send_header("Content-Length", str(len(body)))
                for k, v in route.headers.items():
                    self.send_header(k, v)
                self.end_headers()
                if route.cut_after is not None and route.cut_times > 0 and len(body) > route.cut_after:
                    route.cut_times -= 1
                    self.wfile.write(body[: route.cut_after])
                    self.wfile.flush()
                    self.close_connection = True
                    return
                self.wfile.write(body)

            def _plain(self, status: int):
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    @property
    def base(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host}:{port}"

    def url(self, path: str) -> str:
        return self.base + path

    def add(self, path: str, **kw) -> Route:
        self.routes[path] = Route(**kw)
        return self.routes[path]

    def start(self) -> "ModelServer":
        self.thread.start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def closed_port() -> int:
    """A port on 127.0.0.1 that nothing listens on (bound, then closed): an "unreachable host" that
    answers at once, without any outside address."""
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port
