"""Properties of the planner over the synthetic machines and scaled copies of them."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from h3kit import catalog as catalog_mod
from h3kit.planner import make_plan

FPS = {p.stem: json.loads(p.read_text()) for p in sorted((Path(__file__).parent / "fixtures" / "fingerprints").glob("*.json"))}
QUALITY = {name: spec["quality"] for name, spec in catalog_mod.load().formats.items()}


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


@pytest.mark.parametrize("name", sorted(FPS))
def test_poorer_machine_never_gets_heavier_format_or_larger_canvas(name):
    richer = make_plan(FPS[name])
    for factor in (0.85, 0.7, 0.5):
        poorer = make_plan(scaled(FPS[name], factor, factor))
        if not poorer["fits"]:
            continue
        assert QUALITY[poorer["settings"]["quantization"]] <= QUALITY[richer["settings"]["quantization"]], factor
        if poorer["settings"]["quantization"] == richer["settings"]["quantization"]:
            assert area(poorer) <= area(richer), factor
        richer = poorer


@pytest.mark.parametrize("name", sorted(FPS))
def test_more_ram_never_stops_a_plan_fitting(name):
    base = make_plan(FPS[name])
    for factor in (1.25, 2.0, 4.0):
        more = make_plan(scaled(FPS[name], 1.0, factor))
        if base["fits"]:
            assert more["fits"], factor
