"""One ComfyUI as found, typed: the record every version decision reads, made once per command.

`take` inspects a ComfyUI once: its folder and kind (a git clone, the portable build, the Desktop app,
Stability Matrix, Pinokio, a plain folder), its Python, ComfyUI's version, the git commit, branch and
tracked files with local changes, torch and its build, the launch flags (h3kit's launcher, or what the
app starts it with), every custom node pack (its git commit, or a hash of its files when it is not a
clone) and the pip set (`pip freeze --all`). Each part that cannot be read is None and says nothing
more: a probe never raises, so a broken Python still gives a state whose `python_error` says why.

The state goes into the history (h3kit.comfyui.versions.history) as JSON and comes back with
`from_json`; `drift` compares two of them.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from h3kit.comfyui import manifest as mf
from h3kit.comfyui.inspect import comfyui_version, torch_build
from h3kit.comfyui.locate import ComfyInstall
from h3kit.core.errors import H3kitError
from h3kit.core.tools import run_git

SCHEMA = "h3kit.comfyui_state/1"
GIT_TIMEOUT = 60.0
SKIPPED_DIRS = {".git", "__pycache__", ".ipynb_checkpoints", "node_modules"}


@dataclass(frozen=True)
class GitState:
    commit: str
    branch: str | None  # None: a detached HEAD
    changed: tuple[str, ...] = ()  # tracked files with local changes

    @property
    def short(self) -> str:
        return self.commit[:8]


@dataclass(frozen=True)
class PackState:
    name: str
    commit: str | None = None  # the pack's own git commit, when it is a clone
    files_sha256: str | None = None  # otherwise a hash of its files (paths and contents)

    @property
    def identity(self) -> str:
        return f"commit {self.commit[:8]}" if self.commit else f"files {str(self.files_sha256)[:8]}"


@dataclass(frozen=True)
class ComfyState:
    path: str
    kind: str  # git | portable | desktop | stability_matrix | pinokio | plain
    taken: str
    python: str | None = None
    version: str | None = None
    git: GitState | None = None
    torch: str | None = None
    torch_build: str | None = None  # cuda | rocm | mps | xpu | cpu
    launch_args: tuple[str, ...] = ()
    packs: tuple[PackState, ...] = ()
    pip: tuple[str, ...] = ()
    python_error: str | None = None
    profile: str | None = None  # the profile the h3kit pack holds (its h3kit_profile.json), None: no pack
    info: dict = field(default_factory=dict, compare=False)  # the raw inspect answer (h3kit.comfyui.inspect)

    @property
    def label(self) -> str:
        """'0.33.0 (e4140500)': the version and, for a clone, the commit."""
        commit = f" ({self.git.short})" if self.git else ""
        return f"{self.version or 'unknown version'}{commit}"

    def pack(self, name: str) -> PackState | None:
        return next((p for p in self.packs if p.name == name), None)

    def to_json(self) -> dict:
        return {"schema": SCHEMA, **asdict(self)}


def from_json(doc: dict) -> ComfyState:
    """The state `to_json` wrote (unknown keys ignored, so a newer h3kit's record still reads)."""
    git = doc.get("git")
    return ComfyState(
        path=doc["path"], kind=doc.get("kind", "plain"), taken=doc.get("taken", ""), python=doc.get("python"),
        version=doc.get("version"),
        git=GitState(git["commit"], git.get("branch"), tuple(git.get("changed") or ())) if git else None,
        torch=doc.get("torch"), torch_build=doc.get("torch_build"),
        launch_args=tuple(doc.get("launch_args") or ()),
        packs=tuple(PackState(p["name"], p.get("commit"), p.get("files_sha256")) for p in doc.get("packs") or ()),
        pip=tuple(doc.get("pip") or ()), python_error=doc.get("python_error"), profile=doc.get("profile"),
        info=doc.get("info") or {})


# -- the probes (each returns None or a value, never raises) -----------------------------------------


def kind_of(install: ComfyInstall) -> str:
    """What owns this ComfyUI's version: an app that updates it itself, or a git clone h3kit may move."""
    by_app = {"Stability Matrix": "stability_matrix", "Pinokio": "pinokio"}
    if install.app in by_app:
        return by_app[install.app]
    if install.layout in ("portable", "desktop") or (install.app or "").startswith("ComfyUI Desktop"):
        return install.layout if install.layout != "plain" else "desktop"
    return "git" if (Path(install.path) / ".git").exists() else "plain"


def _git_out(ctx, path: Path, args: list[str], label: str) -> str | None:
    # --no-optional-locks: `git status` would otherwise refresh .git/index, a write into the user's checkout
    try:
        return run_git(ctx, ["--no-optional-locks", "-C", str(path), *args], label, timeout=GIT_TIMEOUT).stdout
    except H3kitError:
        return None


def git_state(ctx, path: Path) -> GitState | None:
    """HEAD's commit, branch and tracked files with local changes; None when `path` is not a clone."""
    if not (path / ".git").exists():
        return None
    commit = _git_out(ctx, path, ["rev-parse", "HEAD"], "Reading the checked-out commit")
    if not commit:
        return None
    ref = _git_out(ctx, path, ["rev-parse", "--symbolic-full-name", "HEAD"], "Reading the branch") or ""
    status = _git_out(ctx, path, ["status", "--porcelain", "--untracked-files=no"], "Looking for local changes")
    changed = tuple(ln[3:] for ln in (status or "").splitlines() if ln.strip())
    ref = ref.strip()
    return GitState(commit.strip(), ref[len("refs/heads/"):] if ref.startswith("refs/heads/") else None, changed)


def files_sha256(folder: Path) -> str:
    """sha256 over the relative paths and contents of every file under `folder` (caches and .git left out)."""
    h = hashlib.sha256()
    for dirpath, dirnames, filenames in os.walk(folder):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIPPED_DIRS)
        for name in sorted(filenames):
            p = Path(dirpath) / name
            if name.endswith(".pyc") or p.is_symlink():
                continue
            h.update(p.relative_to(folder).as_posix().encode("utf-8", "surrogateescape") + b"\0")
            try:
                h.update(hashlib.sha256(p.read_bytes()).digest())
            except OSError:
                h.update(b"unreadable")
    return h.hexdigest()


