"""`doctor --fix` for a ComfyUI without MiniMax H3: move a git checkout to the newest release with H3, and back.

A ComfyUI is below H3 when its version (comfyui_version.py) is older than the
catalog's `model.comfyui_min_version` or a file of `comfyui_h3.files` is
missing (h3kit.comfyui.h3_support.check_tree). What happens depends on where
that ComfyUI came from (`kind_of`):

- a git checkout (`.git` in the ComfyUI folder; not the portable build):
  `upgrade_to_h3` works in this order and stops at the first refusal with
  nothing changed:
  1. refuse local changes to tracked files (`git status --porcelain
     --untracked-files=no`) and a Python without torch (nothing to pin);
  2. list release tags (the catalog's `release_tag_pattern`, `v{version}`)
     here and on every remote with `git ls-remote`, which changes nothing
     (a remote that cannot be reached is a note when a tag here qualifies);
     newest first, take the first whose own tree has H3 (comfyui_version.py
     >= the minimum and every H3 file), fetching only that tag when only a
     remote has it; none: NotReady;
  3. refuse when a file that tag adds is already on disk, untracked or
     ignored (checkout would overwrite it, or stop half-way);
  4. ask pip (`install --dry-run`) whether the tag's requirements.txt can be
     met with the installed torch, torchvision and torchaudio pinned;
  5. record the commit, the branch (None: detached HEAD) and `pip freeze
     --all` in the install record (`extra.comfyui_upgrade`; the first record
     wins, so a second upgrade still goes back to what the user had), check
     the tag out as a detached HEAD (no branch is moved, made or deleted),
     install torchaudio of torch's build when it is missing, then
     requirements.txt under the pins (torch, torchvision, torchaudio stay as
     they are), and check the tree again.
- portable or Desktop: nothing is changed; NotReady with the catalog's
  update action (`comfyui_h3.update`).
- a folder without git: NotReady naming `install --new-comfyui`.

`undo_upgrade` returns to the recorded branch (or commit), with the same
refusals, restores the package set (h3kit.comfyui.versions.freeze) and forgets
the record. `undo_recorded` undoes every recorded action, newest first:
the upgrade and the torch `fix_torch` replaced. 
"""

from __future__ import annotations

import os
from pathlib import Path

from packaging.version import InvalidVersion, Version

from h3kit.comfyui import manifest as mf
from h3kit.comfyui.h3_support import check_tree, problem, requirements
from h3kit.comfyui.inspect import comfyui_version, parse_version_file
from h3kit.comfyui.locate import require_python
from h3kit.comfyui.versions import freeze
from h3kit.comfyui.versions.releases import parse_ls_remote, releases, tag_version
from h3kit.comfyui.setup.pip import (
    install_requirements,
    match_companions,
    probe_torch,
    setup_table,
    write_constraints,
)
from h3kit.comfyui.setup.torch_repair import (
    _index_for_version,
    check_target_env,
    undo_torch,
)
from h3kit.core.errors import BadInput, NotReady, VerificationFailed
from h3kit.core.files import atomic_write
from h3kit.core.tools import PipOptions, run_git, run_pip
from h3kit.plan import torch_build

RECORD = "comfyui_upgrade"
RECORD_SCHEMA = "h3kit.comfyui_upgrade/1"
GIT_TIMEOUT = 120.0
UNDO_HINT = "'h3kit doctor --undo' returns to the commit and packages you had"


def kind_of(install) -> str:
    """portable | desktop | git | plain: whether h3kit may move this ComfyUI itself (only 'git')."""
    if install.layout in ("portable", "desktop"):
        return install.layout
    return "git" if (Path(install.path) / ".git").exists() else "plain"


def below_h3(install, catalog) -> bool:
    """True when the tree lacks H3: version below the catalog's minimum, or an H3 file missing."""
    return not check_tree(Path(install.path), catalog).tree_ready


# -- the checkout -----------------------------------------------------------------------------

