"""The torch-build choice over synthetic fingerprints (golden table), check() and doctor findings."""

from __future__ import annotations

import json
import re

import pytest

from h3kit.plan import torch_build
from h3kit.fingerprint.schema import load_file, validate
from tests.conftest import FIXTURES

FP_DIR = FIXTURES / "torchsel"
SHARED_FP_DIR = FIXTURES / "fingerprints"  # the planner's synthetic machines


def fp(name: str) -> dict:
    return load_file(FP_DIR / f"{name}.json")


# name -> (status, build, backend, index URL or None for PyPI)
GOLDEN = {
    "linux-rtx4090-driver580": ("ok", "cu130", "cuda", "https://download.pytorch.org/whl/cu130"),
    "linux-rtx4090-driver595": ("ok", "cu132", "cuda", "https://download.pytorch.org/whl/cu132"),
    "linux-rtx4090-driver570-nocuda": ("ok", "cu126", "cuda", "https://download.pytorch.org/whl/cu126"),
    "windows-rtx3060-driver566": ("ok", "cu126", "cuda", "https://download.pytorch.org/whl/cu126"),
    "windows-gtx1080ti-driver580": ("ok", "cu126", "cuda", "https://download.pytorch.org/whl/cu126"),
    "linux-teslak80-driver470": ("ok", "cpu", "cpu", "https://download.pytorch.org/whl/cpu"),
    "linux-rtx3090-driver535": ("refuse", None, "cuda", None),
    "windows-rtx5090-driver566": ("refuse", None, "cuda", None),
    "darwin-m3max-128": ("ok", "mps", "mps", None),
    "darwin-m1-rosetta": ("refuse", "mps", "mps", None),
    "darwin-intel-i9": ("refuse", "mps", "mps", None),
    "linux-rx7900xtx": ("ok", "rocm7.2", "rocm", "https://download.pytorch.org/whl/rocm7.2"),
    "linux-radeon780m": ("ok", "rocm-gfx1103", "rocm", "https://stable.repo.amd.com/rocm/whl-next/"),
    "windows-rx7900xtx": ("ok", "rocm-windows-gfx1100", "rocm", "https://stable.repo.amd.com/rocm/whl-next/"),
    "windows-rx6700xt": ("ok", "directml", "directml", None),
    "linux-arc-a770": ("ok", "xpu", "xpu", "https://download.pytorch.org/whl/xpu"),
    "linux-cpu-only": ("ok", "cpu", "cpu", "https://download.pytorch.org/whl/cpu"),
}


def test_every_fixture_is_a_valid_fingerprint_and_in_the_table():
    names = sorted(p.stem for p in FP_DIR.glob("*.json"))
    assert names == sorted(GOLDEN)
    for name in names:
        assert validate(json.loads((FP_DIR / f"{name}.json").read_text())) == []


@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_golden_choice(name):
    status, build, backend, index = GOLDEN[name]
    choice = torch_build.choose(fp(name))
    assert (choice["status"], choice["build"], choice["backend"], choice["index_url"]) == (status, build, backend, index)
    assert choice["schema"] == "h3kit.torch_choice/1"
    assert choice["rationale"], "every choice explains itself"
    assert all(s.endswith(".") for s in choice["rationale"])
    if status == "refuse":
        assert choice["fix"]
    else:
        assert choice["fix"] is None


def test_rationale_carries_the_numbers():
    choice = torch_build.choose(fp("linux-rtx4090-driver580"))
    text = " ".join(choice["rationale"])
    assert "RTX 4090" in text and "24 GiB" in text and "8.9" in text and "CUDA 13.0" in text
    assert torch_build.requirements(choice) == ["torch==2.14.1", "torchvision==0.29.1", "torchaudio>=2.11"]


def test_driver_too_old_for_any_wheel_names_the_minimum_driver():
    linux = torch_build.choose(fp("linux-rtx3090-driver535"))
    assert "535.183.01" in linux["rationale"][0] and "560.28.03" in linux["rationale"][0]
    assert "560.28.03" in linux["fix"] and "nvidia.com" in linux["fix"]
    # Blackwell has no cu126 kernels: the driver must reach the CUDA 13 line.
    blackwell = torch_build.choose(fp("windows-rtx5090-driver566"))
    assert "580.88" in blackwell["fix"]


