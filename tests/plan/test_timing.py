"""The time estimate: the formula (plan/timing.py), the throughput table, and its properties over many machines."""

from __future__ import annotations

import copy
import json
import random
from pathlib import Path

import pytest
from h3kit.data.fingerprint import Fingerprint
from h3kit import bundled
from h3kit.core.errors import BadInput
from h3kit.data import catalog as catalog_mod
from h3kit.data import throughput as throughput_mod
from h3kit.data.yamlio import parse_yaml
from h3kit.plan import make_plan, timing
from h3kit.data.speed import PRESET_ORDER

FPS = {p.stem: json.loads(p.read_text()) for p in sorted((Path(__file__).parents[1] / "fixtures" / "fingerprints").glob("*.json"))}
CAT = catalog_mod.load()
PROFILES = catalog_mod.load_profiles(CAT)
ARCH = {"blocks": CAT.blocks}
TABLE = throughput_mod.load()
RATES = ("block_s_per_token", "block_s_per_token2", "step_fixed_s", "step_fixed_s_per_token", "text_encode_s",
         "decode_s_per_pixel_frame")


def test_the_sequence_is_comfyuis_text_audio_video_rows():
    # 864x480, 124 frames: latent_t = (124 - 5) // 17 * 5 + 2 = 37; 27 x 15 patches; audio 2 x round(124/24*40)
    assert timing.sequence_tokens(CAT, 864, 480, 124) == 256 + 2 * 207 + 37 * 15 * 27
    assert timing.sequence_tokens(CAT, 512, 288, 22) == 256 + 2 * 37 + 7 * 9 * 16


def test_estimate_clip_is_the_interface_formula():
    t = {"source": "test", "block_s_per_token": 1e-4, "block_s_per_token2": 2e-9, "step_fixed_s": 0.5,
         "step_fixed_s_per_token": 1e-6, "text_encode_s": 40.0, "decode_s_per_pixel_frame": 2e-7}
    e = timing.estimate_clip({"blocks_total": 50}, t, (864, 480), 124, 20, 1.0, CAT)
    tok = e["tokens"]
    call = 50 * (1e-4 * tok + 2e-9 * tok ** 2) + 0.5 + 1e-6 * tok
    assert e["model_calls_per_step"] == 1 and e["seconds_per_call"] == pytest.approx(call)
    assert e["sampling_s"] == pytest.approx(20 * call)
    assert e["decode_s"] == pytest.approx(2e-7 * 864 * 480 * 124)
    assert e["seconds_per_clip"] == pytest.approx(20 * call + 40.0 + e["decode_s"])
    assert e["minutes_per_clip"] == pytest.approx(e["seconds_per_clip"] / 60) and e["source"] == "test"
    cfg = timing.estimate_clip({"blocks": 50}, t, (864, 480), 124, 20, 3.5, CAT)
    assert cfg["model_calls_per_step"] == 2 and cfg["seconds_per_step"] == pytest.approx(2 * call)
    bare = {k: t[k] for k in ("block_s_per_token", "block_s_per_token2", "step_fixed_s")}
    assert timing.estimate_clip({}, bare, (512, 288), 22, 6, 1.0, CAT)["text_encode_s"] == 0.0


@pytest.mark.parametrize("name, row", [("nvidia-rtx4090-24gb-64gb", "nvidia-rtx-4090"),
                                       ("nvidia-rtx3060-12gb-32gb", "nvidia-rtx-3060"),
                                       ("nvidia-rtx6000ada-48gb-128gb", "nvidia-rtx-6000-ada"),
                                       ("apple-m2pro-32gb", "apple-m2-pro"), ("apple-m1-16gb", "apple-m1"),
                                       ("amd-rx7900xtx-24gb-64gb", "amd-rx-7900-xtx"),
                                       ("intel-arcb580-12gb-32gb", "intel-arc-b580")])
def test_each_synthetic_gpu_finds_its_own_row(name, row):
    t = timing.rates_from_table(Fingerprint.from_json(FPS[name]), CAT, "bf16")
    assert t["source"].startswith(f"table: {row} ") and t["dtype"] == "bfloat16"
    assert all(t[k] > 0 for k in RATES)


