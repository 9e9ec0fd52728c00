"""scripts/bench_streaming.py's own pieces that need no ComfyUI: the graphs it queues and the call log it reads."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("bench_streaming", REPO / "scripts" / "bench_streaming.py")
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)

STREAM = {"preload_bytes": 1 << 20, "shard_size_bytes": 1 << 22, "prefetch_blocks": 2}


def _by_type(api: dict) -> dict:
    out = {}
    for node_id, node in api.items():
        out.setdefault(node["class_type"], []).append((node_id, node))
    return out


def test_stock_and_streamed_graphs_differ_only_in_the_loader():
    stock, streamed = bench.graph("dit.safetensors", None, 3, seed=4), bench.graph("dit.safetensors", STREAM, 3, seed=4)
    s, t = _by_type(stock), _by_type(streamed)
    assert "UNETLoader" in s and "H3kitStreamedDiTLoader" not in s
    (_, loader), = t["H3kitStreamedDiTLoader"]
    assert loader["inputs"] == {"unet_name": "dit.safetensors", "weight_dtype": "default", **STREAM}
    assert set(s) - {"UNETLoader"} == set(t) - {"H3kitStreamedDiTLoader"}
    (_, sched), = t["BasicScheduler"]
    (_, noise), = t["RandomNoise"]
    assert sched["inputs"]["steps"] == 3 and noise["inputs"]["noise_seed"] == 4
    assert "BasicGuider" in t  # cfg 1: one model call per step, which the step timing relies on
    (_, save), = t["BenchSaveLatentParts"]
    sampler_id = t["SamplerCustomAdvanced"][0][0]
    assert save["inputs"]["samples"] == [sampler_id, 0]


def test_timed_graph_wraps_the_model_before_the_flow_shift_and_lora_sits_after_the_loader():
    api = bench.graph("dit.safetensors", STREAM, 2, lora="l.safetensors", timed="round0")
    t = _by_type(api)
    (timer_id, timer), = t["BenchTimeModel"]
    (_, shift), = t["MiniMaxH3SigmaShift"]
    (lora_id, lora), = t["LoraLoaderModelOnly"]
    loader_id = t["H3kitStreamedDiTLoader"][0][0]
    assert shift["inputs"]["model"] == [timer_id, 0] and timer["inputs"] == {"model": [lora_id, 0], "tag": "round0"}
    assert lora["inputs"]["model"] == [loader_id, 0] and lora["inputs"]["lora_name"] == "l.safetensors"


def test_call_times_keep_only_the_tag_asked_for(tmp_path):
    out = tmp_path / "output"
    out.mkdir()
    rows = [{"tag": "warm", "seconds": 9.0}, {"tag": "timed0", "seconds": 2.5}, {"tag": "timed0", "seconds": 2.25}]
    (out / "bench_calls.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert bench.call_times(tmp_path, "timed0") == [2.5, 2.25]
    assert bench.call_times(tmp_path, "cold") == [] and bench.call_times(tmp_path / "none", "warm") == []


def test_the_benchmark_dit_is_at_least_2_5_gb_in_bf16():
    d = bench.BENCH_DIT
    h, inner, ffn, t = d["hidden_size"], d["num_attention_heads"] * d["attention_head_dim"], d["ffn_hidden_size"], d["time_embed_dim"]
    refiner = 2 * h + 3 * inner * h + 2 * d["attention_head_dim"] + h * inner + 2 * ffn * h + h * ffn
    block = refiner + 18 * h * t + 18 * h  # plus the adaLN projection (6 modulations x 3 modalities)
    assert (d["num_layers"] * block + 2 * refiner) * 2 >= 2.5e9  # two token-refiner blocks; bf16
