"""Properties of the planner over the synthetic machines and scaled copies of them."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from h3kit.data.fingerprint import Fingerprint
from h3kit.data import catalog as catalog_mod
from h3kit.plan import make_plan as _make_plan

FPS = {p.stem: json.loads(p.read_text()) for p in sorted((Path(__file__).parents[1] / "fixtures" / "fingerprints").glob("*.json"))}
CAT = catalog_mod.load()
PROFILES = catalog_mod.load_profiles(CAT)
QUALITY = {name: spec.quality for name, spec in CAT.formats.items()}


def make_plan(fp: dict, **kw) -> dict:
    """The planner's h3kit.plan/1 document over the shipped catalog and profiles, loaded once for the module."""
    return _make_plan(Fingerprint.from_json(fp), CAT, PROFILES, **kw).to_json()


def scaled(fp: dict, gpu: float = 1.0, ram: float = 1.0) -> dict:
    out = copy.deepcopy(fp)
    out["memory"]["total_bytes"] = int(out["memory"]["total_bytes"] * ram)
    for g in out["gpus"]:
        g["memory_total_bytes"] = int(g["memory_total_bytes"] * (ram if g["unified_memory"] else gpu))
    return out


def area(plan):
    w, h = plan["settings"]["max_canvas"]
    return w * h


@pytest.mark.parametrize("name", sorted(FPS))
def test_fits_means_every_peak_within_its_budget(name):
    for factor in (0.5, 0.75, 1.0, 1.5):
        plan = make_plan(scaled(FPS[name], factor, factor))
        b, e = plan["budget"], plan["estimates"]
        if plan["fits"]:
            assert e["peak_ram_bytes"] <= b["ram_bytes"]
            assert e["disk_bytes"] <= b["disk_bytes"]
            if b["gpu_bytes"] is not None:
                assert e["peak_gpu_bytes"] <= b["gpu_bytes"]
        else:
            assert any("short by" in w for w in plan["warnings"])


def load_tier(plan):
    """The chosen model files' load tiers, worst first (0: loads in ComfyUI, 2: reported broken); smaller is surer.
    The preset's LoRA is left out: it follows the time target, not the memory the files are chosen by."""
    return sorted((catalog_mod.LOAD_TIERS[v] for part, v in plan["comfyui_loads"].items() if part != "lora"),
                  reverse=True)


@pytest.mark.parametrize("name", sorted(FPS))
def test_poorer_machine_never_gets_heavier_format_or_larger_canvas(name):
    """Plans are ordered by (files that load, format quality, canvas): a poorer machine never ranks higher.
    It may get a heavier format only by dropping to files less sure to load (a fallback the plan warns about)."""
    richer = make_plan(scaled(FPS[name], 1.0, 1.0))
    for gpu_f, ram_f in ((1, 1), (0.85, 0.85), (0.7, 0.7), (0.5, 0.5), (0.6, 1), (1, 0.6)):
        poorer = make_plan(scaled(FPS[name], gpu_f, ram_f))
        if not poorer["fits"]:
            continue
        where = (gpu_f, ram_f)
        assert load_tier(poorer) >= load_tier(richer), where
        if load_tier(poorer) == load_tier(richer):
            assert QUALITY[poorer["settings"]["quantization"]] <= QUALITY[richer["settings"]["quantization"]], where
            assert area(poorer) <= area(richer), where
        else:
            assert any("reported" in w for w in poorer["warnings"]), where


@pytest.mark.parametrize("name", sorted(FPS))
def test_more_ram_never_stops_a_plan_fitting(name):
    base = make_plan(FPS[name])
    for factor in (1.25, 2.0, 4.0):
        more = make_plan(scaled(FPS[name], 1.0, factor))
        if base["fits"]:
            assert more["fits"], factor


@pytest.mark.parametrize("name", [n for n in sorted(FPS) if n.startswith("apple")])
def test_unified_memory_is_counted_once(name):
    plan = make_plan(FPS[name])
    b = plan["budget"]
    assert b["unified_memory"] and b["gpu_bytes"] <= b["ram_bytes"]
    gpu_share = FPS[name]["gpus"][0]["memory_total_bytes"]
    assert b["gpu_bytes"] < gpu_share  # the detected usable share, less ComfyUI's reserve -- not the whole RAM
    for phase in plan["estimates"]["phases"].values():
        # every GPU byte is also a RAM byte (one pool), and nothing is counted twice
        assert phase["gpu_bytes"] <= phase["ram_bytes"] <= phase["gpu_bytes"] + FPS[name]["memory"]["total_bytes"] - gpu_share


def test_a_machine_that_holds_the_dit_keeps_it_and_one_that_cannot_streams_it():
    ultra = make_plan(FPS["apple-m3ultra-192gb"])
    assert ultra["settings"]["streaming"]["resident"] and ultra["settings"]["preload_bytes"] > 0
    small = make_plan(FPS["nvidia-rtx3060-12gb-32gb"])
    st = small["settings"]
    assert not st["streaming"]["resident"] and st["preload_bytes"] < small["budget"]["gpu_bytes"]
    assert st["shard_size_bytes"] == st["streaming"]["shard_blocks"] * st["streaming"]["block_bytes"]


def test_workflow_defaults_stay_within_the_memory_limits_unless_the_user_says_otherwise():
    for name, fp in FPS.items():
        s = _make_plan(Fingerprint.from_json(fp), CAT, PROFILES).settings
        assert s.canvas[0] * s.canvas[1] <= s.max_canvas[0] * s.max_canvas[1], name
        assert s.frames <= s.max_frames and s.steps == CAT.presets[s.preset].steps, name


@pytest.mark.parametrize("name", sorted(FPS))
def test_the_plans_figures_describe_the_run_it_plans(name):
    """With h3kit's streamer on, fits and the peaks are the streamed run's and the time counts the streamer;
    with it off, they are ComfyUI's own loading and the time has no streaming in it (issue #15)."""
    for factor in (0.5, 0.75, 1.0, 1.5, 2.0):
        plan = make_plan(scaled(FPS[name], factor, factor))
        st, e = plan["settings"]["streaming"], plan["estimates"]
        if st["enabled"]:
            assert plan["fits"] == st["fits"] and e["peak_ram_bytes"] == st["peak_ram_bytes"], factor
            assert e["peak_gpu_bytes"] == st["peak_gpu_bytes"], factor
            assert plan["settings"]["preload_bytes"] == st["preload_bytes"], factor
            assert e["time"]["stream_pass_overhead"] == st["pass_overhead"] > 0, factor
        else:
            assert e["time"]["stream_pass_overhead"] == 0, factor
