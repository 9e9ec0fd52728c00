"""The machine the suite's in-process h3kit sees (tests/conftest.py): this one's CPU, memory and disks, and no
GPU, whatever the box running the suite has; a test marked `real_gpus` probes the GPUs for real.

The proof is a fake nvidia-smi first on PATH that reports an RTX 4090 and leaves a file when it runs: unmarked,
`h3kit fingerprint` neither runs it nor shows a GPU; marked, it runs and its card is there, so the probe the
other tests are kept from is the real one.
"""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

import pytest

import h3kit.fingerprint as front
from h3kit.fingerprint import _darwin, _linux, _windows

from conftest import GPU_PROBES, NO_GPU

CARD = "NVIDIA GeForce RTX 4090"


@pytest.fixture
def fake_smi(tmp_path, monkeypatch) -> Path:
    """An nvidia-smi first on PATH answering the CSV query with one RTX 4090; returns the file each run leaves."""
    folder, ran = tmp_path / "bin", tmp_path / "nvidia-smi-ran"
    folder.mkdir()
    smi = folder / "nvidia-smi"
    smi.write_text("#!/bin/sh\n"
                   f"echo x >> '{ran}'\n"
                   'case "$1" in --query-gpu*) echo "' + CARD + ', 24564, 23980, 580.95.05, 8.9";; esac\n',
                   encoding="utf-8")
    smi.chmod(smi.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ.get('PATH', '')}")
    return ran


def _fingerprint(run_cli) -> dict:
    code, out, err = run_cli("fingerprint", "--json")
    assert code == 0, err
    return json.loads(out)


def test_the_suite_sees_no_gpu_and_runs_no_gpu_tool(fake_smi, run_cli):
    doc = _fingerprint(run_cli)
    assert doc["gpus"] == [] and not fake_smi.exists()
    probes = {p["name"]: p for p in doc["probes"]}
    for name in GPU_PROBES[front._backend.SYSTEM]:
        assert probes[name]["status"] == "missing" and probes[name]["detail"] == NO_GPU, probes[name]
    assert doc["memory"]["total_bytes"] > 0 and doc["cpu"]["logical_cores"] >= 1  # the rest is probed
    machine = front.this_machine()  # what install, plan and calibrate take
    assert machine.gpus == () and machine.backend == "cpu" and not fake_smi.exists()


@pytest.mark.real_gpus
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the Linux back end asks nvidia-smi on PATH")
def test_marked_real_gpus_the_fake_card_is_probed(fake_smi, run_cli):
    doc = _fingerprint(run_cli)
    assert fake_smi.exists() and CARD in [g["name"] for g in doc["gpus"]], doc["gpus"]


@pytest.mark.parametrize("backend", [_linux, _darwin, _windows], ids=lambda m: m.SYSTEM)
def test_the_gpu_probes_conftest_replaces_are_the_back_ends_own(backend):
    """A GPU probe renamed in a back end would run for real in every test: its old name here fails instead."""
    names = {p.name for p in backend.probes([])}
    assert GPU_PROBES[backend.SYSTEM] <= names, GPU_PROBES[backend.SYSTEM] - names
