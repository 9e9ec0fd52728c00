"""Speed presets, target_minutes and the new settings keys: from config.yaml through the plan into the workflows."""

from __future__ import annotations

import copy
import dataclasses
import json
from pathlib import Path

import pytest
from h3kit.data.fingerprint import Fingerprint
from h3kit.comfyui import workflows
from h3kit.comfyui.graph import ui_to_api
from h3kit.core.errors import BadInput
from h3kit.data import catalog as catalog_mod
from h3kit.data import comfy_nodes
from h3kit.data import config as config_mod
from h3kit.data.plan_doc import Plan
from h3kit.data.settings import typed
from h3kit.plan import make_plan

FPS = {p.stem: json.loads(p.read_text()) for p in sorted((Path(__file__).parents[1] / "fixtures" / "fingerprints").glob("*.json"))}
CAT = catalog_mod.load()
PROFILES = catalog_mod.load_profiles(CAT)
SPECS = comfy_nodes.load()
FP_4090 = FPS["nvidia-rtx4090-24gb-64gb"]


def _config(text: str, tmp_path: Path):
    path = tmp_path / "config.yaml"
    path.write_text(text, encoding="utf-8")
    return config_mod.load(path, catalog=CAT, profile_names=sorted(PROFILES))


def _plan(fp=FP_4090, text: str | None = None, tmp_path: Path | None = None) -> dict:
    """The planner's h3kit.plan/1 document, with `text` as config.yaml."""
    return make_plan(Fingerprint.from_json(fp), CAT, PROFILES,
                     config=_config(text, tmp_path) if text else None).to_json()


def _api(plan: dict, kind: str = "t2v") -> dict:
    """The workflow made from a plan document, read back as a saved plan.json would be."""
    files = workflows.pack_files(Plan.from_json(plan), CAT, "p", SPECS)
    name = workflows.NAMES[kind]
    api = json.loads(files[f"{workflows.API_DIR}/{name}.json"])
    assert ui_to_api(json.loads(files[f"{workflows.UI_DIR}/{name}.json"]), SPECS) == api  # both forms agree
    return api


def _nodes(api: dict, class_type: str) -> list:
    return [(k, n) for k, n in api.items() if n["class_type"] == class_type]


def test_the_catalog_presets_follow_the_sources():
    p = CAT.presets
    # lightx2v's 8-step 768p LoRA at 8 steps (discussion #48), else ComfyUI's 20; antirez/h3.c's quality preset 50
    assert [p[n].steps for n in ("fast", "balanced", "quality")] == [8, 20, 50]
    assert {x.cfg for x in p.values()} == {1.0}  # H3 fails silently with another cfg (FACTS.md)
    assert p["fast"].lora == "h3-lora-turbo-768p" and p["balanced"].lora is None and p["quality"].lora is None
    lora = CAT.weight("h3-lora-turbo-768p")
    assert lora.bytes == lora.file.bytes == 1_956_193_000 and lora.file.sha256 is None
    assert lora.file.name == "minimax_h3_fl2v_turbo_8step_v1.0_768p_comfyui_bf16.safetensors"
    assert lora.file.folder == "loras" and lora.file.loader == "LoraLoaderModelOnly"
    assert lora.comfyui_loads == "stock" and not lora.load_tier and lora.file.unverified is None
    assert lora.file.urls[0].startswith("https://huggingface.co/lightx2v/Minimax-h3-Turbo/")


@pytest.mark.parametrize("kind", ["t2v", "i2v"])
def test_the_fast_preset_puts_the_lora_between_the_dit_loader_and_the_sampler(tmp_path, kind):
    plan = _plan(text="overrides:\n  preset: fast\n", tmp_path=tmp_path)
    s = plan["settings"]
    assert (s["preset"], s["steps"], s["lora"], s["cfg"]) == ("fast", 8, "h3-lora-turbo-768p", 1.0)
    assert plan["settings_source"]["preset"].startswith("override")
    api = _api(plan, kind)
    ((lora_id, lora),) = _nodes(api, "LoraLoaderModelOnly")
    ((dit_id, _),) = _nodes(api, "UNETLoader")
    assert lora["inputs"]["model"] == [dit_id, 0]
    assert lora["inputs"]["lora_name"] == "minimax_h3_fl2v_turbo_8step_v1.0_768p_comfyui_bf16.safetensors"
    assert lora["inputs"]["strength_model"] == 1.0
    ((_, shift),) = _nodes(api, "MiniMaxH3SigmaShift")
    assert shift["inputs"]["model"] == [lora_id, 0]
    assert _nodes(api, "BasicScheduler")[0][1]["inputs"]["steps"] == 8


def test_quality_has_no_lora_and_samples_fifty_steps(tmp_path):
    plan = _plan(text="overrides:\n  preset: quality\n", tmp_path=tmp_path)
    api = _api(plan)
    assert not _nodes(api, "LoraLoaderModelOnly") and plan["settings"]["lora"] is None
    assert _nodes(api, "BasicScheduler")[0][1]["inputs"]["steps"] == 50
    assert plan["estimates"]["time"]["steps"] == 50


