"""No write under a missing mount: a configured default model folder whose drive is not there is one sentence,
exit 2, and nothing is created -- h3kit makes model folders only under a root that exists (the entry's
base_path, or the ComfyUI folder for its own models folder)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from h3kit.comfyui import model_folders as mf

from test_models import FP_4090, server, small  # noqa: F401 (fixtures: small files served by a local mirror)

FP = str(FP_4090)


def _comfy(tmp_path: Path) -> Path:
    root = tmp_path / "Com fyUI"
    for sub in ("models/diffusion_models", "models/text_encoders", "models/vae", "custom_nodes", "comfy"):
        (root / sub).mkdir(parents=True)
    (root / "main.py").write_text("# stand-in\n")
    return root


def _tree(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


@pytest.mark.parametrize("entry", [
    "gone_drive:\n  base_path: {mnt}/usb-models\n  is_default: true\n  diffusion_models: diffusion_models\n"
    "  text_encoders: text_encoders\n  vae: vae\n",
    "gone_drive:\n  is_default: true\n  vae: {mnt}/usb-models/vae\n  text_encoders: {mnt}/usb-models/te\n"
    "  diffusion_models: {mnt}/usb-models/dm\n",
], ids=["base_path", "absolute-folders"])
def test_a_default_folder_on_a_missing_mount_is_exit_2_and_nothing_is_made(tmp_path, run_cli, small, entry):
    comfy = _comfy(tmp_path)
    mnt = tmp_path / "mnt"  # the mount point is there, the drive under it is not
    mnt.mkdir()
    (comfy / "extra_model_paths.yaml").write_text(entry.format(mnt=mnt), encoding="utf-8")
    before = _tree(comfy)
    code, out, err = run_cli("models", "fetch", "--comfyui", str(comfy), "--fingerprint", FP, "--yes")
    assert code == 2, (code, err)
    first = err.splitlines()[0]
    assert "Traceback" not in err and first.startswith("error: ") and first.endswith("."), err
    assert f"{mnt / 'usb-models'}" in first and "does not exist" in first, first
    assert "connect" in err
    assert list(mnt.iterdir()) == [], list(mnt.rglob("*"))
    assert _tree(comfy) == before


def test_a_missing_folder_under_an_existing_base_path_is_still_made(tmp_path, run_cli, small):
    comfy = _comfy(tmp_path)
    shared = tmp_path / "shared"
    shared.mkdir()
    (comfy / "extra_model_paths.yaml").write_text(
        f"drive:\n  base_path: {shared}\n  is_default: true\n  diffusion_models: models/diffusion_models\n"
        "  text_encoders: models/text_encoders\n  vae: models/vae\n", encoding="utf-8")
    code, out, err = run_cli("models", "fetch", "--comfyui", str(comfy), "--fingerprint", FP, "--yes", "--json")
    assert code == 0, err
    paths = [Path(r["path"]) for r in json.loads(out)["files"]]
    assert paths and all(p.is_file() and shared in p.parents for p in paths), paths


def test_comfyuis_own_models_folder_is_made_under_the_comfyui_folder(tmp_path):
    comfy = _comfy(tmp_path)
    folders = mf.ModelFolders.built_in(comfy / "models")
    root, what = mf.creation_root(folders, comfy / "models" / "vae")
    assert root == comfy and "ComfyUI folder" in what
    gone = mf.ModelFolders.built_in(tmp_path / "gone" / "ComfyUI" / "models")  # --models-directory on a gone drive
    root, _ = mf.creation_root(gone, tmp_path / "gone" / "ComfyUI" / "models" / "vae")
    assert root == tmp_path / "gone" / "ComfyUI" and not root.exists()
