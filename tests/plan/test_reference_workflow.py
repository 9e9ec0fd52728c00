"""The reference-to-video workflow (settings key reference_to_video): off by default; on, the plan carries the
ref2va twin of its DiT with the preset's reference steps and LoRA, counts their disk, `models` lists them and the
pack gets the workflow."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from h3kit.comfyui import workflows
from h3kit.comfyui.graph import ui_to_api
from h3kit.core.errors import BadInput
from h3kit.data import catalog as catalog_mod
from h3kit.data import comfy_nodes
from h3kit.data import config as config_mod
from h3kit.data.fingerprint import Fingerprint
from h3kit.data.plan_doc import Plan
from h3kit.models import files_for_plan
from h3kit.plan import make_plan

FPS = Path(__file__).parents[1] / "fixtures" / "fingerprints"
CAT = catalog_mod.load()
PROFILES = catalog_mod.load_profiles(CAT)
SPECS = comfy_nodes.load()
FP_4090 = json.loads((FPS / "nvidia-rtx4090-24gb-64gb.json").read_text())


def _plan(tmp_path: Path, overrides: str = "", fp=FP_4090) -> Plan:
    path = tmp_path / "config.yaml"
    path.write_text("overrides:\n" + (overrides or "  {}\n"), encoding="utf-8")
    config = config_mod.load(path, catalog=CAT, profile_names=sorted(PROFILES))
    return Plan.from_json(make_plan(Fingerprint.from_json(fp), CAT, PROFILES, config=config).to_json())


def _files(plan: Plan) -> dict:
    out = workflows.pack_files(plan, CAT, "p", SPECS)
    for name in workflows.NAMES.values():  # both forms of every workflow agree
        if f"{workflows.API_DIR}/{name}.json" in out:
            assert ui_to_api(json.loads(out[f"{workflows.UI_DIR}/{name}.json"]), SPECS) == \
                json.loads(out[f"{workflows.API_DIR}/{name}.json"])
    return out


def _api(files: dict, kind: str) -> dict:
    return json.loads(files[f"{workflows.API_DIR}/{workflows.NAMES[kind]}.json"])


def _nodes(api: dict, class_type: str) -> list[dict]:
    return [n for n in api.values() if n["class_type"] == class_type]


def test_every_ref2va_twin_matches_one_fl2va_kind_and_looks_like_its_twin():
    kinds = [(w.variant, w.format) for w in CAT.reference_dit]
    assert len(kinds) == len(set(kinds)) >= 5  # one twin per kind: the mapping is a function
    for w in CAT.reference_dit:
        assert w.part == "dit" and "ref2va" in w.file.name.lower() and w.file.folder == "diffusion_models"
        assert w.file.urls and w.comfyui_loads != "unknown"
        fl2va = [d for d in CAT.dit if (d.variant, d.format) == (w.variant, w.format)]
        assert fl2va, f"{w.id} is the twin of no DiT the catalog lists"
        assert CAT.reference_twin(fl2va[0]) is w
        assert abs(w.bytes - fl2va[0].bytes) <= 0.1 * fl2va[0].bytes  # the same model, give or take the packing
    assert CAT.weight("h3-dit-ref2va-full-bf16").file.bytes == 66_280_487_368
    assert all(w.id not in {d.id for d in CAT.dit} for w in CAT.reference_dit)  # never planned as the main DiT
    lora = CAT.weight("h3-lora-ref2v-turbo")
    assert lora.bytes == 1_956_193_000 and lora.file.name == "minimax_h3_ref2v_turbo_4step_v0.1_comfyui_bf16.safetensors"
    assert lora.file.urls[0].startswith("https://huggingface.co/Comfy-Org/MiniMax-H3/resolve/main/loras/")
    ref = CAT.presets["fast"].reference
    assert (ref.steps, ref.lora, ref.lora_strength) == (4, "h3-lora-ref2v-turbo", 1.0)
    assert CAT.presets["balanced"].reference is None and CAT.presets["quality"].reference is None


def test_off_by_default_nothing_more_is_planned_fetched_or_written(tmp_path):
    plan = _plan(tmp_path)
    assert plan.settings.reference is None
    assert not any("ref2v" in f.name for f in files_for_plan(plan, CAT))
    names = {Path(k).stem for k in _files(plan)}
    assert workflows.NAMES["r2v"] not in names
    assert {workflows.NAMES[k] for k in ("t2v", "i2v", "flf2v")} <= names


@pytest.mark.parametrize("preset, steps, lora", [("fast", 4, "h3-lora-ref2v-turbo"), ("balanced", 20, None),
                                                 ("quality", 50, None)])
def test_on_the_plan_carries_the_twin_with_the_presets_reference_steps_and_lora(tmp_path, preset, steps, lora):
    off = _plan(tmp_path, f"  preset: {preset}\n")
    plan = _plan(tmp_path, f"  preset: {preset}\n  reference_to_video: on\n")
    s, ref = plan.settings, plan.settings.reference
    dit = CAT.weight(s.dit_weights)
    twin = CAT.weight(ref.dit_weights)
    assert twin is CAT.reference_twin(dit) and (twin.variant, twin.format) == (dit.variant, dit.format)
    assert (ref.steps, ref.lora) == (steps, lora) and s.steps == off.settings.steps  # the other workflows keep theirs
    extra = twin.bytes + (CAT.weight(lora).bytes if lora else 0)
    assert plan.estimates.disk_bytes == off.estimates.disk_bytes + extra
    assert any("reference_to_video is on" in r for r in plan.rationale)
    fetched = [f.weight_id for f in files_for_plan(plan, CAT)]
    assert twin.id in fetched and (lora in fetched if lora else "h3-lora-ref2v-turbo" not in fetched)
    assert len(fetched) == len(set(fetched))

    api = _api(_files(plan), "r2v")
    (encode,) = _nodes(api, "MiniMaxH3ReferenceToVideo")
    inputs = encode["inputs"]
    (image,) = _nodes(api, "LoadImage")
    assert api[inputs["ref_images.ref_image_0"][0]] is image and image["inputs"]["image"] == "example.png"
    assert "<Picture 1>" in inputs["prompt"] and inputs["ref_image_size"] == "match"
    assert [inputs[k] for k in ("width", "height", "length")] == [*s.canvas, s.frames]
    vaes = {n["inputs"]["vae_name"]: k for k, n in api.items() if n["class_type"] == "VAELoader"}
    assert inputs["audio_vae"] == [vaes[CAT.weight(s.audio_vae_weights).file.name], 0]
    loader = next(n for n in api.values() if n["class_type"] in ("UNETLoader", "H3kitStreamedDiTLoader",
                                                                  "H3kitUnetLoaderGGUF", "UnetLoaderGGUF"))
    assert loader["inputs"]["unet_name"] == twin.file.name
    assert _nodes(api, "BasicScheduler")[0]["inputs"]["steps"] == steps
    loras = [n["inputs"]["lora_name"] for n in _nodes(api, "LoraLoaderModelOnly")]
    assert loras == ([CAT.weight(lora).file.name] if lora else [])
    assert _nodes(api, "H3kitTiledVAEDecode") and _nodes(api, "VAEDecodeAudio") and _nodes(api, "SaveVideo")


def test_steps_in_the_settings_win_for_the_reference_workflow_too(tmp_path):
    plan = _plan(tmp_path, "  preset: fast\n  steps: 3\n  reference_to_video: on\n")
    assert plan.settings.reference.steps == 3 and plan.settings.reference.lora == "h3-lora-ref2v-turbo"


def test_a_dit_with_no_published_twin_gets_a_warning_and_no_reference_workflow(tmp_path):
    plan = _plan(tmp_path, "  dit_weights: h3-dit-full-q8_0\n  reference_to_video: on\n")
    assert plan.settings.dit_weights == "h3-dit-full-q8_0" and plan.settings.reference is None
    assert any("no reference-to-video (ref2va) DiT" in w and "full q8_0" in w for w in plan.warnings)
    assert workflows.NAMES["r2v"] not in {Path(k).stem for k in _files(plan)}


@pytest.mark.parametrize("value", ["maybe", 3, "auto"])
def test_reference_to_video_takes_on_or_off(tmp_path, value):
    with pytest.raises(BadInput):
        _plan(tmp_path, f"  reference_to_video: {value}\n")


def test_a_saved_plan_reads_the_reference_back():
    doc = {"settings": {"reference": {"dit_weights": "h3-dit-ref2va-pruned-int8_convrot", "steps": 4,
                                      "lora": "h3-lora-ref2v-turbo", "lora_strength": 1.0}}}
    plan = Plan.from_json(doc)
    assert plan.settings.reference.dit_weights == "h3-dit-ref2va-pruned-int8_convrot"
    assert plan.to_json()["settings"]["reference"] == doc["settings"]["reference"]
    assert Plan.from_json({"settings": {}}).settings.reference is None


def test_a_twin_too_new_for_the_comfyui_is_left_out_without_a_sentence_of_its_own():
    from h3kit.plan.comfy_version import loadable_catalog

    old, said = loadable_catalog(CAT, "0.30.0")
    assert "h3-dit-ref2va-pruned-w4a8" not in {w.id for w in old.reference_dit}
    assert not any("ref2va" in s for s in said)
    assert loadable_catalog(CAT, "0.33.0")[0].reference_dit == CAT.reference_dit
