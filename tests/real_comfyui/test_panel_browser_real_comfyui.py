"""h3kit's panel in a real ComfyUI page, driven by headless Chromium (opt-in: H3KIT_COMFYUI_DIR; Playwright).

h3kit installs into a throwaway ComfyUI for a 16 GB CPU-only machine (no
calibration; empty files under the weights' names, so the page finds every
file the workflow names) -> ComfyUI serves the pack's web extension -> in the
page, the h3kit sidebar tab opens, the installed text-to-video workflow loads
and the panel prices it (minutes, RAM peak against the budget) -> a canvas of
1920x1080 with 241 frames raises the warning with a fix -> "Apply fix" puts
a canvas that fits on the H3 node (the server's own estimate of the new graph
says it fits) -> oversized again, Run opens h3kit's dialog, and Cancel leaves
/prompt unasked (the queue and history stay empty) -> the preset switch runs
h3kit's `apply --preset` and the panel shows how it ended -> "Queue anyway"
sends the prompt with the guard node's h3kit_queue_anyway set, and the queue
guard lets it through (ComfyUI queues it; it stops at the first empty file).

With H3KIT_PANEL_SHOTS=<folder> the test saves panel-estimate.png,
panel-warning.png, panel-dialog.png and panel-preset.png there (docs/panel.md
shows them).
"""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

import pytest

import comfy_h3
from browser_support import NO_CHROMIUM, chromium
from h3kit.comfyui import client as comfy_api
from h3kit.comfyui import workflows
from h3kit.data import catalog as catalog_mod

REAL, PYTHON, WHY = comfy_h3.h3_comfyui()
HAS_PLAYWRIGHT = importlib.util.find_spec("playwright") is not None
pytestmark = [pytest.mark.native, pytest.mark.comfyui, pytest.mark.slow,
              pytest.mark.skipif(REAL is None, reason=WHY),
              pytest.mark.skipif(not HAS_PLAYWRIGHT, reason="Playwright is not installed (pip install playwright)"),
              pytest.mark.skipif(chromium() is None, reason=NO_CHROMIUM)]

VIEWPORT = {"width": 1500, "height": 900}
WAIT_MS = 60_000
POLL_MS = 1500  # how often the open panel prices the graph (h3kit_panel.js)
# the tutorial done: a fresh user folder would open the templates dialog over the page
SETTINGS = {"Comfy.TutorialCompleted": True}

H3_NODE = "() => app.graph._nodes.find(n => n.type === 'MiniMaxH3ImageToVideo')"
SET_WORKLOAD = """([w, h, frames]) => {
    const node = (%s)();
    const set = (name, v) => { node.widgets.find(x => x.name === name).value = v; };
    set('width', w); set('height', h); set('length', frames);
    app.graph.setDirtyCanvas(true, true);
}""" % H3_NODE
READ_WORKLOAD = """() => {
    const node = (%s)();
    const get = (name) => node.widgets.find(x => x.name === name).value;
    return [get('width'), get('height'), get('length')];
}""" % H3_NODE


def installed_comfyui(run_cli, tmp_path: Path) -> tuple[Path, dict]:
    """A test ComfyUI with h3kit installed for the 16 GB machine; (its folder, the text-to-video UI workflow)."""
    comfy = comfy_h3.make_test_comfyui(REAL, tmp_path / "Comfy UI ü")
    fingerprint = comfy_h3.machine_fingerprint(run_cli, tmp_path, 16, gpus=False)  # a 16 GB CPU-only computer
    code, out, err = run_cli("install", "--comfyui", str(comfy), "--fingerprint", fingerprint,
                             "--yes", "--skip-calibrate", "--no-models", "--json")
    assert code == 0, err
    placeholder_weights(run_cli, comfy, fingerprint)
    settings = comfy / "user" / "default" / "comfy.settings.json"
    settings.parent.mkdir(parents=True, exist_ok=True)
    settings.write_text(json.dumps(SETTINGS), encoding="utf-8")
    pack = comfy / "custom_nodes" / "ComfyUI-h3kit"
    assert (pack / "h3kit_panel" / "web" / "h3kit_panel.js").is_file()
    return comfy, json.loads((pack / workflows.UI_DIR / "h3kit_text_to_video.json").read_text(encoding="utf-8"))