def test_unlisted_cards_fall_back_to_their_generation_and_the_cpu_is_computed():
    fp = copy.deepcopy(FPS["nvidia-rtx4090-24gb-64gb"])
    fp["gpus"][0].update(name="NVIDIA Future Card", compute_capability="8.9")
    assert timing.rates_from_table(Fingerprint.from_json(fp), CAT, "bf16")["source"].startswith("table: nvidia-ada ")
    cpu = timing.rates_from_table(Fingerprint.from_json(FPS["cpu-only-16gb"]), CAT, "bf16")
    assert cpu["device"] == "cpu" and cpu["dtype"] == "float32"  # ComfyUI computes H3 in float32 on a CPU
    assert "6 cores x 32 FLOP/cycle (fma) x 3.2 GHz" in cpu["source"]
    # a CPU-only profile on a GPU machine is timed on the CPU
    forced = timing.rates_from_table(Fingerprint.from_json(FPS["nvidia-rtx4090-24gb-64gb"]), CAT, "bf16", backend="cpu")
    assert forced["device"] == "cpu" and "avx512f" in forced["source"]


def test_a_bad_table_row_names_its_line():
    text = (Path(TABLE.path).read_text(encoding="utf-8")
            .replace("names: [\"rtx 4090\"], fp16: 165.2", "names: [\"rtx 4090\"], fp16: -1"))
    with pytest.raises(BadInput) as exc:
        throughput_mod.check(parse_yaml(text, Path("throughput.yaml")))
    line = next(i for i, l in enumerate(text.splitlines(), 1) if "fp16: -1" in l)
    assert f"throughput.yaml:{line}: 'devices[" in exc.value.message and ".fp16' is -1" in exc.value.message


# -- properties over many machines (a seeded generator: hypothesis is not a test dependency) ----------------

def _machines(n: int = 40, seed: int = 20261201):
    rng = random.Random(seed)
    gpu_rows = [r for r in TABLE.devices if r.names]
    for _ in range(n):
        fp = copy.deepcopy(rng.choice(list(FPS.values())))
        fp["cpu"]["physical_cores"] = rng.choice([1, 2, 4, 8, 16, 64])
        fp["cpu"]["flags"] = rng.choice([[], ["sse4_2"], ["avx2", "fma"], ["avx2", "fma", "avx512f"], ["neon"]])
        scale = rng.choice([0.5, 1.0, 2.0, 4.0])
        fp["memory"]["total_bytes"] = int(fp["memory"]["total_bytes"] * scale)
        for g in fp["gpus"]:
            row = rng.choice([r for r in gpu_rows if r.vendor == g["vendor"]] or gpu_rows)
            g["name"] = row.names[0].strip()
            g["memory_total_bytes"] = int(g["memory_total_bytes"] * (scale if g["unified_memory"] else rng.choice([0.5, 1, 2])))
        yield fp


def _faster(t: dict, k: float) -> dict:
    return dict(t, **{r: t[r] * k for r in RATES if r in t})


def test_more_throughput_never_gives_a_longer_estimate():
    rng = random.Random(7)
    for fp in _machines():
        machine = Fingerprint.from_json(fp)
        t = timing.rates_from_table(machine, CAT, CAT.comfyui.dtype_on(machine.backend))
        for _ in range(5):
            canvas = rng.choice(CAT.canvas_ladder)
            frames, steps, cfg = rng.choice(CAT.frames_ladder), rng.randint(1, 60), rng.choice([1.0, 1.0, 4.0])
            slow = timing.estimate_clip(ARCH, t, canvas, frames, steps, cfg, CAT)
            for rate in RATES:  # any one rate faster
                fast = timing.estimate_clip(ARCH, dict(t, **{rate: t[rate] * rng.uniform(0, 1)}), canvas, frames,
                                            steps, cfg, CAT)
                assert fast["seconds_per_clip"] <= slow["seconds_per_clip"]


def test_a_faster_device_row_or_more_cores_never_gives_a_longer_estimate():
    import dataclasses

    fp = FPS["nvidia-rtx4090-24gb-64gb"]
    base = timing.rates_from_table(Fingerprint.from_json(fp), CAT, "bf16")
    row = next(r for r in TABLE.devices if r.id == "nvidia-rtx-4090")
    for field, k in (("bf16", 2.0), ("bandwidth", 2.0), ("bf16", 1.01)):
        rows = tuple(dataclasses.replace(r, **{field: getattr(r, field) * k}) if r is row else r for r in TABLE.devices)
        t = timing.rates_from_table(Fingerprint.from_json(fp), CAT, "bf16", table=dataclasses.replace(TABLE, devices=rows))
        assert all(t[r] <= base[r] for r in RATES)
    cpu = copy.deepcopy(FPS["cpu-only-16gb"])
    times = []
    for cores in (1, 2, 6, 32):
        cpu["cpu"]["physical_cores"] = cores
        times.append(timing.estimate_clip(ARCH, timing.rates_from_table(Fingerprint.from_json(cpu), CAT, "fp32"), (512, 288), 22, 6, 1.0,
                                          CAT)["seconds_per_clip"])
    assert times == sorted(times, reverse=True)


