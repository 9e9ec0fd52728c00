"""`scripts/gpu_check.sh run --cpu` end to end on the real tier's ComfyUI (opt-in: H3KIT_COMFYUI_DIR).

The GPU check's run on this CPU, so that on the card only the device differs (docs/development.md, "The GPU
check"): every check of scripts/gpu_check/run.py is in gpu_check.json, each with its figures and its one line or,
where it could not run, a named reason, and gpu_check.md has a row for each. About 15 minutes on a 2-core
machine and 11 GB of random weights in a work folder that is removed after (ComfyUI-GGUF from
H3KIT_COMFYUI_GGUF_GIT when there: without it the gguf check must say so).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import comfy_h3

REPO = Path(__file__).resolve().parents[2]
REAL, PYTHON, WHY = comfy_h3.h3_comfyui()
pytestmark = [pytest.mark.comfyui, pytest.mark.slow, pytest.mark.skipif(REAL is None, reason=WHY)]
CHECKS = ["fingerprint", "plan", "format_probe", "dit_stream", "te_stream", "gguf", "calibrate", "plan_vs_measured"]


@pytest.fixture
def work(tmp_path):
    yield tmp_path / "work"
    shutil.rmtree(tmp_path / "work", ignore_errors=True)  # the random weights: 11 GB


def test_the_cpu_run_records_every_check_with_a_figure_or_a_named_reason(tmp_path, work):
    env = {**os.environ, "H3KIT_COMFYUI_DIR": str(REAL), "H3KIT_PYTHON": sys.executable, "OUT": str(tmp_path / "out"),
           "H3KIT_GPU_CHECK_WORK": str(work)}
    done = subprocess.run(["bash", str(REPO / "scripts" / "gpu_check.sh"), "run", "--cpu"], capture_output=True,
                          text=True, timeout=1800, env=env)
    sys.__stdout__.write("\n" + done.stdout[-4000:] + "\n")
    assert done.returncode in (0, 4), done.stderr[-3000:]
    doc = json.loads((tmp_path / "out" / "gpu_check.json").read_text())
    assert doc["schema"] == "h3kit.gpu_check/1" and doc["device"] == "cpu" and doc["sizes"]["note"]
    assert list(doc["checks"]) == CHECKS
    for name, rec in doc["checks"].items():
        assert rec["status"] in ("ok", "failed", "timeout", "not_run"), (name, rec)
        if rec["status"] == "ok":
            assert rec["figures"] and rec["line"], (name, rec)
        else:
            assert rec["reason"] and len(rec["reason"]) > 10, (name, rec)
        assert f"] {name} (" in done.stdout  # one line each as it ran, or as it was left
    assert doc["checks"]["fingerprint"]["status"] == doc["checks"]["plan"]["status"] == "ok"
    dit = doc["checks"]["dit_stream"]
    if dit["status"] == "ok":
        assert dit["figures"]["latents"]["finite"] and dit["figures"]["runs"]["streamed"]["seconds_per_step"] > 0
    md = (tmp_path / "out" / "gpu_check.md").read_text()
    assert all(f"| {name} | {doc['checks'][name]['status']} |" in md for name in CHECKS)
