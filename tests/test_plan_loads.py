"""Which files the planner picks by whether ComfyUI loads them, and the profile limits it explains.

The catalog's file.comfyui_loads (stock | with_loader_pack | unknown |
reported_broken) decides the order: files that load first, reported-broken
ones only when nothing else fits, and then with a warning naming the report.
"""

from __future__ import annotations

import copy
import dataclasses
import json
from pathlib import Path

import pytest

from h3kit.data import catalog as catalog_mod
from h3kit.data import config as config_mod
from h3kit.data.catalog import Machine
from h3kit.plan import make_plan as _make_plan

FP_DIR = Path(__file__).parent / "fixtures" / "fingerprints"
FPS = {p.stem: json.loads(p.read_text()) for p in sorted(FP_DIR.glob("*.json"))}
CAT = catalog_mod.load()
PROFILES = catalog_mod.load_profiles(CAT)


def make_plan(fp: dict, **kw) -> dict:
    """The planner over the shipped catalog and profiles, loaded once for the module."""
    return _make_plan(fp, CAT, PROFILES, **kw)


def _config(text: str, tmp_path: Path) -> config_mod.Config:
    path = tmp_path / "config.yaml"
    path.write_text(text)
    return config_mod.load(path)


def _chosen(plan: dict) -> list:
    s = plan["settings"]
    return [CAT.weight(s[k]) for k in ("dit_weights", "text_encoder_weights", "vae_weights", "audio_vae_weights")]


@pytest.mark.parametrize("name", sorted(FPS))
def test_every_file_that_is_not_known_to_load_is_warned_about_with_its_source(name):
    plan = make_plan(FPS[name])
    assert set(plan["comfyui_loads"]) == {"dit", "text_encoder", "vae", "audio_vae"}
    for w in _chosen(plan):
        assert plan["comfyui_loads"][w.part] == w.comfyui_loads
        name_ = w.file["name"]
        if w.comfyui_loads == "reported_broken":
            warning = next(x for x in plan["warnings"] if name_ in x)
            assert "reported not to load" in warning and w.file["comfyui_loads_source"] in warning
            assert any(r.startswith("Fallback:") and name_ in r and w.file["comfyui_loads_source"] in r
                       for r in plan["rationale"])
        elif w.comfyui_loads == "with_loader_pack":
            pack = w.file["loader_pack"]
            assert any(name_ in r and f"custom node pack {pack}" in r for r in plan["rationale"])
        elif w.comfyui_loads == "stock":
            assert not any(name_ in x for x in plan["warnings"])


@pytest.mark.parametrize("name", sorted(FPS))
def test_a_reported_broken_dit_is_chosen_only_when_no_loadable_runnable_one_fits(name, tmp_path):
    """Force each better-loading DiT the machine can run: none of them may fit, or the fallback was wrong."""
    plan = make_plan(FPS[name])
    dit = CAT.weight(plan["settings"]["dit_weights"])
    if not dit.load_tier or not plan["fits"]:
        return
    machine = Machine.from_fingerprint(FPS[name])
    profile = PROFILES[plan["profile"]]
    for alt in CAT.dit:
        if alt.load_tier < dit.load_tier and alt.format in profile.settings["formats"] \
                and CAT.runnable(alt.format, machine)[0]:
            forced = make_plan(FPS[name], profile=plan["profile"],
                               config=_config(f"overrides:\n  dit_weights: {alt.id}\n", tmp_path))
            assert not forced["fits"], alt.id


def _as_before_h3kits_loaders(parts=("dit", "text_encoder")) -> catalog_mod.Catalog:
    """The shipped catalog with h3kit's GGUF loader nodes taken away for `parts`: the metadata-less H3 GGUFs are
    reported not to load again (stock ComfyUI-GGUF refuses them), as before tests/test_gguf_loaders_real_comfyui.py."""
    def back(ws):
        return [dataclasses.replace(w, file=dict(w.file, comfyui_loads="reported_broken"))
                if w.comfyui_loads == "with_h3kit_loader" and w.part in parts else w for w in ws]
    return catalog_mod.Catalog(CAT.doc, CAT.formats, back(CAT.dit), back(CAT.text_encoder), CAT.vae, CAT.audio_vae,
                               CAT.lora)


BEFORE = _as_before_h3kits_loaders()
BEFORE_DIT = _as_before_h3kits_loaders(("dit",))


def test_loadable_files_beat_a_higher_quality_file_reported_broken():
    """Without h3kit's loader the 3060 would get the pruned Q8_0 GGUF (quality 97), which stock ComfyUI-GGUF
    rejects; it gets the stock int8_convrot file (96) at the same canvas and frames."""
    plan = _make_plan(FPS["nvidia-rtx3060-12gb-32gb"], BEFORE, PROFILES)
    assert plan["settings"]["quantization"] == "int8_convrot" and plan["fits"]
    assert set(plan["comfyui_loads"].values()) == {"stock"} and plan["warnings"] == []
    assert plan["settings"]["max_canvas"] == [1024, 576] and plan["settings"]["max_frames"] == 243
    # with h3kit's loader node the Q8_0 file loads, and quality decides
    plan = make_plan(FPS["nvidia-rtx3060-12gb-32gb"])
    assert plan["settings"]["dit_weights"] == "h3-dit-pruned-q8_0" and plan["comfyui_loads"]["dit"] == "with_h3kit_loader"
    line = next(r for r in plan["rationale"] if "H3kitUnetLoaderGGUF" in r)
    assert "tests/test_gguf_loaders_real_comfyui.py" in line and "Unknown model architecture" in line