def _git(ctx, path: Path, args: list[str], label: str, timeout: float = GIT_TIMEOUT) -> str:
    return run_git(ctx, ["-C", str(path), *args], label, timeout=timeout).stdout


def head_of(ctx, path: Path) -> dict:
    """{'commit': sha, 'branch': name or None (detached HEAD)}."""
    commit = _git(ctx, path, ["rev-parse", "HEAD"], "Reading the checked-out commit").strip()
    ref = _git(ctx, path, ["rev-parse", "--symbolic-full-name", "HEAD"], "Reading the checked-out branch").strip()
    return {"commit": commit, "branch": ref[len("refs/heads/"):] if ref.startswith("refs/heads/") else None}


def refuse_local_changes(ctx, path: Path, doing: str) -> None:
    changed = run_git(ctx, ["--no-optional-locks", "-C", str(path), "status", "--porcelain", "--untracked-files=no"],
                      "Looking for local changes", timeout=GIT_TIMEOUT).stdout  # reads; never refreshes .git/index
    files = [ln[3:] for ln in changed.splitlines() if ln.strip()]
    if files:
        shown = ", ".join(files[:3]) + (f" and {len(files) - 3} more" if len(files) > 3 else "")
        raise NotReady(f"The ComfyUI checkout {path} has local changes to tracked files ({shown}), so h3kit will "
                       f"not {doing}.", f'Commit or stash them (git -C "{path}" stash), then run the same command again.')


def refuse_overwrites(ctx, path: Path, here: str, there: str) -> None:
    """Files `there` tracks and `here` does not that are already on disk (untracked or ignored): refuse."""
    added = _git(ctx, path, ["diff", "--name-only", "--no-renames", "--diff-filter=A", "-z", here, there],
                 "Comparing the two commits")
    taken = [rel for rel in added.split("\0") if rel and os.path.lexists(path / rel)]
    if taken:
        shown = ", ".join(taken[:3]) + (f" and {len(taken) - 3} more" if len(taken) > 3 else "")
        raise NotReady(f"Checking out {there[:12]} in {path} would overwrite files that git does not track there "
                       f"({shown}).", "Move those files out of the ComfyUI folder, then run the same command again.")


def tree_at(ctx, path: Path, tag: str, catalog) -> str | None:
    """The version at `tag` when its tree has H3 (version >= minimum and every H3 file); None otherwise."""
    minimum, need = requirements(catalog)
    try:
        version = parse_version_file(_git(ctx, path, ["show", f"{tag}:comfyui_version.py"], f"Reading {tag}"))
        files = list(need.files)
        listed = set(_git(ctx, path, ["ls-tree", "-r", "--name-only", tag, "--", *files], f"Listing {tag}").split())
    except NotReady:
        return None
    try:
        ok = version is not None and Version(version) >= Version(minimum) and set(files) <= listed
    except InvalidVersion:
        ok = False
    return version if ok else None


