"""Where h3kit streams the DiT itself, decided through make_plan on synthetic machines, and the read-ahead arithmetic.

Machines are the planner's fixtures (tests/fixtures/fingerprints) or one of them with its RAM changed
(Apple: the GPU share follows Metal's working set, 2/3 of RAM up to 32 GB and 3/4 above, as SOURCES.md
there says). Versions: the plan assumes the torch h3kit installs (profiles/torch_builds.yaml); a probed
ComfyUI's versions go in through `runtime`.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from h3kit.data.fingerprint import Fingerprint
from h3kit.data import catalog as catalog_mod
from h3kit.data.catalog import Machine
from h3kit.data.config import Config
from h3kit.plan import make_plan
from h3kit.plan import dynamic_vram as dynamic_vram_mod, prefetch, streaming
from h3kit.plan.dynamic_vram import dynamic_vram
from h3kit.plan.prefetch import call_wait_s, prefetch_for
from h3kit.plan.search import plan_profile

FP_DIR = Path(__file__).parents[1] / "fixtures" / "fingerprints"
CAT = catalog_mod.load()
PROFILES = catalog_mod.load_profiles(CAT)
GIB = 2**30


def _fp(name: str, ram_gib: int | None = None, gpu_share: float | None = None) -> dict:
    fp = json.loads((FP_DIR / f"{name}.json").read_text())
    if ram_gib is not None:
        fp = copy.deepcopy(fp)
        fp["memory"]["total_bytes"] = ram_gib * GIB
        fp["memory"]["available_bytes"] = int(ram_gib * GIB * 0.7)
        if gpu_share is not None:
            fp["gpus"][0]["memory_total_bytes"] = int(ram_gib * GIB * gpu_share)
    return fp


def _plan(fp: dict, **overrides) -> dict:
    """The planner's h3kit.plan/1 document, with `overrides` as config.yaml's."""
    return make_plan(Fingerprint.from_json(fp), CAT, PROFILES,
                     config=Config(overrides=overrides) if overrides else None).to_json()


def _stream(fp: dict, **overrides) -> dict:
    return _plan(fp, **overrides)["settings"]["streaming"]


def _direct(fp: dict, runtime=None, **overrides) -> tuple[dict, list[str]]:
    """The plan's profile planned with a probed `runtime` (its streaming policy uses that ComfyUI's versions):
    (settings.streaming as the plan writes it, the streaming rationale)."""
    plan = _plan(fp, **overrides)
    fp = Fingerprint.from_json(fp)
    machine = Machine.from_fingerprint(fp)
    config = Config(overrides=overrides) if overrides else None
    c = plan_profile(CAT, fp, machine, PROFILES[plan["profile"]], config, runtime=runtime)
    return streaming.to_doc(c.stream, CAT).to_json(), streaming.rationale(CAT, c)


# -- Apple MPS: unified memory, no dynamic VRAM ---------------------------------------------


@pytest.mark.parametrize("ram,share", [(24, 2 / 3), (32, 2 / 3), (48, 3 / 4)])
def test_mps_24_32_48_gb_stream_the_bf16_dit(ram, share):
    plan = _plan(_fp("apple-m2pro-32gb", ram, share))
    st = plan["settings"]["streaming"]
    assert plan["settings"]["quantization"] == "bf16" and plan["fits"]
    assert st["enabled"] is True and st["dynamic_vram"] is False
    assert 0 < st["resident_blocks"] < st["blocks"] and st["preload_bytes"] == st["resident_blocks"] * st["block_bytes"]
    assert st["peak_ram_bytes"] <= plan["budget"]["ram_bytes"] and st["fits"]
    said = " ".join(plan["rationale"])
    assert "h3kit streams the DiT from disk" in said and "no dynamic VRAM on MPS" in said


def test_more_unified_memory_keeps_more_blocks():
    counts = [_stream(_fp("apple-m2pro-32gb", r, s))["resident_blocks"] for r, s in ((24, 2 / 3), (32, 2 / 3), (48, 3 / 4))]
    assert counts == sorted(counts) and counts[0] < counts[-1]


def test_a_192_gb_mac_holds_the_dit_whole_and_does_not_stream():
    plan = _plan(_fp("apple-m3ultra-192gb"))
    st = plan["settings"]["streaming"]
    assert st["enabled"] is False and st["resident_blocks"] == st["blocks"]
    assert "to spare" in st["why"] and "only cost time" in st["why"]


def test_a_gguf_dit_is_streamed_and_a_comfyui_quantized_one_names_the_file_that_can():
    """A 36 GB GGUF forced onto a 32 GB Mac: ComfyUI cannot hold it, h3kit streams it (its blocks dequantized per
    use). An int8_convrot file (ComfyUI's own quantized format) is not streamed; the plan names the streamable
    file of the same variant and at least its quality."""
    plan = _plan(_fp("apple-m2pro-32gb"), dit_weights="h3-dit-full-q8_0")
    st = plan["settings"]["streaming"]
    assert plan["settings"]["quantization"] == "q8_0" and st["enabled"] is True and st["streamable"] is True
    assert plan["fits"]
    held = _plan(_fp("apple-m2pro-32gb"), dit_weights="h3-dit-full-int8_convrot")
    st = held["settings"]["streaming"]
    assert st["enabled"] is False and st["streamable"] is False and not held["fits"]
    [line] = [r for r in held["rationale"] if "streamer is off" in r]
    assert "int8_convrot" in line and "GGUF" in line and "dit_weights: h3-dit-full-q8_0" in line


def test_a_streamed_gguf_block_is_counted_dequantized_not_at_its_file_size():
    """h3kit's loader dequantizes each GGUF block into the compute dtype (bf16 on a Mac): a Q8_0 block of
    file bytes B holds B x 16 / 8.5 in memory, and the plan's sample phase counts that, not B."""
    plan = _plan(_fp("apple-m2pro-32gb"), dit_weights="h3-dit-full-q8_0")
    machine = Machine.from_fingerprint(Fingerprint.from_json(_fp("apple-m2pro-32gb")))
    c = plan_profile(CAT, Fingerprint.from_json(_fp("apple-m2pro-32gb")), machine, PROFILES[plan["profile"]],
                     Config(overrides={"dit_weights": "h3-dit-full-q8_0"}))
    assert c.est.streamed
    block = CAT.block_bytes(c.choice.dit)
    assert c.est.block_held == int(block * 2 * 8 / 8.5)
    bf16 = plan_profile(CAT, Fingerprint.from_json(_fp("apple-m2pro-32gb")), machine, PROFILES[plan["profile"]],
                        Config(overrides={"dit_weights": "h3-dit-pruned-bf16"}))
    assert bf16.est.block_held == CAT.block_bytes(bf16.choice.dit)  # bf16 on MPS: computed as it is stored


# -- CPU only ----------------------------------------------------------------------------------


def test_cpu_16_gb_fits_with_the_text_encoder_streamed_too():
    """Held whole, the text encoder alone (13.1 GB at the smallest) is beyond 16 GB less headroom; streamed layer by
    layer (issue #33) it fits, and so does the streamed bf16 DiT."""
    plan = _plan(_fp("cpu-only-16gb"))
    st = plan["settings"]["streaming"]
    assert plan["fits"] and st["enabled"] is True and st["dynamic_vram"] is False and st["fits"] is True
    assert plan["settings"]["quantization"] == "bf16" and plan["settings"]["text_encoder_streaming"]["enabled"]
    assert not any("short by" in w for w in plan["warnings"])


def test_cpu_16_gb_with_the_text_encoder_held_fits_nothing():
    """text_encoder_stream: off brings back the old answer: the encode phase is short."""
    plan = _plan(_fp("cpu-only-16gb"), text_encoder_stream="off")
    assert not plan["fits"] and not plan["settings"]["text_encoder_streaming"]["enabled"]
    assert any("the encode phase needs" in w and "short by" in w for w in plan["warnings"])


def test_cpu_64_gb_streams_bf16_because_comfyui_holds_it_as_float32():
    plan = _plan(_fp("cpu-only-16gb", 64))
    st = plan["settings"]["streaming"]
    assert plan["settings"]["quantization"] == "bf16"
    assert st["enabled"] is True and "cast to float32: 80.5 GB" in st["why"]  # 2 x the 40.23 GB bf16 file
    assert 0 < st["resident_blocks"] < st["blocks"] and st["fits"]
    assert "--cpu in the launch flags" in " ".join(plan["rationale"])


def test_cpu_128_gb_holds_even_the_float32_copy():
    st = _stream(_fp("cpu-only-16gb", 128))
    assert st["enabled"] is False and "to spare" in st["why"]


# -- NVIDIA: dynamic VRAM on by default, off by flag or old torch ---------------------------------


def test_nvidia_with_dynamic_vram_leaves_streaming_to_comfyui():
    plan = _plan(_fp("nvidia-rtx4090-24gb-64gb"))
    st = plan["settings"]["streaming"]
    assert st["enabled"] is False and st["dynamic_vram"] is True
    assert "ComfyUI's dynamic VRAM already streams the weights" in " ".join(plan["rationale"])
    assert "torch 2.14.1" in st["why"]  # the release in profiles/torch_builds.yaml


@pytest.mark.parametrize("flag", ["--disable-dynamic-vram", "--novram"])
def test_nvidia_without_dynamic_vram_streams_only_when_ram_cannot_hold_the_rest(flag):
    roomy = _stream(_fp("nvidia-rtx4090-24gb-64gb"), comfyui_args=[flag])
    assert roomy["dynamic_vram"] is False and roomy["enabled"] is False and "in RAM" in roomy["why"]
    tight = _direct(_fp("nvidia-rtx4090-24gb-64gb", 32), comfyui_args=[flag], quantization="bf16")[0]
    assert tight["dynamic_vram"] is False and tight["enabled"] is True and "would hold the whole DiT" in tight["why"]


@pytest.mark.parametrize("flag", ["--highvram", "--gpu-only"])
def test_highvram_loads_the_whole_dit_onto_the_card_so_h3kit_streams(flag):
    st = _stream(_fp("nvidia-rtx4090-24gb-64gb"), comfyui_args=[flag])
    assert st["enabled"] is True and st["dynamic_vram"] is False and st["why"].startswith(f"{flag} makes ComfyUI")
    assert st["preload_bytes"] == st["resident_blocks"] * st["block_bytes"]


def test_nvidia_with_torch_older_than_2_8_has_no_dynamic_vram():
    st, why = _direct(_fp("nvidia-rtx4090-24gb-64gb", 64), runtime={"torch": "2.7.1+cu126", "aimdo": True},
                      quantization="bf16", stream_dit="on")
    assert st["dynamic_vram"] is False and st["enabled"] is True and "torch 2.7 < 2.8" in " ".join(why)
    assert st["assumed"] == "the probed ComfyUI"
    on, _ = _direct(_fp("nvidia-rtx4090-24gb-64gb", 64), runtime={"torch": "2.8.0+cu128", "aimdo": True},
                    quantization="bf16")
    assert on["dynamic_vram"] is True and on["enabled"] is False


def test_nvidia_whose_ram_cannot_hold_the_off_card_dit_streams_it_from_disk_without_dynamic_vram():
    """Issue #33: with dynamic VRAM ComfyUI keeps the DiT's off-card blocks in RAM (stream_from: ram); where that
    RAM cannot hold them nothing fits, so the plan adds --disable-dynamic-vram and h3kit's loader streams the same
    DiT from the file."""
    plan = _plan(_fp("nvidia-rtx4090-24gb-64gb", 32), quantization="bf16")
    st = plan["settings"]["streaming"]
    assert plan["fits"] and "--disable-dynamic-vram" in plan["settings"]["comfyui_args"]
    assert st["enabled"] is True and st["dynamic_vram"] is False and plan["settings"]["quantization"] == "bf16"
    assert any(r.startswith("With ComfyUI's dynamic VRAM nothing fits") for r in plan["rationale"])
    # the 8 GB card with 8 GB of RAM: the pruned Q2_K DiT the closest plan held, streamed instead
    small = _plan(_fp("nvidia-rtx4060-8gb-8gb"))
    assert small["fits"] and small["settings"]["streaming"]["enabled"]
    assert small["settings"]["dit_weights"] == "h3-dit-pruned-q2_k"
    assert small["settings"]["text_encoder_streaming"]["enabled"]
    # stream_dit: off keeps ComfyUI's dynamic VRAM, and the plan says what is short
    off = _plan(_fp("nvidia-rtx4060-8gb-8gb"), stream_dit="off")
    assert not off["fits"] and "--disable-dynamic-vram" not in off["settings"]["comfyui_args"]


def test_a_probed_comfyui_without_comfy_aimdo_has_no_dynamic_vram():
    st, _ = _direct(_fp("nvidia-rtx4090-24gb-64gb"), runtime={"torch": "2.14.1+cu130", "aimdo": False})
    assert st["dynamic_vram"] is False and st["enabled"] is False  # 64 GB of RAM holds what the card does not


# -- AMD ROCm: dynamic VRAM from HIP 7.14 ------------------------------------------------------


def test_amd_on_h3kits_rocm_7_2_wheels_has_no_dynamic_vram():
    plan = _plan(_fp("amd-rx7900xtx-24gb-64gb"))
    st = plan["settings"]["streaming"]
    assert st["dynamic_vram"] is False and st["assumed"] == "the torch h3kit installs (rocm7.2)"
    assert st["enabled"] is False and "in RAM" in st["why"]  # 64 GB of RAM holds the offloaded part
    tight = _direct(_fp("amd-rx7900xtx-24gb-64gb", 32), quantization="bf16")[0]
    assert tight["enabled"] is True and tight["dynamic_vram"] is False


def test_amd_with_rocm_7_14_leaves_streaming_to_comfyui():
    st, why = _direct(_fp("amd-rx7900xtx-24gb-64gb"), runtime={"torch": "2.14.1+rocm7.14", "hip": "7.14.0"},
                      quantization="bf16")
    assert st["dynamic_vram"] is True and st["enabled"] is False
    assert "dynamic VRAM already streams" in why[0]


def test_intel_xpu_has_no_dynamic_vram():
    st = _stream(_fp("intel-arcb580-12gb-32gb"))
    assert st["dynamic_vram"] is False


# -- settings ---------------------------------------------------------------------------------


def test_stream_dit_forces_and_prefetch_blocks_sets_the_depth():
    on = _stream(_fp("nvidia-rtx4090-24gb-64gb"), stream_dit="on", prefetch_blocks=3)
    assert on["enabled"] is True and on["why"] == "stream_dit is on in the settings" and on["prefetch_blocks"] == 3
    off = _stream(_fp("apple-m2pro-32gb"), stream_dit="off")
    assert off["enabled"] is False and off["why"] == "stream_dit is off in the settings"


def test_the_loader_bypasses_the_page_cache_exactly_when_the_cache_cannot_hold_the_file():
    small = _plan(_fp("cpu-only-16gb"))  # 16 GB: the streamed blocks are more than the cache keeps
    assert small["settings"]["streaming"]["page_cache"] == "bypass"
    assert any("page_cache: bypass" in r for r in small["rationale"])
    big = _stream(_fp("apple-m2pro-32gb", 128, 3 / 4), stream_dit="on")  # 128 GB: they stay cached
    assert big["enabled"] and big["page_cache"] == "use"
    named = _plan(_fp("cpu-only-16gb"), page_cache="use")  # the settings' choice wins, and the rationale says so
    assert named["settings"]["streaming"]["page_cache"] == "use"
    assert any("page_cache: use, from the settings" in r for r in named["rationale"])


def test_a_deeper_ring_costs_memory():
    """Each block read ahead is one more buffer of the file's block size, in RAM during sampling."""
    fp = _fp("nvidia-rtx4090-24gb-64gb")
    one = _stream(fp, prefetch_blocks=1, comfyui_args=["--highvram"])
    eight = _stream(fp, prefetch_blocks=8, comfyui_args=["--highvram"])
    assert eight["prefetch_blocks"] == 8 and eight["enabled"]
    assert one["peak_ram_bytes"] < eight["peak_ram_bytes"] <= one["peak_ram_bytes"] + 7 * one["block_bytes"]


def test_on_a_cpu_resident_blocks_share_ram_with_the_text_encoder():
    """Resident blocks stay across prompts, so the next prompt's text encoding runs beside them."""
    plan = _plan(_fp("cpu-only-16gb", 64))
    st = plan["settings"]["streaming"]
    phases = plan["estimates"]["phases"]
    per_block = 2 * st["block_bytes"]  # held as float32 on a CPU
    peak = max(p["ram_bytes"] for p in phases.values())
    assert phases["encode"]["ram_bytes"] == peak == plan["estimates"]["peak_ram_bytes"] == st["peak_ram_bytes"]
    assert peak <= plan["budget"]["ram_bytes"] < peak + per_block  # one more resident block would not fit


def test_planning_twice_gives_the_same_streaming():
    fp = _fp("apple-m2pro-32gb")
    assert _stream(fp) == _stream(fp)


# -- ComfyUI's rule -----------------------------------------------------------------------------


@pytest.mark.parametrize("backend,args,torch,hip,expected", [
    ("cuda", [], (2, 14, 1), None, True),
    ("cuda", [], (2, 7, 1), None, False),
    ("cuda", ["--enable-dynamic-vram"], (2, 7, 1), None, True),  # main.py skips the torch check then
    ("cuda", ["--cpu"], (2, 14, 1), None, False),
    ("cuda", [], None, None, None),
    ("rocm", [], (2, 14, 1), (7, 2), False),
    ("rocm", [], (2, 14, 1), (7, 14), True),
    ("rocm", [], (2, 14, 1), None, None),
    ("mps", [], (2, 14, 1), None, False),
    ("mps", ["--enable-dynamic-vram"], (2, 14, 1), None, False),  # comfy-aimdo has no MPS library
    ("xpu", [], (2, 14, 1), None, False),
    ("cpu", [], (2, 14, 1), None, False),
])
def test_dynamic_vram_follows_comfyui_main_py(backend, args, torch, hip, expected):
    assert dynamic_vram(backend, args, torch, hip)[0] is expected


def test_the_assumed_versions_come_from_the_wheel_table():
    nvidia = dynamic_vram_mod.assumed_runtime(Fingerprint.from_json(_fp("nvidia-rtx4090-24gb-64gb")))
    assert nvidia["torch"] == (2, 14, 1) and nvidia["hip"] is None
    amd = dynamic_vram_mod.assumed_runtime(Fingerprint.from_json(_fp("amd-rx7900xtx-24gb-64gb")))
    assert amd["hip"] == (7, 2)


# -- read-ahead -------------------------------------------------------------------------------


def test_a_read_well_inside_compute_needs_one_block_ahead():
    r = prefetch_for(2e9, 500_000_000, 1.0)
    assert r == {"prefetch_blocks": 1, "io_wait_fraction": 0.0, "read_s_per_block": 0.25, "compute_s_per_block": 1.0,
                 "disk_bound": False, "ring_blocks": 2}


def test_a_read_close_to_compute_gets_a_second_buffer():
    r = prefetch_for(1e9, 800_000_000, 1.0)
    assert r["prefetch_blocks"] == 2 and r["io_wait_fraction"] == 0.0 and not r["disk_bound"]


def test_a_slow_disk_waits_the_difference_whatever_the_depth():
    r = prefetch_for(150e6, 750_000_000, 1.0)  # 5 s to read a block that computes in 1 s
    assert r["disk_bound"] and r["io_wait_fraction"] == pytest.approx(0.8, abs=1e-3)
    assert r["prefetch_blocks"] == 2  # deeper would hold more memory for the same throughput
    assert prefetch_for(150e6, 750_000_000, 1.0, max_blocks=1)["prefetch_blocks"] == 1


def test_resident_blocks_give_a_deeper_ring_time_to_fill():
    """39 of 50 blocks streamed, reads 0.375 s, compute 0.3 s: reads can hide behind the resident stretch
    only if the reader may run far enough ahead."""
    shallow = prefetch_for(2e9, 750_000_000, 0.3, max_blocks=2, blocks=50, resident_blocks=11, fixed_s=0.5)
    deep = prefetch_for(2e9, 750_000_000, 0.3, max_blocks=8, blocks=50, resident_blocks=11, fixed_s=0.5)
    assert deep["prefetch_blocks"] > shallow["prefetch_blocks"]
    assert deep["io_wait_fraction"] < shallow["io_wait_fraction"] / 5
    hide = deep["hide_resident_blocks"]
    wait, total = call_wait_s(0.375, 0.3, 50, hide, 8, 0.5)
    assert wait <= 0.01 * total and call_wait_s(0.375, 0.3, 50, hide - 1, 8, 0.5)[0] > 0.01 * total


def test_the_pipeline_model_in_the_steady_state():
    assert call_wait_s(0.5, 0.3, 10, 0, 1) == pytest.approx((2.0, 5.0))  # every block waits 0.2 s
    assert call_wait_s(0.2, 0.3, 10, 0, 1) == pytest.approx((0.0, 3.0))
    assert call_wait_s(1.0, 0.1, 10, 9, 1) == pytest.approx((0.0, 1.0))  # one read hides behind nine resident blocks


@pytest.mark.parametrize("bad", [dict(disk_bytes_per_s=0), dict(block_bytes=0)])
def test_prefetch_for_refuses_nonsense(bad):
    args = {"disk_bytes_per_s": 1e9, "block_bytes": 1 << 20, "block_compute_s": 0.1, **bad}
    with pytest.raises(ValueError):
        prefetch_for(**args)


# -- the search knows about streaming (plan/search.py, plan/budget.py) --------------------------------


def test_a_32_gb_mac_streams_a_safetensors_dit_and_fits():
    plan = _plan(_fp("apple-m2pro-32gb"))
    s, st = plan["settings"], plan["settings"]["streaming"]
    assert s["dit_weights"] == "h3-dit-pruned-bf16" and st["enabled"] and plan["fits"]
    assert CAT.weight(s["dit_weights"]).file.name.endswith(".safetensors")
    # the plan's figures are the streamed run's, not ComfyUI holding the DiT
    assert plan["estimates"]["peak_ram_bytes"] == st["peak_ram_bytes"] <= plan["budget"]["ram_bytes"]
    assert plan["estimates"]["peak_gpu_bytes"] == st["peak_gpu_bytes"] <= plan["budget"]["gpu_bytes"]
    assert st["held_fits"] is False and st["held_peak_ram_bytes"] > plan["budget"]["ram_bytes"]
    assert s["preload_bytes"] == st["preload_bytes"] == st["resident_blocks"] * st["block_bytes"]


def test_a_24_gb_cpu_box_streams_a_safetensors_dit_and_fits():
    plan = _plan(_fp("cpu-only-16gb", 24))
    st = plan["settings"]["streaming"]
    assert plan["settings"]["dit_weights"] == "h3-dit-pruned-bf16" and st["enabled"] and plan["fits"]
    assert plan["estimates"]["peak_ram_bytes"] == st["peak_ram_bytes"] <= plan["budget"]["ram_bytes"]
    assert plan["comfyui_loads"]["dit"] == "stock"  # not a GGUF reported not to load
    said = " ".join(plan["rationale"])
    assert "streamed from disk by h3kit's loader" in said and "more per model call" in said


def test_streaming_costs_time_in_the_estimate():
    """The same 24 GB CPU plan with the streamer's overhead and without it (stream_dit: off cannot fit, so the
    comparison is of the overhead itself): every model call is slower by the streamed share."""
    plan = _plan(_fp("cpu-only-16gb", 24))
    t = plan["estimates"]["time"]
    st = plan["settings"]["streaming"]
    assert t["stream_pass_overhead"] == st["pass_overhead"] > 0.5
    from h3kit.plan.timing import estimate_clip
    plain = estimate_clip({"blocks": CAT.blocks}, plan["settings"]["timing"], plan["settings"]["canvas"],
                          plan["settings"]["frames"], plan["settings"]["steps"], plan["settings"]["cfg"], CAT)
    assert t["seconds_per_step"] == pytest.approx(plain["seconds_per_step"] * (1 + st["pass_overhead"]), rel=1e-3)


@pytest.mark.parametrize("name,ram,share", [("apple-m2pro-32gb", 128, 3 / 4), ("apple-m3ultra-192gb", None, None)])
def test_a_128_gb_mac_holds_the_dit(name, ram, share):
    plan = _plan(_fp(name, ram, share))
    st = plan["settings"]["streaming"]
    assert plan["settings"]["quantization"] == "bf16" and plan["fits"]
    assert st["enabled"] is False and st["resident_blocks"] == st["blocks"] and "only cost time" in st["why"]
    assert plan["estimates"]["time"]["stream_pass_overhead"] == 0


def test_without_the_streamer_a_32_gb_mac_holds_a_smaller_format_or_nothing():
    plan = _plan(_fp("apple-m2pro-32gb"), stream_dit="off")
    assert plan["settings"]["streaming"]["enabled"] is False and plan["settings"]["quantization"] != "bf16"
    assert plan["estimates"]["time"]["stream_pass_overhead"] == 0


@pytest.mark.parametrize("name", ["nvidia-rtx4090-24gb-64gb", "nvidia-rtx3060-12gb-32gb", "nvidia-rtx4060-8gb-16gb",
                                  "nvidia-rtx5090-32gb-96gb", "nvidia-2x-rtx3090-24gb-128gb"])
@pytest.mark.parametrize("scale", [0.25, 0.5, 1.0, 2.0])
def test_nvidia_with_dynamic_vram_never_uses_h3kits_streamer(name, scale):
    fp = copy.deepcopy(_fp(name))
    fp["memory"]["total_bytes"] = int(fp["memory"]["total_bytes"] * scale)
    for g in fp["gpus"]:
        g["memory_total_bytes"] = int(g["memory_total_bytes"] * scale)
    plan = _plan(fp)
    st = plan["settings"]["streaming"]
    assert st["dynamic_vram"] is True and st["enabled"] is False
    assert plan["estimates"]["time"]["stream_pass_overhead"] == 0


def test_cpu_holds_bf16_at_twice_its_file_size():
    """ComfyUI casts 16-bit float files to float32 on a CPU (FACTS.md: 2.65 GB bf16 -> 5.0 GB): the held
    estimate counts the DiT (and the fp16 video VAE) at 2x, a GGUF at its file size; a GPU holds bf16 as is."""
    from h3kit.plan.budget import Choice, memory_estimate, make_budget

    fp = _fp("cpu-only-16gb", 128)
    settings = PROFILES["cpu-only"].settings
    budget = make_budget(CAT, Fingerprint.from_json(fp), settings, cpu=True)
    bf16, q8 = CAT.weight("h3-dit-pruned-bf16"), CAT.weight("h3-dit-pruned-q8_0")
    te, vae16, vae8, audio = CAT.weight("h3-te-qwen3vl32b-q2_k_m"), CAT.weight("h3-vae-video-fp16"), \
        CAT.weight("h3-vae-video-int8"), CAT.audio_vae[0]
    held = memory_estimate(CAT, budget, settings, Choice(bf16, te, vae8, audio, (512, 288), 22))
    packed = memory_estimate(CAT, budget, settings, Choice(q8, te, vae8, audio, (512, 288), 22))
    assert held.dit_held == 2 * bf16.bytes and packed.dit_held == q8.bytes
    assert held.phases["sample"]["ram_bytes"] - packed.phases["sample"]["ram_bytes"] == 2 * bf16.bytes - q8.bytes
    fp16_vae = memory_estimate(CAT, budget, settings, Choice(q8, te, vae16, audio, (512, 288), 22))
    assert fp16_vae.phases["decode"]["ram_bytes"] - packed.phases["decode"]["ram_bytes"] == 2 * vae16.bytes - vae8.bytes
    gpu_fp = _fp("apple-m3ultra-192gb")
    gpu_budget = make_budget(CAT, Fingerprint.from_json(gpu_fp), PROFILES["apple-unified-128-plus"].settings)
    assert memory_estimate(CAT, gpu_budget, PROFILES["apple-unified-128-plus"].settings,
                    Choice(bf16, te, vae8, audio, (512, 288), 22)).dit_held == bf16.bytes


def test_the_cast_is_data_in_the_catalog():
    cu = CAT.comfyui
    assert cu.dtype_on("cpu") == "float32" and cu.dtype_on("mps") == "bfloat16" and cu.dtype_on("cuda") == "bfloat16"
    assert cu.held_factor("dit", "bf16", "cpu") == 2.0 and cu.held_factor("dit", "q8_0", "cpu") == 1.0
    assert cu.held_factor("text_encoder", "bf16", "cpu") == 1.0  # ComfyUI loads text encoders in float16 there
    assert dict(cu.compute_dtype)["cpu"] == "float32" and dict(cu.cast_formats) == {"bf16": 2, "fp16": 2}


def test_without_dynamic_vram_stream_from_disk_does_not_hide_the_dit_from_ram():
    """stream_from: disk on a card without dynamic VRAM: ComfyUI still keeps the part the card does not hold in
    RAM, so the held figures are the same as with stream_from: ram."""
    fp = _fp("amd-rx7900xtx-24gb-64gb")
    disk = _plan(fp, stream_from="disk", stream_dit="off")
    ram = _plan(fp, stream_from="ram", stream_dit="off")
    assert disk["estimates"]["peak_ram_bytes"] == ram["estimates"]["peak_ram_bytes"]
    assert disk["settings"]["streaming"]["dynamic_vram"] is False


def test_the_measured_overhead_is_waiting_plus_the_cpu_copy_over_the_streamed_share():
    from h3kit.plan.prefetch import measured_pass_overhead

    hidden = prefetch.prefetch_for(4e9, 400_000_000, 0.2)  # reads 0.1 s a block: hidden behind 0.2 s of compute
    assert hidden["io_wait_fraction"] == 0 and measured_pass_overhead(hidden) == 0
    assert measured_pass_overhead(hidden, copy_s_per_block=0.03) == pytest.approx(0.15)
    assert measured_pass_overhead(hidden, 0.5, copy_s_per_block=0.03) == pytest.approx(0.075)
    slow = prefetch.prefetch_for(1e9, 400_000_000, 0.2)  # 0.4 s a block: the disk is the limit, half the time waits
    assert slow["io_wait_fraction"] == pytest.approx(0.5, abs=0.01)
    assert measured_pass_overhead(slow) == pytest.approx(1.0, abs=0.03)


def test_cpu_64_gb_keeps_the_streamed_blocks_in_the_page_cache_and_counts_the_cached_cost():
    # the resident blocks as float32 and the run's peak leave room for the streamed bf16 blocks between steps
    plan = _plan(_fp("cpu-only-16gb", 64))
    st = plan["settings"]["streaming"]
    said = " ".join(plan["rationale"])
    assert "The page cache holds the" in said and "cached_pass_overhead" in said
    streamed = st["blocks"] - st["resident_blocks"]
    assert st["pass_overhead"] == pytest.approx(CAT.throughput.stream_cached_overhead * streamed / st["blocks"], abs=1e-4)
    small = _plan(_fp("cpu-only-16gb"))  # 16 GB: a 40 GB file is read from the disk every step, as before
    assert "The page cache" not in " ".join(small["rationale"])


def test_streaming_is_decided_once_and_the_plan_reads_the_decision(monkeypatch):
    """One policy per profile (the search's), one frozen decision per candidate; the plan document and the
    rationale read it and decide nothing again."""
    import dataclasses

    calls = []
    real = streaming.policy
    monkeypatch.setattr(streaming, "policy", lambda *a, **k: calls.append(1) or real(*a, **k))
    fp = Fingerprint.from_json(_fp("cpu-only-16gb"))
    c = plan_profile(CAT, fp, Machine.from_fingerprint(fp), PROFILES["cpu-only"], None)
    assert len(calls) == 1 and c.stream.enabled and c.stream.streamed is c.est
    with pytest.raises(dataclasses.FrozenInstanceError):
        c.stream.enabled = False  # type: ignore[misc]
    plan = make_plan(fp, CAT, PROFILES, profile="cpu-only")
    assert plan.settings.streaming == streaming.to_doc(c.stream, CAT)
    assert plan.settings.streaming.streamed.page_cache == c.est.page_cache == "bypass"
