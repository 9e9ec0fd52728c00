"""A real ComfyUI laid out as Pinokio lays it out on Linux (opt-in: H3KIT_COMFYUI_DIR): found by doctor and
install with no --comfyui, with Pinokio's Python (app/env), and install's last lines name Pinokio and the flags
to add there (Pinokio starts ComfyUI itself, so h3kit's launcher never does)."""

from __future__ import annotations

import json
import os

import pytest

import comfy_h3

REAL, PYTHON, WHY = comfy_h3.h3_comfyui()
pytestmark = [pytest.mark.native, pytest.mark.comfyui, pytest.mark.slow, pytest.mark.skipif(REAL is None, reason=WHY)]


def test_pinokio_comfyui_is_found_and_told_its_flags(tmp_path, h3kit_home, run_cli, monkeypatch):
    home = tmp_path / "home ü"
    app = comfy_h3.make_test_comfyui(REAL, home / "pinokio" / "api" / "comfy.git" / "app")
    os.rename(app / "venv", app / "env")  # Pinokio keeps its venv in app/env (here a link to the real one)
    roomy = comfy_h3.roomy_fingerprint(run_cli, tmp_path)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("COMFYUI_PATH", raising=False)
    monkeypatch.chdir(tmp_path)
    (h3kit_home / "config.yaml").write_text(comfy_h3.TINY_CONFIG, encoding="utf-8")

    code, out, err = run_cli("doctor", "--fingerprint", roomy, "--json")
    doc = json.loads(out)
    assert doc["comfyui"] == str(app), doc.get("comfyui")
    python = next(f for f in doc["findings"] if f["check"] == "comfyui.python")
    assert python["status"] == "ok" and str(app / "env") in python["message"]

    code, out, err = run_cli("install", "--fingerprint", roomy, "--yes", "--skip-calibrate", "--no-models", "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["comfyui"]["path"] == str(app) and doc["comfyui"]["found_by"].startswith("Pinokio")
    assert doc["app"]["name"] == "Pinokio" and doc["app"]["flags_to_add"], doc["app"]
    first = doc["next_steps"][0]
    assert first.startswith("Start ComfyUI from Pinokio with these launch flags added: ")
    assert " ".join(doc["app"]["flags_to_add"]) in first and "start script" in first
    code, out, err = run_cli("uninstall", "--yes")
    assert code == 0, err


def test_desktop2_shared_folder_counts_the_same_with_comfyui_as_by_the_search(tmp_path, h3kit_home, run_cli,
                                                                              monkeypatch):
    """A Desktop 2.0 install on Linux whose models are in ComfyUI-Shared (is_default): ComfyUI's own folder_paths,
    asked with the Desktop's --extra-model-paths-config, finds the planned files there with --comfyui as with
    the search (before: --comfyui lost the argument, so every file was missing and would download again)."""
    home = tmp_path / "home ü"
    data = home / ".local" / "share" / "Comfy-Desktop"
    comfy = comfy_h3.make_test_comfyui(REAL, data / "ComfyUI-Installs" / "Video" / "ComfyUI")
    shared = data / "ComfyUI-Shared"
    (shared / "models").mkdir(parents=True)
    (shared / "extra_models_config.yaml").write_text(
        f"comfy_desktop:\n  base_path: {shared / 'models'}\n  is_default: true\n"
        "  diffusion_models: diffusion_models\n  text_encoders: text_encoders\n  vae: vae\n  loras: loras\n",
        encoding="utf-8")
    roomy = comfy_h3.roomy_fingerprint(run_cli, tmp_path)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("COMFYUI_PATH", raising=False)
    monkeypatch.delenv("XDG_DATA_HOME", raising=False)
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli("models", "plan", "--fingerprint", roomy, "--json")
    assert code == 0, err
    for f in json.loads(out)["files"]:
        (shared / "models" / f["folder"]).mkdir(parents=True, exist_ok=True)
        with open(shared / "models" / f["folder"] / f["name"], "wb") as fh:
            fh.truncate(f["exact_bytes"] or f["bytes"])
    answers = {}
    for how, extra in (("search", ()), ("--comfyui", ("--comfyui", str(comfy)))):
        code, out, err = run_cli("models", "status", "--fingerprint", roomy, "--json", *extra)
        assert code == 0, err
        doc = json.loads(out)
        assert doc["model_folders"]["source"] == "comfyui", doc["model_folders"]
        answers[how] = {r["name"]: (r["state"], r["path"]) for r in doc["files"]}
    assert {state for state, _ in answers["search"].values()} == {"present"}, answers["search"]
    assert all(str(shared) in path for _, path in answers["search"].values())
    assert answers["--comfyui"] == answers["search"]
