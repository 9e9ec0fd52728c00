"""Against a real ComfyUI (opt-in: H3KIT_COMFYUI_DIR=/path/to/ComfyUI).

Installs with the real CLI, starts ComfyUI through the launcher with --cpu
on a free loopback port, checks /object_info lists the h3kit nodes, queues a
workflow that decodes through H3kitTiledVAEDecode (a randomly initialised
TAESD-shaped VAE saved by the test: nothing is downloaded), compares the node
with ComfyUI's VAEDecode, uninstalls, and compares the tree with the one
before (ComfyUI's own runtime folders and byte code left out).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from fixtures.comfyui import comfy_tree

COMFY = os.environ.get("H3KIT_COMFYUI_DIR")
pytestmark = [pytest.mark.native, pytest.mark.comfyui, pytest.mark.slow,
              pytest.mark.skipif(not COMFY, reason="set H3KIT_COMFYUI_DIR to a real ComfyUI checkout to run")]

FIXTURES = Path(__file__).parents[1] / "fixtures" / "comfyui"

# ComfyUI writes these itself while running; they are not h3kit's to keep identical.
RUNTIME = ("venv", ".venv", "user", "temp", "output", "input")
NODES = ("H3kitProfileInfo", "H3kitTiledVAEDecode", "H3kitMemoryGuard")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _h3kit(*argv: str) -> tuple[int, dict, str]:
    p = subprocess.run([sys.executable, "-m", "h3kit", *argv, "--json"], capture_output=True, text=True, timeout=600)
    return p.returncode, json.loads(p.stdout or "{}"), p.stderr


def _get(url: str, timeout: float = 10):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return json.loads(r.read())


def _post(url: str, doc: dict):
    req = urllib.request.Request(url, data=json.dumps(doc).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.loads(r.read())


WORKFLOW = {
    "1": {"class_type": "EmptyLatentImage", "inputs": {"width": 64, "height": 64, "batch_size": 3}},
    "2": {"class_type": "VAELoader", "inputs": {"vae_name": "h3kit_test_taesd.safetensors"}},
    "3": {"class_type": "H3kitTiledVAEDecode", "inputs": {"samples": ["1", 0], "vae": ["2", 0], "frames_per_chunk": 2}},
    "4": {"class_type": "H3kitMemoryGuard", "inputs": {"value": ["3", 0]}},
    "5": {"class_type": "PreviewImage", "inputs": {"images": ["4", 0]}},
    "6": {"class_type": "H3kitProfileInfo", "inputs": {}},
    "7": {"class_type": "PreviewAny", "inputs": {"source": ["6", 0]}},
}


def test_real_comfyui_install_run_uninstall(tmp_path, h3kit_home):
    comfy = Path(COMFY).resolve()
    python = next((p for p in (comfy / "venv/bin/python", comfy / ".venv/bin/python") if p.exists()), None)
    assert python, f"no venv in {comfy}"
    if (comfy / "custom_nodes" / "ComfyUI-h3kit").exists():
        pytest.skip(f"{comfy}/custom_nodes/ComfyUI-h3kit exists already (another install is using this ComfyUI)")
    models = tmp_path / "extra models"
    (models / "vae").mkdir(parents=True)
    vae_file = models / "vae" / "h3kit_test_taesd.safetensors"
    made = subprocess.run([str(python), str(FIXTURES / "make_test_vae.py"), str(vae_file)], cwd=comfy,
                          capture_output=True, text=True, timeout=300, env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
    assert made.returncode == 0, made.stderr[-2000:]
    extra = tmp_path / "extra_model_paths.yaml"
    extra.write_text(f"h3kit_test:\n    base_path: {models}\n    vae: vae/\n", encoding="utf-8")

    before = comfy_tree.snapshot(comfy, skip=RUNTIME, skip_names=("__pycache__",))
    code, doc, err = _h3kit("install", "--comfyui", str(comfy), "--yes", "--skip-calibrate", "--no-models")
    print("install:", code, json.dumps({k: doc.get(k) for k in ("verified", "nodes", "launchers", "profile")}))
    assert code == 0, err
    assert doc["verified"] is True
    launcher = Path(doc["launchers"][0])

    try:
        port = _free_port()
        log = (tmp_path / "comfyui.log").open("w")
        server = subprocess.Popen([str(launcher), "--cpu", "--listen", "127.0.0.1", "--port", str(port),
                                   "--disable-auto-launch", "--extra-model-paths-config", str(extra)],
                                  stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            base = f"http://127.0.0.1:{port}"
            deadline = time.monotonic() + 300
            while True:
                try:
                    info = _get(f"{base}/object_info", timeout=30)
                    break
                except OSError:
                    assert server.poll() is None, (tmp_path / "comfyui.log").read_text()[-3000:]
                    assert time.monotonic() < deadline, "ComfyUI did not answer within 300 s"
                    time.sleep(2)
            listed = [n for n in NODES if n in info]
            print("object_info lists:", listed)
            assert listed == list(NODES)
            workflow = json.loads(json.dumps(WORKFLOW))
            if "PreviewAny" not in info:
                del workflow["7"]
            prompt_id = _post(f"{base}/prompt", {"prompt": workflow})["prompt_id"]
            deadline = time.monotonic() + 300
            while True:
                hist = _get(f"{base}/history/{prompt_id}")
                if prompt_id in hist and hist[prompt_id].get("status", {}).get("completed") is not None:
                    break
                assert time.monotonic() < deadline, "the workflow did not finish within 300 s"
                time.sleep(1)
            status = hist[prompt_id]["status"]
            images = hist[prompt_id]["outputs"].get("5", {}).get("images", [])
            print("workflow:", status.get("status_str"), "images:", len(images))
            assert status.get("status_str") == "success", json.dumps(status)[-3000:]
            assert len(images) == 3
            guard = [line for line in (tmp_path / "comfyui.log").read_text().splitlines() if "memory guard" in line]
            print("guard:", guard[-1] if guard else None)
        finally:
            os.killpg(server.pid, signal.SIGTERM)
            try:
                server.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(server.pid, signal.SIGKILL)
            log.close()

        cmp = subprocess.run([str(python), str(FIXTURES / "compare_decode.py"), str(comfy), doc["node_dir"], str(vae_file)],
                             cwd=comfy, capture_output=True, text=True, timeout=300,
                             env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
        line = next((x for x in cmp.stdout.splitlines() if x.startswith("H3KIT-COMPARE ")), None)
        assert line, cmp.stderr[-3000:]
        diffs = json.loads(line.split(" ", 1)[1])
        print("compare with VAEDecode:", diffs)
        assert diffs["small"]["shape"] == diffs["small"]["ref_shape"] and diffs["small"]["max_abs_diff"] < 1e-4
        assert diffs["tiled"]["shape"] == diffs["tiled"]["ref_shape"]
        assert diffs["tiled"]["max_abs_diff_vs_tiled"] < 1e-4  # the only difference from VAEDecode is ComfyUI's tiling
        assert diffs["small"]["ref_std"] > 0.01  # the test VAE draws something, so equality means something

    finally:  # never leave the pack in a shared ComfyUI, whatever failed above
        code, undone, err = _h3kit("uninstall", "--comfyui", str(comfy), "--yes")
    print("uninstall:", code, "removed", len(undone.get("removed", [])), "backed up", undone.get("backed_up"))
    assert code == 0, err
    after = comfy_tree.snapshot(comfy, skip=RUNTIME, skip_names=("__pycache__",))
    changed = sorted(set(before.items()) ^ set(after.items()))
    assert not changed, changed[:10]
