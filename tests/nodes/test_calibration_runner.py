"""The self-contained calibration runner: its safetensors files, the scaled DiT, and failure reporting."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from h3kit import bundled
from h3kit.bundled import h3k_safetensors
from h3kit.bundled.h3k_calibration_runner import dit_ops, measure, native_bench, safetensors_io, scaled_dit
from h3kit.bundled.h3k_calibration_runner.job import Job

RUNNER = bundled.CALIBRATION_RUNNER
BRIDGE = bundled.NATIVE_BRIDGE


def test_safetensors_layout_is_the_published_format(tmp_path):
    a = np.arange(12, dtype=np.float32)
    raw = bytes(range(7))
    path = tmp_path / "t.safetensors"
    offsets = safetensors_io.write_safetensors(str(path), [("a", "F32", [3, 4], a.tobytes()), ("q", "U8", [7], raw)],
                                       {"quantization": "q8_0"})
    data = path.read_bytes()
    (n,) = struct.unpack("<Q", data[:8])
    assert (8 + n) % 8 == 0  # the header is padded so tensor data starts aligned
    header = h3k_safetensors.read_header(path)  # the shared reader, with its checks, accepts what the runner writes
    assert header["data_start"] == 8 + n and header["file_size"] == len(data)
    assert header["metadata"] == {"quantization": "q8_0"}
    assert header["tensors"]["a"] == {"dtype": "F32", "shape": [3, 4], "start": 8 + n, "end": 8 + n + 48}
    assert [(e["start"], e["end"]) for e in header["tensors"].values()] == [offsets["a"], offsets["q"]]
    assert np.array_equal(np.frombuffer(data[offsets["a"][0]:offsets["a"][1]], np.float32), a)
    assert data[offsets["q"][0]:offsets["q"][1]] == raw


@pytest.mark.comfyui
def test_safetensors_file_loads_with_the_safetensors_package(tmp_path):
    """The oracle: the `safetensors` package in ComfyUI's venv reads our file back unchanged."""
    comfy = os.environ.get("H3KIT_COMFYUI_DIR")
    python = Path(comfy or "", "venv", "bin", "python")
    if not comfy or not python.is_file():
        pytest.skip("set H3KIT_COMFYUI_DIR to a ComfyUI with a venv holding safetensors")
    a = np.linspace(-1, 1, 64, dtype=np.float32)
    path = tmp_path / "t.safetensors"
    safetensors_io.write_safetensors(str(path), [("w", "F32", [8, 8], a.tobytes()), ("q", "U8", [5], b"\x01\x02\x03\x04\x05")], {})
    script = ("import sys, json; from safetensors.numpy import load_file; t = load_file(sys.argv[1]); "
              "print(json.dumps({k: v.ravel().tolist() for k, v in t.items()}))")
    proc = subprocess.run([str(python), "-c", script, str(path)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout)
    assert np.allclose(got["w"], a) and got["q"] == [1, 2, 3, 4, 5]


@pytest.fixture(scope="module")
def native(native_library):
    """The real native library (the session's build) through the real bridge."""
    return native_bench.load_bridge(str(BRIDGE), str(native_library))


TINY = {"blocks": 2, "hidden": 256, "heads": 2, "head_dim": 128, "ffn": 672, "tokens": 48}


@pytest.mark.parametrize("kind, limit", [("q8_0", 0.03), ("q4_0", 0.25)])
def test_scaled_dit_through_the_streamer_matches_fp32(native, kind, limit):
    job = {"scaled_dit": {**TINY, "quantization": kind},
           "plan": {"settings": {"shard_size_bytes": 1 << 20, "preload_bytes": 2 << 20}}}
    out = scaled_dit.run_scaled_dit(native, Job.from_json(job), True, measure.Progress(None))
    assert out["status"] == "measured"
    # The kernels alone agree with fp32 math on the dequantized weights...
    assert out["kernel_relative_error"] < 1e-4
    # ...and quantization costs what its bit width allows.
    assert 0 < out["relative_error"] < limit
    assert len(out["blocks"]) == 2 and all(b["seconds"] > 0 for b in out["blocks"])
    assert out["bytes_streamed"] == sum(b["bytes"] for b in out["blocks"])
    assert out["peak_rss_bytes"] > out["baseline_rss_bytes"] > 0
    kinds = {span["kind"] for span in out["timeline"]}
    assert kinds == {"wait", "compute"}


def test_the_check_catches_weights_read_from_the_wrong_place(native, monkeypatch):
    """Negative control: stream block 1's bytes for block 0 and the error must be large."""
    real = scaled_dit.stream_blocks

    def swapped(st, layout):
        layout = [dict(b) for b in layout]
        layout[0]["start"], layout[0]["end"], layout[1]["start"], layout[1]["end"] = \
            layout[1]["start"], layout[1]["end"], layout[0]["start"], layout[0]["end"]
        yield from real(st, layout)

    monkeypatch.setattr(scaled_dit, "stream_blocks", swapped)
    job = {"scaled_dit": {**TINY, "quantization": "q8_0"}, "plan": {"settings": {"shard_size_bytes": 1 << 20}}}
    out = scaled_dit.run_scaled_dit(native, Job.from_json(job), True, measure.Progress(None))
    assert out["relative_error"] > 0.3 and out["kernel_relative_error"] > 0.3


def test_runner_reports_a_broken_bridge_and_still_writes_its_result(tmp_path):
    bridge = tmp_path / "h3k_native"
    bridge.mkdir()
    (bridge / "__init__.py").write_text("raise ImportError('no library in this test')\n")
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"schema": "h3kit.plan/1", "settings": {}, "budget": {}}))
    out = tmp_path / "result.json"
    proc = subprocess.run([sys.executable, str(RUNNER), "--bridge", str(bridge), "--plan", str(plan), "--out", str(out),
                           "--quick"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(out.read_text())
    assert doc["native"]["status"] == "error" and "no library in this test" in doc["native"]["reason"]
    assert doc["inference"]["status"] == "skipped"
    assert any("native" in s for s in doc["skipped"])
    assert doc["device"]["status"] in ("skipped", "measured", "error")


def test_runner_without_numpy_measures_native_and_the_scaled_dit(native, tmp_path):
    """h3kit's own Python has no numpy: `-S` (no site-packages) gives the same situation here."""
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"plan": {"settings": {}, "budget": {}}, "scaled_dit": {**TINY, "quantization": "q8_0"}}))
    out = tmp_path / "result.json"
    python = getattr(sys, "_base_executable", sys.executable)
    probe = subprocess.run([python, "-S", "-c", "import numpy"], capture_output=True)
    if probe.returncode == 0:
        pytest.skip("numpy is importable even without site-packages here")
    proc = subprocess.run([python, "-S", str(RUNNER), "--bridge", str(BRIDGE), "--lib", str(native.path), "--plan", str(plan), "--out", str(out), "--quick"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(out.read_text())
    assert doc["runner"]["numpy"] is None
    assert doc["native"]["status"] == "measured", doc["native"]
    assert all(k["gflop_per_s"] > 0 for k in doc["native"]["kernels"])
    inf = doc["inference"]
    assert inf["status"] == "measured", inf
    assert inf["path"] == "native+python" and inf["config"]["hidden"] == TINY["hidden"]
    assert 0 < inf["relative_error"] < 0.03 and inf["kernel_relative_error"] < 1e-4
    assert inf["bytes_streamed"] == sum(b["bytes"] for b in inf["blocks"]) > 0
    assert all(b["seconds"] > 0 for b in inf["blocks"]) and inf["peak_rss_bytes"] > 0
    assert not any("scaled DiT" in s for s in doc["skipped"])


@pytest.mark.parametrize("kind", ["q8_0", "q4_0"])
def test_numpy_and_native_python_paths_agree_on_the_same_weights(native, kind):
    """Both paths on the same shape, weights and input: the same outputs within fp32 rounding, and so
    the same errors. Weights from the stdlib generator, the one the native+python path uses."""
    job = {"scaled_dit": {**TINY, "quantization": kind},
           "plan": {"settings": {"shard_size_bytes": 1 << 20, "preload_bytes": 2 << 20}}}
    weights = lambda cfg, b: dit_ops.stdlib_block_weights(native, cfg, b)  # noqa: E731
    inputs = dit_ops.stdlib_inputs(TINY)
    by_path = {path: scaled_dit.scaled_dit(native, Job.from_json(job), True, measure.Progress(None), path, weights, inputs)
               for path in ("numpy", "native+python")}
    (a, ya), (b, yb) = by_path["numpy"], by_path["native+python"]
    assert a["path"] == "numpy" and b["path"] == "native+python" and a["config"] == b["config"]
    yb = np.frombuffer(yb, np.float32).reshape(ya.shape)
    # the quantized kernels round activations to int16 per 32 values, so fp32 rounding differences
    # upstream can move an output by about the kernels' own error (~3e-5 relative), no more
    assert np.linalg.norm(ya - yb) <= 1e-4 * np.linalg.norm(ya)
    assert b["relative_error"] == pytest.approx(a["relative_error"], rel=1e-3)
    assert b["kernel_relative_error"] < 1e-4 and a["kernel_relative_error"] < 1e-4
    assert a["bytes_streamed"] == b["bytes_streamed"]


def test_native_python_path_shrinks_the_shape_and_measures_the_error(native):
    """Run as in the installer's venv (no numpy): the shape is capped; the figures are real."""
    big = {"blocks": 4, "hidden": 1024, "heads": 8, "head_dim": 128, "ffn": 2720, "tokens": 384, "quantization": "q8_0"}
    cfg = dit_ops.python_path_shape(big, quick=True)
    assert (cfg["blocks"], cfg["hidden"], cfg["heads"], cfg["tokens"]) == (2, 256, 2, 384)
    assert cfg["ffn"] % 32 == 0 and abs(cfg["ffn"] / cfg["hidden"] - 2720 / 1024) < 0.1
    assert dit_ops.python_path_shape(TINY, quick=True) == TINY  # within the caps: unchanged
    small = {**big, "hidden": 256, "ffn": 672, "tokens": 96, "blocks": 1}
    out = scaled_dit.run_scaled_dit(native, Job.from_json({"scaled_dit": small, "plan": {"settings": {}}}), True,
                                measure.Progress(None), path="native+python")
    assert out["path"] == "native+python" and 0 < out["relative_error"] < 0.03
    assert out["kernel_relative_error"] < 1e-4


@pytest.mark.comfyui
def test_device_measurements_run_with_real_torch(tmp_path):
    """The GPU code path, run by ComfyUI's real torch on its CPU device (tiny tiles): no GPU is needed
    to catch a wrong call; the rates themselves are only meaningful on a GPU."""
    comfy = os.environ.get("H3KIT_COMFYUI_DIR")
    python = Path(comfy or "", "venv", "bin", "python")
    if not comfy or not python.is_file():
        pytest.skip("set H3KIT_COMFYUI_DIR to a ComfyUI with a venv holding torch")
    script = (
        "import json, sys\n"
        "sys.path.insert(0, sys.argv[1])\n"
        "from h3k_calibration_runner import device, measure\n"
        "from h3k_calibration_runner.job import Job\n"
        "import torch\n"
        "print(json.dumps({'real': device.torch_device()[2]}))\n"
        "device.torch_device = lambda: (torch, 'cpu', 'cpu')\n"
        "job = {'budget': {'gpu_bytes': 10**9}, 'tile_candidates': [64, 128], 'device_matmul_size': 128,\n"
        "       'device_copy_bytes': 1 << 20}\n"
        "dev, tiles = device.measure_device(Job.from_json(job), True, measure.Progress(None))\n"
        "print(json.dumps({'device': dev, 'tiles': tiles}, default=str))\n"
    )
    proc = subprocess.run([str(python), "-c", script, str(RUNNER.parent)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    first, second = [json.loads(line) for line in proc.stdout.strip().splitlines()[-2:]]
    assert "sees no cuda, mps or xpu" in first["real"] or first["real"] in ("cuda", "rocm", "mps", "xpu")
    dev = second["device"]
    assert dev["status"] == "measured" and dev["bf16_tflops"] > 0 and dev["h2d_gb_per_s"] > 0
    assert [t["tile"] for t in second["tiles"]] == [64, 128]
    assert all(t["seconds"] > 0 for t in second["tiles"])
