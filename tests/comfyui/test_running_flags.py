"""Did the running ComfyUI get the plan's flags? /system_stats' argv, parsed from a recorded answer (ComfyUI
0.33 server.py's shape) and asked of a stand-in server on loopback; the install's last lines for an app."""

from __future__ import annotations

import http.server
import json
import threading
from pathlib import Path

from h3kit.comfyui import running
from h3kit.comfyui.apps import HOW_TO_ADD, STABILITY_MATRIX
from h3kit.steps import next_steps

STATS = {"system": {"os": "linux", "ram_total": 25000000000, "ram_free": 20000000000, "comfyui_version": "0.35.1",
                    "python_version": "3.11.7", "pytorch_version": "2.14.1+cu130", "embedded_python": False,
                    "argv": ["/data/Packages/ComfyUI/main.py", "--listen", "127.0.0.1", "--reserve-vram", "2",
                             "--preview-method", "auto"]},
         "devices": [{"name": "cuda:0 NVIDIA GeForce RTX 4060", "type": "cuda", "index": 0,
                      "vram_total": 8585740288, "vram_free": 7000000000}]}


def test_missing_flags_with_their_values():
    argv = ("main.py", "--reserve-vram", "2", "--cpu", "--vram-headroom=1")
    assert running.missing_flags(argv, ["--cpu", "--vram-headroom", "1"]) == []
    assert running.missing_flags(argv, ["--reserve-vram", "3", "--disable-pinned-memory"]) == \
        ["--reserve-vram 3", "--disable-pinned-memory"]
    assert running.missing_flags((), []) == []


def test_missing_flags_read_both_lists_as_comfyui_does():
    """h3kit.data.comfy_argv: of a flag given twice ComfyUI holds the last, and a shortened flag is the one it names."""
    argv = ("main.py", "--reserve-vram", "3", "--reserve=2", "--vram-headroom", "-1")
    assert running.missing_flags(argv, ["--reserve-vram", "2", "--vram-headroom", "-1"]) == []
    assert running.missing_flags(argv, ["--reserve-vram", "3"]) == ["--reserve-vram 3"]
    assert running.missing_flags(("main.py", "--cpu-vae"), ["--cpu"]) == ["--cpu"]
    assert running.missing_flags(("main.py",), ["--reserve-vram", "1", "--reserve-vram", "2"]) == ["--reserve-vram 2"]
    paths = ("main.py", "--extra-model-paths-config", "/a.yaml", "--extra-model-paths-config", "/Jürgen/b c.yaml")
    assert running.missing_flags(paths, ["--extra-model-paths-config", "/Jürgen/b c.yaml"]) == []


def test_a_recorded_answer_is_parsed_and_judged():
    r = running.parse_system_stats(STATS, 8188)
    assert r.version == "0.35.1" and r.main_py() == Path("/data/Packages/ComfyUI/main.py")
    bad = running.argv_finding(r, ["--vram-headroom", "1", "--reserve-vram", "2"], "add it in the app")
    assert bad["status"] == "fail" and "--vram-headroom 1" in bad["message"] and "--reserve-vram" not in \
        bad["message"].split("without")[1].split("(")[0]
    assert running.argv_finding(r, ["--reserve-vram", "2"], "x")["status"] == "ok"
    assert running.parse_system_stats({"system": {"argv": "not a list"}}, 1) is None
    assert running.parse_system_stats([], 1) is None
    assert running.argv_finding(None, ["--cpu"], "x")["status"] == "ok"  # not running: nothing known wrong
    # `python main.py ...` (the apps' way) names no folder: taken as this ComfyUI; an absolute one must match
    assert running.same_comfyui(running.Running(8188, ("main.py", "--cpu"), None), Path("/any"))
    assert not running.same_comfyui(r, Path("/elsewhere/ComfyUI"))


def test_probe_asks_a_server_on_loopback_and_skips_closed_ports(monkeypatch):
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            body = json.dumps(STATS).encode() if self.path == "/system_stats" else b"{}"
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        with __import__("socket").socket() as s:
            s.bind(("127.0.0.1", 0))
            closed = s.getsockname()[1]
        monkeypatch.setattr(running, "ALLOWED_PORTS", frozenset({closed, server.server_address[1]}))
        found = running.probe((closed, server.server_address[1]), timeout=2)
    finally:
        server.shutdown()
    assert [r.port for r in found] == [server.server_address[1]] and found[0].argv[0].endswith("main.py")


def test_the_last_line_names_the_app_and_the_flags():
    line = next_steps.app_start_line(STABILITY_MATRIX, ["--vram-headroom", "1"], HOW_TO_ADD[STABILITY_MATRIX])
    assert line.startswith("Start ComfyUI from Stability Matrix with these launch flags added: --vram-headroom 1")
    assert "Launch Options" in line
    assert "needs no extra launch flags" in next_steps.app_start_line(STABILITY_MATRIX, [], "x")
