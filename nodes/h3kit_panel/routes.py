"""The panel's HTTP routes on ComfyUI's server, and the one call that registers them with the queue guard.

Each route is a thin aiohttp handler over a pure function with bytes or
nothing in and (HTTP status, JSON document) out, so the tests call the
functions without ComfyUI or aiohttp:

  GET  /h3kit/status    status_document()       the profile, the budgets, the cost model's state, the calibration
  GET  /h3kit/report    report_file()           the calibration's HTML report (that one file only)
  POST /h3kit/estimate  estimate_response(raw)  a graph's figures and fix (estimate.py)
  POST /h3kit/preset    preset_start(raw)       `h3kit apply --preset NAME` in the background (preset.py)
  GET  /h3kit/preset    preset_state()          that job's state

ComfyUI serves each under /api/... too. A handler never lets an exception
reach aiohttp: a bad request is a 400 with one sentence, anything unexpected
a 500 with a sentence and the traceback in ComfyUI's log, and the server
stays up. aiohttp is imported only in `register`: it is ComfyUI's, not ours.
"""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path
from typing import Any, Callable

from .estimate import estimate_for, unavailable
from .graph import GraphError, read_graph, widget_names_of
from .guard import on_prompt
from .preset import PRESETS, PresetJobs, PresetRefused
from .sources import PACK, Pack

STATUS_SCHEMA = "h3kit.panel-status/1"
ESTIMATE_MAX_BYTES = 4 * 2**20  # a graph is tens of KB; an image pasted into a prompt string stays well under
PRESET_MAX_BYTES = 64 * 2**10
STATUS_PATH = "/h3kit/status"
JOBS = PresetJobs(PACK)
LOG = logging.getLogger("h3kit")


def status_document(pack: Pack = PACK, jobs: PresetJobs = JOBS) -> dict:
    """GET /h3kit/status: what the panel shows before any graph is priced."""
    profile, model, settings = pack.profile.current(), pack.cost.current(), pack.settings()
    d = model.defaults if model is not None else None
    return {"schema": STATUS_SCHEMA, "profile": profile.profile, "h3kit_version": profile.h3kit_version,
            "profile_problem": pack.profile.error, "machine": model.machine if model else None,
            "settings": settings,
            "budget": {"gpu_bytes": model.budget_gpu_bytes, "ram_bytes": model.budget_ram_bytes} if model else None,
            "defaults": {"canvas": [d.width, d.height], "frames": d.frames, "steps": d.steps, "cfg": d.cfg}
            if d else None,
            "target_minutes": model.target_minutes if model else None, "queue_guard": pack.queue_guard(),
            "cost": {"available": model is not None, "problem": pack.cost.problem},
            "calibration": pack.calibration(), "presets": list(PRESETS), "preset": settings.get("preset"),
            "preset_job": jobs.state()}


def estimate_response(raw: bytes, pack: Pack = PACK, widget_names: Callable | None = None) -> tuple[int, dict]:
    """POST /h3kit/estimate: {"prompt": API prompt} or {"workflow": saved workflow} in, the estimate out."""
    if len(raw) > ESTIMATE_MAX_BYTES:
        return too_large(len(raw))
    body, problem = _json_object(raw)
    if problem:
        return problem
    if "prompt" in body:
        doc = body["prompt"]
    elif "workflow" in body:
        doc = body["workflow"]
    else:
        return error(400, "the request holds neither a \"prompt\" (ComfyUI's API prompt) nor a \"workflow\"",
                     "no_graph")
    try:
        graph = read_graph(doc, widget_names)
    except GraphError as exc:
        return error(400, str(exc), "bad_graph")
    if not graph.has_h3:
        return error(400, graph.problem, "no_h3_node")
    model = pack.cost.current()
    if model is None:
        return 200, unavailable(graph, pack.cost.problem)
    return 200, estimate_for(model, graph)


def too_large(size: int | None) -> tuple[int, dict]:
    """A body over the cap, by its declared or counted size (None: over the cap, size unknown)."""
    said = f"{size / 2**20:.1f} MB" if size is not None else f"over {ESTIMATE_MAX_BYTES // 2**20} MB"
    return error(400, f"the request is {said}; h3kit's estimate takes at most {ESTIMATE_MAX_BYTES // 2**20} MB",
                 "too_large")


def preset_start(raw: bytes | None, jobs: PresetJobs = JOBS) -> tuple[int, dict]:
    """POST /h3kit/preset {"preset": NAME}: 202 with the job's first state, or why it cannot start (raw None: a
    body over the cap, left unread)."""
    if raw is None or len(raw) > PRESET_MAX_BYTES:
        return error(400, f"the request is over {PRESET_MAX_BYTES // 2**10} KB, so it is no preset switch", "too_large")
    body, problem = _json_object(raw)
    if problem:
        return problem
    try:
        return 202, jobs.start(body.get("preset"))
    except PresetRefused as exc:
        return error(exc.status, str(exc), "preset_refused")