def choose_release(ctx, path: Path, catalog, *, fetch: bool) -> dict:
    """The release tag to take (`releases`' order: the newest the real tier passed first) with H3 in its tree:
    {tag, version, notes} (+ remote when only there)."""
    minimum, need = requirements(catalog)
    pattern = need.release_tag_pattern
    local = set(_git(ctx, path, ["tag", "--list"], "Listing the release tags").split())
    remote_of: dict[str, str] = {}
    notes, failures = [], []
    remotes = _git(ctx, path, ["remote"], "Listing the remotes").split()
    for remote in remotes:
        try:
            listed = _git(ctx, path, ["ls-remote", "--tags", "--refs", remote], f"Listing the tags of {remote}",
                          timeout=setup_table()["timeouts_s"]["clone"])
        except NotReady as exc:
            failures.append(exc)
            notes.append(f"{exc.message} (using the tags already here)")
            continue
        for tag in parse_ls_remote(listed):
            remote_of.setdefault(tag, remote)
    for tag in releases(local | set(remote_of), pattern, minimum, catalog.comfyui_versions.newest_tested):
        if tag not in local:
            if not fetch:
                return {"tag": tag, "version": str(tag_version(tag, pattern)), "remote": remote_of[tag], "notes": notes}
            _git(ctx, path, ["fetch", "--no-tags", remote_of[tag], f"refs/tags/{tag}:refs/tags/{tag}"],
                 f"Fetching {tag} from {remote_of[tag]}", timeout=setup_table()["timeouts_s"]["clone"])
        version = tree_at(ctx, path, tag, catalog)
        if version is not None:
            return {"tag": tag, "version": version, "notes": notes}
        notes.append(f"{tag} was skipped: its tree lacks H3 ({', '.join(need.files)})")
    where = f"{path} or its remotes ({', '.join(remotes)})" if remotes else f"{path} (it has no git remote)"
    if failures:
        raise NotReady(f"No release tag of ComfyUI {minimum} or newer with H3 is in {where}, and "
                       f"{failures[0].message[0].lower() + failures[0].message[1:]}", failures[0].fix)
    raise NotReady(f"No release tag of ComfyUI {minimum} or newer with H3 (named like "
                   f"{pattern.format(version=minimum)}) is in {where}.",
                   "Add ComfyUI's own repository as a remote (git remote add upstream "
                   "https://github.com/Comfy-Org/ComfyUI.git) and run again, or let h3kit set up a new ComfyUI: "
                   "'h3kit install --new-comfyui DIR'.")


# -- ComfyUI's Python -------------------------------------------------------------------------

def work_file(ctx, path: Path, name: str) -> Path:
    folder = ctx.locations.state_dir / "comfy_upgrade"
    folder.mkdir(parents=True, exist_ok=True)
    return folder / f"{mf.slug_for(path)}-{name}"


def preflight(ctx, python: str, path: Path, tag: str, constraints: Path, opts: PipOptions) -> None:
    """Can pip meet `tag`'s requirements.txt with torch pinned? Asked with --dry-run, before anything changes."""
    try:
        text = _git(ctx, path, ["show", f"{tag}:requirements.txt"], f"Reading the requirements of {tag}")
    except NotReady:
        return  # no requirements.txt at that tag: nothing to install
    reqs = work_file(ctx, path, "requirements.txt")
    atomic_write(reqs, text)
    try:
        run_pip(ctx, python, ["install", "--dry-run", "-r", str(reqs), "-c", str(constraints)],
                f"Checking that pip can install the requirements of {tag} with torch pinned",
                timeout=setup_table()["timeouts_s"]["pip"], opts=opts)
    except NotReady as exc:
        if "--dry-run" not in exc.message:  # a pip older than 22.2 has no --dry-run: the real run will tell
            raise NotReady(f"{exc.message} Nothing was changed.", exc.fix, details=exc.details) from None


def install_pinned(ctx, python: str, path: Path, info: dict, constraints: Path, opts: PipOptions, version: str) -> None:
    """torchaudio of torch's build when missing (its build label checked), then requirements.txt with torch pinned."""
    timeout = setup_table()["timeouts_s"]["pip"]
    torch = info["packages"]["torch"]
    index = _index_for_version(torch)
    tag = torch_build.local_tag(torch)
    try:
        if "torchaudio" not in info["packages"]:
            run_pip(ctx, python, ["install", "torchaudio", "-c", str(constraints)],
                    f"Installing torchaudio for torch {torch} (ComfyUI's H3 nodes import it)", timeout=timeout,
                    opts=opts, index_url=index)
            if tag:  # only the one installed here; a torchaudio the user had stays as it is
                match_companions(ctx, python, tag, opts, index_url=index, timeout=timeout, only=("torchaudio",))
            write_constraints(constraints, probe_torch(python))
        if (path / "requirements.txt").is_file():
            install_requirements(ctx, python, path / "requirements.txt", constraints, opts, timeout=timeout,
                                 label=f"Installing the requirements of ComfyUI {version} (torch pinned)")
    except NotReady as exc:
        raise NotReady(exc.message, f"{exc.fix.rstrip('.')}; {UNDO_HINT}.", details=exc.details) from None


