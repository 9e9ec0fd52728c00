"""A new ComfyUI that h3kit owns, made for this hardware and resumable.

source (h3kit.comfyui.setup.source; a git source at its newest release tag with
MiniMax H3, any source without H3 refused) -> venv with a supported Python -> the
torch build `torch_build.choose` names -> ComfyUI's requirements under a
constraints file that pins the torch just installed -> a check that torch
imports and fits. Each step is written to a state file when done, so a
re-run continues where it stopped; everything made is recorded in the
install manifest (role "comfyui") so `uninstall --purge` can remove it.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

from h3kit.comfyui import manifest as manifest_mod
from h3kit.comfyui.journal import Journal
from h3kit.comfyui.inspect import comfyui_version
from h3kit.comfyui.setup.pip import (
    CONSTRAINTS_FILE,
    constraints_text,
    install_choice,
    install_requirements,
    probe_torch,
    setup_table,
)
from h3kit.comfyui.setup.disk_need import check_room, need_for
from h3kit.comfyui.setup.source import fetch_source, source_kind
from h3kit.comfyui.setup.torch_source import reachable_choice
from h3kit.comfyui.h3_support import check_tree, problem, requirements
from h3kit.comfyui.versions.releases import parse_ls_remote, releases
from h3kit.core import net, subproc
from h3kit.core.errors import BadInput, NotReady, VerificationFailed
from h3kit.core.files import atomic_write
from h3kit.core.paths import new_comfyui_dir
from h3kit.core.tools import PipOptions, run_git, ticking
from h3kit.core.venv import venv_python
from h3kit.data.fingerprint import Fingerprint
from h3kit.plan import torch_build

ROLE = "comfyui"
STATE_SCHEMA = "h3kit.comfy_setup_state/1"
STEPS = ("source", "venv", "torch", "requirements", "verify")


# -- the state file a re-run continues from -------------------------------------------

def state_path(ctx, target: Path) -> Path:
    return ctx.locations.state_dir / "comfy_setup" / f"{manifest_mod.slug_for(target)}.json"


def _load_state(path: Path, target: Path, source: str) -> dict:
    if path.is_file():
        try:
            state = json.loads(path.read_text(encoding="utf-8"))
            if state.get("schema") == STATE_SCHEMA and state.get("target") == str(target):
                return state
        except (OSError, ValueError):
            pass
    return {"schema": STATE_SCHEMA, "target": str(target), "source": source, "done": {}}


def _save_state(path: Path, state: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, json.dumps(state, indent=2))


# -- what a new ComfyUI needs ------------------------------------------------------------

def _python_ok(version: str, spec: str) -> bool:
    from packaging.specifiers import SpecifierSet

    return version in SpecifierSet(spec)


def find_base_python(spec: str | None = None, preference=None) -> tuple[str, str]:
    """A Python for ComfyUI's venv, in this order: $H3KIT_COMFY_PYTHON; this Python; python3.X on PATH
    (X from the preference list); the Windows launcher 'py -3.X'. Returns (path, version)."""
    table = setup_table()
    spec = spec or table["python"]
    candidates: list[list[str]] = []
    if os.environ.get("H3KIT_COMFY_PYTHON"):
        candidates.append([os.environ["H3KIT_COMFY_PYTHON"]])
    candidates.append([sys.executable])
    for ver in preference or table["python_preference"]:
        exe = subproc.which(f"python{ver}")
        if exe:
            candidates.append([exe])
    py = subproc.which("py")
    if py:
        candidates += [[py, f"-{ver}"] for ver in (preference or table["python_preference"])]
    tried = []
    for argv in candidates:
        r = subproc.run([*argv, "-c", "import sys, platform; print(sys.executable); print(platform.python_version())"],
                        timeout=30)
        lines = r.stdout.split() if r.ok else []
        if len(lines) >= 2:
            tried.append(f"{lines[0]} ({lines[1]})")
            if _python_ok(lines[1], spec):
                return lines[0], lines[1]
    raise NotReady(f"No Python {spec} was found for ComfyUI (tried: {', '.join(tried) or 'none'}).",
                   "Install Python 3.12 or 3.13 from python.org (or your package manager) and run again, "
                   "or set H3KIT_COMFY_PYTHON to its path.")


def user_area_files(target: Path) -> list[str]:
    """Files under the user-data folders (models/, output/, ...), relative, '/'-separated."""
    found = []
    for name in setup_table()["user_data"]:
        area = target / name
        if area.is_dir():
            found += [f.relative_to(target).as_posix() for f in area.rglob("*") if f.is_file()]
    return sorted(found)


# -- the steps ------------------------------------------------------------------------------

def _fetch_h3_release(ctx, source: str, target: Path, timeout: float, catalog) -> dict:
    """The source into `target`, at the newest release tag with H3 when it is a git source; refused without H3."""
    if catalog is None:
        from h3kit.data import catalog as catalog_mod

        catalog = catalog_mod.load()
    why = net.unreachable(source) if source_kind(source) == "git-url" else None
    if why:
        raise NotReady(f"ComfyUI's repository {source} cannot be reached ({net.host_of(source)}: {why}).",
                       "Pass a local ComfyUI folder, git repository or downloaded .zip with --comfyui-source "
                       f"(ComfyUI {catalog.model.comfyui_min_version} or newer), and run the same command again.")
    tag = release_for_source(ctx, source, catalog) if source_kind(source) in ("git-url", "git-local") else None
    fetched = fetch_source(ctx, source, target, timeout, ref=tag)
    refusal = source_below_h3(source, target, catalog)
    if refusal is not None:
        shutil.rmtree(target)  # ours: fetched just now, and refused
        raise refusal
    version = comfyui_version(target)
    ctx.progress(f"    took ComfyUI {version}" + (f" (release tag {tag}, the newest with MiniMax H3)" if tag else
                                                  f" ({source} has no release tag of it; its version has H3)"))
    return {**fetched, "tag": tag, "version": version}


def _fetch_interrupted(man, target: Path) -> bool:
    """True when the record names `target` as a ComfyUI h3kit was fetching (pending) when it stopped."""
    entry = man.find(target)
    setup = man.extra.get("comfyui_setup") or {}
    return (entry is not None and entry.pending and entry.role == ROLE and setup.get("created_by") == "h3kit"
            and setup.get("dir") == str(target) and not target.is_symlink())


def new_comfyui(ctx, target_dir, source: str | None, fingerprint: Fingerprint, *, opts: PipOptions | None = None,
                catalog=None) -> Path:
    """Set up a new ComfyUI in target_dir for this hardware; returns its path. Resumable (see module doc).

    A git source is cloned at its newest release tag with H3 (catalog `comfyui_min_version` or newer);
    a source without H3 is refused (BadInput) and removed again.
    """
    table = setup_table()
    opts = opts or PipOptions.from_env()
    opts.check_links()  # a missing wheel folder is bad input: said before anything is fetched, and the disk asked
    target = Path(target_dir).expanduser().absolute()
    source = source or table["source_url"]
    choice = torch_build.choose(fingerprint)
    if choice["status"] == "refuse":
        raise NotReady(choice["rationale"][-1], choice["fix"])
    state_file = state_path(ctx, target)
    state = _load_state(state_file, target, source)
    man = manifest_mod.load_or_new(ctx.locations.state_dir, target)
    run = _SetupRun(ctx, target, source, fingerprint, opts, table, man, Journal(man), state_file, state)
    interrupted = "source" not in run.done and _fetch_interrupted(man, target)
    if target.exists() and "source" not in run.done and not interrupted and any(target.iterdir()):
        raise BadInput(f"{target} already exists and is not empty; h3kit sets up a new ComfyUI only in a new "
                       "or empty folder.", "Choose another folder, or use an existing ComfyUI with --comfyui PATH.")
    if target.exists() and "source" not in run.done and not interrupted:
        target.rmdir()  # empty; the clone creates it again
    if ctx.dry_run:
        return target
    if run.step(1, "source", f"Getting ComfyUI from {source}"):
        _get_source(run, choice, interrupted, catalog)
    venv = target / "venv"
    if run.step(2, "venv", f"Creating ComfyUI's Python environment in {venv}"):
        _make_venv(run, venv)
    found = venv_python(venv)
    if found is None:
        raise NotReady(f"The venv {venv} of the new ComfyUI has no Python.",
                       f"Remove {venv} and run the same command again; the venv is made anew.")
    python = str(found)
    if run.step(3, "torch", f"Installing PyTorch {choice['build']} ({', '.join(torch_build.requirements(choice))})"):
        _install_torch(run, python, choice)
    if run.step(4, "requirements", "Installing ComfyUI's requirements (torch pinned)"):
        _install_requirements(run, python)
    if run.step(5, "verify", "Checking the new environment"):
        _verify(run, python)
    return target


@dataclass
class _SetupRun:
    """One run of new_comfyui: where it sets up, what it has done (the state file) and the record it keeps."""
    ctx: object
    target: Path
    source: str
    fingerprint: Fingerprint
    opts: PipOptions
    table: dict
    man: object
    journal: Journal
    state_file: Path
    state: dict

    @property
    def done(self) -> dict:
        return self.state["done"]

    @property
    def timeouts(self) -> dict:
        return self.table["timeouts_s"]

    def step(self, n: int, name: str, text: str) -> bool:
        """Whether step `name` still has to run (a re-run skips what is done); says which step this is."""
        if name in self.done:
            self.ctx.progress(f"[{n}/{len(STEPS)}] {text}: already done, skipped.")
            return False
        self.ctx.progress(f"[{n}/{len(STEPS)}] {text}...")
        return True

    def finish(self, name: str, **details) -> None:
        self.done[name] = {"at": manifest_mod.now_iso(), **details}
        _save_state(self.state_file, self.state)


def _get_source(run: _SetupRun, choice: dict, interrupted: bool, catalog) -> None:
    ctx, target, man, table = run.ctx, run.target, run.man, run.table
    if interrupted and target.exists():
        ctx.progress(f"    removing the ComfyUI source an interrupted run put into {target} (it was never set up)")
        shutil.rmtree(target)
    check_room(target, need_for(table, choice["backend"], run.opts))
    # Record before write: the folder is h3kit's in the record before the rename makes it appear, so a kill
    # right after the rename leaves a record that a rerun and 'uninstall --purge' both find.
    man.extra["comfyui_setup"] = {"created_by": "h3kit", "dir": str(target), "source": run.source}
    try:
        fetched = run.journal.mkdir(target, ROLE,
                                    lambda p: _fetch_h3_release(ctx, run.source, p, run.timeouts["clone"], catalog))
    except BaseException:
        if not target.exists():  # refused or failed before the rename: nothing of it is on disk
            man.forget(target)
            man.extra.pop("comfyui_setup", None)
            if man.entries or man.extra:
                man.save()
            elif man.path is not None and man.path.exists():
                os.unlink(man.path)  # the record was made for this ComfyUI alone
        raise
    man.extra["comfyui_setup"].update(**fetched, shipped=user_area_files(target))
    man.save()
    run.finish("source", **fetched)


def _make_venv(run: _SetupRun, venv: Path) -> None:
    base, version = find_base_python()
    if venv.exists():
        shutil.rmtree(venv)  # half-made by an interrupted run (the step is not marked done)

    def make_venv(folder: Path) -> None:
        r = ticking("Creating the venv", subproc.run, [base, "-m", "venv", str(folder)], timeout=run.timeouts["venv"])
        if not r.ok or venv_python(folder) is None:
            raise NotReady(f"Python {base} could not create a venv ({r.detail or 'it has no interpreter'}).",
                           "On Debian/Ubuntu install the venv module ('sudo apt install python3-venv'), "
                           "then run again.")

    run.journal.mkdir(venv, ROLE, make_venv)  # named before it is made: a kill mid-way leaves it h3kit's
    run.man.extra["comfyui_setup"].update(venv=str(venv), base_python=base, python_version=version)
    run.man.save()
    run.finish("venv", base_python=base, python_version=version)


def _install_torch(run: _SetupRun, python: str, choice: dict) -> None:
    for line in choice["rationale"]:
        run.ctx.progress(f"    {line}")
    choice, taken = reachable_choice(run.ctx, python, choice, run.fingerprint, run.opts, timeout=run.timeouts["pip"])
    if taken and taken["backend"] in run.table["min_free_bytes"]:  # a CUDA build taken for a CPU box is GBs larger
        check_room(run.target, need_for(run.table, taken["backend"], run.opts))
    install_choice(run.ctx, python, choice, run.opts, force=False, timeout=run.timeouts["pip"])
    if taken:
        run.man.extra["comfyui_setup"]["torch_taken"] = taken  # doctor says which torch this is and why
        run.man.save()
    run.finish("torch", build=choice["build"], requirements=torch_build.requirements(choice, local=True), taken=taken)


def _install_requirements(run: _SetupRun, python: str) -> None:
    constraints = run.target / CONSTRAINTS_FILE
    text, pins = constraints_text(probe_torch(python))
    run.journal.write(constraints, text, ROLE)
    run.man.save()
    reqs = run.target / "requirements.txt"
    if reqs.is_file():
        install_requirements(run.ctx, python, reqs, constraints, run.opts, timeout=run.timeouts["pip"])
    run.finish("requirements", pins=pins)


def _verify(run: _SetupRun, python: str) -> None:
    info = probe_torch(python, import_torch=True, timeout=run.timeouts["verify"])
    problems = [m for m in torch_build.check(run.fingerprint, info) if m["status"] == "fail"]
    if info.get("import_error") or problems:
        raise VerificationFailed(
            f"The new ComfyUI's torch does not work: {info.get('import_error') or problems[0]['message']}",
            "Run 'h3kit doctor --comfyui " + str(run.target) + " --fix', or remove the folder and run again.")
    run.man.extra["comfyui_setup"].update(torch=info.get("packages"), python=python)
    run.man.save()
    run.finish("verify", torch=info.get("packages"))


def offer_new_comfyui(ctx, fingerprint: Fingerprint | None, source: str | None = None, *,
                      searched: list[str] | None = None, min_version: str = "0.30.0") -> Path | None:
    """No ComfyUI was found: offer to set one up next to h3kit's data; None when declined or nobody can answer.

    In a terminal the question lists what was searched and defaults to yes;
    --yes answers it; without a terminal and without --yes nothing is set up
    (a script gets the exit 3 that names --comfyui).
    """
    if fingerprint is None or ctx.dry_run or not (ctx.yes or ctx.interactive):
        return None
    default = new_comfyui_dir(ctx.locations)
    if searched:
        ctx.progress("No ComfyUI was found. Searched:\n" + "\n".join(f"  - {s}" for s in searched))
    question = f"Set up ComfyUI {min_version} or newer with MiniMax H3 support at {default}?"
    if not ctx.confirm(question, default=True):
        return None
    return new_comfyui(ctx, default, source, fingerprint)


def release_for_source(ctx, source: str, catalog) -> str | None:
    """The newest release tag >= the minimum that a git URL or repository offers (None: it has none)."""
    minimum, need = requirements(catalog)
    listed = run_git(ctx, ["ls-remote", "--tags", "--refs", source], f"Listing the release tags of {source}",
                     timeout=setup_table()["timeouts_s"]["clone"],
                     alternative="or pass a local ComfyUI folder or a downloaded ComfyUI .zip with --comfyui-source")
    found = releases(parse_ls_remote(listed.stdout), need.release_tag_pattern, minimum,
                     catalog.comfyui_versions.newest_tested)
    return found[0] if found else None


def source_below_h3(source: str, path: Path, catalog) -> BadInput | None:
    """The refusal for a ComfyUI source (fetched into `path`) without H3; None when it has H3."""
    support = check_tree(path, catalog)
    if support.tree_ready:
        return None
    return BadInput(f"The ComfyUI from {source} is not one h3kit sets up: {problem(support)}",
                    f"Pass ComfyUI {support.min_version} or newer with --comfyui-source (a git repository with "
                    "a release tag of it, or a folder or archive of one), or leave --comfyui-source out to use "
                    "ComfyUI's own repository.")