def _plan(fp, timing_override=None):
    from h3kit.data.config import Config

    cfg = Config(overrides={"timing": timing_override}) if timing_override else None
    return make_plan(Fingerprint.from_json(fp), CAT, PROFILES, config=cfg).to_json()  # the h3kit.plan/1 document


def test_defaults_never_exceed_the_memory_limits_and_a_faster_machine_never_gets_a_worse_preset():
    rank = {name: i for i, name in enumerate(reversed(PRESET_ORDER))}  # fast 0 < balanced 1 < quality 2
    for fp in _machines(24, seed=99):
        plan = _plan(fp)
        s, t = plan["settings"], plan["settings"]["timing"]
        assert s["canvas"][0] * s["canvas"][1] <= s["max_canvas"][0] * s["max_canvas"][1]
        assert s["canvas"][0] <= s["max_canvas"][0] and s["frames"] <= s["max_frames"]
        assert s["steps"] == CAT.presets[s["preset"]].steps and plan["estimates"]["minutes_per_clip"] > 0
        if plan["estimates"]["time"]["meets_target"]:
            assert plan["estimates"]["minutes_per_clip"] <= s["target_minutes"]
        faster = _plan(fp, _faster(t, 0.5))
        fs = faster["settings"]
        assert rank[fs["preset"]] >= rank[s["preset"]]
        preset = CAT.presets[s["preset"]]
        relaxed = s["frames"] < preset.min_frames or s["canvas"][0] * s["canvas"][1] < \
            preset.min_canvas[0] * preset.min_canvas[1]  # the last try, below the preset's minimums
        if fs["preset"] == s["preset"] and not relaxed:
            assert fs["canvas"][0] * fs["canvas"][1] >= s["canvas"][0] * s["canvas"][1]
        assert faster["estimates"]["time"]["meets_target"] or not plan["estimates"]["time"]["meets_target"]


def test_the_sequence_matches_the_calibration_runners_count():
    """The runner (bundled, no h3kit import) counts the same rows the plan extrapolates with, on and off the rungs."""
    import importlib.util

    path = bundled.CALIBRATION_RUNNER / "fit.py"
    spec = importlib.util.spec_from_file_location("h3k_fit_for_test", path)
    fit = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fit)
    for w, h in CAT.canvas_ladder + ((64, 64), (96, 160)):
        for frames in (5, 22, 30, 124, 243, 362):
            assert timing.sequence_tokens(CAT, w, h, frames) == fit.tokens_for(w, h, frames, 256), (w, h, frames)


def test_int8_and_fp8_dits_run_their_linears_at_the_8bit_rate_on_cuda_only():
    fp = FPS["nvidia-rtx3060-12gb-32gb"]
    bf16 = timing.rates_from_table(Fingerprint.from_json(fp), CAT, "bf16", weight_format="bf16")
    int8 = timing.rates_from_table(Fingerprint.from_json(fp), CAT, "bf16", weight_format="int8_convrot")
    assert int8["block_s_per_token"] == pytest.approx(bf16["block_s_per_token"] * 25.6 / 101.9)  # RTX 3060 row
    assert int8["block_s_per_token2"] == bf16["block_s_per_token2"]  # attention stays bf16
    assert "int8_convrot linears at 101.9 TOPS int8" in int8["source"]
    gguf = timing.rates_from_table(Fingerprint.from_json(fp), CAT, "bf16", weight_format="q4_k_m")  # ComfyUI-GGUF dequantizes to bf16
    assert gguf["block_s_per_token"] == bf16["block_s_per_token"]
    mac = FPS["apple-m2max-64gb"]
    assert (timing.rates_from_table(Fingerprint.from_json(mac), CAT, "bf16", weight_format="int8_convrot")["block_s_per_token"]
            == timing.rates_from_table(Fingerprint.from_json(mac), CAT, "bf16")["block_s_per_token"])
    from h3kit.data.config import Config

    s = make_plan(Fingerprint.from_json(fp), CAT, PROFILES, config=Config(overrides={"quantization": "int8_convrot"})).settings
    assert s.quantization == "int8_convrot" and "TOPS int8" in s.timing["source"]
