"""Issue 46, item 1: one function makes every command's plan (h3kit.steps.planning.plan_for), and the rule that a
saved fingerprint's plan takes no probe of this machine is decided there alone.

The probe and the planner are stood in for where a test asks only what the plan maker hands them: the probe
returns the recorded one (tests/fixtures/format_probe/cpu-comfyui-0.33.json), the planner records its keywords.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import json
from pathlib import Path

import pytest

from call_counter import count_calls
from fixtures.comfyui import comfy_tree
from h3kit.calibrate import orchestrate
from h3kit.calibrate.handover import Found
from h3kit.comfyui import locate
from h3kit.core.session import Session
from h3kit.data.config import Config
from h3kit.data.format_evidence import parse
from h3kit.fingerprint.schema import load_file
from h3kit.steps import planning
from h3kit.steps.common import Fingerprinted
from h3kit.steps.planning import Probing, plan_for

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures"
PROBE = parse(json.loads((FIXTURES / "format_probe" / "cpu-comfyui-0.33.json").read_text()))
FINGERPRINT = load_file(str(FIXTURES / "fingerprints" / "cpu-only-16gb.json"))


@pytest.fixture
def planner(monkeypatch) -> list[dict]:
    """The keywords each plan was made with; the probe stands in as the recorded one."""
    made: list[dict] = []
    real = planning.make_plan

    def recorded(*args, **kwargs):
        made.append(kwargs)
        return real(*args, **kwargs)

    monkeypatch.setattr(planning, "make_plan", recorded)
    monkeypatch.setattr(planning, "format_evidence", lambda *a, **k: PROBE)
    return made


@pytest.fixture
def found(tmp_path) -> Found:
    install = locate.find(str(comfy_tree.make_comfyui(tmp_path / "ComfyUI")), None, Session(), need_write=False)
    return Found(install)


@pytest.mark.parametrize("saved", [False, True])
def test_a_saved_fingerprints_plan_takes_no_probe_of_this_machine(planner, found, saved):
    notes: list[str] = []
    planned = plan_for(Session(), Config(), Fingerprinted(FINGERPRINT, saved), notes, found=found)
    assert planned.probe is PROBE and planned.saved is saved  # measured (or read) and reported all the same
    assert planned.evidence is (None if saved else PROBE) and planner[0]["evidence"] is planned.evidence
    assert any(n.startswith("planned with") for n in notes) is not saved
    assert planned.comfyui_version == "0.33.0" == planner[0]["comfyui_version"]  # the found ComfyUI's own
    assert planned.comfyui is found and planned.fingerprint is FINGERPRINT


def test_a_named_probe_and_version_are_the_plans_even_for_a_saved_fingerprint(planner):
    planned = plan_for(Session(), Config(), Fingerprinted(FINGERPRINT, True), [], evidence=PROBE,
                       comfyui_version="0.35.0")
    assert planned.evidence is PROBE and planned.probe is None and planned.comfyui is None
    assert planner[0]["evidence"] is PROBE and planner[0]["comfyui_version"] == "0.35.0"


def test_without_a_comfyui_nothing_is_probed_and_no_version_is_assumed(planner):
    planned = plan_for(Session(), Config(), Fingerprinted(FINGERPRINT), [])
    assert planned.probe is None and planned.evidence is None and planned.comfyui_version is None
    assert planner[0]["evidence"] is None and planner[0]["comfyui_version"] is None


def test_a_calibration_next_plans_without_the_earlier_calibrated_values(planner):
    cfg = Config(calibrated={"vae_tile_size": 256})
    plan_for(Session(), cfg, Fingerprinted(FINGERPRINT), [], for_calibration=True)
    plan_for(Session(), cfg, Fingerprinted(FINGERPRINT), [])
    assert dict(planner[0]["config"].calibrated.items()) == {} and planner[1]["config"] is cfg


def test_models_reads_only_the_cache_and_not_for_another_machine(planner, found, monkeypatch):
    read: list = []
    monkeypatch.setattr(planning, "cached", lambda cache_dir, path: read.append(path) or PROBE)
    mine = plan_for(Session(), Config(), Fingerprinted(FINGERPRINT), [], found=found, probing=Probing.CACHE)
    other = plan_for(Session(), Config(), Fingerprinted(FINGERPRINT, True), [], found=found, probing=Probing.CACHE)
    assert read == [found.install.path] and mine.evidence is PROBE and other.probe is other.evidence is None
    assert mine.comfyui_version == other.comfyui_version == "0.33.0"  # models plans for its ComfyUI's version


def test_doctor_with_a_python_that_does_not_start_probes_nothing(planner, found, monkeypatch):
    monkeypatch.setattr(planning, "format_evidence", lambda *a, **k: pytest.fail("probed"))
    planned = plan_for(Session(), Config(), Fingerprinted(FINGERPRINT), [], found=found, probing=Probing.NONE)
    assert planned.probe is None and planned.comfyui_version == "0.33.0"


def test_the_probes_findings_go_where_the_command_keeps_them(found, monkeypatch):
    said = {"check": "formats.probe", "status": "warn", "message": "No current format probe.", "fix": None}

    def probe(*_a, findings, **_k):
        findings.append(said)
        return None

    monkeypatch.setattr(planning, "format_evidence", probe)
    notes: list[str] = []
    plan_for(Session(), Config(), Fingerprinted(FINGERPRINT), notes, found=found)
    assert notes == ["format probe: No current format probe."]  # install and apply: a note
    kept: list[dict] = []
    notes = []
    plan_for(Session(), Config(), Fingerprinted(FINGERPRINT), notes, found=found, findings=kept)
    assert kept == [said] and notes == []  # doctor: a finding; calibrate: the report's skipped


def test_a_dry_run_install_finds_and_inspects_its_comfyui_once(tmp_path, run_cli, monkeypatch):
    """--comfyui enters h3kit.comfyui.locate once (find) and ComfyUI's Python is asked once (inspect): the probe
    and the plan take that inspection (the full install's count, calibration included: test_install_one_plan)."""
    importlib.import_module("h3kit.steps.install")  # loaded first, so its bindings are wrapped too
    searches = count_calls(monkeypatch, "h3kit.comfyui.locate", "find")
    inspections = count_calls(monkeypatch, "h3kit.comfyui.locate", "inspect")
    comfy = comfy_tree.make_comfyui(tmp_path / "ComfyUI")
    code, out, err = run_cli("install", "--comfyui", str(comfy), "--yes", "--no-models", "--dry-run", "--json")
    assert code == 0, err
    assert json.loads(out)["comfyui"]["version"] == "0.33.0"
    assert len(searches) == 1 and len(inspections) == 1, (searches, inspections)


def _calls(path: Path, name: str) -> list[str]:
    """The functions of `path` that call `name` (a bare name or an attribute)."""
    out = []
    for fn in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for node in ast.walk(fn):
                if isinstance(node, ast.Call) and name in (getattr(node.func, "id", None),
                                                          getattr(node.func, "attr", None)):
                    out.append(f"{path.relative_to(REPO)}:{fn.name}")
    return out


def test_one_function_makes_every_commands_plan():
    """The planner is called by the plan maker, and by nothing else above the planner but calibration's re-apply
    (the second plan: the same Planned's fingerprint, evidence and version with the calibrated values)."""
    pkg = REPO / "installer" / "h3kit"
    callers = sorted(c for layer in ("steps", "cli", "calibrate", "comfyui", "models")
                     for path in (pkg / layer).rglob("*.py") for c in _calls(path, "make_plan"))
    assert callers == ["installer/h3kit/calibrate/orchestrate.py:_apply",
                       "installer/h3kit/steps/planning.py:plan_for"], callers
    # the saved-fingerprint rule: whether a fingerprint was saved is read here, and only here
    readers = sorted({str(path.relative_to(REPO)) for path in pkg.rglob("*.py")
                      for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
                      if isinstance(node, ast.Attribute) and node.attr == "saved"})
    assert readers == ["installer/h3kit/steps/planning.py"], readers


def test_calibration_takes_the_planned_and_no_loose_plan_keywords():
    params = inspect.signature(orchestrate.calibrate).parameters
    assert list(params)[:2] == ["ctx", "planned"] and params["planned"].default is inspect.Parameter.empty
    assert not {"comfyui_dir", "profile", "fingerprint", "fresh_probe"} & set(params)
