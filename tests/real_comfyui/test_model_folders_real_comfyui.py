"""Model folders as a real ComfyUI sees them (opt-in: H3KIT_COMFYUI_DIR).

A throwaway ComfyUI whose extra_model_paths.yaml names a shared folder (`is_default: true`) that holds every
planned file (sparse files of the catalog's exact sizes: nothing is downloaded, no disk is used):
`models status` finds each one there and counts 0 bytes missing; with one file absent it goes to the shared
folder; `install --yes` downloads nothing and uninstall leaves the shared files alone. h3kit's own reading of
the YAML (used when ComfyUI's Python cannot be asked) gives ComfyUI's answer on the same layouts.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import comfy_h3
from h3kit.comfyui import model_folders as mf
from h3kit.comfyui.locate import ComfyInstall, run_python

REAL, PYTHON, WHY = comfy_h3.h3_comfyui()
pytestmark = [pytest.mark.native, pytest.mark.comfyui, pytest.mark.slow, pytest.mark.skipif(REAL is None, reason=WHY)]
WANTED = ["diffusion_models", "text_encoders", "vae", "loras", "checkpoints"]


def _sparse(path: Path, size: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as fh:
        fh.truncate(size)


def _shared_yaml(comfy: Path, shared: Path, folders: set[str]) -> None:
    lines = ["shared_drive:", f"  base_path: {shared}", "  is_default: true"]
    lines += [f"  {f}: {f}" for f in sorted(folders)]
    (comfy / "extra_model_paths.yaml").write_text("\n".join(lines) + "\n", encoding="utf-8")


def test_status_and_install_use_the_shared_folder(tmp_path, h3kit_home, run_cli):
    comfy = comfy_h3.make_test_comfyui(REAL, tmp_path / "Comfy UI ü")
    shared = tmp_path / "Shared Models ü"
    (h3kit_home / "config.yaml").write_text(comfy_h3.TINY_CONFIG, encoding="utf-8")
    roomy = comfy_h3.roomy_fingerprint(run_cli, tmp_path)
    code, out, err = run_cli("models", "plan", "--fingerprint", roomy, "--json")
    assert code == 0, err
    files = json.loads(out)["files"]
    _shared_yaml(comfy, shared, {f["folder"] for f in files})
    for f in files:
        _sparse(shared / f["folder"] / f["name"], f["exact_bytes"] or f["bytes"])

    code, out, err = run_cli("models", "status", "--comfyui", str(comfy), "--fingerprint", roomy, "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["model_folders"]["source"] == "comfyui", doc["model_folders"]
    assert doc["missing_bytes"] == 0
    for row in doc["files"]:
        assert row["state"] == "present" and row["shared"], row
        assert Path(row["path"]) == shared / row["folder"] / row["name"]

    absent = files[0]
    (shared / absent["folder"] / absent["name"]).unlink()
    code, out, err = run_cli("models", "status", "--comfyui", str(comfy), "--fingerprint", roomy, "--json")
    doc = json.loads(out)
    row = next(r for r in doc["files"] if r["name"] == absent["name"])
    assert row["state"] == "missing" and Path(row["path"]) == shared / absent["folder"] / absent["name"]
    assert doc["missing_bytes"] == absent["exact_bytes"] or absent["bytes"]
    assert not (comfy / "models" / absent["folder"] / absent["name"]).exists()

    _sparse(shared / absent["folder"] / absent["name"], absent["exact_bytes"] or absent["bytes"])
    code, out, err = run_cli("install", "--comfyui", str(comfy), "--fingerprint", roomy, "--yes", "--skip-calibrate",
                             "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["models"]["missing_bytes"] == 0 and doc["models"]["fetched"] is None, doc["models"]
    assert doc["model_folders"]["source"] == "comfyui"
    code, out, err = run_cli("uninstall", "--comfyui", str(comfy), "--yes")
    assert code == 0, err
    assert all((shared / f["folder"] / f["name"]).is_file() for f in files)  # not h3kit's: left alone


@pytest.mark.parametrize("layout", ["is_default", "appended", "relative base_path", "two configs"])
def test_h3kits_reading_matches_comfyuis_own(tmp_path, layout):
    comfy = comfy_h3.make_test_comfyui(REAL, tmp_path / "ComfyUI")
    extra = tmp_path / "second drive"
    launch: tuple[str, ...] = ()
    body = {"is_default": f"a:\n  base_path: {extra}\n  is_default: true\n  diffusion_models: |\n    dm\n    unet2\n"
                          f"  clip: te\n",
            "appended": f"a:\n  base_path: {extra}\n  vae: vae\n  loras: loras\n  diffusion_models: diffusion_models\n",
            "relative base_path": "a:\n  base_path: ../second drive\n  text_encoders: text_encoders\n"
                                  "  checkpoints: ckpt\n",
            "two configs": f"a:\n  base_path: {extra}\n  diffusion_models: dm\n"}[layout]
    (comfy / "extra_model_paths.yaml").write_text(body, encoding="utf-8")
    if layout == "two configs":
        other = tmp_path / "desktop extra.yaml"
        other.write_text(f"desk:\n  base_path: {tmp_path / 'desk'}\n  is_default: true\n  diffusion_models: dm\n"
                         "  vae: vae\n", encoding="utf-8")
        launch = ("--extra-model-paths-config", str(other))
    install = ComfyInstall(comfy, "test", python=PYTHON, launch_args=launch)
    asked = mf.resolve(install, WANTED, run_python)
    assert asked.source == "comfyui", asked.detail
    read = mf.h3kit_reading(comfy / "models", mf.config_files(comfy, launch), WANTED)
    for folder in WANTED:
        # ComfyUI also searches output/<folder> for a few kinds (main.py), which h3kit never writes to.
        theirs = [p for p in asked.search_list(folder) if (comfy / "output") not in p.parents]
        assert list(read.search_list(folder)) == theirs, folder
        assert read.target_dir(folder) == asked.target_dir(folder), folder