def pack_states(ctx, custom_nodes: Path) -> tuple[PackState, ...]:
    """Every pack folder in custom_nodes: its git commit when it is a clone, else a hash of its files."""
    if not custom_nodes.is_dir():
        return ()
    out = []
    for entry in sorted(custom_nodes.iterdir()):
        if not entry.is_dir() or entry.name.startswith(".") or entry.name == "__pycache__":
            continue
        git = git_state(ctx, entry) if (entry / ".git").exists() else None
        out.append(PackState(entry.name, git.commit if git else None, None if git else files_sha256(entry)))
    return tuple(out)


def launch_args_of(install: ComfyInstall, state_dir: Path) -> tuple[str, ...]:
    """The flags ComfyUI starts with: h3kit's launcher's (its install record), else what the app passes."""
    try:
        record = mf.load_for(state_dir, install.path)
    except H3kitError:
        record = None
    launcher = (record.extra.get("launcher") if record else None) or {}
    if launcher.get("path"):
        return tuple(launcher.get("args") or ())
    return tuple(install.launch_args)


def pack_profile(install: ComfyInstall) -> str | None:
    """The profile name in the deployed pack's h3kit_profile.json; None without a pack or a readable file."""
    from h3kit.comfyui.deploy import installed_profile

    doc = installed_profile(install)
    return doc.get("profile") if isinstance(doc, dict) and isinstance(doc.get("profile"), str) else None


def take(ctx, install: ComfyInstall, *, info: dict | None = None, pip: list[str] | None = None) -> ComfyState:
    """Inspect `install` once (module doc). `info` (h3kit.comfyui.locate.inspect's answer) and `pip` (a
    `pip freeze --all`) are taken as given when the caller already has them."""
    from h3kit.comfyui import locate
    from h3kit.comfyui.versions import freeze

    path = Path(install.path)
    error = None
    if info is None and install.python is not None:
        try:
            info = locate.inspect(install)
        except H3kitError as exc:
            error = exc.message
    if pip is None and install.python is not None and error is None:
        try:
            pip = freeze.freeze(ctx, str(install.python))
        except H3kitError as exc:
            error = exc.message
    info = info or {}
    return ComfyState(
        path=str(path), kind=kind_of(install), taken=mf.now_iso(),
        python=str(install.python) if install.python else None, version=comfyui_version(path),
        git=git_state(ctx, path), torch=info.get("torch"), torch_build=torch_build(info) if info else None,
        launch_args=launch_args_of(install, ctx.locations.state_dir), packs=pack_states(ctx, install.custom_nodes),
        pip=tuple(pip or ()), python_error=error, profile=pack_profile(install), info=info)


def refreshed(ctx, install: ComfyInstall, found: ComfyState, *, pip_ran: bool = False) -> ComfyState:
    """`found` after h3kit itself changed the folder (a deploy): the packs, launch flags and profile read again, and
    the pip set when h3kit ran pip there (`pip_ran`: a loader pack's requirements); the version, commit, Python and
    torch are as inspected, without a second inspection."""
    from h3kit.comfyui.versions import freeze

    pip = found.pip
    if pip_ran and install.python is not None and found.python_error is None:
        try:
            pip = tuple(freeze.freeze(ctx, str(install.python)))
        except H3kitError:
            pass
    return replace(found, taken=mf.now_iso(), packs=pack_states(ctx, install.custom_nodes),
                   launch_args=launch_args_of(install, ctx.locations.state_dir), profile=pack_profile(install),
                   pip=pip)
