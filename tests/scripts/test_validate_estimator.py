"""scripts/validate_estimator.py: its graph, file dims and verdict (the full comparison needs a real ComfyUI and
minutes of CPU; run it by hand as docs/calibrate.md "Estimate vs measured" says)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "validate_estimator.py"


def _module():
    spec = importlib.util.spec_from_file_location("validate_estimator", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_random_files_keep_h3s_ratios():
    v = _module()
    for hidden, blocks in ((1024, 8), (2048, 16)):
        d = v.dit_dims(hidden, blocks, text_dim=48)
        assert d["num_attention_heads"] * d["attention_head_dim"] == hidden and d["attention_head_dim"] == 128
        assert abs(d["ffn_hidden_size"] / hidden - 14336 / 5376) < 0.02 and d["ffn_hidden_size"] % 32 == 0
        assert d["num_layers"] == blocks and d["text_dim"] != hidden  # ComfyUI skips condition_proj when equal


def test_the_graph_is_the_smallest_h3_workflow_at_the_case():
    v = _module()
    g = v.graph("x.safetensors", [256, 256], 39, 2, 7)
    by = {n["class_type"]: n["inputs"] for n in g.values()}
    assert by["UNETLoader"]["unet_name"] == "x.safetensors"
    assert (by["MiniMaxH3ImageToVideo"]["width"], by["MiniMaxH3ImageToVideo"]["length"]) == (256, 39)
    assert by["KSampler"]["steps"] == 2 and by["KSampler"]["cfg"] == 1.0 and by["KSampler"]["seed"] == 7
    for node in g.values():  # every link points at a node of the graph
        for value in node["inputs"].values():
            if isinstance(value, list):
                assert value[0] in g


def test_without_a_comfyui_it_says_how_and_exits_2(monkeypatch, capsys):
    v = _module()
    monkeypatch.delenv("H3KIT_COMFYUI_DIR", raising=False)
    assert v.main([]) == 2
    assert "--comfyui" in capsys.readouterr().err


def test_reports_mode_keeps_the_planner_check(capsys):
    v = _module()
    assert v.main(["--reports", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert rows and all(abs(r["error_pct"]) <= 20 for r in rows)
    assert v.pct(110.0, 100.0) == 10.0 and v.pct(1.0, None) is None


def test_published_mode_gives_every_run_an_estimate_a_ratio_and_a_verdict(capsys):
    v = _module()
    code = v.main(["--published", "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert doc["rows"], "profiles/published_runs.yaml has runs"
    for r in doc["rows"]:
        assert r["estimate"] and r["published"] and r["ratio"] == r["estimate"] / r["published"], r["id"]
        within = 1 / 1.5 <= r["ratio"] <= 1.5
        # within 1.5x either way passes; beyond, only a run that states why may be off
        assert r["verdict"] == ("PASS" if within else "OFF" if r["reason"] else "FAIL"), r["id"]
        assert r["verdict"] == "PASS" or r["reason"], r["id"]
    assert code == (1 if any(r["verdict"] == "FAIL" for r in doc["rows"]) else 0)
    assert all(n["why"] and n["cited_as"] for n in doc["not_found"])


def test_a_published_mac_is_planned_with_metals_share_of_unified_memory():
    v = _module()
    fp = v.machine_fingerprint({"backend": "mps", "gpu": "Apple M5 Max", "ram": "128 GiB", "unified_memory": True})
    gpu = fp.primary_gpu
    assert fp.os.system == "darwin" and gpu.vendor == "apple" and gpu.unified_memory and gpu.backend == "mps"
    assert 0.5 * 128 * 2**30 < gpu.memory_total_bytes < 128 * 2**30  # a share, not all of RAM


def test_held_mode_estimates_memory_from_a_typed_plan(monkeypatch):
    """--held hands calibration's memory model a typed Plan (it once passed a dict and failed before measuring)."""
    from h3kit.calibrate import arch as arch_mod
    from h3kit.calibrate import estimates as est_mod
    from h3kit.data import catalog as catalog_mod
    from h3kit.data.fingerprint import Fingerprint
    from h3kit.data.plan_doc import Plan

    v = _module()
    fixture = Path(__file__).resolve().parents[1] / "fixtures" / "fingerprints" / "nvidia-rtx4090-24gb-64gb.json"
    monkeypatch.setattr(v, "_FINGERPRINT", [Fingerprint.from_json(json.loads(fixture.read_text()))])
    cat = catalog_mod.load()
    case = v.CASES[0]
    plan = v.held_plan(cat, case)
    assert isinstance(plan, Plan) and not v.cpu_fingerprint().gpus  # the graph runs with --cpu
    s = plan.settings
    assert (list(s.canvas), s.frames, s.steps, s.comfyui_args) == (case["canvas"], case["frames"], 2, ("--cpu",))
    assert not s.streaming.enabled and cat.weight(s.dit_weights).format == "bf16"
    assert v.held_plan(cat, case).to_json()["settings"]["canvas"] == case["canvas"]  # the job's wire form
    held = {"text_encoder": 10_000_000, "vae": 4_000_000}
    m = est_mod.clip_memory(None, arch_mod.from_catalog(cat), plan, cat, v.cpu_fingerprint(),
                            {"canvas": case["canvas"], "frames": case["frames"], "steps": 2, "cfg": 1.0}, 1000, "cpu",
                            weights={"dit": v.bf16_dit(cat)}, held_parts=held)
    assert m["peak_gpu_bytes"] is None and m["parts"]["text_encoder_bytes"] == held["text_encoder"]
    assert m["peak_rss_bytes"] > m["parts"]["dit_weights_bytes"] > 0
