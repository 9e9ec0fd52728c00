"""A client for a ComfyUI that h3kit starts itself, for one measured workflow.

Why h3kit starts its own server instead of talking to one the user runs:
the measurement needs the server's peak memory (its process, sampled with
psutil) and a ComfyUI started with the profile's flags, and the user's
output folder must stay untouched (--output-directory / --temp-directory
point into a temporary folder).

The server is the one long-lived process h3kit starts, so it cannot go
through h3kit.core.subproc.run (which waits for the end); it gets the same care
by hand: an argument list, its own process group, every wait bounded, and
`stop()` (terminate, then kill) in a `finally`, so Ctrl-C or an error never
leaves a ComfyUI running. Every failure is a `ComfyError` with one sentence.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

START_TIMEOUT = 300.0  # a cold ComfyUI imports torch and scans custom nodes: minutes on a slow disk
STOP_TIMEOUT = 20.0
REQUEST_TIMEOUT = 30.0
RSS_INTERVAL = 0.2


class ComfyError(Exception):
    """One clear sentence about what went wrong with the ComfyUI server."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def server_argv(python: str | os.PathLike, port: int, workdir: Path, launch_args: list[str]) -> list[str]:
    """ComfyUI's main.py with the profile's flags, on loopback, writing only into `workdir`."""
    return [os.fspath(python), "main.py", *launch_args, "--listen", "127.0.0.1", "--port", str(port),
            "--disable-auto-launch", "--output-directory", str(workdir / "output"),
            "--temp-directory", str(workdir / "temp")]


def launch_args(profile_args: list[str], accepted: set[str] | None, has_gpu: bool) -> tuple[list[str], list[str]]:
    """(kept, dropped): the profile's flags this ComfyUI accepts (as the launcher writes them), plus --cpu
    when the machine has no GPU. Flags h3kit sets itself for the measurement are left to server_argv."""
    from h3kit.comfyui.launcher import filter_args

    ours = {"--listen", "--port", "--output-directory", "--temp-directory", "--disable-auto-launch"}
    _ours, wanted = filter_args([str(a) for a in profile_args], ours)
    kept, dropped = filter_args(wanted, accepted) if accepted is not None else ([], wanted)
    if not has_gpu and "--cpu" not in kept:
        kept.append("--cpu")
    return kept, dropped


def missing_nodes(workflow: dict, object_info: dict) -> list[str]:
    """Node classes the workflow uses that this ComfyUI does not list, in workflow order."""
    seen: list[str] = []
    for node in workflow.values():
        cls = node["class_type"]
        if cls not in object_info and cls not in seen:
            seen.append(cls)
    return seen


def combo_problems(workflow: dict, object_info: dict) -> list[str]:
    """Inputs whose value is not among the choices this ComfyUI offers (a file it cannot see, an unknown type)."""
    problems = []
    for node in workflow.values():
        spec = object_info.get(node["class_type"]) or {}
        inputs = {**(spec.get("input") or {}).get("required", {}), **(spec.get("input") or {}).get("optional", {})}
        for name, value in node["inputs"].items():
            choices = (inputs.get(name) or [None])[0]
            if isinstance(choices, list) and not isinstance(value, list) and value not in choices:
                problems.append(f"{node['class_type']}.{name} = {value!r} is not one of this ComfyUI's choices")
    return problems


def device_memory(system_stats: dict) -> dict | None:
    """Free/total bytes of the first non-CPU device in /system_stats, or None on a CPU-only server."""
    for dev in system_stats.get("devices") or []:
        if str(dev.get("type", "cpu")).lower() != "cpu" and dev.get("vram_total"):
            return {"name": dev.get("name"), "total_bytes": int(dev["vram_total"]), "free_bytes": int(dev.get("vram_free") or 0)}
    return None


def history_outcome(entry: dict) -> tuple[bool, str]:
    """(ran, one sentence) from one /history/<id> entry."""
    status = entry.get("status") or {}
    if status.get("status_str") == "success":
        return True, "the workflow ran"
    for kind, data in status.get("messages") or []:
        if kind == "execution_error":
            return False, (f"ComfyUI's node {data.get('node_type')} failed: "
                           f"{str(data.get('exception_message', '')).strip().splitlines()[0:1] or ['no message']}"[:400])
    return False, f"ComfyUI reported status {status.get('status_str')!r}"