def test_older_driver_without_cuda_version_uses_the_driver_table():
    choice = torch_build.choose(fp("linux-rtx4090-driver570-nocuda"))
    text = " ".join(choice["rationale"])
    assert "570.86.10" in text and "560.28.03" in text
    assert "580.65.06" in text  # what updating the driver would unlock
    assert any("int8_convrot" in w for w in choice["warnings"])


def test_gpu_too_old_for_cuda13_gets_the_legacy_tag_and_too_old_for_all_gets_cpu():
    pascal = torch_build.choose(fp("windows-gtx1080ti-driver580"))
    assert pascal["build"] == "cu126"
    kepler = torch_build.choose(fp("linux-teslak80-driver470"))
    assert kepler["build"] == "cpu" and "3.7" in kepler["rationale"][0] and "5.0" in kepler["rationale"][0]
    assert kepler["warnings"]


def test_rosetta_refuses_with_the_exact_fix():
    choice = torch_build.choose(fp("darwin-m1-rosetta"))
    assert "Rosetta" in choice["rationale"][0]
    assert "arch -arm64" in choice["fix"]


def test_amd_gfx_target_from_the_name_when_the_fingerprint_lacks_it():
    choice = torch_build.choose(fp("windows-rx7900xtx"))
    assert choice["packages"] == {"torch[device-gfx1100]": "", "torchvision[device-gfx1100]": ""}
    directml = torch_build.choose(fp("windows-rx6700xt"))
    assert torch_build.requirements(directml) == ["torch-directml"]
    assert "--directml" in directml["rationale"][0]


def test_choice_is_data_driven(tmp_path):
    table = json.loads(json.dumps(torch_build.builds_table()))
    table["release"]["torch"] = "==9.9.9"
    table["cuda_tags"] = [r for r in table["cuda_tags"] if r["tag"] != "cu132"]
    choice = torch_build.choose(fp("linux-rtx4090-driver595"), table)
    assert choice["build"] == "cu130" and choice["packages"]["torch"] == "==9.9.9"


@pytest.mark.parametrize("path", sorted(SHARED_FP_DIR.glob("*.json")),
                         ids=lambda p: p.stem)
def test_shared_fingerprints_get_a_sound_choice(path):
    """The planner's synthetic machines: every one gets a build or a refusal with a fix."""
    choice = torch_build.choose(load_file(path))
    assert choice["status"] in ("ok", "refuse") and choice["rationale"]
    assert (choice["fix"] is not None) == (choice["status"] == "refuse")
    gpus = {g["vendor"] for g in load_file(path)["gpus"]}
    if choice["status"] == "ok" and "nvidia" in gpus:
        assert choice["build"].startswith("cu") or choice["build"] == "cpu"


# -- check() and doctor findings ---------------------------------------------------

def test_describe_installed_reads_local_tags_and_inspect_shapes():
    assert torch_build.describe_installed({"torch_version": "2.13.0+cu130"})["cuda"] == "13.0"
    assert torch_build.describe_installed({"torch": {"version": "2.14.1", "build": "cuda", "cuda": "13.0"}})["build"] == "cu130"
    assert torch_build.describe_installed({"torch_version": "2.14.1+rocm7.2"})["backend"] == "rocm"
    assert torch_build.describe_installed({})["installed"] is False


@pytest.mark.parametrize("machine,installed,kinds", [
    ("linux-rtx4090-driver580", {"torch_version": "2.13.0+cpu"}, ["backend"]),
    ("linux-rtx4090-driver580", {"torch_version": "2.14.1+cu130"}, []),
    ("linux-rtx4090-driver580", {"torch_version": "2.14.1+cu132"}, ["cuda-too-new"]),
    ("linux-rtx4090-driver580", {"torch_version": "2.14.1+cu126"}, ["cuda-older"]),
    ("linux-rtx4090-driver580", {}, ["missing"]),
    ("windows-rtx3060-driver566", {"torch_version": "2.14.1", "torch_build": "cuda", "torch_cuda": "13.0"}, ["cuda-too-new"]),
    ("darwin-m3max-128", {"torch_version": "2.14.1", "torch_build": "mps"}, []),
    ("darwin-m1-rosetta", {"torch_version": "2.14.1", "torch_build": "cpu"}, ["machine"]),
    ("linux-cpu-only", {"torch_version": "2.14.1+cu130"}, []),
    ("linux-rx7900xtx", {"torch_version": "2.14.1+cpu"}, ["backend"]),
])
def test_check(machine, installed, kinds):
    assert [m["kind"] for m in torch_build.check(fp(machine), installed)] == kinds


