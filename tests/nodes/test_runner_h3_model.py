"""The calibration runner's H3 measurement: the pure fit, the skip paths, and a real run in ComfyUI's Python."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from h3kit import bundled
from h3kit.bundled.h3k_calibration_runner import comfy_env, fit, h3_model
from h3kit.bundled.h3k_calibration_runner.job import Job
from h3kit.bundled.h3k_calibration_runner.measure import Progress

RUNNER = bundled.CALIBRATION_RUNNER
BRIDGE = bundled.NATIVE_BRIDGE

# The tiny random-weight DiT of tests/support/comfy_h3/make_tiny_h3.py, as h3kit reads it from the file header.
TINY_ARCH = {"hidden": 64, "heads": 2, "head_dim": 32, "ffn": 128, "text_dim": 48, "blocks_total": 2,
             "refiner_blocks": 2, "rope_inv_freq_len": 4, "timestep_input_dim": 32, "time_embed_hidden": 64,
             "time_embed_dim": 32, "from": "test: make_tiny_h3.py dims"}


def test_tokens_follow_comfyuis_latent_shapes():
    # 64x64, 22 frames: latent [1, 24, 7, 4, 4] -> 7 * 2 * 2 patches; audio 37 latent frames x 2 channels
    assert fit.latent_frames(22) == 7 and fit.audio_latent_frames(22) == 37
    assert fit.tokens_for(64, 64, 22, 128) == 128 + 74 + 28
    assert fit.tokens_for(512, 288, 22, 128) == 128 + 74 + 7 * 9 * 16
    assert fit.snap_frames(24) == 39 and fit.snap_frames(124) == 124 and fit.snap_frames(5) == 5


def _made_up(f0=0.02, f1=1e-5, c=0.01, a=2e-3, b=4e-7, heads=8, blocks_total=40):
    calls = []
    for t in (150, 300, 600):
        blk = c + a * t + b * t * t
        calls.append({"tokens": t, "blocks": 2, "seconds": f0 + f1 * t + 2 * blk, "block_seconds": [blk, blk]})
    calls.append({"tokens": 150, "blocks": 1, "seconds": f0 + f1 * 150 + c + a * 150 + b * 150 ** 2,
                  "block_seconds": []})
    # attention timed with half the heads and a slice of the query rows
    attn = [{"tokens": k, "query_tokens": q, "heads": heads // 2, "seconds": b * q * k / 2}
            for k, q in ((1000, 64), (4000, 256))]
    return calls, attn


def test_fit_recovers_made_up_rates_and_folds_the_block_constant():
    calls, attn = _made_up()
    got = fit.fit_timing(calls, attn, heads=8, blocks_total=40)
    assert got["block_s_per_token2"] == pytest.approx(4e-7, rel=1e-9)
    assert got["block_s_per_token"] == pytest.approx(2e-3, rel=1e-6)
    assert got["block_fixed_s"] == pytest.approx(0.01, rel=1e-6)
    assert got["step_fixed_s"] == pytest.approx(0.02 + 40 * 0.01, rel=1e-6)
    assert got["step_fixed_s_per_token"] == pytest.approx(1e-5, rel=1e-4)
    assert got["residual_pct"] < 1e-6
    t = 5000
    want = 40 * (0.01 + 2e-3 * t + 4e-7 * t * t) + 0.02 + 1e-5 * t
    assert fit.seconds_per_call(got, 40, t) == pytest.approx(want, rel=1e-6)
    # another depth moves the folded per-block constant with it
    assert fit.seconds_per_call(got, 10, t) == pytest.approx(10 * (0.01 + 2e-3 * t + 4e-7 * t * t) + 0.02 + 1e-5 * t,
                                                             rel=1e-6)


def test_fit_residual_exposes_a_check_call_that_disagrees():
    calls, attn = _made_up()
    calls[-1]["seconds"] *= 1.5  # the one-block check 50% slower than the split predicts
    got = fit.fit_timing(calls, attn, heads=8, blocks_total=40)
    assert got["residual_pct"] > 10
    assert calls[-1]["predicted_seconds"] == pytest.approx(calls[-1]["seconds"] / 1.5)


def test_fit_line_never_returns_negative_rates():
    c, a = fit.fit_line([(100, 1.0), (200, 2.5)])  # a negative intercept -> through the origin
    assert c == 0.0 and a == pytest.approx((100 * 1.0 + 200 * 2.5) / (100 ** 2 + 200 ** 2))
    c, a = fit.fit_line([(100, 2.0), (200, 1.0)])  # time falling with tokens is noise: a constant
    assert a == 0.0 and c == pytest.approx(1.5)
    c, a = fit.fit_line([(100, 1.0), (100, 1.2)])  # one token count: a rate through the origin
    assert c == 0.0 and a == pytest.approx(0.011)


def test_solve_says_when_the_points_cannot_separate_the_unknowns():
    with pytest.raises(ValueError, match="distinct token counts"):
        fit.solve([[1.0, 100.0], [1.0, 100.0]], [1.0, 1.1])


def test_repeat_until_stable_stops_on_agreement_or_at_the_cap():
    clock = {"t": 0.0}

    def runner(times):
        it = iter(times)

        def run():
            dt = next(it)
            clock["t"] += dt
            return dt
        return run

    now = lambda: clock["t"]  # noqa: E731
    got = fit.repeat_until_stable(runner([9.0, 1.3, 1.0, 1.01, 0.99, 5.0]), now, warmup=1, min_runs=3, cap_s=100)
    # the first three counted runs disagree (1.3 vs 1.0); the fourth makes the last three agree within 5%
    assert got["stable"] and got["runs"] == 4 and got["seconds"] == pytest.approx(1.0)
    assert got["spread"] == pytest.approx((1.01 - 0.99) / 1.0)
    got = fit.repeat_until_stable(runner([1.0, 2.0, 3.0, 4.0, 5.0]), now, warmup=0, min_runs=2, cap_s=2.5)
    assert not got["stable"] and got["runs"] == 2  # 3 s spent after two runs: past the cap
    got = fit.repeat_until_stable(runner([7.0]), now, warmup=0, min_runs=1, cap_s=1.0)
    assert got["runs"] == 1 and got["spread"] is None and got["seconds"] == 7.0


def test_low_median_keeps_the_fastest_third_so_slowed_runs_do_not_move_it():
    quiet = [1.00, 1.02, 0.99, 1.01]
    assert fit.low_median(quiet) == pytest.approx(0.995)
    # two of three runs slowed by other work on the machine: a plain median would take a slowed one
    assert fit.low_median([1.00, 2.1, 1.7]) == pytest.approx(1.0)
    assert fit.low_median([1.00, 2.1, 0.99, 1.01, 1.98, 1.5]) == pytest.approx(0.995)
    assert fit.low_median([3.0]) == 3.0
    with pytest.raises(ValueError):
        fit.low_median([])


def test_attention_rate_scales_by_heads_and_query_rows():
    pts = [{"tokens": 2000, "query_tokens": 100, "heads": 4, "seconds": 0.2}]
    assert fit.attention_rate(pts, heads=8) == pytest.approx(0.2 * 2 / (100 * 2000))
    assert fit.attention_rate([], heads=8) == 0.0


def test_without_a_comfyui_the_measurement_is_skipped_with_the_reason(tmp_path):
    got = h3_model.measure_h3_model(Job(), None, True, Progress(None))
    assert got == {"status": "skipped", "reason": "no ComfyUI folder was given (--comfyui)"}
    got = h3_model.measure_h3_model(Job(), str(tmp_path), True, Progress(None))
    assert got["status"] == "skipped" and "not a ComfyUI folder" in got["reason"]
    (tmp_path / "comfy").mkdir()
    (tmp_path / "comfy" / "model_management.py").write_text("", encoding="utf-8")
    (tmp_path / "comfyui_version.py").write_text('__version__ = "0.8.0"\n', encoding="utf-8")
    got = h3_model.measure_h3_model(Job(), str(tmp_path), True, Progress(None))
    assert got["status"] == "skipped" and "ComfyUI 0.8.0" in got["reason"] and ">= 0.30" in got["reason"]


def test_a_python_without_torch_says_so(tmp_path):
    try:
        import torch  # noqa: F401
        pytest.skip("this Python has torch")
    except ImportError:
        pass
    (tmp_path / "comfy").mkdir()
    (tmp_path / "comfy" / "model_management.py").write_text("", encoding="utf-8")
    (tmp_path / "comfyui_version.py").write_text('__version__ = "0.33.0"\n', encoding="utf-8")
    got = h3_model.measure_h3_model(Job(), str(tmp_path), True, Progress(None))
    assert got["status"] == "skipped" and got["reason"].startswith("torch is not importable in this Python")


def test_arch_defaults_follow_the_width_and_the_device_follows_the_flags():
    arch = h3_model.resolve_arch(Job(h3_arch={"hidden": 64, "heads": 2, "head_dim": 32, "ffn": 128}))
    assert arch["rope_inv_freq_len"] == 5 and arch["time_embed_dim"] == 32 and arch["blocks_total"] == 50
    assert h3_model.resolve_arch(Job())["hidden"] == 5376
    cfg = h3_model.unet_config(TINY_ARCH, 1)
    assert cfg["num_layers"] == 1 and cfg["hidden_size"] == 64 and cfg["timestep_input_dim"] == 32
    assert Job.from_json({"plan": {"settings": {"comfyui_args": ["--cpu", "--lowvram"]}}}).device() == "cpu"
    assert Job.from_json({"h3_device": "cuda"}).device() == "cuda" and Job.from_json({"device": "mps"}).device() == "mps"
    assert Job.from_json({"plan": {}}).device() is None


def _comfy_python():
    root = os.environ.get("H3KIT_COMFYUI_DIR")
    python = Path(root or "", "venv", "bin", "python")
    if not root or not python.is_file():
        pytest.skip("set H3KIT_COMFYUI_DIR to a ComfyUI >= 0.31 with its venv")
    return root, python


@pytest.mark.comfyui
def test_runner_measures_comfyuis_h3_model_in_comfyuis_python(tmp_path):
    """The runner in ComfyUI's interpreter builds the tiny H3 at its width and reports a usable fit."""
    root, python = _comfy_python()
    job = {"plan": {"settings": {"comfyui_args": ["--cpu"], "canvas": [64, 64], "frames": 22, "vae_tile_size": 256}},
           "h3_arch": TINY_ARCH, "h3_points": [128, 512, 2048], "h3_vae": {"heads": 2, "dim_head": 32, "layers": 1},
           "h3_text_encoder": {"hidden_size": 48, "intermediate_size": 96, "num_hidden_layers": 50,
                               "num_attention_heads": 1, "num_key_value_heads": 1}}
    (tmp_path / "job.json").write_text(json.dumps(job), encoding="utf-8")
    out = tmp_path / "result.json"
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}  # leave the shared ComfyUI folder untouched
    proc = subprocess.run([str(python), str(RUNNER), "--bridge", str(BRIDGE), "--plan", str(tmp_path / "job.json"),
                           "--out", str(out), "--quick", "--comfyui", root], capture_output=True, text=True,
                          timeout=240, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    h = json.loads(out.read_text(encoding="utf-8"))["h3_model"]
    assert h["status"] == "measured", h.get("reason")
    assert h["device"] == "cpu" and h["dtype"] == "float32"  # --cpu: ComfyUI computes H3 in fp32
    assert h["comfyui_version"] and h["attention"]
    assert h["arch"]["hidden"] == 64 and h["arch"]["blocks_total"] == 2 and h["arch"]["blocks_built"] == 1
    timed = [p for p in h["points"] if p["block_seconds"]]
    assert len({p["tokens"] for p in timed}) >= 2 and all(p["seconds"] > 0 for p in h["points"])
    assert {p["blocks"] for p in h["points"]} == {1, 2}  # the block list sliced: one and two blocks
    assert all(sum(p["block_seconds"]) < p["seconds"] for p in timed)  # the blocks sit inside the call
    f = h["fit"]
    assert all(f[k] >= 0 for k in ("block_s_per_token", "block_s_per_token2", "step_fixed_s",
                                   "step_fixed_s_per_token"))
    assert f["block_s_per_token"] + f["block_fixed_s"] > 0 and f["residual_pct"] is not None
    assert len(timed) == 3 and timed[-1]["block_seconds"][0] > timed[0]["block_seconds"][0]  # 16x the tokens
    # the extrapolation to the tiny file's full depth (2 blocks) against the measured two-block call
    two = next(p for p in h["points"] if p["blocks"] == 2)
    predicted = fit.seconds_per_call(f, 2, two["tokens"])
    assert 0.2 * two["seconds"] < predicted < 5 * two["seconds"]
    assert h["extrapolated"]["tokens"] == fit.tokens_for(64, 64, 22, 128) and h["extrapolated"]["seconds_per_call"] > 0
    m = h["memory"]
    # one tiny block in fp32: norms, qkv, out, q/k norms, fc1, fc2, adaln (18 x hidden rows from t_dim, + bias)
    block_params = 64 * 2 + 64 * 192 + 64 * 64 + 32 * 2 + 64 * 256 + 128 * 64 + 18 * 64 * 32 + 18 * 64
    assert m["weights_bytes_per_block"] == 4 * block_params
    assert m["baseline_rss_bytes"] > 0 and m["peak_rss_bytes"] >= m["baseline_rss_bytes"]
    assert m["activation_bytes_per_token"] >= 0 and m["peak_device_bytes"] is None
    assert h["vae"]["status"] == "measured" and h["vae"]["decode_s_per_pixel_frame"] > 0
    assert h["vae"]["canvas_tiles"]["calls"] == 1  # 64x64: one 256px tile, one temporal chunk
    assert h["text_encoder"]["status"] == "measured" and h["text_encoder"]["text_encode_s"] > 0
    assert h["seconds"] < 60


def test_a_compute_bound_block_takes_its_constant_from_the_direct_measurement():
    # true block: 0.05 s + 0.01 s/token; the 160-token point 5% slow (noise) pulls the line's constant up
    pts = [(160, 1.05 * (0.05 + 0.01 * 160)), (480, 0.05 + 0.01 * 480)]
    c_line, a_line = fit.fit_line(pts)
    c, a, how = fit.fit_block(pts, constant_s=0.05)
    assert how.startswith("slope through") and 0.05 <= c < c_line
    t = 5000  # far above the points the directly measured constant extrapolates closer to the truth
    truth = 0.05 + 0.01 * t
    assert abs(c + a * t - truth) < abs(c_line + a_line * t - truth) / 2
    # an overhead-bound block (a tiny model) keeps the straight line: its constant is real
    tiny = [(160, 1.0e-3 + 1e-7 * 160), (480, 1.0e-3 + 1e-7 * 480)]
    c, a, how = fit.fit_block(tiny, constant_s=1e-5)
    assert how == "line" and c == pytest.approx(1e-3) and a == pytest.approx(1e-7)
    # near the bound the fit leans gradually: a recorded quick run (80/168/320 rows) whose line constant sat
    # just under it (8.6%) keeps most of that constant, instead of dropping to the AdaLN's 0.16 ms
    below = fit.fit_block([(80, 0.360), (168, 0.592), (320, 1.101)], constant_s=1.6e-4)
    above = fit.fit_block([(80, 0.380), (168, 0.592), (320, 1.101)], constant_s=1.6e-4)
    assert below[2].startswith("slope through") and above[2] == "line"
    assert abs(below[0] - above[0]) / above[0] < 0.35 and abs(below[1] - above[1]) / above[1] < 0.05
