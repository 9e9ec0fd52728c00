"""scripts/make_h3_dit.py's random H3 DiT, and the streamed loader on one at H3's real block width.

Without ComfyUI: the sizes it plans (50 blocks match the published pruned
bf16 file) and its bad-input exits. With H3KIT_COMFYUI_DIR: a narrow file is
detected by ComfyUI as H3 and loads into the model it builds with no key
missing or left over, every value finite. With H3KIT_REAL_WIDTH=1 as well
(opt-in: it writes a 24.8 GB file and a step reads all of it, several
minutes on a 2-core machine): 30 real-width blocks (H3KIT_REAL_WIDTH_BLOCKS
to change), larger than this machine's RAM, made in the test under
H3KIT_REAL_WIDTH_DIR (default: pytest's temporary folder) and deleted
after; one step of h3kit's text-to-video graph through the pack's streamed
loader in the real ComfyUI reads every block once, gives a finite latent,
and the process peaks under 40% of RAM.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

import comfy_h3

pytestmark = pytest.mark.native  # installs: the session's native library, not a compile per test

REPO = Path(__file__).resolve().parents[2]
MAKE = REPO / "scripts" / "make_h3_dit.py"
REAL, PYTHON, WHY = comfy_h3.h3_comfyui()
needs_comfy = pytest.mark.skipif(REAL is None, reason=WHY)
REAL_WIDTH = os.environ.get("H3KIT_REAL_WIDTH") == "1"
PRUNED_BF16_BYTES = 40.23e9  # FACTS.md: the pruned (20B) bf16 DiT, 50 blocks
NARROW = ["--hidden", "256", "--heads", "2", "--ffn", "512", "--text-dim", "48"]
CHECK = r"""
import json, sys
from comfy.cli_args import args
args.cpu = True
import torch
from safetensors.torch import load_file
import comfy.model_detection, comfy.sd
sd = load_file(sys.argv[1])
config = comfy.model_detection.model_config_from_unet(sd, "")
patcher = comfy.sd.load_diffusion_model_state_dict(dict(sd))
dm = patcher.model.diffusion_model
missing, unexpected = dm.load_state_dict(sd, strict=False)
print(json.dumps({"config": type(config).__name__, "unet": {k: v for k, v in config.unet_config.items()},
                  "blocks": len(dm.blocks), "curves": dm.use_adaln_curves, "missing": missing,
                  "unexpected": unexpected, "finite": all(bool(torch.isfinite(t.float()).all()) for t in sd.values()),
                  "normal_std": float(sd["blocks.0.mlp.fc1.weight"].float().std())}))