def placeholder_weights(run_cli, comfy: Path, fingerprint: str) -> None:
    """An empty file under each weight name the plan's workflows load: the page then finds every file it
    names (no missing-model errors over the screenshots), and a run stops at the first loader."""
    code, out, err = run_cli("plan", "--fingerprint", fingerprint, "--json")
    assert code == 0, err
    settings, cat = json.loads(out)["settings"], catalog_mod.load()
    for key in (*comfy_h3.PART_OF, "lora"):
        weight = cat.weight(settings[key]) if settings.get(key) else None
        if weight is not None:
            path = comfy / "models" / weight.file.folder / weight.file.name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.touch()


def shot(page, name: str) -> None:
    folder = os.environ.get("H3KIT_PANEL_SHOTS")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(folder) / name))


def open_page(browser, base: str, requests: list, errors: list):
    """The ComfyUI page with h3kit's extension set up and its sidebar tab open; `requests` records every POST,
    `errors` every uncaught exception in the page."""
    page = browser.new_page(viewport=VIEWPORT)
    page.on("request", lambda r: requests.append(r.url) if r.method == "POST" else None)
    page.on("pageerror", lambda exc: errors.append(f"{exc}\n{exc.stack}"))
    page.goto(base)
    page.wait_for_function("() => window.__h3kit_ready === true", timeout=WAIT_MS)
    assert "h3kit" in page.evaluate("() => app.extensionManager.getSidebarTabs().map(t => t.id)")
    page.evaluate("() => app.extensionManager.command.execute('Workspace.ToggleSidebarTab.h3kit')")
    page.wait_for_selector("#h3kit-panel", timeout=WAIT_MS)
    return page


def priced(page, workload: str) -> str:
    """The estimate's text once the panel shows it for `workload` ("512x288, 22 frames")."""
    page.wait_for_function("(w) => (document.querySelector('#h3kit-figures')?.textContent || '').includes(w)",
                           arg=workload, timeout=WAIT_MS)
    return page.inner_text("#h3kit-estimate")


def server_estimate(page, server) -> dict:
    output = page.evaluate("async () => (await app.graphToPrompt()).output")
    return server.post("/h3kit/estimate", {"prompt": output})


def check_estimate(page, ui_workflow: dict) -> None:
    page.evaluate("async (wf) => { await app.loadGraphData(wf); }", ui_workflow)
    page.evaluate(f"() => {{ app.canvas.ds.scale = 1; app.canvas.centerOnNode(({H3_NODE})()); }}")  # its widgets in view
    w, h, frames = page.evaluate(READ_WORKLOAD)
    text = priced(page, f"{w}x{h}, {frames} frames")
    title = page.evaluate(f"() => ({H3_NODE})().title")
    assert title in text and " min" in text and " GB" in text and "RAM" in text, text
    page.wait_for_selector("#h3kit-machine-text", timeout=WAIT_MS)
    assert "cpu-only" in page.inner_text("#h3kit-machine"), page.inner_text("#h3kit-machine")
    shot(page, "panel-estimate.png")


def check_warning_and_fix(page, server) -> None:
    page.evaluate(SET_WORKLOAD, [1920, 1080, 241])
    page.wait_for_selector("#h3kit-warning:not([hidden]) #h3kit-apply-fix", timeout=WAIT_MS)
    warning = page.inner_text("#h3kit-warning")
    assert "does not fit" in warning and "1920x1080 with 241 frames" in warning, warning
    assert server_estimate(page, server)["fits"] is False
    shot(page, "panel-warning.png")

    page.click("#h3kit-apply-fix")
    page.wait_for_function("() => (%s)().widgets.find(x => x.name === 'width').value !== 1920" % H3_NODE,
                           timeout=WAIT_MS)
    w, h, frames = page.evaluate(READ_WORKLOAD)
    assert w * h * frames < 1920 * 1080 * 241
    after = server_estimate(page, server)
    assert after["fits"] is True and (after["canvas"], after["frames"]) == ([w, h], frames), after
    priced(page, f"{w}x{h}, {frames} frames")
    assert "does not fit" not in page.inner_text("#h3kit-estimate")


