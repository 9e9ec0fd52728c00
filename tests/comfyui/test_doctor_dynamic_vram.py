"""doctor's dynamic VRAM line: parsed from recorded probe output, decided by ComfyUI's own rule, and in a real ComfyUI.

Recorded outputs (tests/fixtures/doctor/, SOURCES.md there): the inspect and module probes run in
/work/comfy33's Python (torch 2.14.1+cu130, no GPU, comfy-aimdo 0.4.13) and in a Python without
torch or comfy-aimdo. Other machines are those records with one field changed, named in each test.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from h3kit.comfyui import doctor
from h3kit.comfyui.inspect import parse_inspect_output
from h3kit.comfyui.locate import ComfyInstall
from h3kit.data.plan_doc import Plan, PlanSettings, Streaming

REC = Path(__file__).parents[1] / "fixtures" / "doctor"
COMFY33_INFO = parse_inspect_output((REC / "inspect-comfy33-cuda-nogpu.txt").read_text())
NO_TORCH_INFO = parse_inspect_output((REC / "inspect-devvenv-notorch.txt").read_text())
AIMDO = doctor.parse_aimdo_report((REC / "aimdo-comfy33.txt").read_text())
NO_AIMDO = doctor.parse_aimdo_report((REC / "aimdo-missing-devvenv.txt").read_text())


def _gpu(**changes) -> dict:
    """The comfy33 record as if torch saw its GPU (cuda_available true), with `changes`."""
    return {**COMFY33_INFO, "cuda_available": True, **changes}


def test_the_recorded_probes_parse():
    assert COMFY33_INFO["torch"] == "2.14.1+cu130" and COMFY33_INFO["torch_build"] == "cuda"
    assert AIMDO == {"imports": True, "version": "0.4.13", "error": None}
    assert NO_AIMDO["imports"] is False and "No module named 'comfy_aimdo'" in NO_AIMDO["error"]
    assert doctor.parse_aimdo_report("a custom node printed this\n")["imports"] is None


def test_on_with_a_cuda_torch_that_sees_its_gpu():
    s = doctor.dynamic_vram_status(_gpu(), AIMDO, [], True, "0.33.0")
    assert s["active"] is True
    assert s["line"] == "dynamic VRAM: on (torch 2.14.1+cu130, comfy-aimdo 0.4.13)"


@pytest.mark.parametrize("flag", ["--cpu", "--novram", "--highvram", "--gpu-only", "--disable-dynamic-vram"])
def test_each_flag_that_turns_it_off_is_named(flag):
    s = doctor.dynamic_vram_status(_gpu(), AIMDO, ["--listen", flag], True, "0.33.0")
    assert s["active"] is False and s["line"] == f"dynamic VRAM: off: {flag} in the launch flags turns it off"
    assert s["flags"] == [flag]


def test_enable_dynamic_vram_beats_an_old_torch_as_in_comfyui():
    """main.py checks torch >= 2.8 only when --enable-dynamic-vram is absent."""
    old = _gpu(torch="2.5.1+cu124")
    assert doctor.dynamic_vram_status(old, AIMDO, [], True, "0.33.0")["line"] == "dynamic VRAM: off: torch 2.5 < 2.8"
    assert doctor.dynamic_vram_status(old, AIMDO, ["--enable-dynamic-vram"], True, "0.33.0")["active"] is True


def test_rocm_follows_the_hip_version():
    rocm = _gpu(torch="2.14.1+rocm7.2", torch_cuda=None, torch_hip="7.2.26015", torch_build="rocm")
    assert doctor.dynamic_vram_status(rocm, AIMDO, [], True, "0.33.0")["line"] == "dynamic VRAM: off: ROCm 7.2 < 7.14"
    newer = dict(rocm, torch_hip="7.14.0")
    assert doctor.dynamic_vram_status(newer, AIMDO, [], True, "0.33.0")["active"] is True


def test_without_comfy_aimdo_or_torch_or_dynamic_vram_code():
    assert doctor.dynamic_vram_status(_gpu(), NO_AIMDO, [], True, "0.33.0")["line"] == \
        "dynamic VRAM: off: comfy-aimdo does not import in ComfyUI's Python"
    assert doctor.dynamic_vram_status(NO_TORCH_INFO, NO_AIMDO, [], True, "0.33.0")["active"] is None
    old_tree = doctor.dynamic_vram_status(_gpu(), AIMDO, [], False, "0.8.0")
    assert old_tree["line"] == "dynamic VRAM: off: ComfyUI 0.8.0 has no dynamic VRAM (its cli_args.py lacks it)"


def test_a_cuda_torch_without_a_visible_gpu_is_off_and_says_why():
    """The comfy33 record as it is: a CUDA build on a machine with no GPU."""
    s = doctor.dynamic_vram_status(COMFY33_INFO, AIMDO, [], True, "0.33.0")
    assert s["active"] is False and s["line"] == "dynamic VRAM: off: torch 2.14.1+cu130 sees no CUDA device"


def test_mps_and_cpu_torch_have_none():
    mps = {**COMFY33_INFO, "torch": "2.14.1", "torch_cuda": None, "torch_build": "mps", "system": "darwin"}
    assert doctor.dynamic_vram_status(mps, AIMDO, [], True, "0.33.0")["line"] == \
        "dynamic VRAM: off: ComfyUI has no dynamic VRAM on MPS"
    cpu = {**COMFY33_INFO, "torch": "2.14.1+cpu", "torch_cuda": None, "torch_build": "cpu"}
    assert doctor.dynamic_vram_status(cpu, AIMDO, [], True, "0.33.0")["line"] == \
        "dynamic VRAM: off: ComfyUI has no dynamic VRAM on a CPU"


def test_tree_check_reads_cli_args(tmp_path):
    (tmp_path / "comfy").mkdir()
    assert doctor.tree_has_dynamic_vram(tmp_path) is None
    (tmp_path / "comfy" / "cli_args.py").write_text("def enables_dynamic_vram():\n    return True\n")
    assert doctor.tree_has_dynamic_vram(tmp_path) is True
    (tmp_path / "comfy" / "cli_args.py").write_text("parser = None\n")
    assert doctor.tree_has_dynamic_vram(tmp_path) is False


def test_launch_flags_come_from_the_launcher_then_the_plan():
    plan = Plan(settings=PlanSettings(comfyui_args=("--cpu",)))
    assert doctor.launch_args(None, plan) == (["--cpu"], "the plan's flags (no h3kit launcher recorded)")
    assert doctor.launch_args(None, None) == ([], "no launch flags known")


def test_each_cause_of_off_gets_its_own_fix(tmp_path):
    install = ComfyInstall(tmp_path, "test", python=Path("/opt/comfy/bin/python"))
    flag = doctor.dynamic_vram_status(_gpu(), AIMDO, ["--highvram"], True, "0.33.0")
    assert "drop --highvram from comfyui_args" in doctor._dynamic_vram_fix(flag, install)
    old = doctor.dynamic_vram_status(_gpu(torch="2.5.1+cu124"), AIMDO, [], True, "0.33.0")
    assert "'h3kit doctor --fix' installs the torch" in doctor._dynamic_vram_fix(old, install)
    missing = doctor.dynamic_vram_status(_gpu(), NO_AIMDO, [], True, "0.33.0")
    assert doctor._dynamic_vram_fix(missing, install).startswith('"/opt/comfy/bin/python" -m pip install comfy-aimdo')
    on = doctor.dynamic_vram_status(_gpu(), AIMDO, [], True, "0.33.0")
    assert doctor._dynamic_vram_fix(on, install).startswith("set stream_dit: off under overrides")


# -- a real ComfyUI -------------------------------------------------------------------------

import comfy_h3  # noqa: E402  (tests/support is on the path; the helper only reads H3KIT_COMFYUI_DIR)

REAL, PYTHON, WHY = comfy_h3.h3_comfyui()


@pytest.mark.comfyui
@pytest.mark.skipif(REAL is None, reason=WHY)
def test_real_comfyui_with_cpu_is_off_and_without_is_off_for_want_of_a_gpu(tmp_path):
    from h3kit.comfyui.locate import inspect

    comfy = comfy_h3.make_test_comfyui(REAL, tmp_path / "Comfy")
    install = ComfyInstall(comfy, "test", python=PYTHON)
    info = inspect(install)
    plan = Plan(settings=PlanSettings(comfyui_args=("--cpu",), streaming=Streaming(dynamic_vram=False)))
    [f] = doctor.dynamic_vram_findings(install, info, None, plan)
    assert f["check"] == "comfyui.dynamic_vram" and f["status"] == "ok", f
    assert f["message"].startswith("dynamic VRAM: off: --cpu in the launch flags turns it off")
    status = f["dynamic_vram"]
    assert status["comfyui_version"] == info["comfyui_version"] and status["torch"] == info["torch"]
    if doctor.tree_has_dynamic_vram(comfy):  # its main.py imports comfy_aimdo, so a working venv has it
        assert status["aimdo_version"], status
    # Without --cpu, a torch that sees no GPU is off too; a plan that counted on it gets a warning and a fix.
    gpu_plan = Plan(settings=PlanSettings(comfyui_args=(), streaming=Streaming(dynamic_vram=True)))
    [g] = doctor.dynamic_vram_findings(install, info, None, gpu_plan)
    if not info.get("cuda_available"):
        assert g["status"] == "warn" and "sees no CUDA device" in g["message"] and "holds the DiT whole" in g["message"]
        assert g["fix"]
    json.dumps([f, g])  # findings stay JSON for 'doctor --json'


@pytest.mark.comfyui
@pytest.mark.skipif(REAL is None, reason=WHY)
def test_doctor_prints_the_line_for_a_real_comfyui(tmp_path, run_cli):
    """'h3kit doctor' on a copy of the real ComfyUI, before any install: the plan's flags decide."""
    comfy = comfy_h3.make_test_comfyui(REAL, tmp_path / "Comfy")
    code, out, err = run_cli("doctor", "--comfyui", str(comfy), "--comfyui-python", str(PYTHON), "--json")
    found = {f["check"]: f for f in json.loads(out)["findings"]}
    line = found["comfyui.dynamic_vram"]
    assert line["message"].startswith("dynamic VRAM: "), line
    assert f"ComfyUI {line['dynamic_vram']['comfyui_version']}; the plan's flags" in line["message"]
    # the suite's machine has no GPU (tests/conftest.py): the plan is cpu-only's, with --cpu
    assert "--cpu" in line["dynamic_vram"]["flags"], line
    assert line["status"] == "ok" and "off: --cpu in the launch flags" in line["message"]
    code, text, err = run_cli("doctor", "--comfyui", str(comfy), "--comfyui-python", str(PYTHON))
    assert "comfyui.dynamic_vram: dynamic VRAM: " in text
