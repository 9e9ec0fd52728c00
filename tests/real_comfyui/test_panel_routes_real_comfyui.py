"""h3kit inside a real ComfyUI (opt-in: H3KIT_COMFYUI_DIR): the pack's routes, its queue guard and the preset switch.

A 16 GB machine (this one's fingerprint with 16 GB of RAM, no weights needed): POST /h3kit/estimate on every
installed workflow gives the plan's own minutes and peaks (estimates.minutes_per_clip, estimates.workflow) within
1%; the text-to-video graph at 1920x1080 with 241 frames does not fit and comes with a fix that, posted again,
fits; that graph queued through POST /prompt is refused at validation (HTTP 400, the sentence on the h3kit node)
so nothing runs and no weight is read; bad bodies get HTTP 400 with a sentence and the server stays up; the panel's
preset switch leaves the pack exactly as `h3kit apply --preset` does. A 48 GB machine with tiny random-weight
files: the workflow that fits runs to its MP4 with the guard on, and the oversized one is refused.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

import comfy_h3
from h3kit.comfyui import client as comfy_api
from h3kit.comfyui import workflows
from h3kit.data import catalog as catalog_mod

REAL, PYTHON, WHY = comfy_h3.h3_comfyui()
pytestmark = [pytest.mark.native, pytest.mark.comfyui, pytest.mark.slow, pytest.mark.skipif(REAL is None, reason=WHY)]

TINY_48GB = comfy_h3.TINY_CONFIG + "  stream_dit: on\n"
OVERSIZED = {"width": 1920, "height": 1080, "length": 241}


def _install(run_cli, comfy: Path, fingerprint: str) -> dict:
    code, out, err = run_cli("install", "--comfyui", str(comfy), "--fingerprint", fingerprint, "--yes",
                             "--skip-calibrate", "--no-models", "--json")
    assert code == 0, err
    return json.loads(out)


def _http(server, method: str, path: str, body: bytes | None = None) -> tuple[int, dict]:
    request = urllib.request.Request(server.base + path, data=body, method=method,
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=120) as r:
            return r.status, json.loads(r.read() or b"null")
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"null")


def _post(server, path: str, doc) -> tuple[int, dict]:
    return _http(server, "POST", path, json.dumps(doc).encode("utf-8"))


def _pack(comfy: Path) -> Path:
    return comfy / "custom_nodes" / "ComfyUI-h3kit"


def _api_workflows(comfy: Path) -> dict[str, dict]:
    folder = _pack(comfy) / workflows.API_DIR
    return {p.stem: json.loads(p.read_text(encoding="utf-8")) for p in sorted(folder.glob("*.json"))}


def _oversized(api: dict) -> dict:
    graph = json.loads(json.dumps(api))
    node = next(n for n in graph.values() if n["class_type"].startswith("MiniMaxH3") and "width" in n["inputs"])
    node["inputs"].update(OVERSIZED)
    return graph


def _near(a, b) -> bool:
    return a is None and b is None or abs(a - b) <= 0.01 * abs(b)


def _estimates_match_the_plan(server, comfy: Path, plan: dict) -> None:
    e = plan["estimates"]
    for name, api in _api_workflows(comfy).items():
        status, doc = _post(server, "/h3kit/estimate", {"prompt": api})
        assert status == 200, (name, doc)
        if name == workflows.NAMES["r2v"]:
            continue  # its own steps; not set up by this plan anyway
        assert doc["fits"] is True and _near(doc["minutes"], e["minutes_per_clip"]), (name, doc, e["minutes_per_clip"])
        assert _near(doc["peak_ram_bytes"], e["workflow"]["peak_ram_bytes"]), (name, doc)
        assert _near(doc["peak_gpu_bytes"], e["workflow"]["peak_gpu_bytes"]), (name, doc)
        assert doc["canvas"] == plan["settings"]["canvas"] and doc["frames"] == plan["settings"]["frames"]


def _bad_bodies_get_a_sentence(server, t2v: dict) -> None:
    no_h3 = {k: v for k, v in t2v.items() if not v["class_type"].startswith(("MiniMaxH3", "H3kit"))}
    absurd = json.loads(json.dumps(t2v))
    next(n for n in absurd.values() if "width" in n["inputs"])["inputs"]["width"] = 10**9
    for body in (b"{not json", b"[]", json.dumps({"prompt": no_h3}).encode(), json.dumps({"prompt": absurd}).encode(),
                 b'{"prompt": "' + b"x" * (10 * 2**20) + b'"}'):
        status, doc = _http(server, "POST", "/h3kit/estimate", body)
        assert status == 400 and isinstance(doc.get("error"), str) and "Traceback" not in doc["error"], (status, doc)
        assert doc["error"].count(". ") <= 1, doc["error"]  # one sentence
    assert _http(server, "GET", "/h3kit/status")[0] == 200  # still up


def _snapshot(comfy: Path) -> dict[str, str]:
    pack = _pack(comfy)
    files = [pack / "h3kit_profile.json", pack / "h3kit_cost.json"] + sorted((pack / workflows.UI_DIR).glob("*.json")) \
        + sorted((pack / workflows.API_DIR).glob("*.json"))
    return {str(p.relative_to(pack)): hashlib.sha256(p.read_bytes()).hexdigest() for p in files}


def _switch_preset(server, preset: str) -> dict:
    status, doc = _post(server, "/h3kit/preset", {"preset": preset})
    assert status in (200, 202), doc
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        status, job = _http(server, "GET", "/h3kit/preset")
        if job and job.get("state") in ("done", "failed"):
            return job
        time.sleep(1)
    raise AssertionError("the preset switch did not finish in 600 s")


def test_a_16gb_machine_gets_the_plans_figures_the_guard_and_the_preset_switch(h3kit_home, run_cli, tmp_path):
    comfy = comfy_h3.make_test_comfyui(REAL, tmp_path / "Comfy UI ü")
    fp = comfy_h3.machine_fingerprint(run_cli, tmp_path, 16, gpus=False)
    _install(run_cli, comfy, fp)
    code, out, err = run_cli("plan", "--fingerprint", fp, "--json")
    assert code == 0, err
    plan = json.loads(out)
    t2v = _api_workflows(comfy)[workflows.NAMES["t2v"]]
    with comfy_api.ComfyServer(comfy, PYTHON, ["--cpu"], tmp_path / "work") as server:
        server.start(timeout=240)
        status, doc = _http(server, "GET", "/h3kit/status")
        assert status == 200 and doc["profile"] == plan["profile"] and doc["cost"]["available"], doc
        _estimates_match_the_plan(server, comfy, plan)

        big = _oversized(t2v)
        status, doc = _post(server, "/h3kit/estimate", {"prompt": big})
        assert status == 200 and doc["fits"] is False and doc["fix"], doc
        fixed = json.loads(json.dumps(big))
        target = fixed[str(doc["targets"]["canvas"])]["inputs"]
        target.update(width=doc["fix"]["canvas"][0], height=doc["fix"]["canvas"][1], length=doc["fix"]["frames"])
        fixed[str(doc["targets"]["steps"])]["inputs"]["steps"] = doc["fix"]["steps"]
        assert _post(server, "/h3kit/estimate", {"prompt": fixed})[1]["fits"] is True

        status, refused = _post(server, "/prompt", {"prompt": big, "client_id": "h3kit-test"})
        assert status == 400, refused
        # no weights here, so the loaders also say their files are missing; the guard's error is on its node
        guard = refused["node_errors"][str(doc["guard_node"])]
        said = [e["details"] for e in guard["errors"] if e["type"] == "custom_validation_failed"]
        assert guard["class_type"].startswith("H3kit") and len(said) == 1, refused
        assert said[0].startswith("h3kit_guard - h3kit: 1920x1080 with 241 frames needs") and "GB" in said[0], said
        assert _http(server, "GET", "/history")[1] == {}  # nothing ran, so no weight was read
        _bad_bodies_get_a_sentence(server, t2v)

        job = _switch_preset(server, "fast")
        assert job["state"] == "done" and job["exit_code"] == 0, job
        assert isinstance(job["restart_needed"], bool) and job["message"], job
    by_panel = _snapshot(comfy)
    assert json.loads((_pack(comfy) / "h3kit_profile.json").read_text())["settings"]["preset"] == "fast"
    # the same command typed in a terminal (a process of its own, as the panel's is, so both see this machine alike)
    done = subprocess.run([sys.executable, "-m", "h3kit", "apply", "--comfyui", str(comfy), "--preset", "fast", "--yes",
                           "--json"], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert _snapshot(comfy) == by_panel  # the panel's switch left the pack as `h3kit apply --preset fast` does


def test_with_the_guard_on_the_graph_that_fits_runs_to_its_mp4_and_the_oversized_one_is_refused(
        h3kit_home, run_cli, tmp_path):
    comfy = comfy_h3.make_test_comfyui(REAL, tmp_path / "Comfy UI ü")
    (h3kit_home / "config.yaml").write_text(TINY_48GB, encoding="utf-8")
    fp = comfy_h3.machine_fingerprint(run_cli, tmp_path, 48, gpus=False)
    _install(run_cli, comfy, fp)
    profile = json.loads((_pack(comfy) / "h3kit_profile.json").read_text())["settings"]
    cat = catalog_mod.load()
    comfy_h3.write_tiny_files(comfy, PYTHON, {part: f"{cat.weight(profile[key]).file.folder}/"
                                                    f"{cat.weight(profile[key]).file.name}"
                                              for key, part in comfy_h3.PART_OF.items()})
    t2v = _api_workflows(comfy)[workflows.NAMES["t2v"]]
    work = tmp_path / "work"
    with comfy_api.ComfyServer(comfy, PYTHON, ["--cpu"], work) as server:
        server.start(timeout=240)
        status, refused = _post(server, "/prompt", {"prompt": _oversized(t2v), "client_id": "h3kit-test"})
        assert status == 400 and "h3kit_guard" in json.dumps(refused["node_errors"]), refused
        ran = comfy_api.run_workflow(server, t2v, timeout=600)
        assert ran["ran"], ran["message"] + server.log_tail(3000)
    video = sorted((work / "output").rglob("*.mp4"))
    assert video, "no MP4 was written"
    assert comfy_h3.probe_mp4(PYTHON, video[-1])["frames"] == 22
