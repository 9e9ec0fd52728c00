"""The panel's preset switch: `h3kit apply --preset NAME`, run by h3kit itself in a background thread.

The pack never re-plans on its own (it cannot import h3kit, which is not
installed in ComfyUI's Python): it runs the h3kit that installed it, as the
profile records it (`h3kit`: {"command": [python, "-m", "h3kit"], "env",
"comfyui"}), so the switch leaves the pack exactly as the same command typed
in a terminal. One job at a time; its stderr lines (the last 50) are the
progress the panel shows, its --json document on stdout the outcome.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import threading
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Mapping

from .sources import Pack

PRESETS = ("auto", "fast", "balanced", "quality")
TIMEOUT_S = 600
KEPT_LINES = 50
NO_COMMAND = "this pack's profile does not say where h3kit is; run 'h3kit apply' once from a terminal"
LOG = logging.getLogger("h3kit")


class PresetRefused(ValueError):
    """The switch cannot start (an unknown preset, no h3kit recorded, a job running); `status` is the HTTP status."""

    def __init__(self, status: int, sentence: str):
        super().__init__(sentence)
        self.status = status


@dataclass
class Job:
    preset: str
    state: str = "running"
    lines: deque = field(default_factory=lambda: deque(maxlen=KEPT_LINES))
    exit_code: int | None = None
    restart_needed: bool | None = None
    message: str = ""

    def to_json(self) -> dict:
        return {"state": self.state, "preset": self.preset, "lines": list(self.lines), "exit_code": self.exit_code,
                "restart_needed": self.restart_needed, "message": self.message}


class PresetJobs:
    """The one preset job of this ComfyUI: start it, read its state."""

    def __init__(self, pack: Pack, timeout_s: float = TIMEOUT_S):
        self.pack, self.timeout_s = pack, timeout_s
        self._lock = threading.Lock()
        self._job: Job | None = None
        self._thread: threading.Thread | None = None

    def state(self) -> dict | None:
        with self._lock:
            return None if self._job is None else self._job.to_json()

    def start(self, preset: Any) -> dict:
        """Start `h3kit apply --preset` in a thread; the job's first state. PresetRefused says why not."""
        if preset not in PRESETS:
            raise PresetRefused(400, f"there is no preset named {str(preset)[:40]!r}; choose one of: "
                                     f"{', '.join(PRESETS)}")
        argv, env = self.command(preset)
        with self._lock:
            if self._job is not None and self._job.state == "running":
                raise PresetRefused(409, f"h3kit is already switching to the {self._job.preset} preset; wait for "
                                         "it to finish")
            self._job = job = Job(preset, message=f"switching to the {preset} preset")
        self._thread = threading.Thread(target=self._run, args=(job, argv, env), name="h3kit-preset", daemon=True)
        self._thread.start()
        return job.to_json()

    def wait(self, timeout: float | None = None) -> None:
        """Until the running job ends (the tests' way to see it finish)."""
        if self._thread is not None:
            self._thread.join(timeout)

    def command(self, preset: str) -> tuple[list[str], dict]:
        """h3kit's argument list and environment, from the profile's `h3kit` section."""
        section = self.pack.h3kit()
        command = section.get("command")
        if not (isinstance(command, list) and command and all(isinstance(c, str) and c for c in command)):
            raise PresetRefused(409, NO_COMMAND)
        argv = [*command, "apply", "--preset", preset]
        if isinstance(section.get("comfyui"), str) and section["comfyui"]:
            argv += ["--comfyui", section["comfyui"]]
        extra = section.get("env") if isinstance(section.get("env"), Mapping) else {}
        env = {**os.environ, **{str(k): str(v) for k, v in extra.items() if v is not None}}
        return argv + ["--yes", "--json"], env

    def _run(self, job: Job, argv: list[str], env: dict) -> None:
        try:
            code, out, timed_out = _run_streaming(argv, env, self.timeout_s, lambda line: self._line(job, line))
        except OSError as exc:
            self._finish(job, "failed", None, None, f"h3kit could not be started ({exc.strerror or exc}); "
                                                    "run 'h3kit apply' once from a terminal")
            return
        except Exception as exc:  # a bug here must end the job, not leave it running forever
            LOG.exception("h3kit: the preset switch failed")
            self._finish(job, "failed", None, None, f"the preset switch failed ({type(exc).__name__}: {exc})")
            return
        state, restart, text = outcome(job.preset, code, _final_json(out), timed_out, self.timeout_s,
                                       list(job.lines))
        self._finish(job, state, code, restart, text)

    def _line(self, job: Job, line: str) -> None:
        with self._lock:
            job.lines.append(line.rstrip("\n"))

    def _finish(self, job: Job, state: str, code: int | None, restart: bool | None, message: str) -> None:
        with self._lock:
            job.state, job.exit_code, job.restart_needed, job.message = state, code, restart, message
        LOG.info("h3kit: preset %s: %s (%s)", job.preset, state, message)


def outcome(preset: str, code: int | None, doc: dict | None, timed_out: bool, timeout_s: float,
            lines: list[str]) -> tuple[str, bool | None, str]:
    """(state, restart_needed, message) from h3kit's exit code and its --json document."""
    if timed_out:
        return "failed", None, f"h3kit apply ran past {timeout_s:g} s and was stopped"
    doc = doc or {}
    if code == 0 and doc.get("schema") == "h3kit.apply/1":
        restart = doc.get("restart_needed") if isinstance(doc.get("restart_needed"), bool) else None
        why = doc.get("restart_why") if isinstance(doc.get("restart_why"), str) else ""
        return "done", restart, f"The {preset} preset is applied (profile {doc.get('profile')}). {why}".strip()
    if isinstance(doc.get("error"), str):
        fix = doc.get("fix") if isinstance(doc.get("fix"), str) else ""
        return "failed", None, f"{doc['error']} {fix}".strip()
    last = next((line.strip() for line in reversed(lines) if line.strip()), "")
    return "failed", None, f"h3kit exited with code {code}" + (f": {last}" if last else "")


def _run_streaming(argv: list[str], env: dict, timeout_s: float, on_line) -> tuple[int, str, bool]:
    """Run `argv`, each stderr line to `on_line` as it comes; (exit code, stdout, whether it was stopped)."""
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=env, text=True, encoding="utf-8", errors="replace")
    stopped = threading.Event()

    def stop():
        stopped.set()
        proc.kill()

    def pump():
        for line in proc.stderr:
            on_line(line)

    timer = threading.Timer(timeout_s, stop)
    reader = threading.Thread(target=pump, name="h3kit-preset-stderr", daemon=True)
    timer.start()
    reader.start()
    try:
        out = proc.stdout.read()  # stderr drains in its own thread, so neither pipe fills up
        code = proc.wait()
        reader.join(5)
    finally:
        timer.cancel()
    return code, out, stopped.is_set()


def _final_json(text: str) -> dict | None:
    """h3kit's --json document: the whole stdout, else the last JSON object that starts a line and ends it."""
    starts = [0] + [i + 1 for i, c in enumerate(text) if c == "\n" and text[i + 1:i + 2] == "{"]
    for start in reversed(starts):
        try:
            doc = json.loads(text[start:])
        except ValueError:
            continue
        return doc if isinstance(doc, dict) else None
    return None
