"""h3kit's streamed text encoder in the plan (issue #33): the encode phase's arithmetic on the real catalog, when the
plan streams it (settings key text_encoder_stream), its time, and the decision the plan document carries."""

from __future__ import annotations

import copy
import json
from dataclasses import replace
from pathlib import Path

import pytest

from h3kit.data import catalog as catalog_mod
from h3kit.data.config import Config
from h3kit.data.fingerprint import Fingerprint
from h3kit.data.plan_doc import Plan
from h3kit.plan import make_plan, te_stream
from h3kit.plan.te_stream import held_encode_phase
from h3kit.plan.budget import Choice, make_budget, memory_estimate
from h3kit.data.settings import typed

FP_DIR = Path(__file__).parents[1] / "fixtures" / "fingerprints"
CAT = catalog_mod.load()
PROFILES = catalog_mod.load_profiles(CAT)
TS = CAT.memory.text_encoder_stream
PROCESS = CAT.memory.comfyui_process_ram
ACT = CAT.memory.text_encoder_activation


def _fp(name: str, ram_gib: int | None = None) -> Fingerprint:
    doc = json.loads((FP_DIR / f"{name}.json").read_text())
    if ram_gib is not None:
        doc = copy.deepcopy(doc)
        doc["memory"]["total_bytes"] = ram_gib * 2**30
        doc["memory"]["available_bytes"] = int(ram_gib * 2**30 * 0.7)
    return Fingerprint.from_json(doc)


def _plan(name: str, ram_gib: int | None = None, **overrides) -> Plan:
    return make_plan(_fp(name, ram_gib), CAT, PROFILES, config=Config(overrides=overrides) if overrides else None)


def _budget(name: str):
    fp = _fp(name)
    profile = {"cpu-only-16gb": "cpu-only", "apple-m1-16gb": "apple-unified-24",
               "nvidia-rtx4060-8gb-16gb": "nvidia-8gb"}[name]
    return make_budget(CAT, fp, PROFILES[profile].settings, cpu=name.startswith("cpu"))


def test_the_catalog_carries_the_nodes_figures_with_their_source():
    assert (TS.layers, TS.layer_held, TS.vision_tower) == (50, 975_000_000, 1_190_000_000)
    assert TS.ring_layer_sets == 2 and TS.in_place_layer_sets == 1 and TS.prefetch_layers == 1
    assert TS.read_rate("ssd") > TS.read_rate("hdd") and TS.read_rate("nvme-or-other") == TS.read_rate("unknown")


@pytest.mark.parametrize("wid, reads", [("h3-te-qwen3vl32b-q4_k_m", True), ("h3-te-qwen3vl32b-q2_k_m", True),
                                         ("h3-te-qwen3vl32b-int8_convrot", False),
                                         ("h3-te-qwen3vl32b-nvfp4_awq", False),
                                         ("h3-te-qwen3vl32b-convrot_w4a4", False)])
def test_the_loader_reads_gguf_and_plain_floats_never_comfyuis_quantized_safetensors(wid, reads):
    assert te_stream.readable(CAT.weight(wid)) is reads


def test_a_plain_bf16_file_would_be_read_too():
    q4 = CAT.weight("h3-te-qwen3vl32b-q4_k_m")
    bf16 = replace(q4, format="bf16", file=replace(q4.file, name="qwen3vl_32b_minimax_h3_bf16.safetensors",
                                                   loader="CLIPLoader"))
    assert te_stream.readable(bf16)


