"""The first run as a new user meets it on a machine that reaches PyPI only (opt-in: H3KIT_COMFYUI_SOURCE).

A fresh clone of this repository under a path with a space and an accent, a
fresh HOME and H3KIT_HOME, no ComfyUI anywhere: `./install.sh --yes
--comfyui-source SRC` must set up a new ComfyUI with a working torch (from
pip's own index when PyTorch's cannot be reached), install and verify the
pack, launcher and workflows, and exit 3 naming the weight files it could
not fetch and the way to finish. With the real-ComfyUI tier's tiny H3 files
then in place under the planned names (its DiT, text encoder and VAEs), `h3kit install --yes --no-models`
exits 0, the launcher starts that ComfyUI and `/workflow_templates` lists
h3kit's workflows. Nothing waits more than 30 s on an unreachable host.

H3KIT_COMFYUI_SOURCE: a local ComfyUI >= 0.31 folder without its venv (or a
.zip, or a git repository). It installs torch and ComfyUI's requirements for
real: minutes and several GB; run it under `flock /tmp/h3kit-heavy.lock`.
Set H3KIT_FIRST_RUN_PORT to choose the port ComfyUI listens on (default: a free one).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest

import comfy_h3
from h3kit.comfyui.client import free_port

ROOT = Path(__file__).resolve().parents[2]
SOURCE = os.environ.get("H3KIT_COMFYUI_SOURCE")
pytestmark = [pytest.mark.native, pytest.mark.comfyui, pytest.mark.slow,
              pytest.mark.skipif(not SOURCE, reason="set H3KIT_COMFYUI_SOURCE to a local ComfyUI >= 0.31 folder")]


def _say(*parts) -> None:
    sys.__stdout__.write(" ".join(str(p) for p in parts) + "\n")


def _run(argv, env, cwd, timeout) -> tuple[int, str, str, float]:
    """Run, timing each stderr line as it arrives: a line that names an unreachable host must come within 30 s
    of the line before it (the time spent finding out; what follows is work on the alternative source)."""
    start = time.monotonic()
    proc = subprocess.Popen(argv, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out_parts: list[str] = []
    reader = threading.Thread(target=lambda: out_parts.append(proc.stdout.read()), daemon=True)
    reader.start()
    timed = []
    for line in proc.stderr:
        timed.append((time.monotonic(), line))
        assert time.monotonic() - start < timeout
    proc.wait(timeout=60)
    reader.join(60)
    for (t0, _before), (t1, line) in zip(timed, timed[1:]):
        if "cannot be reached" in line and not line.startswith(("error:", "fix:")):
            assert t1 - t0 < 30, f"waited {t1 - t0:.0f} s before: {line}"
    err = "".join(line for _t, line in timed)
    assert "Traceback" not in err and "Traceback" not in "".join(out_parts)
    return proc.returncode, "".join(out_parts), err, time.monotonic() - start


def test_a_new_user_on_a_pypi_only_machine(tmp_path):
    place = tmp_path / "h3 tëst"
    place.mkdir()
    clone = place / "h3kit"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True, timeout=300)
    home, h3home = place / "home", place / "h3home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("H3KIT_", "COMFYUI"))}
    env.update(HOME=str(home), H3KIT_HOME=str(h3home))

    code, out, err, seconds = _run([str(clone / "install.sh"), "--yes", "--comfyui-source", SOURCE], env, clone, 3600)
    _say("install.sh:", code, f"{seconds:.0f} s")
    _say("\n".join((out + err).strip().splitlines()[-12:]))
    assert code == 3, out + err
    assert "could not be downloaded" in err and "h3kit models fetch --comfyui" in err and "--from DIR" in err
    comfy = h3home / "ComfyUI" if (h3home / "ComfyUI").is_dir() else next(h3home.rglob("ComfyUI/main.py")).parent
    assert (comfy / "custom_nodes" / "ComfyUI-h3kit").is_dir()
    launcher = comfy / "run_h3kit.sh"
    assert launcher.is_file()
    python = comfy / "venv" / "bin" / "python"
    probe = subprocess.run([str(python), "-c", "import torch; print(torch.__version__, torch.version.cuda)"],
                           capture_output=True, text=True, timeout=300)
    assert probe.returncode == 0, probe.stderr
    _say("torch in the new ComfyUI:", probe.stdout.strip())

    h3kit = h3home / "state" / "venv" / "bin" / "h3kit"
    # The first run's plan, unchanged: the tier's tiny files under its DiT, text encoder and VAE names
    # (the launcher and the templates need them present, not loadable; the LoRA has no tiny stand-in).
    code, out, err, _ = _run([str(h3kit), "plan", "--json"], env, clone, 600)
    assert code == 0, err
    plan = json.loads(out)
    from h3kit.data import catalog as catalog_mod

    cat = catalog_mod.load()
    names = {part: f"{cat.weight(plan['settings'][key]).file.folder}/{cat.weight(plan['settings'][key]).file.name}"
             for key, part in comfy_h3.PART_OF.items()}
    comfy_h3.write_tiny_files(comfy, python, names)

    code, out, err, seconds = _run([str(h3kit), "install", "--yes", "--no-models"], env, clone, 3600)
    _say("install --no-models:", code, f"{seconds:.0f} s")
    _say("\n".join((out + err).strip().splitlines()[-4:]))
    assert code == 0, out + err

    port = int(os.environ.get("H3KIT_FIRST_RUN_PORT") or free_port())
    started = time.monotonic()
    proc = subprocess.Popen([str(launcher), "--listen", "127.0.0.1", "--port", str(port)], env=env, cwd=comfy,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    try:
        templates = None
        while time.monotonic() - started < 300 and proc.poll() is None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/workflow_templates", timeout=5) as r:
                    templates = json.loads(r.read())
                    break
            except OSError:
                time.sleep(2)
        assert templates is not None, proc.stderr.read().decode(errors="replace")[-3000:] if proc.poll() else "no answer"
        _say("launcher answered after", f"{time.monotonic() - started:.0f} s:", json.dumps(templates.get("ComfyUI-h3kit")))
        assert {"h3kit_text_to_video", "h3kit_image_to_video"} <= set(templates.get("ComfyUI-h3kit", []))
    finally:
        os.killpg(proc.pid, 15)
        proc.wait(timeout=60)
