"""An install that ends short of the model files (not enough disk, a host it cannot reach) after it set up
ComfyUI and the pack says what is in place, what is missing and where it goes, the one command that finishes
the job, and how to start ComfyUI after it -- and that command does finish it."""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import importlib.util
import json
import shlex
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from h3kit.core import files as core_files
from h3kit.data import catalog as catalog_mod
from h3kit.models import download, store
from h3kit.models import files as model_files
from h3kit.steps.next_steps import shell_quoted
from model_server import ModelServer, closed_port

pytestmark = pytest.mark.native  # installs: the session's native library, not a compile per test

FIXTURES = Path(__file__).parents[1] / "fixtures"
FP = str(FIXTURES / "fingerprints" / "nvidia-rtx4090-24gb-64gb.json")
_spec = importlib.util.spec_from_file_location("comfy_tree", FIXTURES / "comfyui" / "comfy_tree.py")
comfy_tree = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(comfy_tree)


@pytest.fixture
def served(monkeypatch, h3kit_home):
    """Every weight a small file of known bytes, served by a local mirror that config.yaml names."""
    server = ModelServer().start()
    real = catalog_mod.load()
    weights = []
    for i, w in enumerate(real.dit + real.text_encoder + real.vae + real.audio_vae + real.lora):
        data = hashlib.sha256(w.id.encode()).digest() * (3000 + 100 * i)
        weights.append(dataclasses.replace(w, bytes=len(data), file=dataclasses.replace(w.file, bytes=len(data))))
        for url in w.file.urls:
            server.add(urlsplit(url).path, data=data)
    fake = dataclasses.replace(real, **{k: [w for w in weights if w.part == k]
                                        for k in ("dit", "text_encoder", "vae", "audio_vae", "lora")})
    monkeypatch.setattr(model_files, "_catalog", lambda catalog=None: catalog or fake)
    monkeypatch.setattr(store, "Downloader", functools.partial(download.Downloader, sleep=lambda s: None,
                                                                progress=False, token=""))
    (h3kit_home / "config.yaml").write_text(f"profile: auto\nmodels:\n  mirror: {server.base}\n")
    yield server
    server.stop()


def _planned_files(run_cli) -> list[dict]:
    code, out, err = run_cli("models", "plan", "--fingerprint", FP, "--json")
    assert code == 0, err
    return json.loads(out)["files"]


@pytest.mark.parametrize("why", ["disk", "host"])
def test_an_install_short_of_its_weights_says_what_is_in_place_and_how_to_finish(run_cli, served, h3kit_home,
                                                                               tmp_path, monkeypatch, why):
    comfy = comfy_tree.make_comfyui(tmp_path / "Comfy UI")
    files = _planned_files(run_cli)
    room = {"free": 5 * 10**8}  # short of the 1 GB h3kit keeps free
    monkeypatch.setattr(core_files, "free_bytes", lambda p: room["free"] if why == "disk" else 10**12)
    cfg = h3kit_home / "config.yaml"
    good = cfg.read_text()
    if why == "host":
        cfg.write_text(f"profile: auto\nmodels:\n  mirror: http://127.0.0.1:{closed_port()}\n")
    install = ("install", "--comfyui", str(comfy), "--fingerprint", FP, "--yes", "--skip-calibrate")
    code, out, err = run_cli(*install)
    assert code == 3, err
    assert "Traceback" not in err and "internal error" not in err, err
    node_dir = comfy / "custom_nodes" / "ComfyUI-h3kit"
    assert f"already in place: ComfyUI 0.33.0 at {comfy}; the h3kit node pack in {node_dir} (verified)" in err, err
    assert "still missing" in err, err
    for f in files:
        assert str(comfy / "models" / f["folder"] / f["name"]) in err, (f["name"], err)
    finish = f"h3kit models fetch --comfyui {shell_quoted(str(comfy))} --fingerprint {shell_quoted(FP)}"
    assert finish in err, err
    code, out, _ = run_cli(*install, "--json")  # the same, as a document: the launcher it names is the one written
    doc = json.loads(out)
    assert code == 3 and doc["details"]["launchers"], doc
    assert f"Start ComfyUI: {shell_quoted(doc['details']['launchers'][0])}" in err, err
    # everything but the weights ran, the record of this ComfyUI's state included (update and rollback use it)
    assert any(n.startswith("recorded as") for n in doc["details"]["notes"]), doc["details"]["notes"]
    summary = doc["details"]["finish"]
    assert summary["command"] == finish and summary["missing_bytes"] > 0
    assert {Path(m["path"]).name for m in summary["missing"]} == {f["name"] for f in files}
    # once the space is there (or the host answers), that one command finishes the job
    room["free"] = 10**12
    cfg.write_text(good)
    code, out, err = run_cli(*shlex.split(finish)[1:])  # the command as printed
    assert code == 0, err
    code, out, err = run_cli("models", "status", "--comfyui", str(comfy), "--fingerprint", FP, "--json")
    assert {r["state"] for r in json.loads(out)["files"]} == {"present"}