class PeakRss:
    """Samples the summed RSS of a process and its children in a thread; keeps the peak."""

    def __init__(self, pid: int, interval: float = RSS_INTERVAL):
        import psutil

        self._proc = psutil.Process(pid)
        self._interval = interval
        self._stop = threading.Event()
        self.peak = 0
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def sample(self) -> int:
        import psutil

        try:
            procs = [self._proc, *self._proc.children(recursive=True)]
            rss = sum(p.memory_info().rss for p in procs)
        except psutil.Error:
            return self.peak
        self.peak = max(self.peak, rss)
        return rss

    def _loop(self) -> None:
        while not self._stop.wait(self._interval):
            self.sample()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(2 * self._interval + 1)


class ComfyServer:
    """A ComfyUI started for one measurement; use as a context manager so it always stops."""

    def __init__(self, comfy_dir: Path, python: str | os.PathLike, launch: list[str], workdir: Path,
                 env: dict | None = None, port: int | None = None):
        self.comfy_dir = Path(comfy_dir)
        self.workdir = Path(workdir)
        self.port = port or free_port()
        self.argv = server_argv(python, self.port, self.workdir, launch)
        self.env = env
        self.base = f"http://127.0.0.1:{self.port}"
        self.log_path = self.workdir / "comfyui.log"
        self.proc: subprocess.Popen | None = None
        self.rss: PeakRss | None = None

    # -- life cycle
    def start(self, timeout: float = START_TIMEOUT) -> float:
        """Start and wait until /system_stats answers; returns the seconds it took."""
        for sub in ("output", "temp"):
            (self.workdir / sub).mkdir(parents=True, exist_ok=True)
        t0 = time.monotonic()
        with self.log_path.open("wb") as log:
            kwargs = {"start_new_session": True} if os.name == "posix" else \
                {"creationflags": getattr(subprocess, "CREATE_NEW_PROCESS_GROUP", 0)}
            try:
                self.proc = subprocess.Popen(self.argv, cwd=self.comfy_dir, env=self.env, stdout=log,
                                             stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, **kwargs)
            except OSError as exc:
                raise ComfyError(f"ComfyUI could not be started with {self.argv[0]}: {exc.strerror or exc}.") from None
        self.rss = PeakRss(self.proc.pid)
        while True:
            if self.proc.poll() is not None:
                raise ComfyError(f"ComfyUI exited with code {self.proc.returncode} while starting; "
                                 f"its log ends: {self.log_tail(300)!r}")
            try:
                self.get("/system_stats", timeout=5)
                return time.monotonic() - t0
            except ComfyError:
                pass
            if time.monotonic() - t0 > timeout:
                raise ComfyError(f"ComfyUI did not answer on {self.base} within {timeout:.0f} s; "
                                 f"its log ends: {self.log_tail(300)!r}")
            time.sleep(0.5)

    def stop(self, timeout: float = STOP_TIMEOUT) -> None:
        """Terminate, then kill after `timeout`; the whole process group on POSIX."""
        if self.rss is not None:
            self.rss.close()
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return
        self._signal(signal.SIGTERM if os.name == "posix" else None)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self._signal(signal.SIGKILL if os.name == "posix" else "kill")
            proc.wait(10)

    def _signal(self, sig) -> None:
        try:
            if os.name == "posix":
                os.killpg(self.proc.pid, sig)
            elif sig == "kill":
                self.proc.kill()
            else:
                self.proc.terminate()
        except (ProcessLookupError, PermissionError):
            pass

    def __enter__(self) -> "ComfyServer":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def log_tail(self, chars: int = 2000) -> str:
        try:
            return self.log_path.read_text(encoding="utf-8", errors="replace")[-chars:]
        except OSError:
            return ""

    @property
    def peak_rss_bytes(self) -> int:
        if self.rss is not None:
            self.rss.sample()
            return self.rss.peak
        return 0

    # -- HTTP
    def _call(self, request: urllib.request.Request, timeout: float):
        try:
            with urllib.request.urlopen(request, timeout=timeout) as r:
                return json.loads(r.read() or b"null")
        except urllib.error.HTTPError as exc:
            body = exc.read().decode("utf-8", "replace")
            raise ComfyError(f"ComfyUI answered {request.full_url} with HTTP {exc.code}: {_error_text(body)}") from None
        except (OSError, ValueError) as exc:
            raise ComfyError(f"ComfyUI at {self.base} did not answer {request.full_url}: {exc}") from None

    def get(self, path: str, timeout: float = REQUEST_TIMEOUT):
        return self._call(urllib.request.Request(self.base + path), timeout)

    def post(self, path: str, doc: dict, timeout: float = REQUEST_TIMEOUT):
        data = json.dumps(doc).encode("utf-8")
        return self._call(urllib.request.Request(self.base + path, data=data,
                                                 headers={"Content-Type": "application/json"}), timeout)

    def object_info(self) -> dict:
        return self.get("/object_info", timeout=120)

    def system_stats(self) -> dict:
        return self.get("/system_stats")

    def queue(self, workflow: dict) -> str:
        return self.post("/prompt", {"prompt": workflow, "client_id": "h3kit-calibrate"})["prompt_id"]

    def wait(self, prompt_id: str, timeout: float, on_poll=None) -> dict:
        """The /history entry once the prompt finished; ComfyError after `timeout` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            if self.proc is not None and self.proc.poll() is not None:
                raise ComfyError(f"ComfyUI exited with code {self.proc.returncode} while running the workflow "
                                 f"(out of memory?); its log ends: {self.log_tail(300)!r}")
            entry = self.get(f"/history/{prompt_id}").get(prompt_id)
            if entry and (entry.get("status") or {}).get("completed") is not None:
                return entry
            if on_poll is not None:
                on_poll()
            if time.monotonic() > deadline:
                raise ComfyError(f"the workflow did not finish within {timeout:.0f} s")
            time.sleep(0.5)


def _error_text(body: str) -> str:
    """ComfyUI's /prompt error body as one line: its message plus the first node error."""
    try:
        doc = json.loads(body)
    except ValueError:
        return body.strip()[:300]
    err = doc.get("error") or {}
    text = err.get("message") or str(err)[:200] if isinstance(err, dict) else str(err)
    for node_id, node in (doc.get("node_errors") or {}).items():
        first = (node.get("errors") or [{}])[0]
        text += f" (node {node_id} {node.get('class_type')}: {first.get('message')}: {first.get('details')})"
        break
    return text[:400]