def test_a_loader_pack_file_is_preferred_to_a_broken_one_and_named(tmp_path):
    # Without h3kit's streamer (which would run the stock bf16 file on this card) the Arc holds a GGUF.
    plan = _make_plan(FPS["intel-arcb580-12gb-32gb"], BEFORE_DIT, PROFILES,
                      config=_config("overrides:\n  stream_dit: off\n", tmp_path))
    assert plan["settings"]["dit_weights"] == "h3-dit-full-q4_k_m"
    assert plan["comfyui_loads"]["dit"] == "with_loader_pack"
    line = next(r for r in plan["rationale"] if "custom node pack" in r)
    assert "ComfyUI-GGUF" in line and "github.com/city96/ComfyUI-GGUF" in line and "--with-loaders" in line


def test_a_broken_file_is_never_planned_by_itself_the_plan_says_what_would_work():
    """Before h3kit's loader the 4060 got the pruned Q4_K_M GGUF that stock ComfyUI-GGUF refuses; now a plan never
    picks a file reported not to load: nothing that loads fits, and the plan says so in one sentence."""
    plan = _make_plan(FPS["nvidia-rtx4060-8gb-16gb"], BEFORE, PROFILES)
    assert not plan["fits"] and plan["comfyui_loads"]["dit"] != "reported_broken"
    assert plan["blocked"].startswith("Nothing that loads in ComfyUI fits this machine")
    assert "it would work with more RAM (at least" in plan["blocked"]
    # with h3kit's loader node the same file loads and fits
    plan = make_plan(FPS["nvidia-rtx4060-8gb-16gb"])
    assert plan["fits"] and plan["blocked"] is None and plan["comfyui_loads"]["dit"] == "with_h3kit_loader"


def test_a_broken_file_the_user_forces_is_kept_and_warned_as_theirs(tmp_path):
    plan = _make_plan(FPS["nvidia-rtx4090-24gb-64gb"], BEFORE, PROFILES,
                      config=_config("overrides:\n  quantization: q2_k\n", tmp_path))
    assert plan["settings"]["dit_weights"] == "h3-dit-pruned-q2_k"
    warning = next(w for w in plan["warnings"] if "Q2_K.gguf" in w)
    assert "you set it" in warning and "config.yaml:2" in warning
    assert not any(r.startswith("Fallback: DiT") for r in plan["rationale"])
    assert "Q2_K.gguf is reported not to load" in plan["blocked"] and "--allow-unverified" in plan["blocked"]


def test_where_no_text_encoder_loads_the_plan_does_not_fit_and_says_so():
    """An AMD card runs no CUDA-only text encoder; without h3kit's GGUF text-encoder loader nothing loads."""
    plan = _make_plan(FPS["amd-rx7900xtx-24gb-64gb"], BEFORE, PROFILES)
    assert not plan["fits"] and plan["blocked"].startswith("Nothing that loads in ComfyUI runs here for the text encoder")
    assert make_plan(FPS["amd-rx7900xtx-24gb-64gb"])["fits"]


def test_among_loadable_files_quality_decides():
    """A machine with room for everything still gets bf16 over the stock int8/fp8 files."""
    plan = make_plan(FPS["nvidia-rtx6000ada-48gb-128gb"])
    assert plan["settings"]["quantization"] == "bf16" and set(plan["comfyui_loads"].values()) == {"stock"}


def _card(name: str, gib: float) -> dict:
    fp = copy.deepcopy(FPS[name])
    fp["gpus"][0]["memory_total_bytes"] = int(gib * 2**30)
    return fp


def test_16gb_cards_stop_at_209_frames_and_say_why(tmp_path):
    cfg = _config("overrides:\n  max_canvas: [864, 480]\n", tmp_path)
    plan = make_plan(_card("nvidia-rtx4090-24gb-64gb", 16), config=cfg)
    assert plan["profile"] == "nvidia-16gb" and plan["fits"]
    assert plan["settings"]["max_frames"] == 209  # 5 + 17*12, between the ladder's 124 and 243
    why = next(r for r in plan["rationale"] if r.startswith("max_frames 209"))
    assert "VAE decode" in why and "FACTS.md" in why
    # a 24 GB card with the same canvas is not capped
    assert make_plan(FPS["nvidia-rtx4090-24gb-64gb"], config=cfg)["settings"]["max_frames"] == 243


def test_the_user_can_lift_the_209_cap(tmp_path):
    cfg = _config("overrides:\n  max_canvas: [864, 480]\n  max_frames: 243\n", tmp_path)
    plan = make_plan(_card("nvidia-rtx4090-24gb-64gb", 16), config=cfg)
    assert plan["settings"]["max_frames"] == 243
    assert not any(r.startswith("max_frames 209") for r in plan["rationale"])


def test_a_users_workflow_defaults_win_and_are_checked_against_the_memory_limits(tmp_path):
    cfg = _config("overrides:\n  canvas: [1344, 768]\n  frames: 362\n  steps: 8\n", tmp_path)
    plan = make_plan(FPS["nvidia-rtx4060-8gb-16gb"], config=cfg)
    s = plan["settings"]
    assert (s["canvas"], s["frames"], s["steps"]) == ([1344, 768], 362, 8)
    assert s["max_canvas"] != [1344, 768] and plan["settings_source"]["canvas"].startswith("override")
    assert any("beyond the largest canvas that fits" in w for w in plan["warnings"])
    assert any("beyond the most frames that fit" in w for w in plan["warnings"])
    assert any("8 steps, as override" in r for r in plan["rationale"])