def python_for(ctx, install) -> tuple[str, dict]:
    python = str(require_python(install))
    info = probe_torch(python)
    if "error" in info:
        raise NotReady(f"h3kit could not run ComfyUI's Python {python} ({info['error']}).",
                       "Check the ComfyUI path with 'h3kit doctor --comfyui PATH'.")
    check_target_env(python, info)
    if not info["packages"].get("torch"):
        raise NotReady(f"ComfyUI's Python {python} has no torch, so h3kit cannot keep its build while it updates "
                       "ComfyUI's requirements.", "Run 'h3kit doctor --fix' once for torch, then again for ComfyUI.")
    return python, info


# -- the fix and its undo ---------------------------------------------------------------------

def upgrade_to_h3(ctx, install, catalog, *, opts: PipOptions | None = None) -> dict:
    """Bring the ComfyUI of `install` up to H3 (module docstring); with ctx.dry_run only says what it would do."""
    opts = opts or PipOptions.from_env()
    path = Path(install.path)
    minimum, need = requirements(catalog)
    support = check_tree(path, catalog)
    kind = kind_of(install)
    out = {"comfyui": str(path), "layout": kind, "version": support.version, "min_version": minimum,
           "changed": False, "notes": []}
    if support.tree_ready:
        return {**out, "message": f"ComfyUI {support.version} already has MiniMax H3 support."}
    why = problem(support)
    if kind in ("portable", "desktop"):
        name = "portable" if kind == "portable" else "Desktop app's"
        raise NotReady(f"{why} h3kit does not update the {name} ComfyUI itself.",
                       need.update.get(kind, "Update ComfyUI, then run h3kit doctor again."))
    if kind == "plain":
        raise NotReady(f"{why} {path} is not a git checkout, so h3kit cannot move it to a newer release.",
                       f"Replace it with ComfyUI {minimum} or newer, or let h3kit set one up: "
                       "'h3kit install --new-comfyui DIR'.")
    python, info = python_for(ctx, install)
    refuse_local_changes(ctx, path, "move it to another release")
    head = head_of(ctx, path)
    release = choose_release(ctx, path, catalog, fetch=not ctx.dry_run)
    tag = release["tag"]
    out["notes"] += release["notes"]
    out["from"] = {"version": support.version, **head}
    if "remote" in release:  # dry run, tag only on a remote: nothing fetched
        return {**out, "would_fetch": f"{tag} from {release['remote']}", "would_checkout": tag,
                "would_version": release["version"]}
    refuse_overwrites(ctx, path, head["commit"], tag)
    if ctx.dry_run:
        extra = [] if "torchaudio" in info["packages"] else ["torchaudio"]
        return {**out, "would_checkout": tag, "would_version": release["version"],
                "would_pin": dict(info["packages"]), "would_install": extra + ["requirements.txt"]}
    constraints = work_file(ctx, path, "constraints.txt")
    write_constraints(constraints, info)
    preflight(ctx, python, path, tag, constraints, opts)
    before = freeze.freeze(ctx, python, opts)
    record = mf.load_or_new(ctx.locations.state_dir, path)
    entry = record.extra.get(RECORD) or {"schema": RECORD_SCHEMA, "recorded": mf.now_iso(), "comfyui": str(path),
                                         "python": python, "from_version": support.version, **head,
                                         "freeze": before}
    to_commit = _git(ctx, path, ["rev-parse", f"{tag}^{{commit}}"], f"Reading {tag}").strip()
    entry.update(to_tag=tag, to_version=release["version"], to_commit=to_commit)
    record.extra[RECORD] = entry
    record.save()
    ctx.progress(f"Moving ComfyUI in {path} from {support.version} to {tag} (your branch "
                 f"{head['branch'] or '(detached)'} stays where it is)...")
    _git(ctx, path, ["-c", "advice.detachedHead=false", "checkout", "--quiet", "--detach", tag], f"Checking out {tag}")
    install_pinned(ctx, python, path, info, constraints, opts, release["version"])
    after = check_tree(path, catalog)
    if not after.tree_ready:
        raise VerificationFailed(f"ComfyUI was moved to {tag} but still lacks H3: {problem(after)}",
                                 f"Run 'h3kit doctor -v' and read the log; {UNDO_HINT}.")
    packages = freeze.changes(freeze.parse(before), freeze.parse(freeze.freeze(ctx, python, opts)))
    return {**out, "changed": True, "to": {"tag": tag, "version": after.version, "commit": to_commit},
            "packages": packages, "record": str(record.path)}