def test_gguf_on_a_cpu_holds_two_layers_a_ring_the_activations_and_the_vision_tower():
    b = _budget("cpu-only-16gb")
    te = CAT.weight("h3-te-qwen3vl32b-q4_k_m")
    gpu, ram = te_stream.encode_phase(CAT, b, te, PROCESS)
    ring = 2 * -(-te.bytes // 50)
    assert gpu is None
    assert ram == PROCESS + 2 * TS.layer_held + ring + ACT + TS.vision_tower
    assert ram < held_encode_phase(CAT, b, te, PROCESS)[1] - 10 * 10**9  # 18.2 GB held whole vs ~6.4 GB


def test_plain_safetensors_on_a_cpu_are_read_in_place_with_no_ring():
    b = _budget("cpu-only-16gb")
    q4 = CAT.weight("h3-te-qwen3vl32b-q4_k_m")
    bf16 = replace(q4, format="bf16", bytes=51_506_295_256,
                   file=replace(q4.file, name="qwen3vl_32b_minimax_h3_bf16.safetensors", loader="CLIPLoader"))
    assert te_stream.ring_bytes(CAT, b, bf16) == 0
    assert te_stream.encode_phase(CAT, b, bf16, PROCESS)[1] == \
        PROCESS + TS.layer_held + ACT + TS.vision_tower


def test_on_a_discrete_gpu_the_layers_are_on_the_card_and_the_ring_in_ram():
    b = _budget("nvidia-rtx4060-8gb-16gb")
    te = CAT.weight("h3-te-qwen3vl32b-q2_k_m")
    gpu, ram = te_stream.encode_phase(CAT, b, te, PROCESS)
    assert gpu == 2 * TS.layer_held + ACT + TS.vision_tower
    assert ram == PROCESS + 2 * -(-te.bytes // 50)


def test_apple_counts_the_one_pool_once():
    b = _budget("apple-m1-16gb")
    te = CAT.weight("h3-te-qwen3vl32b-q4_k_m")
    gpu, ram = te_stream.encode_phase(CAT, b, te, PROCESS)
    assert ram == PROCESS + gpu + 2 * -(-te.bytes // 50)


def test_the_estimate_counts_the_streamed_encoder_only_in_the_encode_phase():
    b = _budget("cpu-only-16gb")
    s = PROFILES["cpu-only"].settings
    dit, te, vae = CAT.weight("h3-dit-pruned-bf16"), CAT.weight("h3-te-qwen3vl32b-q4_k_m"), CAT.weight("h3-vae-video-int8")
    held = memory_estimate(CAT, b, s, Choice(dit, te, vae, CAT.audio_vae[0], (512, 288), 39), 1)
    streamed = memory_estimate(CAT, b, s, Choice(dit, te, vae, CAT.audio_vae[0], (512, 288), 39, True), 1)
    assert streamed.phases["encode"]["ram_bytes"] < held.phases["encode"]["ram_bytes"]
    assert streamed.phases["sample"]["ram_bytes"] - streamed.resident_blocks * streamed.block_held == \
        held.phases["sample"]["ram_bytes"] - held.resident_blocks * held.block_held


@pytest.mark.parametrize("name", ["apple-m1-16gb", "cpu-only-16gb", "apple-m2-16gb", "apple-m3pro-18gb"])
def test_the_16_to_18_gb_machines_fit_every_phase_at_512x288x39_or_more(name):
    plan = _plan(name)
    s, te = plan.settings, plan.settings.text_encoder_streaming
    assert plan.fits and plan.blocked is None
    assert te.enabled and te.node == "H3kitStreamedTextEncoderLoader" and s.text_encoder_weights.endswith("q4_k_m")
    assert s.max_canvas[0] * s.max_canvas[1] >= 512 * 288 and s.max_frames >= 39
    for phase in plan.estimates.phases.values():
        assert phase.ram_bytes <= plan.budget.ram_bytes
        assert phase.gpu_bytes is None or phase.gpu_bytes <= plan.budget.gpu_bytes
    said = " ".join(plan.rationale)
    assert "h3kit streams the text encoder (q4_k_m, 18.2 GB)" in said
    assert "Text encoder streamed: one 18.2 GB read per prompt, about 36 s at 0.5 GB/s" in said
    assert "q4_k_m (quality 85) is the best-ranked file the streamed loader reads" in said
    assert "it ranks above q2_k_m" in said


def test_with_memory_no_longer_the_limit_the_better_gguf_is_chosen():
    """Held, only q2_k_m was within reach of a 16 GB machine (and not even it); streamed, the q4_k_m file wins on
    quality, since both readable files fit."""
    assert CAT.formats["q4_k_m"].quality > CAT.formats["q2_k_m"].quality
    assert _plan("cpu-only-16gb").settings.text_encoder_weights == "h3-te-qwen3vl32b-q4_k_m"


def test_the_time_counts_one_read_of_the_file_per_prompt():
    on, off = _plan("apple-m1-16gb"), _plan("apple-m1-16gb", text_encoder_stream="off")
    te = on.settings.text_encoder_streaming
    assert te.read_bytes == CAT.weight("h3-te-qwen3vl32b-q4_k_m").bytes
    assert te.disk_bytes_per_s == TS.read_rate("ssd") and te.read_s == pytest.approx(te.read_bytes / te.disk_bytes_per_s, abs=0.1)
    assert on.estimates.time.text_encode_s == pytest.approx(off.estimates.time.text_encode_s + te.read_bytes / te.disk_bytes_per_s)


def test_a_read_beyond_the_time_share_is_not_planned():
    """On a hard disk the q4_k_m file takes 121 s a prompt, more than 10% of 15 minutes; q2_k_m (87 s) is within."""
    fp = json.loads((FP_DIR / "cpu-only-16gb.json").read_text())
    fp["disks"][0]["kind"] = "hdd"
    plan = make_plan(Fingerprint.from_json(fp), CAT, PROFILES)
    assert plan.settings.text_encoder_streaming.enabled
    assert plan.settings.text_encoder_weights == "h3-te-qwen3vl32b-q2_k_m"
    said = next(r for r in plan.rationale if r.startswith("Streamed, memory no longer decides the text encoder"))
    assert "q4_k_m ranks higher, but one 18.2 GB read per prompt, about 121 s at 0.15 GB/s" in said


def test_off_holds_it_whole_and_on_streams_even_where_it_would_fit():
    off = _plan("cpu-only-16gb", text_encoder_stream="off").settings.text_encoder_streaming
    assert not off.enabled and off.why == "text_encoder_stream is off in the settings"
    roomy = _plan("cpu-only-16gb", 128)
    assert not roomy.settings.text_encoder_streaming.enabled
    forced = _plan("cpu-only-16gb", 128, text_encoder_stream="on").settings.text_encoder_streaming
    assert forced.enabled and forced.why == "text_encoder_stream is on in the settings"


def test_a_quantized_safetensors_encoder_is_never_streamed():
    plan = _plan("nvidia-rtx4060-8gb-16gb")
    te = plan.settings.text_encoder_streaming
    assert plan.settings.text_encoder_weights == "h3-te-qwen3vl32b-nvfp4_awq" and not te.enabled
    assert "does not read" in te.why


def test_the_page_cache_rule_bypasses_a_file_the_cache_cannot_keep():
    small = _plan("cpu-only-16gb").settings.text_encoder_streaming
    assert small.page_cache == "bypass"
    roomy = _plan("cpu-only-16gb", 128, text_encoder_stream="on").settings.text_encoder_streaming
    assert roomy.page_cache == "use"
    assert _plan("cpu-only-16gb", page_cache="use").settings.text_encoder_streaming.page_cache == "use"


def test_the_decision_survives_a_saved_plan():
    plan = _plan("apple-m1-16gb")
    back = Plan.from_json(json.loads(json.dumps(plan.to_json())))
    assert back.settings.text_encoder_streaming == plan.settings.text_encoder_streaming
    assert plan.to_json()["settings"]["text_encoder_streaming"]["enabled"] is True


def test_an_8_gb_cpu_says_its_real_floor_in_one_sentence():
    plan = _plan("cpu-only-8gb")
    assert not plan.fits and plan.settings.text_encoder_streaming.enabled
    assert plan.blocked.count(". ") == 0 and "it would work with more RAM (at least" in plan.blocked


def test_the_setting_is_checked():
    assert typed({"text_encoder_stream": True}).text_encoder_stream == "on"
    assert typed({}).text_encoder_stream == "auto"


def test_a_measured_disk_rate_times_the_read_and_decides_the_file():
    """Calibration's disk probe writes disk_read_bytes_per_s under calibrated:; the plan times the read at it."""
    fast = _plan("cpu-only-16gb", disk_read_bytes_per_s="3 GB").settings.text_encoder_streaming
    assert fast.enabled and fast.disk_bytes_per_s == 3 * 10**9
    assert fast.read_s == pytest.approx(fast.read_bytes / 3e9, abs=0.1)
    assert fast.rate_source == "measured by 'h3kit calibrate' (disk_read_bytes_per_s)"
    # a slow measured disk: the q4_k_m read (18.2 GB at 0.15 GB/s, 121 s) is beyond 10% of 15 min, q2_k_m is not
    slow = _plan("cpu-only-16gb", disk_read_bytes_per_s=150_000_000)
    assert slow.settings.text_encoder_weights == "h3-te-qwen3vl32b-q2_k_m"
    said = next(r for r in slow.rationale if r.startswith("Streamed, memory no longer decides the text encoder"))
    assert "q4_k_m ranks higher, but one 18.2 GB read per prompt, about 121 s at 0.15 GB/s (measured by" in said


def test_calibration_writes_the_disk_probes_rate_for_the_next_plans():
    from h3kit.calibrate.decisions import calibrated_values, decide_disk_read
    from h3kit.data.settings import KEYS

    plan = _plan("apple-m1-16gb")
    got = decide_disk_read(plan, {"status": "measured", "read_bytes_per_s": 2.4e9, "path": "/Volumes/Models"})
    assert got["setting"] == "disk_read_bytes_per_s" and got["value"] == 2_400_000_000 and got["changed"]
    assert "2.40 GB/s from /Volumes/Models" in got["evidence"]
    assert calibrated_values([got], KEYS) == {"disk_read_bytes_per_s": 2_400_000_000}
    assert decide_disk_read(plan, {"status": "skipped"}) is None


def test_a_disk_rate_of_nothing_is_one_sentence_and_exit_2(run_cli, h3kit_home):
    (h3kit_home / "config.yaml").write_text("overrides:\n  disk_read_bytes_per_s: 0\n")
    code, out, err = run_cli("plan", "--fingerprint", str(FP_DIR / "cpu-only-16gb.json"))
    assert code == 2 and "disk_read_bytes_per_s" in err and "allowed: 1 MB/s to 1 TB/s" in err
    assert "Traceback" not in err
