"""Model folders as ComfyUI sees them: a shared folder named in extra_model_paths.yaml counts, a missing file
goes to ComfyUI's default for its kind, and `models status` says where each file is.

The reader (h3kit's copy of ComfyUI 0.33's rule, used when ComfyUI's Python cannot be asked) and the parser of
ComfyUI's own answer are pure functions, tested here on written files; tests/real_comfyui checks the same
layouts against ComfyUI's own folder_paths.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from h3kit import models
from h3kit.cli.context import Context
from h3kit.comfyui import model_folders as mf
from h3kit.comfyui.locate import ComfyInstall
from h3kit.core.subproc import ToolResult
from h3kit.data.plan_doc import Plan

WANTED = ["diffusion_models", "text_encoders", "vae", "loras"]


def _comfy(tmp_path: Path) -> Path:
    root = tmp_path / "Com fyUI ü"
    for sub in ("models/diffusion_models", "models/unet", "models/text_encoders", "models/vae", "custom_nodes"):
        (root / sub).mkdir(parents=True)
    (root / "main.py").write_text("# stand-in\n")
    return root


def test_reader_follows_comfyuis_rule(tmp_path):
    yaml_dir = tmp_path / "cfg"
    text = ("shared:\n  base_path: ../Shared Models\n  is_default: true\n  diffusion_models: |\n    diffusion_models\n"
            "    unet\n  clip: text_encoders\n  vae: vae\nother:\n  loras: /abs/loras\n  checkpoints: rel/ckpt\n")
    got = mf.read_extra_config(text, yaml_dir)
    shared = (tmp_path / "Shared Models").absolute()
    assert ("diffusion_models", shared / "diffusion_models", True) in got
    assert ("diffusion_models", shared / "unet", True) in got
    assert ("text_encoders", shared / "text_encoders", True) in got  # clip is text_encoders to ComfyUI
    assert ("loras", Path("/abs/loras"), False) in got
    assert ("checkpoints", (yaml_dir / "rel" / "ckpt").absolute(), False) in got
    assert mf.read_extra_config(": not yaml [", yaml_dir) == [] and mf.read_extra_config("- a list", yaml_dir) == []


def test_is_default_puts_the_shared_folder_first_and_makes_it_the_target(tmp_path):
    comfy = _comfy(tmp_path)
    shared = tmp_path / "shared"
    (comfy / "extra_model_paths.yaml").write_text(
        f"a:\n  base_path: {shared}\n  is_default: true\n  diffusion_models: diffusion_models\n"
        f"b:\n  base_path: {tmp_path / 'second'}\n  vae: vae\n", encoding="utf-8")
    folders = mf.h3kit_reading(comfy / "models", mf.config_files(comfy, ()), WANTED)
    assert folders.source == "h3kit" and folders.configs == (comfy / "extra_model_paths.yaml",)
    assert folders.search_list("diffusion_models")[0] == shared / "diffusion_models"
    assert folders.target_dir("diffusion_models") == shared / "diffusion_models"
    assert folders.target_dir("unet") == shared / "diffusion_models"  # the legacy name is the same folder
    # Without is_default the extra folder is searched last and new files stay in ComfyUI's own folder.
    assert folders.search_list("vae") == (comfy / "models" / "vae", tmp_path / "second" / "vae")
    assert folders.target_dir("vae") == comfy / "models" / "vae"
    assert folders.target_dir("text_encoders") == comfy / "models" / "text_encoders"
    assert folders.shared(shared / "diffusion_models" / "x") and not folders.shared(comfy / "models" / "vae" / "x")


def test_config_files_follow_the_launch_arguments(tmp_path):
    comfy = _comfy(tmp_path)
    (comfy / "extra_model_paths.yaml").write_text("{}\n")
    args = ("--listen", "--extra-model-paths-config", "/a.yaml", "/b.yaml", "--extra-model-paths-config=/c.yaml",
            "--cpu")
    assert mf.config_files(comfy, args) == [comfy / "extra_model_paths.yaml", Path("/a.yaml"), Path("/b.yaml"),
                                           Path("/c.yaml")]
    # read as ComfyUI reads its command line (h3kit.data.comfy_argv): the last --base-directory, shortened or not
    install = ComfyInstall(comfy, "test", launch_args=("--base-directory", "/x", "--base=/y"))
    assert mf.resolve(install, WANTED).models_dir == Path("/y") / "models"


def test_comfyuis_own_answer_is_parsed_and_preferred(tmp_path):
    comfy = _comfy(tmp_path)
    report = {"ok": True, "rule": "main.py apply_custom_paths", "models_dir": str(comfy / "models"),
              "folders": {"diffusion_models": ["/shared/dm", str(comfy / "models" / "unet")], "vae": ["/v"]}}
    calls = []

    def run_python(install, argv, timeout):
        calls.append(argv)
        return ToolResult(argv, "ok", 0, "noise\nH3KIT-FOLDERS " + json.dumps(report) + "\n")

    install = ComfyInstall(comfy, "test", python=Path("/usr/bin/python3"),
                           launch_args=("--extra-model-paths-config", "/x.yaml"))
    folders = mf.resolve(install, WANTED, run_python)
    assert folders.source == "comfyui" and "main.py" in folders.detail
    assert folders.search_list("diffusion_models") == (Path("/shared/dm"), comfy / "models" / "unet")
    assert folders.target_dir("diffusion_models") == Path("/shared/dm")
    assert json.loads(calls[0][3]) == ["--extra-model-paths-config", "/x.yaml"] and calls[0][2] == str(comfy)

    broken = mf.resolve(install, WANTED, lambda i, a, t: ToolResult(a, "error", 1, 'H3KIT-FOLDERS {"ok": false, '
                                                                             '"error": "ImportError: no yaml"}'))
    assert broken.source == "default" and "no yaml" in broken.detail  # nothing to read: built-in, reason kept
    assert mf.parse_folders_output("nothing", WANTED) == (None, "ComfyUI's Python printed no answer")


def test_status_finds_files_in_the_shared_folder_and_sends_missing_ones_there(tmp_path):
    comfy = _comfy(tmp_path)
    shared = tmp_path / "shared models"
    plan = Plan.from_json(json.loads((Path(__file__).parents[1] / "fixtures" / "plans" /
                                      "nvidia-rtx4090-24gb-64gb.json").read_text()))
    files = models.files_for_plan(plan)
    (comfy / "extra_model_paths.yaml").write_text(
        f"shared:\n  base_path: {shared}\n  is_default: true\n" + "".join(
            f"  {f}: {f}\n" for f in sorted({m.folder for m in files})), encoding="utf-8")
    for f in files[1:]:  # every file but the DiT, at its exact size, as sparse files
        (shared / f.folder).mkdir(parents=True, exist_ok=True)
        with open(shared / f.folder / f.name, "wb") as fh:
            fh.truncate(f.exact_bytes or f.bytes)
    folders = mf.h3kit_reading(comfy / "models", mf.config_files(comfy, ()), WANTED)
    doc = models.status_doc(Context(json=True), plan, comfy, folders=folders)
    rows = {r["name"]: r for r in doc["files"]}
    for f in files[1:]:
        assert rows[f.name]["state"] == "present" and rows[f.name]["shared"]
        assert rows[f.name]["path"] == str(shared / f.folder / f.name)
    dit = rows[files[0].name]
    assert dit["state"] == "missing" and dit["path"] == str(shared / files[0].folder / files[0].name)
    assert doc["missing_bytes"] == files[0].exact_bytes or files[0].bytes
    assert doc["model_folders"]["source"] == "h3kit"
    # The same tree without the YAML: all missing, all into ComfyUI's own folders.
    os.remove(comfy / "extra_model_paths.yaml")
    plain = models.status_doc(Context(json=True), plan, comfy,
                              folders=mf.h3kit_reading(comfy / "models", mf.config_files(comfy, ()), WANTED))
    assert all(r["state"] == "missing" and not r["shared"] for r in plain["files"])


def test_a_broken_yaml_is_named_and_status_still_answers(tmp_path, run_cli):
    comfy = _comfy(tmp_path)
    (comfy / "extra_model_paths.yaml").write_text("shared:\n  base_path: /x\n   vae: [unclosed\n", encoding="utf-8")
    folders = mf.h3kit_reading(comfy / "models", mf.config_files(comfy, ()), WANTED)
    assert folders.source == "default" and "extra_model_paths.yaml is not a model-paths file" in folders.problem
    assert "not YAML at line" in folders.problem and "ComfyUI stops at start" in folders.problem
    assert mf.yaml_problem("- a\n- list\n") == "its top level must map section names to folders"
    assert mf.yaml_problem("") is None and mf.yaml_problem("a:\n  vae: v\n") is None
    missing = mf.h3kit_reading(comfy / "models", [tmp_path / "gone.yaml"], WANTED)
    assert "gone.yaml cannot be read" in missing.problem
    code, out, err = run_cli("models", "status", "--comfyui", str(comfy), "--fingerprint",
                             str(Path(__file__).parents[1] / "fixtures" / "fingerprints" / "nvidia-rtx4090-24gb-64gb.json"))
    assert code == 0, err
    assert "extra_model_paths.yaml is not a model-paths file ComfyUI can read" in err
    assert "Traceback" not in err


def test_a_default_folder_that_cannot_be_made_is_one_sentence_before_any_write(tmp_path, run_cli):
    comfy = _comfy(tmp_path)
    (tmp_path / "a file").write_text("not a folder")
    (comfy / "extra_model_paths.yaml").write_text(
        f"gone_drive:\n  base_path: {tmp_path / 'a file' / 'models'}\n  is_default: true\n  vae: vae\n", encoding="utf-8")
    usb = tmp_path / "usb"
    usb.mkdir()
    fp = Path(__file__).parents[1] / "fixtures" / "fingerprints" / "nvidia-rtx4090-24gb-64gb.json"
    code, out, err = run_cli("models", "plan", "--fingerprint", str(fp), "--json")
    for f in json.loads(out)["files"]:
        with open(usb / f["name"], "wb") as fh:
            fh.truncate(f["exact_bytes"] or f["bytes"])
    before = sorted(p.relative_to(comfy) for p in comfy.rglob("*"))
    code, out, err = run_cli("models", "fetch", "--comfyui", str(comfy), "--fingerprint", str(fp), "--from", str(usb),
                             "--yes")
    assert code == 2, err
    assert f"{tmp_path / 'a file'} is not a folder" in err and "is_default" in err and "Traceback" not in err
    assert sorted(p.relative_to(comfy) for p in comfy.rglob("*")) == before
