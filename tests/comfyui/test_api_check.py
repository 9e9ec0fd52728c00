"""The pack's `comfy.*` names and calls checked against a git ref of ComfyUI, read from git without a checkout.

The ComfyUI here is a small git repository shaped like the real one: comfy/ as a namespace package,
custom_nodes git-ignored (`/custom_nodes/*`), and a module with a stub for every `comfy.*` name the real
node pack (a copy of nodes/) uses, so v0.30.0 has everything the pack needs; v0.99.0 renames
comfy.utils.calculate_parameters, which the pack calls inside a function (its comfy imports are lazy).
HEAD sits at v0.99.0, so a safe verdict at v0.30.0 also shows the check read git, not the folder.
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from h3kit.comfyui.versions import api_check
from h3kit.core import subproc
from h3kit.core.errors import BadInput

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")

NODES = Path(__file__).resolve().parents[2] / "nodes"
OURS = "ComfyUI-h3kit"
UTILS = 'def calculate_parameters(sd, prefix=""):\n    return 0\n'
SD = "def load_diffusion_model_state_dict(sd, model_options={}):\n    return None\n"
GIT_ENV = {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1",
           "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.invalid"}


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True,
                          env=GIT_ENV).stdout


def _stubs(pack: Path) -> dict[str, set[str]]:
    """module -> the names the pack's references need in it: the modules its imports name, every other
    reference hung off the longest of them (what comfy-import-guard resolves against)."""
    from comfy_import_guard.extract import FROM, MODULE, scan_pack

    scan = scan_pack(str(pack))
    modules = {r.module for r in scan.references if r.kind in (MODULE, FROM)} | {"comfy.utils", "comfy.sd"}
    names: dict[str, set[str]] = {}
    for dotted in [r.dotted for r in scan.references] + [c.dotted for c in scan.call_sites]:
        parts = dotted.split(".")
        if dotted in modules or len(parts) < 2:
            continue
        cut = next((i for i in range(len(parts) - 1, 1, -1) if ".".join(parts[:i]) in modules), len(parts) - 1)
        module = ".".join(parts[:cut])
        modules.add(module)
        names.setdefault(module, set()).add(parts[cut])
    return {m: names.get(m, set()) for m in modules if m != "comfy"}


def _write_comfy(root: Path, stubs: dict[str, set[str]], utils: str) -> None:
    """comfy/ with no __init__.py (a namespace, as in ComfyUI); a module that is also a prefix is a package."""
    for module, names in stubs.items():
        rel = module.replace(".", "/")
        is_pkg = any(other.startswith(module + ".") for other in stubs)
        path = root / (rel + "/__init__.py" if is_pkg else rel + ".py")
        path.parent.mkdir(parents=True, exist_ok=True)
        text = {"comfy.utils": utils, "comfy.sd": SD}.get(module, "")
        defined = {n.name for n in ast.parse(text).body if isinstance(n, ast.FunctionDef)}
        path.write_text(text + "".join(f"{n} = None\n" for n in sorted(names - defined)
                                       if n not in ("calculate_parameters", "count_parameters")))


def _release(root: Path, version: str, utils: str, stubs) -> None:
    _write_comfy(root, stubs, utils)
    (root / "comfyui_version.py").write_text(f'__version__ = "{version}"\n')
    _git(root, "add", "-A")
    _git(root, "commit", "-q", "-m", f"ComfyUI v{version}")
    _git(root, "tag", f"v{version}")


@pytest.fixture(scope="module")
def comfy(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("api") / "ComfyUI"
    root.mkdir()
    _git(root, "init", "-q")
    (root / ".gitignore").write_text("__pycache__/\n/custom_nodes/*\n")
    stubs = _stubs(NODES)
    _release(root, "0.30.0", UTILS, stubs)
    _release(root, "0.99.0", UTILS.replace("calculate_parameters", "count_parameters"), stubs)
    nodes = root / "custom_nodes"
    shutil.copytree(NODES, nodes / OURS, ignore=shutil.ignore_patterns("__pycache__"))
    (nodes / "OtherPack").mkdir()
    (nodes / "OtherPack" / "__init__.py").write_text(
        "import comfy.sd\n\n\ndef load(sd):\n    return comfy.sd.load_diffusion_model_state_dict(sd, bogus=1)\n")
    (nodes / "GuardedPack").mkdir()
    (nodes / "GuardedPack" / "__init__.py").write_text(
        "try:\n    import comfy.model_prefetch\nexcept ImportError:\n    pass\n")
    (nodes / "BrokenPack").mkdir()
    (nodes / "BrokenPack" / "__init__.py").write_text("def broken(:\n")
    (nodes / "Vendored" / "comfy").mkdir(parents=True)
    (nodes / "Vendored" / "comfy" / "__init__.py").write_text("")
    assert _git(root, "status", "--porcelain") == ""  # the packs are ignored, as in ComfyUI
    return root


@pytest.fixture(scope="module")
def reports(comfy) -> dict[str, api_check.ApiReport]:
    """Each target checked once for the tests that only read the report."""
    return {t: api_check.check_target(comfy, t) for t in ("v0.30.0", "v0.99.0")}


def _call_line(rel: str, needle: str) -> int:
    lines = (NODES / rel).read_text(encoding="utf-8").splitlines()
    return next(i for i, line in enumerate(lines, 1) if needle in line)


def _by_name(report: api_check.ApiReport) -> dict[str, api_check.PackVerdict]:
    return {p.name: p for p in report.others}


def test_ours_is_safe_at_the_release_that_has_everything_it_uses(comfy, reports):
    report = reports["v0.30.0"]
    assert report.ours is not None and report.ours.name == OURS
    assert report.ours.verdict == "safe", report.ours
    assert report.refusal is None
    assert report.target_commit == _git(comfy, "rev-parse", "v0.30.0^{commit}").strip()


def test_a_rename_in_a_lazily_imported_module_is_our_refusal(reports):
    rel = "h3kit_streaming/load.py"
    line = _call_line(rel, "comfy.utils.calculate_parameters(")
    report = reports["v0.99.0"]
    assert report.ours.verdict == "will_break"
    first = report.ours.breaks[0]
    assert (first.symbol, first.file, first.line, first.kind) == ("comfy.utils.calculate_parameters", rel, line,
                                                                  "missing")
    assert first.detail == "not in comfy/utils.py at v0.99.0"
    assert report.refusal == (f"ComfyUI at v0.99.0 has no comfy.utils.calculate_parameters, which the h3kit "
                              f"pack uses in {rel} line {line}.")
    # the pack imports comfy.utils inside a function, and that reference was checked all the same
    tree = ast.parse((NODES / rel).read_text(encoding="utf-8"))
    imports = [n for n in ast.walk(tree) if isinstance(n, ast.Import) and
               any(a.name == "comfy.utils" for a in n.names)]
    assert imports and all(n not in tree.body for n in imports)


def test_other_packs_are_reported_not_refused(reports):
    report = reports["v0.30.0"]
    other = _by_name(report)["OtherPack"]
    assert other.verdict == "will_break"
    (b,) = other.breaks
    assert (b.symbol, b.file, b.line, b.kind) == ("comfy.sd.load_diffusion_model_state_dict", "__init__.py", 5,
                                                  "badcall")
    assert "unexpected keyword argument 'bogus'" in b.detail
    assert report.refusal is None  # not ours


def test_a_guarded_import_is_a_warning_and_weird_packs_are_reported(reports):
    others = _by_name(reports["v0.30.0"])
    guarded = others["GuardedPack"]
    assert guarded.verdict == "warn" and not guarded.breaks
    assert "comfy.model_prefetch" in guarded.warnings[0] and "try/except" in guarded.warnings[0]
    assert others["BrokenPack"].verdict == "warn" and "not parsed" in others["BrokenPack"].warnings[0]
    assert others["Vendored"].verdict == "skipped" and "comfy/" in others["Vendored"].warnings[0]


def test_ours_finding_a_module_through_importlib_is_not_seen(reports):
    """compiler.py looks comfy.model_prefetch up with importlib (and guards it): comfy-import-guard cannot see
    that, so a ComfyUI without the module (this one) gives neither a break nor a warning for it."""
    assert "comfy.model_prefetch" in (NODES / "h3kit_streaming" / "compiler.py").read_text(encoding="utf-8")
    ours = reports["v0.30.0"].ours
    assert not any("model_prefetch" in w for w in ours.warnings)


def test_a_pack_the_checker_trips_over_is_skipped_and_the_rest_go_on(comfy, monkeypatch):
    import comfy_import_guard.report as report_mod

    real = report_mod.check_pack

    def trips(resolver, name, *args, **kwargs):
        if name == "OtherPack":
            raise RecursionError("maximum recursion depth exceeded")
        return real(resolver, name, *args, **kwargs)

    monkeypatch.setattr(report_mod, "check_pack", trips)
    report = api_check.check_target(comfy, "v0.99.0")
    other = _by_name(report)["OtherPack"]
    assert other.verdict == "skipped" and "RecursionError" in other.warnings[0]
    assert report.ours.verdict == "will_break"


def _snapshot(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def test_only_git_reads_run_and_the_checkout_is_byte_identical(comfy, monkeypatch):
    head, status = _git(comfy, "rev-parse", "HEAD"), _git(comfy, "status", "--porcelain")
    before = _snapshot(comfy)
    commands = []
    real_run = subproc.run

    def recording(argv, **kwargs):
        commands.append(list(argv[1:]))
        return real_run(argv, **kwargs)

    monkeypatch.setattr(subproc, "run", recording)
    for target in ("v0.30.0", "v0.99.0"):
        api_check.check_target(comfy, target)
    assert commands and {c[0] for c in commands} <= {"rev-parse", "ls-tree", "show"}
    assert _snapshot(comfy) == before  # .git included: nothing written, nothing checked out
    assert (_git(comfy, "rev-parse", "HEAD"), _git(comfy, "status", "--porcelain")) == (head, status)


def test_history_and_anything_but_a_read_are_refused(tmp_path):
    reader = api_check._GitReader(tmp_path, subproc.which("git"), time.monotonic() + 60)
    for args in (["log", "-1"], ["checkout", "v0.30.0"], ["fetch", "--tags"]):
        with pytest.raises(api_check._GitStopped):
            reader(args)
    with pytest.raises(api_check._GitStopped):
        reader.no_history()
    late = api_check._GitReader(tmp_path, subproc.which("git"), time.monotonic() - 1)
    with pytest.raises(api_check._GitStopped, match="ran out"):
        late(["rev-parse", "HEAD"])


def test_a_ref_that_is_not_there_is_bad_input(comfy):
    for target in ("v9.9.9", "--output=x"):
        with pytest.raises(BadInput) as err:
            api_check.check_target(comfy, target)
        assert err.value.message.count(". ") == 0 and err.value.fix and "tag" in err.value.fix


def test_a_folder_that_is_not_a_git_checkout_is_bad_input(tmp_path):
    (tmp_path / "custom_nodes").mkdir()
    with pytest.raises(BadInput, match="not a git checkout"):
        api_check.check_target(tmp_path, "v0.30.0")


def test_the_report_is_json(reports):
    data = json.loads(json.dumps(reports["v0.99.0"].to_json()))
    assert data["target"] == "v0.99.0" and data["refusal"].startswith("ComfyUI at v0.99.0 has no")
    assert data["ours"]["breaks"][0]["symbol"] == "comfy.utils.calculate_parameters"
    assert {p["name"] for p in data["others"]} == {"OtherPack", "GuardedPack", "BrokenPack", "Vendored"}
