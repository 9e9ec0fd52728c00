"""The format probe in a real ComfyUI >= 0.31 on this machine (opt-in: H3KIT_COMFYUI_DIR).

A throwaway copy of that ComfyUI (tests/support/comfy_h3) with ComfyUI-GGUF unpacked
into its custom_nodes from the fetched mirror (H3KIT_COMFYUI_GGUF_GIT, a git
dir; without it the GGUF rows must say skipped and why). gguf-py comes from
ComfyUI's venv when it has it, else from a folder this test installs it into
(PYTHONPATH of the runner only; the real venv is never written). Checks: every
format of both parts has a status, the ones measured ran ComfyUI's own code on
this device, the whole probe takes at most 60 s, the second call is the
cache, and `h3kit doctor` prints the table and carries it in --json.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

import comfy_h3
from h3kit.data.fingerprint import Fingerprint
from h3kit.calibrate import format_probe as fp
from h3kit.comfyui import locate
from h3kit.core.session import Session
from h3kit.data.format_evidence import PARTS, STATUSES

REAL, PYTHON, WHY = comfy_h3.h3_comfyui()
pytestmark = [pytest.mark.native, pytest.mark.comfyui, pytest.mark.slow, pytest.mark.skipif(REAL is None, reason=WHY)]
GGUF_GIT = Path(os.environ.get("H3KIT_COMFYUI_GGUF_GIT", "/work/.mirror/city96+ComfyUI-GGUF/repo"))
SAFETENSORS = ("bf16", "fp8_scaled", "int8_convrot", "nvfp4", "nvfp4_awq", "w4a8")
GGUF = ("q8_0", "q6_k", "q5_0", "q4_k", "q3_k", "q2_k")


def _unpack_gguf_pack(comfy: Path) -> bool:
    if not (GGUF_GIT / "HEAD").is_file():
        return False
    archive = subprocess.run(["git", f"--git-dir={GGUF_GIT}", "archive", "HEAD"], capture_output=True, timeout=120,
                             check=True).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(comfy / "custom_nodes" / "ComfyUI-GGUF", filter="data")
    return True


def _gguf_py_path(tmp: Path) -> str | None:
    """None when ComfyUI's Python imports gguf already, else a folder gguf-py was installed into for this test."""
    if subprocess.run([str(PYTHON), "-c", "import gguf"], capture_output=True, timeout=120).returncode == 0:
        return None
    target = tmp / "gguf-py"
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(target), "gguf"],
                   check=True, capture_output=True, timeout=300)
    return str(target)


@pytest.fixture(scope="module")
def probe_comfy(tmp_path_factory):
    comfy = comfy_h3.make_test_comfyui(REAL, tmp_path_factory.mktemp("probe") / "ComfyUI")
    return comfy, _unpack_gguf_pack(comfy), _gguf_py_path(tmp_path_factory.mktemp("site"))


def test_every_format_has_a_status_within_a_minute_and_doctor_prints_it(probe_comfy, h3kit_home, run_cli,
                                                                        monkeypatch):
    comfy, with_pack, gguf_path = probe_comfy
    if gguf_path:
        monkeypatch.setenv("PYTHONPATH", gguf_path)
    ctx = Session()
    install = locate.find(str(comfy), None, ctx, need_write=False)
    said: list[dict] = []
    started = time.perf_counter()
    probe = fp.format_evidence(ctx, install, fingerprint=Fingerprint(), findings=said)
    wall = time.perf_counter() - started
    sys.__stdout__.write(f"\nformat probe: {wall:.1f} s wall, {probe.seconds if probe else None} s in the runner\n"
                         + "\n".join(fp.table_lines(probe) if probe else [json.dumps(said)]) + "\n")
    assert probe is not None, said
    assert wall <= 60, f"the probe took {wall:.1f} s (budget 60 s)"
    assert probe.comfyui_version == locate.comfyui_version(comfy) and probe.backend == "cpu"
    for part in PARTS:
        rows = probe.parts[part]
        assert set(rows) == set(SAFETENSORS + GGUF), part
        for fmt, res in rows.items():
            assert res.status in STATUSES and (res.status == "runs" or res.error), (part, fmt, res)
        assert rows["bf16"].status == "runs" and rows["bf16"].device == "cpu" and rows["bf16"].dtype == "float32"
        for fmt in SAFETENSORS[1:]:
            assert rows[fmt].status in ("runs", "fails"), (part, fmt, rows[fmt])  # ComfyUI 0.33 has them all
        for fmt in GGUF:
            if with_pack:
                assert rows[fmt].status in ("runs", "fails"), (part, fmt, rows[fmt])
            else:
                assert rows[fmt].status == "skipped" and "ComfyUI-GGUF is not installed" in rows[fmt].error

    again: list[dict] = []
    started = time.perf_counter()
    cached = fp.format_evidence(ctx, install, fingerprint=Fingerprint(), findings=again)
    assert cached is not None and cached.to_json() == probe.to_json()
    assert again[0]["check"] == "formats.cache" and time.perf_counter() - started < 20  # inspect only, no probe

    code, out, _err = run_cli("doctor", "--comfyui", str(comfy), "--json")
    doc = json.loads(out)
    assert doc["format_probe"]["parts"] == probe.to_json()["parts"]
    assert any(f["check"] == "formats.probe" for f in doc["findings"])
    code, out, _err = run_cli("doctor", "--comfyui", str(comfy))
    assert f"Format probe: ComfyUI {probe.comfyui_version}, torch {probe.torch}, cpu (backend cpu)" in out
    assert "  cache key: ComfyUI" in out and "  q4_k " in out


