"""ComfyUI's source into a new folder: a git clone (of a URL or a local repository), a folder, or an archive.

All-or-nothing: the source lands in `<target>.h3kit-partial` first and is
renamed into place when complete. Archives are unpacked member by member
into that folder and never outside it: on Pythons whose tarfile has the
`data` filter (3.10.12+, 3.11.4+, 3.12+) the standard library checks each
member; on older ones `extract_tar` does the same checks itself (absolute
names, `..`, links that point outside, device files), because a plain
`extractall` writes wherever a crafted member's name says.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import tarfile
import tempfile
import zipfile
from pathlib import Path

from h3kit.core import files
from h3kit.core.errors import BadInput, NotReady
from h3kit.core.tools import run_git

ARCHIVE = re.compile(r"\.(zip|tar|tar\.gz|tgz|tar\.xz|tar\.bz2)$", re.I)
OFFLINE = "or pass a local ComfyUI folder or a downloaded ComfyUI .zip with --comfyui-source"


def source_kind(source: str) -> str:
    """'git-url' | 'git-local' | 'folder' | 'archive' (pure apart from looking at the path)."""
    if re.match(r"^(https?|ssh|git)://|^[\w.-]+@[\w.-]+:", source):
        return "git-url"
    p = Path(source).expanduser()
    if p.is_file() and ARCHIVE.search(p.name):
        return "archive"
    if p.is_dir():
        if (p / ".git").exists() or ((p / "HEAD").is_file() and (p / "objects").is_dir()):
            return "git-local"
        return "folder"
    raise BadInput(f"The ComfyUI source {source} is neither a URL nor an existing folder, git repository or archive.",
                   "Pass a git URL, a ComfyUI folder, or a .zip/.tar.gz of one with --comfyui-source.")


def fetch_source(ctx, source: str, target: Path, timeout: float, *, ref: str | None = None) -> dict:
    """Put ComfyUI's source into `target` (which must not exist); returns {kind, commit}.

    `ref`: a tag (or branch) of a git source to clone instead of its default branch (a tag: detached HEAD)."""
    kind = source_kind(source)
    partial = target.with_name(target.name + ".h3kit-partial")
    if partial.exists():
        shutil.rmtree(partial)  # ours: a previous run stopped while fetching
    commit = None
    if kind in ("git-url", "git-local"):
        try:
            run_git(ctx, ["clone", "--depth", "1", "--progress", *(["--branch", ref] if ref else []), source,
                          str(partial)],
                    f"Cloning ComfyUI from {source}", timeout=timeout, alternative=OFFLINE)
        except NotReady:
            shutil.rmtree(partial, ignore_errors=True)
            raise
        try:
            commit = run_git(ctx, ["-C", str(partial), "rev-parse", "HEAD"], "Reading the cloned commit",
                             timeout=30).stdout.strip() or None
        except NotReady:
            commit = None
    elif kind == "archive":
        unpack(Path(source), partial)
    else:
        shutil.copytree(Path(source).expanduser(), partial, symlinks=True,
                        ignore=shutil.ignore_patterns("venv", ".venv", "__pycache__"))
    files.replace(partial, target)  # through h3kit.core.files: the crash harness can stop right after it
    if not (target / "main.py").is_file():
        raise BadInput(f"{source} does not look like ComfyUI (no main.py at its top).",
                       "Pass the ComfyUI repository, folder or archive itself with --comfyui-source.")
    return {"kind": kind, "commit": commit}


def unpack(archive: Path, dest: Path) -> None:
    """Unpack a .zip or tar archive into `dest` (which must not exist); a single top folder is taken as the tree."""
    tmp = Path(tempfile.mkdtemp(prefix=".h3kit-unpack-", dir=dest.parent))
    try:
        try:
            if archive.suffix.lower() == ".zip":
                with zipfile.ZipFile(archive) as z:
                    z.extractall(tmp)  # zipfile drops absolute and '..' parts and makes no links
            else:
                with tarfile.open(archive) as t:
                    extract_tar(t, tmp)
        except (tarfile.TarError, zipfile.BadZipFile, EOFError) as exc:
            if isinstance(exc, getattr(tarfile, "FilterError", ())):
                raise _refused(archive, str(exc)) from None
            raise BadInput(f"The archive {archive} cannot be read ({exc}).",
                           "Download it again, or pass a git URL with --comfyui-source.") from None
        entries = [e for e in tmp.iterdir() if not e.name.startswith(".")]
        top = entries[0] if len(entries) == 1 and entries[0].is_dir() else tmp  # GitHub zips have one top folder
        os.replace(top, dest)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def extract_tar(t: tarfile.TarFile, dest: Path) -> None:
    """Every member of `t` under `dest`; BadInput for a member that would land, or point, outside it."""
    members = t.getmembers()
    for m in members:  # the data filter would strip the slash; a ComfyUI archive never has one, so refuse
        if os.path.isabs(m.name) or os.path.splitdrive(m.name)[0]:
            raise _refused(t.name, f"{m.name} has an absolute path")
    if hasattr(tarfile, "data_filter"):
        t.extractall(dest, filter="data")
        return
    root = os.path.realpath(dest)
    for m in members:
        target = _inside(root, m.name, m)
        if m.isdir():
            os.makedirs(target, exist_ok=True)
            continue
        os.makedirs(os.path.dirname(target), exist_ok=True)
        if m.issym() or m.islnk():
            # A symlink's target is relative to its folder, a hard link's to the archive's top.
            link = os.path.join(os.path.dirname(m.name), m.linkname) if m.issym() else m.linkname
            if os.path.isabs(m.linkname) or os.path.splitdrive(m.linkname)[0]:
                raise _refused(t.name, f"{m.name} links to the absolute path {m.linkname}")
            source = _inside(root, link, m)
            if os.path.lexists(target) and not os.path.isdir(target):
                os.unlink(target)
            if m.issym():
                os.symlink(m.linkname, target)
            else:
                os.link(source, target)
        elif m.isfile():
            with t.extractfile(m) as fin, open(target, "wb") as fout:
                shutil.copyfileobj(fin, fout)
            os.chmod(target, 0o755 if m.mode & stat.S_IXUSR else 0o644)
        else:
            raise _refused(t.name, f"{m.name} is a device or pipe, not a file")


def _inside(root: str, rel: str, member: tarfile.TarInfo) -> str:
    """`root/rel` with links already unpacked followed; refused unless it stays under `root`."""
    path = os.path.realpath(os.path.join(root, rel))
    if os.path.commonpath([root, path]) != root:
        what = "points" if member.issym() or member.islnk() else "would be written"
        raise _refused(None, f"{member.name} {what} outside the folder it is unpacked into")
    return path


def _refused(archive, why: str) -> BadInput:
    where = f"The archive {archive}" if archive else "The archive"
    return BadInput(f"{where} was refused: {why}.",
                    "Use ComfyUI's own archive (GitHub: Code > Download ZIP) or a git URL with --comfyui-source.")
