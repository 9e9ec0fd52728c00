"""Issue 45 (8) in a real ComfyUI (opt-in: H3KIT_COMFYUI_DIR): `h3kit calibrate --quick` after an install whose
workflow streams the DiT times the pass with the installed loader node itself (ComfyUI loads the pack, the node
loads the plan's file with the workflow's inputs), and the clip time counts that pass, not the composed share.
A throwaway copy of the ComfyUI with tiny random-weight H3 files; yours is never written to."""

from __future__ import annotations

import json

import pytest

import comfy_h3
from h3kit.data import catalog as catalog_mod

REAL, PYTHON, WHY = comfy_h3.h3_comfyui()
pytestmark = [pytest.mark.native, pytest.mark.comfyui, pytest.mark.slow, pytest.mark.skipif(REAL is None, reason=WHY)]

CONFIG = comfy_h3.TINY_CONFIG + "  preset: balanced\n  stream_dit: \"on\"\n  page_cache: bypass\n"


def test_calibration_times_the_installed_loaders_pass_and_the_estimate_counts_it(h3kit_home, run_cli, tmp_path):
    comfy, roomy, plan = comfy_h3.planned_test_comfyui(REAL, run_cli, h3kit_home, tmp_path, CONFIG)
    assert plan["settings"]["streaming"]["enabled"], plan["settings"]["streaming"]
    cat = catalog_mod.load()
    comfy_h3.write_tiny_files(comfy, PYTHON, {part: f"{cat.weight(plan['settings'][key]).file.folder}/"
                                                    f"{cat.weight(plan['settings'][key]).file.name}"
                                              for key, part in comfy_h3.PART_OF.items()})
    code, out, err = run_cli("install", "--comfyui", str(comfy), "--fingerprint", roomy, "--yes",
                             "--skip-calibrate", "--no-models", "--json")
    assert code == 0, err
    code, out, err = run_cli("calibrate", "--quick", "--comfyui", str(comfy), "--json")
    assert code == 0, err
    doc = json.loads(out)
    st = doc["streaming"]
    whole = st["pass_measured"]
    # the runner's pass: the workflow's node and inputs, on the plan's file, cold then two warm calls
    assert whole["streamed_s"] > 0 and whole["held_s"] > 0 and whole["page_cache"] == "bypass"
    assert abs(whole["tokens"] - doc["h3_model"]["canvas"]["tokens"]) < 16  # the workflow's sequence, as packed
    assert st["pass_overhead"] == pytest.approx(max(0.0, whole["streamed_s"] / whole["held_s"] - 1), abs=1e-4)
    assert "pass_overhead_composed" in st
    t = doc["estimates"]["time"]
    assert t["pass_overhead"] == st["pass_overhead"] and t["pass_overhead_from"].startswith("measured")
    # the runner's own record: the installed node, the workflow's inputs, a cold call and two warm ones
    run = doc["streamed_pass"]
    assert run["node"] == "H3kitStreamedDiTLoader" and run["inputs"]["page_cache"] == "bypass"
    assert len(run["warm_s"]) == 2 and run["cold_s"] > 0 and run["blocks"] == doc["h3_model"]["arch"]["blocks_total"]