def test_doctor_findings_for_cpu_torch_on_a_4090_name_index_and_versions():
    python = "/opt/My ComfyUI/venv/bin/python"
    findings = torch_build.doctor_findings(fp("linux-rtx4090-driver580"),
                                        {"python": python, "torch_version": "2.13.0+cpu"})
    assert len(findings) == 1
    f = findings[0]
    assert set(f) >= {"check", "status", "message", "fix"}
    assert f["status"] == "fail"
    assert "2.13.0+cpu" in f["message"] and "cu130" in f["message"]
    assert f["message"].count(".") >= 1 and "\n" not in f["message"]
    assert f["fix"] == (f'"{python}" -m pip install --force-reinstall torch==2.14.1 torchvision==0.29.1 '
                        f'"torchaudio>=2.11" --index-url https://download.pytorch.org/whl/cu130')


def test_doctor_findings_ok_and_refusal():
    ok = torch_build.doctor_findings(fp("linux-rtx4090-driver580"), {"python": "p", "torch_version": "2.14.1+cu130"})
    assert [f["status"] for f in ok] == ["ok"] and ok[0]["fix"] is None
    refused = torch_build.doctor_findings(fp("linux-rtx3090-driver535"), {"python": "p", "torch_version": "2.14.1+cu130"})
    assert refused[0]["status"] == "fail" and re.search(r"560\.28\.03", refused[0]["fix"])


def test_build_from_recorded_pypi_metadata():
    """torch 2.14.1 from PyPI on Linux has no local tag; its cuda-toolkit==13.0.3 requirement says cu130."""
    lines = (FP_DIR / "recorded" / "torch-2.14.1-pypi-linux-METADATA.txt").read_text().splitlines()
    requires = [line.split(":", 1)[1].strip() for line in lines if line.startswith("Requires-Dist:")]
    linux = torch_build.build_from_metadata("2.14.1", requires, "linux")
    assert (linux["backend"], linux["build"], linux["cuda"]) == ("cuda", "cu130", "13.0")
    assert torch_build.build_from_metadata("2.14.1", [], "darwin")["backend"] == "mps"
    assert torch_build.build_from_metadata("2.14.1", [], "windows")["backend"] == "cpu"
    assert torch_build.build_from_metadata("2.13.0+cpu", requires, "linux")["backend"] == "cpu"


def test_doctor_findings_read_the_deploy_inspect_output():
    """h3kit.comfyui.locate.inspect's recorded output is what doctor passes in."""
    from h3kit.comfyui.inspect import parse_inspect_output

    info = parse_inspect_output((FIXTURES / "comfyui" / "inspect-linux-cu130.txt").read_text())
    assert [f["status"] for f in torch_build.doctor_findings(fp("linux-rtx4090-driver580"), info)] == ["ok"]
    old_driver = torch_build.doctor_findings(fp("windows-rtx3060-driver566"), info)
    assert old_driver[0]["status"] == "fail" and old_driver[0]["kind"] == "cuda-too-new"
    assert old_driver[0]["fix"].endswith("--index-url https://download.pytorch.org/whl/cu126")
    assert torch_build.doctor_findings(None, info)[0]["status"] == "warn"
    broken = torch_build.doctor_findings(fp("linux-rtx4090-driver580"), {"torch": None, "torch_error": "ImportError: libcudnn"})
    assert "libcudnn" in broken[0]["message"]


def test_mixed_builds_of_torch_and_its_companions_are_a_failure():
    info = {"torch_version": "2.14.1+cpu",
            "packages": {"torch": "2.14.1+cpu", "torchvision": "0.29.1+cpu", "torchaudio": "2.11.0+cu130"}}
    assert torch_build.companion_mismatches(info) == ["torchaudio 2.11.0+cu130"]
    mixed = torch_build.check(fp("linux-cpu-only"), info)
    assert [m["kind"] for m in mixed] == ["companions"] and "torchaudio 2.11.0+cu130" in mixed[0]["message"]
    info["packages"]["torchaudio"] = "2.11.0"  # from PyPI: no label to compare
    assert torch_build.check(fp("linux-cpu-only"), info) == []