"""
FINITE = r"""
import json, sys, torch
from safetensors.torch import load_file
parts = load_file(sys.argv[1])
print(json.dumps({"parts": len(parts), "finite": all(bool(torch.isfinite(t).all()) for t in parts.values())}))
"""


def _make(*args, python=sys.executable, timeout=120):
    return subprocess.run([str(python), str(MAKE), *map(str, args)], capture_output=True, text=True, timeout=timeout)


def test_planned_sizes_match_the_real_model(tmp_path):
    done = _make("--out", tmp_path / "x.safetensors", "--blocks", "50", "--dry-run")
    assert done.returncode == 0, done.stderr
    plan = json.loads(done.stdout)
    assert abs(plan["bytes"] - PRUNED_BF16_BYTES) / PRUNED_BF16_BYTES < 0.01
    thirty = json.loads(_make("--out", tmp_path / "x.safetensors", "--dry-run").stdout)
    header_shrink = plan["bytes"] - thirty["bytes"] - 20 * plan["block_bytes"]  # 20 blocks' header entries
    assert thirty["blocks"] == 30 and 0 < header_shrink < 1 << 20
    assert not (tmp_path / "x.safetensors").exists()


@pytest.mark.parametrize("args, says", [(["--blocks", "0"], "--blocks"), (["--ffn", "-1"], "positive")])
def test_bad_arguments_are_one_sentence_and_exit_2(tmp_path, args, says):
    done = _make("--out", tmp_path / "x.safetensors", *args)
    assert done.returncode == 2 and says in done.stderr and "Traceback" not in done.stderr


def test_missing_folder_is_exit_2(tmp_path):
    done = _make("--out", tmp_path / "nowhere" / "x.safetensors", "--dry-run")
    assert done.returncode == 2 and "does not exist" in done.stderr


@needs_comfy
@pytest.mark.comfyui
@pytest.mark.slow
def test_comfyui_detects_h3_and_every_key_loads(tmp_path):
    path = tmp_path / "narrow.safetensors"
    made = _make("--out", path, "--blocks", "3", *NARROW, "--json", python=PYTHON, timeout=300)
    assert made.returncode == 0, made.stderr
    assert not path.with_name(path.name + ".partial").exists()
    done = subprocess.run([str(PYTHON), "-c", CHECK, str(path)], capture_output=True, text=True, timeout=600,
                          cwd=REAL)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["config"] == "MiniMaxH3" and out["blocks"] == 3 and out["curves"]
    assert {k: out["unet"][k] for k in ("hidden_size", "num_attention_heads", "attention_head_dim",
                                         "ffn_hidden_size", "text_dim")} == {
        "hidden_size": 256, "num_attention_heads": 2, "attention_head_dim": 128, "ffn_hidden_size": 512, "text_dim": 48}
    assert out["missing"] == [] and out["unexpected"] == [] and out["finite"]
    assert 0.5 < out["normal_std"] * 256 ** 0.5 < 2  # scaled by 1/sqrt(fan_in)


@pytest.fixture
def real_width_dir(tmp_path):
    base = os.environ.get("H3KIT_REAL_WIDTH_DIR")
    where = Path(tempfile.mkdtemp(prefix="h3kit-real-width-", dir=base)) if base else tmp_path
    yield where
    if base:
        shutil.rmtree(where, ignore_errors=True)


@needs_comfy
@pytest.mark.comfyui
@pytest.mark.slow
@pytest.mark.skipif(not REAL_WIDTH, reason="set H3KIT_REAL_WIDTH=1: writes a 24.8 GB DiT, minutes per step")
def test_a_real_width_dit_larger_than_ram_streams_one_step(real_width_dir, native_library):
    import psutil
    from h3kit.comfyui import client
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_streaming", REPO / "scripts" / "bench_streaming.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    blocks = int(os.environ.get("H3KIT_REAL_WIDTH_BLOCKS", "30"))
    comfy = bench.make_comfy(REAL, real_width_dir / "comfy", native_library, PYTHON)
    dit = comfy / "models" / "diffusion_models" / "h3real_dit_bf16.safetensors"
    made = _make("--out", dit, "--blocks", blocks, "--text-dim", "48", "--json", python=PYTHON, timeout=3600)
    assert made.returncode == 0, made.stderr
    facts = json.loads(made.stdout.strip().splitlines()[-1])
    ram = psutil.virtual_memory().total
    try:
        with client.ComfyServer(comfy, PYTHON, ["--cpu"], real_width_dir / "run") as server:
            server.start(timeout=300)
            # what the plan gives a file the page cache cannot hold next to the run: read past the cache
            stream = {"preload_bytes": 0, "shard_size_bytes": 0, "prefetch_blocks": 2, "page_cache": "bypass"}
            ran = client.run_workflow(server, bench.graph(dit.name, stream, 1, 7, prefix="real/x"), timeout=7200)
            assert ran["ran"], ran["message"] + server.log_tail(3000)
            peak = server.peak_rss_bytes
        stats = bench._stats(comfy)
        assert stats["finished"] and stats["steps"] == 1 and stats["blocks"] == blocks
        assert stats["read_mode"] == "uncached" and stats["bytes_read"] >= blocks * facts["block_bytes"]
        assert stats["page_cache"] == "bypassed" or stats["page_cache"].startswith("used (bypass refused")
        assert peak < 0.40 * ram, (peak, ram)
        latent = bench.latest_latent(real_width_dir / "run", "real/x")
        check = json.loads(bench.run_py(PYTHON, FINITE, latent))
        assert check["parts"] == 2 and check["finite"]
    finally:
        dit.unlink(missing_ok=True)
