"""What the catalog knows of the files published by December 7, 2026, each fact with its source (FACTS.md, December).

- The fast preset loads lightx2v's 8-step 768p V1.0 FL2V LoRA and its workflows sample it the way lightx2v
  publishes (discussion #48: euler, simple, video shift 6 / audio shift 3, 8 steps). ComfyUI's own turbo template
  (comfyui-workflow-templates 0.11.97) loads the older 544p 8-step file at res_multistep and the model's 12 / 3:
  that file stays listed with its own setting, and the workflows that do not load the 768p LoRA keep theirs.
- lightx2v's 8-step 768p Ref2v V1.0 LoRA is listed as published, not planned: its shifts are published two ways.
- Comfy-Org's `minimax_h3_fl2va_pruned_w6a8.safetensors` is listed as published and not loadable: never planned.
- Kijai's W4A8 files carry the users' reports (Kijai/MiniMax-H3_comfy #6) where `models plan` and doctor show them.
- A LoRA's `sampling` that is wrong is one sentence naming file:line and the key.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from h3kit.comfyui import workflows
from h3kit.comfyui.graph import ui_to_api
from h3kit.core.errors import BadInput
from h3kit.core.paths import asset_dir
from h3kit.data import catalog as catalog_mod
from h3kit.data import comfy_nodes
from h3kit.data import config as config_mod
from h3kit.data.catalog_sections import LoraSampling
from h3kit.data.fingerprint import Fingerprint
from h3kit.data.plan_doc import Plan
from h3kit.plan import make_plan

CATALOG = (asset_dir("profiles") / "models" / "minimax-h3.yaml").read_text()
CAT = catalog_mod.load()
PROFILES = catalog_mod.load_profiles(CAT)
SPECS = comfy_nodes.load()
FPS = Path(__file__).parents[1] / "fixtures" / "fingerprints"
FP_4090 = json.loads((FPS / "nvidia-rtx4090-24gb-64gb.json").read_text())
TURBO_768P = "minimax_h3_fl2v_turbo_8step_v1.0_768p_comfyui_bf16.safetensors"
TURBO_544P = "minimax_h3_fl2v_turbo_8step_v1.0_comfyui_bf16.safetensors"
REF2V_8STEP = "minimax_h3_ref2v_turbo_8step_v1.0_768p_comfyui_bf16.safetensors"
W6A8 = "minimax_h3_fl2va_pruned_w6a8.safetensors"


def _plan(tmp_path: Path, overrides: str, fp=FP_4090) -> Plan:
    path = tmp_path / "config.yaml"
    path.write_text("overrides:\n" + overrides, encoding="utf-8")
    config = config_mod.load(path, catalog=CAT, profile_names=sorted(PROFILES))
    return Plan.from_json(make_plan(Fingerprint.from_json(fp), CAT, PROFILES, config=config).to_json())


def _sampling_of(plan: Plan, kind: str) -> tuple:
    """(LoRA file or None, sampler, scheduler, steps, shift video, shift audio) of one workflow, both forms agreeing."""
    files = workflows.pack_files(plan, CAT, "p", SPECS)
    name = workflows.NAMES[kind]
    api = json.loads(files[f"{workflows.API_DIR}/{name}.json"])
    assert ui_to_api(json.loads(files[f"{workflows.UI_DIR}/{name}.json"]), SPECS) == api
    one = {n["class_type"]: n["inputs"] for n in api.values()}
    lora = one.get("LoraLoaderModelOnly", {}).get("lora_name")
    return (lora, one["KSamplerSelect"]["sampler_name"], one["BasicScheduler"]["scheduler"],
            one["BasicScheduler"]["steps"], one["MiniMaxH3SigmaShift"]["shift_video"],
            one["MiniMaxH3SigmaShift"]["shift_audio"])


# --- the fast preset's LoRA and its sampling ----------------------------------------------------------------

def test_the_fast_preset_loads_lightx2vs_8_step_768p_v1_0_lora():
    fast = CAT.presets["fast"]
    assert (fast.steps, fast.cfg, fast.lora, fast.lora_strength) == (8, 1.0, "h3-lora-turbo-768p", 1.0)
    lora = CAT.weight(fast.lora)
    assert lora.file.name == TURBO_768P and lora.bytes == lora.file.bytes == 1_956_193_000
    assert lora.file.urls == (f"https://huggingface.co/lightx2v/Minimax-h3-Turbo/resolve/main/{TURBO_768P}",)
    assert lora.file.loader == "LoraLoaderModelOnly" and lora.comfyui_loads == "stock" and not lora.load_tier
    assert lora.sampling == LoraSampling("euler", "simple", 6.0, 3.0, lora.sampling.source)
    assert lora.sampling.source.startswith("lightx2v/Minimax-h3-Turbo discussion #48")
    # where ComfyUI's template differs, the source says which setting is followed and why
    assert "ComfyUI's turbo template publishes nothing for this file" in lora.sampling.source


def test_comfyuis_own_turbo_file_stays_listed_with_its_templates_setting_and_no_preset_plans_it():
    old = CAT.weight("h3-lora-turbo")
    assert old.file.name == TURBO_544P and old.comfyui_loads == "stock"
    assert old.sampling == LoraSampling("res_multistep", "simple", 12.0, 3.0, old.sampling.source)
    assert "comfyui-workflow-templates 0.11.97" in old.sampling.source and "12 / 3" in old.sampling.source
    assert "h3-lora-turbo" not in {p.lora for p in CAT.presets.values()}


@pytest.mark.parametrize("kind", ["t2v", "i2v", "flf2v"])
def test_the_fast_workflows_sample_the_lora_at_its_published_setting(tmp_path, kind):
    plan = _plan(tmp_path, "  preset: fast\n")
    assert plan.settings.lora == "h3-lora-turbo-768p"
    assert _sampling_of(plan, kind) == (TURBO_768P, "euler", "simple", 8, 6.0, 3.0)
    assert any("they sample with euler, scheduler simple, flow shifts 6 (video) / 3 (audio)" in r and
               "discussion #48" in r for r in plan.rationale)


@pytest.mark.parametrize("preset, steps", [("balanced", 20), ("quality", 50)])
def test_workflows_without_a_lora_keep_comfyuis_template_setting(tmp_path, preset, steps):
    plan = _plan(tmp_path, f"  preset: {preset}\n")
    assert _sampling_of(plan, "t2v") == (None, "res_multistep", "simple", steps, 12.0, 3.0)
    assert not any("they sample with" in r for r in plan.rationale)


def test_the_fast_reference_workflow_keeps_comfyuis_ref2v_lora_at_its_templates_setting(tmp_path):
    plan = _plan(tmp_path, "  preset: fast\n  reference_to_video: on\n")
    assert _sampling_of(plan, "r2v") == ("minimax_h3_ref2v_turbo_4step_v0.1_comfyui_bf16.safetensors",
                                         "res_multistep", "simple", 4, 12.0, 3.0)
    assert _sampling_of(plan, "t2v")[1:] == ("euler", "simple", 8, 6.0, 3.0)


# --- files published, not planned ----------------------------------------------------------------------------

def test_the_ref2v_8_step_lora_is_listed_as_published_and_not_planned():
    ref = next(w for w in CAT.lora if w.file.name == REF2V_8STEP)
    assert ref.bytes == ref.file.bytes == 1_956_193_000 and ref.file.loader == "LoraLoaderModelOnly"
    assert ref.file.urls == (f"https://huggingface.co/lightx2v/Minimax-h3-Turbo/resolve/main/{REF2V_8STEP}",)
    assert ref.comfyui_loads == "unknown" and ref.sampling is None
    assert "12 / 3" in ref.file.comfyui_compat and "6 / 3" in ref.file.comfyui_compat  # why it waits
    assert ref.id not in {p.lora for p in CAT.presets.values()}
    assert ref.id not in {p.reference.lora for p in CAT.presets.values() if p.reference}


def test_w6a8_is_listed_as_published_and_not_loadable():
    w = CAT.weight("h3-dit-pruned-w6a8")
    assert w.file.name == W6A8 and w.format == "w6a8" and w.variant == "pruned"
    assert w.file.urls == (f"https://huggingface.co/Comfy-Org/MiniMax-H3/resolve/main/diffusion_models/{W6A8}",)
    assert w.comfyui_loads == "reported_broken" and w.file.comfyui_compat.startswith("published, not loadable yet")
    assert "w6a8" in CAT.formats and all(status == "unknown" for status, _ in CAT.formats["w6a8"].runs_on.values())
    assert not any("w6a8" in p.settings.formats for p in PROFILES.values())


@pytest.mark.parametrize("fp_path", sorted(FPS.glob("*.json")), ids=lambda p: p.stem)
def test_the_planner_never_plans_w6a8(fp_path):
    plan = make_plan(Fingerprint.from_json(json.loads(fp_path.read_text())), CAT, PROFILES).to_json()
    assert plan["settings"]["dit_weights"] != "h3-dit-pruned-w6a8" and plan["settings"]["quantization"] != "w6a8"


@pytest.mark.parametrize("wid", ["h3-dit-pruned-w4a8", "h3-dit-ref2va-pruned-w4a8"])
def test_the_w4a8_reports_are_recorded_with_the_file(wid):
    w = CAT.weight(wid)
    assert w.comfyui_loads == "stock"  # it loads; some users report it slow or its output corrupt
    assert "Kijai/MiniMax-H3_comfy discussion #6" in w.file.comfyui_compat
    assert "slow" in w.file.comfyui_compat and "corrupt" in w.file.comfyui_compat
    assert "Kijai/MiniMax-H3_comfy discussion #6" in w.load_report


# --- a LoRA's sampling is checked when the catalog loads ----------------------------------------------------

BAD_SAMPLING = [
    ("sampling: {sampler: euler, scheduler: simple, shift_video: 6.0,",
     "sampling: {sampler: euler, scheduler: simple, shift_video: 0,", "lora[1].sampling.shift_video"),
    ("sampling: {sampler: euler, scheduler: simple, shift_video: 6.0,",
     "sampling: {sampler: '', scheduler: simple, shift_video: 6.0,", "lora[1].sampling.sampler"),
    ("sampling: {sampler: euler, scheduler: simple, shift_video: 6.0,",
     "sampling: {sampler: euler, shift_video: 6.0,", "lora[1].sampling"),
]


@pytest.mark.parametrize("old, new, key", BAD_SAMPLING, ids=[n for _, n, _ in BAD_SAMPLING])
def test_a_bad_lora_sampling_is_one_sentence_naming_its_line(tmp_path, old, new, key):
    assert CATALOG.count(old) == 1
    text = CATALOG.replace(old, new)
    (tmp_path / "minimax-h3.yaml").write_text(text)
    with pytest.raises(BadInput) as exc:
        catalog_mod.load(tmp_path)
    line = next(i for i, row in enumerate(text.splitlines(), 1) if new in row)
    assert exc.value.exit_code == 2
    assert exc.value.message.startswith(f"{tmp_path / 'minimax-h3.yaml'}:{line}: '{key}' "), exc.value.message