def test_the_time_estimate_counts_the_presets_steps_and_cfg_doubles_the_calls(tmp_path):
    fast = _plan(text="overrides:\n  preset: fast\n  canvas: [864, 480]\n  frames: 73\n", tmp_path=tmp_path)
    slow = _plan(text="overrides:\n  preset: quality\n  canvas: [864, 480]\n  frames: 73\n", tmp_path=tmp_path)
    tf, tq = fast["estimates"]["time"], slow["estimates"]["time"]
    assert tf["seconds_per_step"] == pytest.approx(tq["seconds_per_step"])
    assert tq["sampling_s"] == pytest.approx(tf["sampling_s"] * 50 / 8)
    cfg = _plan(text="overrides:\n  preset: quality\n  canvas: [864, 480]\n  frames: 73\n  cfg: 4.0\n", tmp_path=tmp_path)
    assert cfg["estimates"]["time"]["model_calls_per_step"] == 2
    assert cfg["estimates"]["seconds_per_step"] == pytest.approx(2 * tq["seconds_per_step"])
    assert any("cfg 4" in w and "doubles" in w for w in cfg["warnings"])
    api = _api(cfg)
    ((_, guider),) = _nodes(api, "CFGGuider")
    assert guider["inputs"]["cfg"] == 4.0 and not _nodes(api, "BasicGuider")
    assert _nodes(api, "CLIPTextEncode")[0][1]["inputs"]["text"] == ""


def test_auto_takes_the_best_preset_that_meets_target_minutes(tmp_path):
    plans = {t: _plan(FPS["nvidia-rtx3060-12gb-32gb"], f"overrides:\n  target_minutes: {t}\n", tmp_path)
             for t in (5, 15, 60, 600)}
    order = ["fast", "balanced", "quality"]
    ranks = [order.index(p["settings"]["preset"]) for p in plans.values()]
    assert ranks == sorted(ranks) and ranks[0] < ranks[-1]
    for t, p in plans.items():
        e = p["estimates"]
        assert p["settings"]["target_minutes"] == float(t)
        assert e["time"]["meets_target"] and e["minutes_per_clip"] <= t
        assert any(f"within target_minutes {t:g}" in r for r in p["rationale"])
    assert _plan(FPS["nvidia-rtx3060-12gb-32gb"])["settings"]["target_minutes"] == 15.0  # the default


def test_a_target_nothing_meets_opens_at_the_cheapest_option_and_says_so(tmp_path):
    plan = _plan(text="overrides:\n  target_minutes: 0.01\n", tmp_path=tmp_path)
    s = plan["settings"]
    # the fast preset's LoRA is known to load: auto takes it like any other preset
    assert (s["preset"], s["lora"], s["steps"]) == ("fast", "h3-lora-turbo-768p", 8)
    assert tuple(s["canvas"]) == CAT.canvas_ladder[-1] and s["frames"] == 22
    assert not any("not chosen by itself" in r for r in plan["rationale"])
    assert not plan["estimates"]["time"]["meets_target"]
    assert any("more than target_minutes 0.01" in w for w in plan["warnings"])


def test_auto_skips_a_preset_whose_lora_is_not_known_to_load():
    """A catalog whose turbo LoRA nobody has seen load: auto never picks it, and says how to ask for it."""
    turbo = CAT.weight("h3-lora-turbo-768p")
    doubtful = dataclasses.replace(turbo, file=dataclasses.replace(turbo.file, unverified="no report of it loading"))
    cat = dataclasses.replace(CAT, lora=[doubtful])
    fp = Fingerprint.from_json(FPS["nvidia-rtx3060-12gb-32gb"])
    plan = make_plan(fp, cat, PROFILES, config=config_mod.Config(overrides=typed({"target_minutes": 0.01}))).to_json()
    assert (plan["settings"]["preset"], plan["settings"]["lora"]) == ("balanced", None)
    assert any(r.startswith("Preset fast is not chosen by itself: its LoRA") and "set preset: fast" in r
               for r in plan["rationale"])
    assert make_plan(fp, CAT, PROFILES, config=config_mod.Config(overrides=typed({"target_minutes": 0.01}))
                     ).settings.preset == "fast"


def test_hours_per_clip_on_a_slow_cpu_is_a_plain_warning():
    fp = copy.deepcopy(FPS["cpu-only-16gb"])
    fp["cpu"].update(physical_cores=1, logical_cores=1, flags=[])
    plan = make_plan(Fingerprint.from_json(fp), CAT, PROFILES)
    (warning,) = [w for w in plan.warnings if w.startswith("One clip at ")]
    assert "512x288, 22 frames takes about" in warning and "on this cpu" in warning
    assert " h " in warning or " days " in warning
    assert plan.estimates.minutes_per_clip > 180