def check_dialog(page, server, requests: list) -> None:
    page.evaluate(SET_WORKLOAD, [1920, 1080, 241])
    page.evaluate("() => { window.__h3kit_run = app.queuePrompt(0, 1); }")  # Run: it waits on the dialog
    page.wait_for_selector("#h3kit-dialog #h3kit-queue-anyway", timeout=WAIT_MS)
    text = page.inner_text("#h3kit-dialog")
    assert "does not fit" in text and "Fits at" in text, text
    shot(page, "panel-dialog.png")
    page.click("#h3kit-dialog-cancel")
    assert page.evaluate("async () => await window.__h3kit_run") is False
    assert page.locator("#h3kit-dialog").count() == 0
    assert page.evaluate(READ_WORKLOAD) == [1920, 1080, 241]  # Cancel changes nothing

    page.evaluate("() => { window.__h3kit_run = app.queuePrompt(0, 1); }")
    page.click("#h3kit-dialog-apply-fix", timeout=WAIT_MS)  # the dialog's fix: set, and not queued
    assert page.evaluate("async () => await window.__h3kit_run") is False
    assert server_estimate(page, server)["fits"] is True
    assert not [u for u in requests if u.endswith("/prompt")], requests
    queue = server.get("/queue")
    assert (queue["queue_running"], queue["queue_pending"], server.get("/history")) == ([], [], {})


def check_queue_anyway(page) -> None:
    """Queue anyway posts the prompt with the flag and the guard lets it through: ComfyUI queues it, and it
    stops at the first loader that reads one of the empty weight files. The canvas is one no machine running
    the suite has the memory for, since the preset switch before this planned for the real machine."""
    page.evaluate(SET_WORKLOAD, [3840, 2160, 601])
    with page.expect_response(lambda r: r.url.endswith("/prompt") and r.request.method == "POST") as answer:
        page.evaluate("() => { window.__h3kit_run = app.queuePrompt(0, 1); }")
        page.click("#h3kit-queue-anyway", timeout=WAIT_MS)
    posted = json.loads(answer.value.request.post_data)["prompt"]
    assert [n["class_type"] for n in posted.values() if n["inputs"].get("h3kit_queue_anyway") is True]
    body = answer.value.text()
    assert answer.value.status == 200 and "prompt_id" in body, body[:2000]


def check_preset_switch(page, server) -> None:
    page.select_option("#h3kit-preset", "balanced")
    page.click("#h3kit-preset-apply")
    page.wait_for_selector("#h3kit-preset-message:is([data-state=done], [data-state=failed])", timeout=300_000)
    job = server.get("/h3kit/preset")
    message = page.inner_text("#h3kit-preset-message")
    assert job["state"] in ("done", "failed") and job["message"] in message, (job, message)
    if job["state"] == "done":
        assert "restart" in message.lower(), (job, message)
    page.wait_for_timeout(2 * POLL_MS)  # the panel prices the graph again under the new plan
    shot(page, "panel-preset.png")


def test_the_panel_prices_the_workflow_fixes_it_and_gates_run(h3kit_home, run_cli, tmp_path):
    from playwright.sync_api import sync_playwright

    comfy, ui_workflow = installed_comfyui(run_cli, tmp_path)
    requests: list[str] = []
    errors: list[str] = []
    with comfy_api.ComfyServer(comfy, PYTHON, ["--cpu"], tmp_path / "work") as server:
        server.start(timeout=300)
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=chromium(), headless=True,
                                        args=["--no-sandbox", "--disable-gpu"])
            try:
                page = open_page(browser, server.base, requests, errors)
                check_estimate(page, ui_workflow)
                check_warning_and_fix(page, server)
                check_dialog(page, server, requests)
                check_preset_switch(page, server)
                check_queue_anyway(page)
            finally:
                browser.close()
    assert not errors, errors