def run_workflow(server: ComfyServer, workflow: dict, timeout: float) -> dict:
    """Queue `workflow` on a started server and measure it: wall time, peak RSS, device memory."""
    before = device_memory(server.system_stats())
    lowest_free = [before["free_bytes"]] if before else []

    def poll_device():
        if before:
            now = device_memory(server.system_stats())
            if now:
                lowest_free.append(now["free_bytes"])

    rss_before = server.peak_rss_bytes
    t0 = time.monotonic()
    prompt_id = server.queue(workflow)
    entry = server.wait(prompt_id, timeout, on_poll=poll_device)
    seconds = time.monotonic() - t0
    poll_device()
    ran, sentence = history_outcome(entry)
    out = {"ran": ran, "message": sentence, "seconds": round(seconds, 3), "prompt_id": prompt_id,
           "peak_rss_bytes": server.peak_rss_bytes, "rss_before_bytes": rss_before,
           "outputs": sorted((entry.get("outputs") or {}).keys())}
    if before:
        after = device_memory(server.system_stats())
        out["device"] = {"name": before["name"], "total_bytes": before["total_bytes"],
                         "used_before_bytes": before["total_bytes"] - before["free_bytes"],
                         "used_after_bytes": (after or before)["total_bytes"] - (after or before)["free_bytes"],
                         "peak_used_bytes": before["total_bytes"] - min(lowest_free),
                         "peak_note": "sampled from /system_stats every 0.5 s while the workflow ran"}
    return out