def test_overrides_win_and_are_checked_against_the_memory_limits(tmp_path):
    fp = FPS["nvidia-rtx4060-8gb-16gb"]
    plan = _plan(fp, "overrides:\n  canvas: [1344, 768]\n  frames: 243\n  steps: 8\n  preset: balanced\n", tmp_path)
    s = plan["settings"]
    assert (s["canvas"], s["frames"], s["steps"], s["preset"]) == ([1344, 768], 243, 8, "balanced")
    assert any("beyond the largest canvas that fits" in w for w in plan["warnings"])
    assert any("beyond the most frames that fit" in w for w in plan["warnings"])
    assert plan["estimates"]["time"]["canvas"] == [1344, 768] and plan["estimates"]["time"]["steps"] == 8


def test_calibrated_timing_replaces_the_table(tmp_path):
    text = ("calibrated:\n  timing:\n    source: calibrated in ComfyUI's Python (cpu, float32)\n    device: cpu\n"
            "    dtype: float32\n    block_s_per_token: 1e-3\n    block_s_per_token2: 3.0e-9\n    step_fixed_s: 0.5\n")
    plan = _plan(FPS["cpu-only-16gb"], text, tmp_path)
    t = plan["settings"]["timing"]
    assert t["block_s_per_token"] == 1e-3 and t["source"].startswith("calibrated")  # "1e-3" is a string to YAML 1.1
    assert plan["estimates"]["time"]["source"].startswith("calibrated")
    assert plan["settings_source"]["timing"].startswith("calibration")


@pytest.mark.parametrize("line, fragment", [
    ("preset: turbo", "'overrides.preset' is 'turbo'; allowed: auto, fast, balanced, quality"),
    ("target_minutes: 0", "'overrides.target_minutes' is 0; allowed: more than 0"),
    ("cfg: 0.5", "'overrides.cfg' is 0.5; allowed: 1 to 30"),
    ("stream_dit: maybe", "'overrides.stream_dit' is 'maybe'; allowed: auto, on, off"),
    ("prefetch_blocks: 9", "'overrides.prefetch_blocks' is 9; allowed: 1 to 8"),
    ("timing: {block_s_per_token: 1.0e-4}", "'overrides.timing' is missing block_s_per_token2, step_fixed_s"),
    ("timing: {block_s_per_token: -1, block_s_per_token2: 0, step_fixed_s: 0}", "'overrides.timing' has block_s_per_token -1"),
    ("timing: {block_s_per_token: 0, block_s_per_token2: 0, step_fixed_s: 0, device: tpu}", "'overrides.timing' has device 'tpu'"),
    ("timing: {block_s_per_token: 0, block_s_per_token2: 0, step_fixed_s: 0, speed: 3}", "'overrides.timing' has 'speed', which is not a timing field"),
    ("presett: fast", "'overrides.presett' is not a settings key"),
])
def test_bad_values_for_the_new_keys_name_the_line(tmp_path, line, fragment):
    with pytest.raises(BadInput) as exc:
        _config(f"profile: auto\noverrides:\n  {line}\n", tmp_path)
    assert f"config.yaml:3: {fragment}" in exc.value.message


def test_the_new_keys_are_accepted_and_typed(tmp_path):
    cfg = _config("overrides:\n  stream_dit: on\n  prefetch_blocks: 3\n  target_minutes: 30\n  cfg: 1\n"
                  "  preset: auto\n", tmp_path)
    assert cfg.overrides.as_dict() == {"stream_dit": "on", "prefetch_blocks": 3, "target_minutes": 30.0, "cfg": 1.0,
                                       "preset": "auto"}
    assert _config("overrides:\n  stream_dit: off\n", tmp_path).overrides.stream_dit == "off"


def test_the_streamed_loader_replaces_unetloader_exactly_when_the_plan_streams():
    plan = json.loads((Path(__file__).parents[1] / "fixtures" / "plans" / "nvidia-rtx4090-24gb-64gb.json").read_text())
    assert not plan["settings"]["streaming"].get("enabled")
    assert _nodes(_api(plan), "UNETLoader") and not _nodes(_api(plan), "H3kitStreamedDiTLoader")
    streamed = copy.deepcopy(plan)
    streamed["settings"]["streaming"].update(enabled=True, prefetch_blocks=3, preload_bytes=2 * 804_514_484,
                                             page_cache="bypass")
    api = _api(streamed)
    ((dit_id, node),) = _nodes(api, "H3kitStreamedDiTLoader")
    assert not _nodes(api, "UNETLoader")
    s = streamed["settings"]
    assert node["inputs"] == {"unet_name": CAT.weight(s["dit_weights"]).file.name, "weight_dtype": "default",
                              "preload_bytes": 2 * 804_514_484, "shard_size_bytes": s["shard_size_bytes"],
                              "prefetch_blocks": 3, "page_cache": "bypass"}
    assert _nodes(api, "MiniMaxH3SigmaShift")[0][1]["inputs"]["model"] == [dit_id, 0]


def test_a_bare_on_is_quoted_as_on(tmp_path):
    plan = _plan(FPS["apple-m2max-64gb"], "overrides:\n  stream_dit: on\n", tmp_path)
    assert any(r.startswith("stream_dit = 'on' from the override") for r in plan["rationale"])
    assert plan["settings"]["streaming"]["enabled"]