CHECK_LAYOUTS = r"""
import json, sys
sys.path[:0] = [sys.argv[1], sys.argv[2]]
from comfy.cli_args import args
args.cpu = True
import numpy as np, torch, gguf
import comfy.ops, comfy.quant_ops as q
import h3k_calibration_runner.format_build as fb
env = {"torch": torch, "ops": comfy.ops}
out = {}
for fmt, (algo, layout, kwargs) in fb.SAFETENSORS.items():
    sd = fb.safetensors_state(env, "dit", fmt)
    where = {"ops": comfy.ops.mixed_precision_ops({}, torch.float32), "weight_dtype": torch.float32,
             "device": torch.device("cpu")}
    full = fb.build_layer(env, "dit", sd, where).weight.dequantize()
    slab = q.QuantizedTensor.from_float(fb.random_rows(torch, fb.SLAB, fb.LAYERS["dit"]["in"], seed=len(fmt)),
                                        layout, **kwargs).dequantize()
    out[fmt] = all(torch.equal(full[i:i + fb.SLAB], slab) for i in range(0, full.shape[0], fb.SLAB))
pack = sys.argv[3]
if pack != "-":
    ops, _ = fb.gguf_pack(pack)
    dequant = sys.modules["h3k_probe_gguf_pack.dequant"]
    for fmt, name in fb.GGUF.items():
        qtype = getattr(gguf.GGMLQuantizationType, name)
        raw = fb.gguf_rows(torch, qtype, fb.SLAB, 5376, seed=len(fmt))
        ref = torch.from_numpy(gguf.quants.dequantize(raw.numpy(), qtype))  # gguf-py's own reading of the blocks
        ours = dequant.dequantize_tensor(ops.GGMLTensor(raw, tensor_type=qtype, tensor_shape=ref.shape),
                                         torch.float32)
        # ComfyUI-GGUF multiplies the scales in float16 (its dequant_dtype default): equal to that rounding
        out[fmt] = bool(torch.isfinite(ref).all()) and bool(torch.allclose(ours, ref, rtol=2e-3, atol=5e-5)) \
            and 0 < float(ref.abs().max()) < 1.0
print(json.dumps(out))
"""


def test_repeated_slabs_are_what_the_quantizer_writes_and_gguf_blocks_are_valid(probe_comfy, monkeypatch):
    """What format_build relies on: every layout scales rows on their own, so the slab repeated to full height
    dequantizes to the slab's values in every block of rows; the GGUF rows (gguf-py's quantizer, random k-quant
    blocks with finite scales) read the same through gguf-py and ComfyUI-GGUF."""
    comfy, with_pack, gguf_path = probe_comfy
    bundled = Path(fp.RUNNER).parent
    env = {**os.environ, "PYTHONPATH": gguf_path} if gguf_path else None
    done = subprocess.run([str(PYTHON), "-c", CHECK_LAYOUTS, str(comfy), str(bundled), str(comfy) if with_pack else "-"],
                          capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    checked = json.loads(done.stdout.strip().splitlines()[-1])
    assert checked == {f: True for f in checked} and set(SAFETENSORS[1:]) <= set(checked), checked
    if with_pack:
        assert set(GGUF) <= set(checked)