def preset_state(jobs: PresetJobs = JOBS) -> tuple[int, Any]:
    """GET /h3kit/preset: the job's state, or null when none ran since ComfyUI started."""
    return 200, jobs.state()


def report_file(pack: Pack = PACK) -> tuple[int, Path | dict]:
    """GET /h3kit/report: (200, the report's path) or (404, why there is none)."""
    path = pack.report_path()
    if path is None:
        return error(404, "there is no calibration report for this pack; run 'h3kit calibrate'", "no_report")
    return 200, Path(path)


def error(status: int, sentence: str, code: str) -> tuple[int, dict]:
    return status, {"error": sentence, "code": code}


def _json_object(raw: bytes) -> tuple[dict, tuple | None]:
    try:
        body = json.loads(raw)
    except ValueError as exc:  # UnicodeDecodeError is one too
        return {}, error(400, f"the request is not JSON ({str(exc)[:120]})", "not_json")
    if not isinstance(body, dict):
        return {}, error(400, "the request must be a JSON object", "not_object")
    return body, None


def comfy_widget_names(class_type: str) -> list | None:
    """The widget order of a node class loaded in this ComfyUI (None: not loaded; the reader's table then)."""
    import nodes  # ComfyUI's own module, present only inside ComfyUI

    cls = nodes.NODE_CLASS_MAPPINGS.get(class_type)
    return None if cls is None else widget_names_of(cls.INPUT_TYPES())


# -- ComfyUI's server ------------------------------------------------------------------


def prompt_server(server_module: Any = None) -> Any:
    """ComfyUI's running PromptServer, or None outside ComfyUI (tests, h3kit's own imports of the pack)."""
    module = server_module if server_module is not None else sys.modules.get("server")
    ps = getattr(getattr(module, "PromptServer", None), "instance", None)
    ok = ps is not None and hasattr(ps, "routes") and hasattr(ps, "add_on_prompt_handler")
    return ps if ok else None


def register(server_module: Any = None) -> bool:
    """Add the routes and the queue guard to ComfyUI's server, once; False (and nothing done) outside ComfyUI."""
    ps = prompt_server(server_module)
    if ps is None or any(getattr(r, "path", None) == STATUS_PATH for r in ps.routes):
        return False  # not in ComfyUI, or this pack was imported twice: aiohttp refuses a route added again
    from aiohttp import web

    for method, path, handler in _handlers(web):
        ps.routes.route(method, path)(handler)
    ps.add_on_prompt_handler(on_prompt)
    LOG.info("h3kit: panel routes under /h3kit/ and the queue guard are on")
    return True


def _handlers(web) -> list:
    async def status(request):
        return _answer(web, lambda: (200, status_document()))

    async def report(request):
        found = _safely(report_file)
        if found[0] != 200:
            return web.json_response(found[1], status=found[0])
        return web.FileResponse(found[1], headers={"Content-Type": "text/html; charset=utf-8"})

    async def estimate(request):
        raw = await _body(request, ESTIMATE_MAX_BYTES)
        if raw is None:
            return _answer(web, lambda: too_large(request.content_length))
        return _answer(web, lambda: estimate_response(raw, widget_names=comfy_widget_names))

    async def preset_post(request):
        raw = await _body(request, PRESET_MAX_BYTES)
        return _answer(web, lambda: preset_start(raw))

    async def preset_get(request):
        return _answer(web, preset_state)

    return [("GET", STATUS_PATH, status), ("GET", "/h3kit/report", report), ("POST", "/h3kit/estimate", estimate),
            ("POST", "/h3kit/preset", preset_post), ("GET", "/h3kit/preset", preset_get)]


async def _body(request, cap: int) -> bytes | None:
    """The request's body, read here with a cap (None: over it); a declared length over it is not read at all.
    A body that breaks off reads as what came, which the core answers as not JSON."""
    if request.content_length is not None and request.content_length > cap:
        return None
    chunks, size = [], 0
    try:
        while chunk := await request.content.read(2**16):
            size += len(chunk)
            if size > cap:
                return None
            chunks.append(chunk)
    except Exception as exc:  # the client went away mid-body: nothing to price
        LOG.info("h3kit: a request's body broke off (%s: %s)", type(exc).__name__, exc)
    return b"".join(chunks)


def _safely(core: Callable[[], tuple]) -> tuple:
    try:
        return core()
    except Exception as exc:  # a bug in the panel must answer, not take the request (or ComfyUI) down
        LOG.exception("h3kit: the panel's route failed")
        return error(500, f"h3kit's panel hit an internal error ({type(exc).__name__}); ComfyUI's log has the "
                          "details", "internal")


def _answer(web, core: Callable[[], tuple]):
    status, doc = _safely(core)
    return web.json_response(doc, status=status)
