"""Moving a git checkout of ComfyUI to another release and pip set, and back to a recorded state.

`target_for` turns what the user asked for into one commit: `tested` (the newest release h3kit's real
tier passed, the catalog's `comfyui_versions.newest_tested`), `newest` (the newest release tag here or
on a remote), a version (`0.33.0`, found as the catalog's release tag pattern, `v0.33.0`) or any other
git ref. Tags only a remote has are fetched, that tag alone. Nothing here checks; h3kit.steps.versions
runs the checks first and journals the move in the history.

`move_to` checks the commit out as a detached HEAD (no branch is moved, made or deleted) and installs
its requirements.txt with torch, torchvision and torchaudio pinned, as `doctor --fix` does
(h3kit.comfyui.versions.upgrade). `restore` goes back to a recorded ComfyState: its branch when the
branch still points at the recorded commit, else the commit detached, then its pip set exactly
(h3kit.comfyui.versions.freeze: changed lines reinstalled --no-deps, added packages removed, a fresh
freeze must equal the record).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from h3kit.comfyui.h3_support import requirements
from h3kit.comfyui.inspect import parse_version_file
from h3kit.comfyui.setup.pip import setup_table, write_constraints
from h3kit.comfyui.versions import freeze
from h3kit.comfyui.versions.state import ComfyState
from h3kit.comfyui.versions.upgrade import (
    _git,
    install_pinned,
    parse_ls_remote,
    releases,
    work_file,
)
from h3kit.core.errors import BadInput, NotReady
from h3kit.core.tools import PipOptions


@dataclass(frozen=True)
class Target:
    asked: str  # what the user asked for: tested | newest | a version | a ref
    ref: str  # the tag or ref it became
    commit: str
    version: str | None  # comfyui_version.py at that commit


def _tags(ctx, path: Path) -> tuple[set[str], dict[str, str]]:
    """Tags here, and {tag: remote} for those only a remote lists (a remote that cannot be reached is skipped)."""
    local = set(_git(ctx, path, ["tag", "--list"], "Listing the release tags").split())
    remote_of: dict[str, str] = {}
    for remote in _git(ctx, path, ["remote"], "Listing the remotes").split():
        try:
            listed = _git(ctx, path, ["ls-remote", "--tags", "--refs", remote], f"Listing the tags of {remote}",
                          timeout=setup_table()["timeouts_s"]["clone"])
        except NotReady as exc:
            ctx.log.info("%s (using the tags already here)", exc.message)
            continue
        for tag in parse_ls_remote(listed):
            if tag not in local:
                remote_of.setdefault(tag, remote)
    return local, remote_of


def _ref_for(asked: str, catalog, tags: set[str]) -> str:
    minimum, need = requirements(catalog)
    pattern = need.release_tag_pattern
    if asked == "newest":
        found = releases(tags, pattern, minimum)
        if not found:
            raise NotReady(f"No release tag of ComfyUI {minimum} or newer is in this checkout or its remotes.",
                           "Add ComfyUI's repository as a remote (git remote add upstream "
                           "https://github.com/Comfy-Org/ComfyUI.git), or name a commit with --to.")
        return found[0]
    version = catalog.comfyui_versions.newest_tested if asked == "tested" else asked
    if version is None:
        raise BadInput("The catalog names no ComfyUI release h3kit has tested.", "Name one: h3kit update --to 0.33.0.")
    tag = pattern.format(version=version.lstrip("v"))
    return tag if tag in tags or asked == "tested" else version  # else a ref the user named: a commit, a branch


def target_for(ctx, path: Path, asked: str, catalog, *, fetch: bool = True) -> Target:
    """The commit `asked` names in the checkout at `path` (module doc); BadInput when it names none."""
    local, remote_of = _tags(ctx, path)
    ref = _ref_for(asked, catalog, local | set(remote_of))
    if ref in remote_of and not fetch:
        raise NotReady(f"{ref} is only on the remote {remote_of[ref]}, and a dry run fetches nothing.",
                       f'Fetch it first (git -C "{path}" fetch {remote_of[ref]} tag {ref}), or run without --dry-run.')
    if ref in remote_of:
        _git(ctx, path, ["fetch", "--no-tags", remote_of[ref], f"refs/tags/{ref}:refs/tags/{ref}"],
             f"Fetching {ref} from {remote_of[ref]}", timeout=setup_table()["timeouts_s"]["clone"])
    try:
        commit = _git(ctx, path, ["rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}"], f"Reading {ref}").strip()
    except NotReady:
        commit = ""
    if not commit:
        tag = requirements(catalog)[1].release_tag_pattern.format(version=asked)
        raise BadInput(f"'{asked}' names no release or commit in the ComfyUI checkout {path} (looked for {ref}"
                       f"{' and ' + tag if tag != ref else ''} here and on its remotes).",
                       "Run 'git -C \"%s\" tag' to see the releases there, or name one as 0.33.0, tested or "
                       "newest." % path)
    try:
        version = parse_version_file(_git(ctx, path, ["show", f"{commit}:comfyui_version.py"], f"Reading {ref}"))
    except NotReady:
        version = None
    return Target(asked, ref, commit, version)


def checkout(ctx, path: Path, commit: str, branch: str | None = None) -> str:
    """Check out `branch` when given (it must point at `commit`), else `commit` detached; returns what it took."""
    if branch:
        _git(ctx, path, ["checkout", "--quiet", branch], f"Checking out {branch}")
        return branch
    _git(ctx, path, ["-c", "advice.detachedHead=false", "checkout", "--quiet", "--detach", commit],
         f"Checking out {commit[:12]}")
    return commit


def move_to(ctx, path: Path, python: str, info: dict, target: Target, opts: PipOptions) -> list[str]:
    """Check the target out and install its requirements with torch pinned; the package changes, for people."""
    before = freeze.freeze(ctx, python, opts)
    constraints = work_file(ctx, path, "constraints.txt")
    write_constraints(constraints, info)
    checkout(ctx, path, target.commit)
    install_pinned(ctx, python, path, info, constraints, opts, target.version or target.ref)
    return freeze.changes(freeze.parse(before), freeze.parse(freeze.freeze(ctx, python, opts)))


def branch_to_take(ctx, path: Path, state: ComfyState) -> str | None:
    """The recorded branch when it still points at the recorded commit (checked out as a branch), else None."""
    if not state.git or not state.git.branch:
        return None
    try:
        tip = _git(ctx, path, ["rev-parse", "--verify", "--quiet", f"refs/heads/{state.git.branch}"],
                   "Reading the branch").strip()
    except NotReady:
        return None
    return state.git.branch if tip == state.git.commit else None


def restore(ctx, path: Path, state: ComfyState, opts: PipOptions) -> dict:
    """Back to `state`: its commit (its branch when that still points there) and its pip set."""
    if state.git is None:
        raise NotReady(f"The recorded state of {path} was not a git checkout, so h3kit cannot move it back.",
                       "Restore the folder from your own backup.")
    took = checkout(ctx, path, state.git.commit, branch_to_take(ctx, path, state))
    packages = freeze.restore(ctx, str(state.python), list(state.pip), opts) if state.pip and state.python else {}
    return {"checked_out": took, "commit": state.git.commit, "packages": packages}