def undo_upgrade(ctx, install, record, *, opts: PipOptions | None = None) -> dict:
    """Go back to the commit or branch and the package set recorded by upgrade_to_h3; forget the record."""
    entry = record.extra.get(RECORD)
    if not entry:
        raise BadInput("There is no ComfyUI upgrade to undo: 'h3kit doctor --fix' has not moved this ComfyUI.",
                       "Nothing to undo.")
    path, python = Path(entry["comfyui"]), entry["python"]
    if not (path / ".git").exists():
        raise NotReady(f"The ComfyUI checkout {path} that 'h3kit doctor --fix' moved is gone or no longer a git "
                       "checkout.", f"Restore the folder, or drop the record with 'h3kit uninstall --comfyui {path}'.")
    refuse_local_changes(ctx, path, "move it back")
    now = head_of(ctx, path)
    branch = entry.get("branch")
    notes = []
    if branch:
        try:
            tip = _git(ctx, path, ["rev-parse", "--verify", "--quiet", f"refs/heads/{branch}"], "Reading the branch")
            dest = tip.strip()
        except NotReady:
            notes.append(f"the branch {branch} no longer exists; checked out its recorded commit instead")
            branch, dest = None, entry["commit"]
        if branch and dest != entry["commit"]:
            notes.append(f"the branch {branch} has moved since the upgrade; it was checked out as it is now")
    else:
        dest = entry["commit"]
    refuse_overwrites(ctx, path, now["commit"], dest)
    if ctx.dry_run:
        return {"comfyui": str(path), "would_checkout": branch or dest, "notes": notes,
                "packages": freeze.restore(ctx, python, entry["freeze"], opts)}
    args = ["checkout", "--quiet", branch] if branch else ["-c", "advice.detachedHead=false", "checkout", "--quiet",
                                                           "--detach", dest]
    _git(ctx, path, args, f"Checking out {branch or dest[:12]}")
    packages = freeze.restore(ctx, python, entry["freeze"], opts)
    record.extra.pop(RECORD, None)
    record.save()
    return {"comfyui": str(path), "checked_out": branch or dest, "commit": dest,
            "version": comfyui_version(path), "packages": packages, "notes": notes}


def recorded_actions(record) -> list[str]:
    """The undoable actions in the record, newest first ('comfyui_upgrade', 'torch'); at a tie the upgrade,
    which `doctor --fix` runs after the torch repair."""
    found = []
    if record.extra.get(RECORD):
        found.append((record.extra[RECORD].get("recorded", ""), 1, RECORD))
    if record.extra.get("torch_before"):
        found.append((record.extra["torch_before"].get("recorded", ""), 0, "torch"))
    return [name for *_order, name in sorted(found, reverse=True)]


def undo_recorded(ctx, install, record, *, opts: PipOptions | None = None) -> list[dict]:
    """Undo every action `doctor --fix` recorded, newest first: [{'action', ...its result}]."""
    actions = recorded_actions(record)
    if not actions:
        raise BadInput("There is no earlier torch to restore and no ComfyUI upgrade to undo: 'h3kit doctor --fix' "
                       "has changed nothing here.", "Nothing to undo.")
    done = []
    for name in actions:
        result = undo_upgrade(ctx, install, record, opts=opts) if name == RECORD else undo_torch(ctx, record, opts)
        done.append({"action": name, **result})
    return done
