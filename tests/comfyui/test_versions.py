"""Keeping H3 working when ComfyUI changes (h3kit.comfyui.versions, h3kit.steps.versions), offline.

The pure parts on recorded values (drift, the self-test's answer, the history file), then update and
rollback end to end on the small git repositories and tiny wheels of test_comfy_upgrade (a user's clone on
their branch 'mine' at v0.8.0, v0.31.0 and v0.33.0 only on the remote, a venv outside the tree). The
self-test needs a real ComfyUI (tests/real_comfyui/test_update_rollback_real_comfyui.py runs it); here its
answer is given, passing or failing, to test what update and rollback do with it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from comfy_setup_support import ctx
from h3kit.comfyui.versions import drift, history, selftest, state
from h3kit.comfyui.versions.state import ComfyState, GitState, PackState
from h3kit.core.errors import BadInput, NotReady, VerificationFailed
from h3kit.core.paths import locations
from h3kit.data import catalog as catalog_mod
from h3kit.steps import version_record, versions
from h3kit.steps.options import ComfyTarget
from tests.comfyui.test_comfy_upgrade import checkout, digest, git, head, house, packages, pip_here  # noqa: F401

CAT = catalog_mod.load()
SMALL_CARD = drift.Machine("cuda", 8 * 2**30, "NVIDIA GeForce RTX 4060")


def a_state(version="0.33.0", commit="a" * 40, **kw) -> ComfyState:
    base = dict(path="/c", kind="git", taken="2026-12-07T10:00:00+00:00", python="/c/venv/bin/python",
                version=version, git=GitState(commit, "master"), torch="2.14.1+cu130", torch_build="cuda",
                launch_args=("--vram-headroom", "1"), packs=(PackState("ComfyUI-h3kit", None, "f" * 64),),
                pip=("torch==2.14.1+cu130", "comfy-kitchen==0.2.31", "av==16.0.1"), profile="nvidia-8gb")
    base.update(kw)
    return ComfyState(**base)


# -- the state and the history ----------------------------------------------------------------------------


def test_a_state_survives_json_and_says_its_label():
    s = a_state()
    assert state.from_json(json.loads(json.dumps(s.to_json()))) == s
    assert s.label == "0.33.0 (aaaaaaaa)" and s.pack("ComfyUI-h3kit").identity == "files ffffffff"


def test_pack_identity_is_its_commit_or_a_hash_of_its_files(tmp_path):
    nodes = tmp_path / "custom_nodes"
    (nodes / "Plain").mkdir(parents=True)
    (nodes / "Plain" / "a.py").write_text("x = 1\n")
    (nodes / "Cloned").mkdir()
    (nodes / "Cloned" / "b.py").write_text("y = 2\n")
    git("init", "-q", cwd=nodes / "Cloned")
    git("add", "-A", cwd=nodes / "Cloned")
    git("commit", "-q", "-m", "c", cwd=nodes / "Cloned")
    first = state.pack_states(ctx(), nodes)
    assert [p.name for p in first] == ["Cloned", "Plain"]
    assert first[0].commit == git("rev-parse", "HEAD", cwd=nodes / "Cloned") and first[0].files_sha256 is None
    (nodes / "Plain" / "a.py").write_text("x = 2\n")
    assert state.pack_states(ctx(), nodes)[1].files_sha256 != first[1].files_sha256


def test_history_numbers_states_keeps_the_move_in_flight_and_reads_back(tmp_path):
    hist = history.load(tmp_path, "/c")
    one = hist.record("install", a_state("0.30.0"), working=True, evidence={"selftest": {"passed": True}})
    hist.record("apply", a_state("0.30.0"), working=False)
    hist.begin("update", a_state("0.30.0"), {"ref": "v0.33.0"})
    hist.step("moved")
    again = history.load(tmp_path, "/c")
    assert [e.id for e in again.states] == [1, 2] and again.last_working().id == one.id
    assert again.in_flight["op"] == "update" and again.in_flight["step"] == "moved"
    again.end()
    assert history.load(tmp_path, "/c").in_flight is None
    with pytest.raises(BadInput) as err:
        again.get(7)
    assert "recorded: 1, 2" in err.value.message


def test_an_unreadable_history_is_one_sentence_with_the_fix(tmp_path):
    path = history.history_path(tmp_path, "/c")
    path.parent.mkdir(parents=True)
    path.write_text("{not json")
    with pytest.raises(BadInput) as err:
        history.load(tmp_path, "/c")
    assert "cannot be read" in err.value.message and "Move" in err.value.fix


# -- drift (pure) -------------------------------------------------------------------------------------------


class _Working:
    id, recorded, evidence = 3, "2026-12-01T09:00:00+00:00", {}

    def __init__(self, s):
        self.state = s


def test_nothing_changed_is_ok_and_a_move_names_versions_and_the_rollback():
    then = a_state("0.30.0", "b" * 40)
    ok = drift.findings(then, _Working(then), CAT.comfyui_versions, SMALL_CARD)[0]
    assert ok["status"] == "ok" and "working state #3" in ok["message"]
    now = a_state("0.33.0", launch_args=(), packs=(PackState("ComfyUI-h3kit", None, "e" * 64),),
                  pip=("torch==2.14.1+cu130", "comfy-kitchen==0.2.26", "av==16.0.1"))
    found = drift.findings(now, _Working(then), CAT.comfyui_versions, SMALL_CARD)[0]
    assert found["status"] == "warn"
    for said in ("ComfyUI went from 0.30.0 (bbbbbbbb) to 0.33.0 (aaaaaaaa)", "ComfyUI-h3kit changed",
                 "launch flags were lost: --vram-headroom", "comfy-kitchen==0.2.31 -> comfy-kitchen==0.2.26"):
        assert said in found["message"], found
    assert "h3kit rollback 3" in found["fix"]


def test_a_release_known_to_fail_here_and_a_pack_reference_gone_are_failures():
    then = a_state("0.34.2")
    crash = drift.findings(a_state("0.35.0", launch_args=()), _Working(then), CAT.comfyui_versions, SMALL_CARD)[0]
    assert crash["status"] == "fail" and "#16150" in crash["message"] and "--vram-headroom 1" in crash["fix"]
    cpu = drift.Machine("cpu")
    gone = drift.findings(a_state("0.35.0"), _Working(then), CAT.comfyui_versions, cpu,
                          api_refusal="ComfyUI at HEAD has no comfy.utils.x, which the h3kit pack uses in a.py line 3.")
    assert gone[0]["status"] == "fail" and "comfy.utils.x" in gone[0]["message"]


def test_a_warning_release_and_a_file_that_needs_a_newer_comfyui():
    then = a_state("0.34.2")
    vae = drift.findings(a_state("0.34.2", git=GitState("c" * 40, None)), _Working(then), CAT.comfyui_versions,
                         SMALL_CARD)[0]
    assert vae["status"] == "warn" and "#16698" in vae["message"]  # VAE offload, fixed in 0.39: said, not failed
    need = drift.findings(then, _Working(then), CAT.comfyui_versions, drift.Machine("cpu"),
                          file_names=("h3_hyperflow_flash_q8.gguf",))[0]
    assert need["status"] == "fail" and "0.43.0" in need["message"] and "h3kit update --to 0.43.0" in need["fix"]


def test_without_a_working_state_doctor_says_how_to_record_one():
    found = drift.findings(a_state(), None, CAT.comfyui_versions, SMALL_CARD)[0]
    assert found["status"] == "warn" and "h3kit update" in found["fix"]


# -- the self-test's answer (pure) --------------------------------------------------------------------------


def test_the_self_test_verdict_names_each_problem():
    assert selftest.verdict({"pack_loaded": True, "missing_nodes": [], "missing_workflow_nodes": {},
                             "unresolved": [], "error": None}, "") == []
    problems = selftest.verdict({"pack_loaded": True, "missing_nodes": ["H3kitMemoryGuard"],
                                 "missing_workflow_nodes": {"t2v.json": ["MiniMaxH3ImageToVideo"]},
                                 "unresolved": [{"dotted": "comfy.utils.calculate_parameters",
                                                 "file": "h3kit_streaming/load.py", "line": 217,
                                                 "error": "AttributeError: no attribute"}], "error": None}, "")
    assert problems[0] == "the pack's nodes H3kitMemoryGuard are not registered"
    assert "t2v.json uses nodes this ComfyUI lacks: MiniMaxH3ImageToVideo" in problems[1]
    assert problems[2].startswith("comfy.utils.calculate_parameters, which the pack uses in h3kit_streaming/load.py "
                                  "line 217, does not resolve")
    assert "no self-test answer (timeout)" in selftest.verdict(None, "timeout")[0]
    assert "did not load the h3kit pack" in selftest.verdict({"pack_loaded": False}, "")[0]


def test_the_pack_references_are_the_packs_comfy_names():
    refs = selftest.pack_references(Path(__file__).parents[2] / "nodes")
    names = {r["dotted"] for r in refs}
    assert "comfy.utils.calculate_parameters" in names and "comfy.sd.load_diffusion_model_state_dict" in names
    where = next(r for r in refs if r["dotted"] == "comfy.utils.calculate_parameters")
    line = (Path(__file__).parents[2] / "nodes" / where["file"]).read_text().splitlines()[where["line"] - 1]
    assert "calculate_parameters" in line


# -- update and rollback, end to end offline ----------------------------------------------------------------


def _answer(monkeypatch, passed: bool):
    result = selftest.SelfTest(passed, () if passed else ("comfy.utils.x, which the pack uses in a.py line 1, does "
                                                          "not resolve in this ComfyUI",), ("H3kitProfileInfo",), 40,
                               ("h3kit_text_to_video.json",))
    monkeypatch.setattr(selftest, "run", lambda *_a, **_k: result)


def _as_found(checkout):
    """(install, the ComfyTarget, what must come back: tree digest, HEAD and branch, packages)."""
    install, python = checkout
    return install, ComfyTarget(str(install.path), python), (digest(install.path), head(install.path), packages(python))


@pytest.mark.slow
def test_update_records_working_then_rollback_restores_branch_tree_and_packages(checkout, pip_here, monkeypatch):
    install, target, (tree, head_before, pkgs) = _as_found(checkout)
    comfy, python = install.path, target.python
    _answer(monkeypatch, True)
    version_record.record_after_install(ctx(), install, state.take(ctx(), install))
    done = versions.update(versions.UpdateOptions(target, "0.33.0"), ctx())
    assert done.code == 0 and done.doc["changed"] and done.doc["to"]["version"] == "0.33.0"
    assert head(comfy) == (git("rev-parse", "v0.33.0^{commit}", cwd=comfy), "HEAD")
    same = versions.update(versions.UpdateOptions(target, "0.33.0"), ctx())
    assert same.doc["changed"] is False and "already at v0.33.0" in same.text and "nothing changed" in same.text
    back = versions.rollback(versions.RollbackOptions(target), ctx())
    assert back.doc["changed"] and head(comfy) == (head_before[0], "refs/heads/mine")
    assert digest(comfy) == tree and packages(python) == pkgs
    lines = versions.history(target, ctx()).text
    assert "#1" in lines and "#2" in lines and "#3" in lines and "working" in lines


@pytest.mark.slow
def test_a_failed_self_test_goes_back_by_itself_with_exit_4(checkout, pip_here, monkeypatch):
    install, target, (tree, head_before, pkgs) = _as_found(checkout)
    comfy, python = install.path, target.python
    _answer(monkeypatch, False)
    with pytest.raises(VerificationFailed) as err:
        versions.update(versions.UpdateOptions(target, "0.33.0"), ctx())
    assert err.value.exit_code == 4 and "went back to 0.8.0" in err.value.message and "comfy.utils.x" in err.value.message
    assert head(comfy) == (head_before[0], "refs/heads/mine") and digest(comfy) == tree and packages(python) == pkgs
    assert history.load(locations().state_dir, comfy).in_flight is None


def test_an_unknown_target_and_an_app_owned_comfyui_change_nothing(checkout, pip_here, monkeypatch):
    install, python = checkout
    target = ComfyTarget(str(install.path), python)
    with pytest.raises(BadInput) as err:
        versions.update(versions.UpdateOptions(target, "9.9.9"), ctx())
    assert "'9.9.9' names no release or commit" in err.value.message
    advice = versions._app_advice("desktop", a_state(), CAT)
    assert isinstance(advice, NotReady) and f"Pick ComfyUI {CAT.comfyui_versions.newest_tested}" in advice.fix


def test_a_crash_mid_update_is_undone_by_the_next_rollback(checkout, pip_here, monkeypatch):
    install, python = checkout
    comfy, target = install.path, ComfyTarget(str(install.path), python)
    head_before, pkgs = head(comfy), packages(python)
    _answer(monkeypatch, True)
    version_record.record_after_install(ctx(), install, state.take(ctx(), install))
    calls = []

    def dies(*_a, **_k):  # the process dies right after the move, before the self-test
        calls.append(1)
        raise KeyboardInterrupt

    monkeypatch.setattr(selftest, "run", dies)
    with pytest.raises(KeyboardInterrupt):
        versions.update(versions.UpdateOptions(target, "0.33.0"), ctx())
    assert calls and history.load(locations().state_dir, comfy).in_flight["step"] == "moved"
    done = versions.rollback(versions.RollbackOptions(target), ctx())
    assert "interrupted update was undone" in done.text
    assert head(comfy) == (head_before[0], "refs/heads/mine") and packages(python) == pkgs
    assert history.load(locations().state_dir, comfy).in_flight is None


def test_a_dry_run_update_fetches_nothing_and_moves_nothing(checkout, pip_here, monkeypatch):
    install, python = checkout
    comfy, target = install.path, ComfyTarget(str(install.path), python)
    before = head(comfy)
    with pytest.raises(NotReady) as err:
        versions.update(versions.UpdateOptions(target, "0.33.0"), ctx(dry_run=True))
    assert "only on the remote origin" in err.value.message and "tag v0.33.0" in err.value.fix
    git("fetch", "-q", "origin", "tag", "v0.33.0", cwd=comfy)
    said = versions.update(versions.UpdateOptions(target, "0.33.0"), ctx(dry_run=True))
    assert said.code == 0 and said.text.startswith("Would move ComfyUI") and said.doc["changed"] is False
    assert head(comfy) == before and history.load(locations().state_dir, comfy).states == []
