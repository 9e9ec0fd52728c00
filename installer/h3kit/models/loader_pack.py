"""Custom node packs that some weight formats need (e.g. ComfyUI-GGUF for .gguf files), installed on request.

`install_loader_pack` clones the pack into `custom_nodes/` and installs its
requirements with ComfyUI's own Python, both through h3kit.core.tools (so
the offline and mirror options of pip hold, and git never waits at a login
prompt), and records every file it wrote (role "loader-pack") so that
`h3kit uninstall` removes exactly the pack.

Without GitHub: `H3KIT_LOADER_SOURCES` names local copies (a checkout, a git
repository, a folder or a .zip/.tar.gz, e.g. GitHub's "Download ZIP"), or
folders that hold them under the pack's name; the first match is used
instead of the clone. A git host that does not answer a connect probe of a
few seconds (h3kit.core.net) is reported at once, naming that variable.

A local folder or archive is checked before anything lands in custom_nodes:
it is the pack when the pack's marker files (`pack_markers`) are at its top,
or in the one folder inside it (GitHub's "Download ZIP", an archive unpacked
into a folder of its own name), which is then taken as the pack. Only
regular files and folders are copied: a link counts as what it leads to while
that lies inside the pack, and is refused otherwise; a pipe, device or socket
is refused by name and never opened (the install record hashes every file, and
reading /dev/zero would never end). An earlier install the record names as the
pack that lacks those files (an older h3kit copied any folder) is replaced,
provided everything in it is still exactly what h3kit wrote.
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

from h3kit.comfyui import locate
from h3kit.comfyui.journal import Journal
from h3kit.comfyui.setup.source import ARCHIVE, source_kind, unpack
from h3kit.core import files, net
from h3kit.core.errors import BadInput, NotReady
from h3kit.core.tools import PipOptions, run_git, run_pip
from h3kit.data.catalog_sections import LoaderPack
from h3kit.models.files import PACK_ROLE, manifest_for, session_config

SOURCES_ENV = "H3KIT_LOADER_SOURCES"  # local checkouts or archives of the packs, for machines without GitHub
CLONE_TIMEOUT = 600.0
PIP_TIMEOUT = 1800.0


def local_source(pack: LoaderPack, environ=None) -> Path | None:
    """The pack from $H3KIT_LOADER_SOURCES (paths separated like PATH): an entry that is the pack itself
    (a checkout, folder or archive named after the pack's folder), or a folder that holds one under that name."""
    env = os.environ if environ is None else environ
    name = pack.folder.lower()
    for entry in [Path(p).expanduser() for p in env.get(SOURCES_ENV, "").split(os.pathsep) if p]:
        stem = ARCHIVE.sub("", entry.name).lower()
        if entry.exists() and (stem == name or stem.startswith(name + "-")):  # ComfyUI-GGUF-main.zip
            return entry
        if entry.is_dir():
            for child in sorted(entry.iterdir()):
                stem = ARCHIVE.sub("", child.name).lower()
                if stem == name or stem.startswith(name + "-"):
                    return child
    return None


def pack_markers(pack: LoaderPack) -> tuple[str, ...]:
    """The files at a pack's top that say it is the pack: ComfyUI imports a custom node folder through its
    `__init__.py`; a pack whose nodes the catalog names (ComfyUI-GGUF) keeps them in `nodes.py`."""
    return ("__init__.py", "nodes.py") if pack.nodes else ("__init__.py",)


def _is_pack(folder: Path, pack: LoaderPack) -> bool:
    return all((folder / m).is_file() for m in pack_markers(pack))


def comfy_python(comfyui_dir: Path, config=None) -> Path | None:
    """ComfyUI's own interpreter, by h3kit.comfyui.locate's search order (portable python_embeded, a venv
    inside ComfyUI, then `comfyui_python` of `config`); None when none is found."""
    base = Path(comfyui_dir)
    py, _source = locate.find_python(locate.ComfyInstall(base, "given", locate.detect_layout(base)), config,
                                     app=locate.app_of(base, {}))  # the app's venv (Pinokio's env/, ...) first
    return Path(py) if py is not None else None


def install_loader_pack(ctx, pack: LoaderPack, comfyui_dir: Path, *, git_url: str | None = None, config=None,
                        opts: PipOptions | None = None) -> dict:
    """git clone the pack into custom_nodes (or copy it from a local source), pip-install its requirements
    with ComfyUI's Python, record every file."""
    comfyui_dir = Path(comfyui_dir)
    dest = comfyui_dir / "custom_nodes" / pack.folder
    man = manifest_for(ctx, comfyui_dir)
    entry = man.find(dest)
    interrupted = entry is not None and entry.pending and dest.is_dir() and not dest.is_symlink()
    wrong = (entry is not None and entry.role == PACK_ROLE and not entry.pending and dest.is_dir()
             and not dest.is_symlink() and not _is_pack(dest, pack))
    if dest.exists() and not interrupted and not wrong:
        return {"name": pack.name, "path": str(dest), "installed": False, "why": "already there"}
    local = local_source(pack)
    source = git_url or (str(local) if local else pack.git)
    why = None if local or net.is_local(source) else net.unreachable(source)
    if why:
        raise NotReady(f"{pack.name} cannot be installed: {net.host_of(source)} cannot be reached ({why}).",
                       f"Set {SOURCES_ENV} to a local checkout or .zip of {pack.name} ({pack.git}), "
                       "copied from a machine that reaches it, and run the same command again.")
    if wrong:
        _refuse_a_folder_not_ours(man, dest, pack)
    if ctx.dry_run:
        redo = (" (an interrupted clone would be redone)" if interrupted
                else f" (an earlier install that is not {pack.name} would be replaced)" if wrong else "")
        return {"name": pack.name, "path": str(dest), "installed": False, "why": "dry run" + redo}
    _put_in_place(ctx, man, pack, dest, source, local, replace=wrong, redo=interrupted)
    req = dest / pack.requirements
    if not req.is_file():
        return {"name": pack.name, "path": str(dest), "installed": True, "python": None, "requirements": None}
    python = comfy_python(comfyui_dir, session_config(ctx, config))
    if python is None:
        raise NotReady(f"Cannot find the Python that runs the ComfyUI in {comfyui_dir}, needed to install "
                       f"{pack.name}'s requirements (the pack itself is in {dest}).",
                       f"Run ComfyUI's python -m pip install -r {req} yourself, or set comfyui_python in config.yaml.")
    run_pip(ctx, python, ["install", "-r", str(req)], f"Installing {pack.name}'s requirements with {python}",
            timeout=PIP_TIMEOUT, opts=opts)
    return {"name": pack.name, "path": str(dest), "installed": True, "python": str(python),
            "requirements": str(req)}


def _refuse_a_folder_not_ours(man, dest: Path, pack: LoaderPack) -> None:
    """An earlier install in `dest` that is not the pack is replaced only when all of it is h3kit's."""
    theirs = _not_ours(man, dest)
    if theirs:
        raise BadInput(f"{dest} is an earlier install of {pack.name} that is not the pack (no "
                       f"{' or '.join(pack_markers(pack))}), and {theirs[0]} in it was not written by h3kit "
                       "(or was changed since), so h3kit will not replace it.",
                       f"Move {theirs[0]} (or the whole folder) out of {dest.parent} yourself, then run "
                       "the same command again.")


def _put_in_place(ctx, man, pack: LoaderPack, dest: Path, source: str, local: Path | None, *, replace: bool,
                  redo: bool) -> None:
    """The pack's files into `dest` (copied from a local source, else cloned), every one recorded; `replace`: an
    earlier install that is not the pack goes first, `redo`: an interrupted clone does."""
    kind = source_kind(str(local)) if local is not None else None
    with tempfile.TemporaryDirectory(prefix=".h3kit-pack-") as scratch:
        # Checked before anything lands in custom_nodes: a refusal leaves no folder for ComfyUI to load.
        tree = _local_tree(pack, local, kind, Path(scratch)) if kind in ("archive", "folder") else None
        if replace:
            ctx.progress(f"Replacing the earlier install in {dest}, which is not {pack.name} ...")
            _remove_ours(man, dest)
        if redo:
            # The record named this folder before it existed, so a half-made clone in it is ours to redo.
            ctx.progress(f"Removing the interrupted clone of {pack.name} in {dest} ...")
            files.remove_tree(dest)
        ctx.progress(f"Installing {pack.name} from {source} into {dest} ...")

        def make(folder: Path) -> None:
            if tree is not None:
                _copy_tree(tree, folder)
            else:
                run_git(ctx, ["clone", "--depth", "1", source, str(folder)], f"Cloning {pack.name} from {source}",
                        timeout=CLONE_TIMEOUT, alternative=f"or set {SOURCES_ENV} to a local checkout or .zip of it")

        # Record before write: the folder is named (pending) before git makes it, so a crash mid-clone
        # leaves a record that says the folder is ours, and the next run redoes the clone.
        Journal(man).mkdir(dest, PACK_ROLE, make)
    _record_tree(man, dest)
    man.save()
    if tree is None and not _is_pack(dest, pack):
        # A clone is checked once made (git writes it in place); all of it is h3kit's, so it goes again.
        Journal(man).remove(dest)
        man.save()
        raise BadInput(f"{source} is not {pack.name}: the clone has no {' and '.join(pack_markers(pack))} at its top.",
                       f"Set {SOURCES_ENV} to a checkout or .zip of {pack.name} ({pack.git}), then run again.")


# -- a local source, checked and copied ----------------------------------------------------------------

def _local_tree(pack: LoaderPack, local: Path, kind: str, scratch: Path) -> list[tuple[str, Path | None]]:
    """The pack's folders and files in `local` (a folder, or an archive unpacked into `scratch`), as
    `_tree` lists them, from the folder that is the pack; BadInput when none is."""
    fix = f"Set {SOURCES_ENV} to a checkout or .zip of {pack.name} ({pack.git}), then run the same command again."
    if kind == "archive":
        try:
            unpack(local, scratch / "unpacked")
        except BadInput as exc:  # its own fix names ComfyUI's --comfyui-source
            raise BadInput(exc.message, fix) from None
        folder, label = scratch / "unpacked", (lambda rel: f"{rel} in {local}")
    else:
        folder, label = local, (lambda rel: str(local / rel))
    top = _find_top(folder, pack)
    if top is None:
        raise BadInput(f"{local} is not {pack.name}: {' and '.join(pack_markers(pack))} are not at its top "
                       "(nor in the one folder inside it).", fix)
    prefix = top.relative_to(folder).as_posix()
    return _tree(top, lambda rel: label(f"{prefix}/{rel}" if prefix != "." else rel), fix)


def _find_top(folder: Path, pack: LoaderPack) -> Path | None:
    """`folder` when it is the pack, else the one folder inside it (or inside one of its folders: a zip of
    an unpacked "Download ZIP", with macOS's __MACOSX beside it) that is; None when none is, or several."""
    level = [folder]
    for _depth in range(3):
        found = [f for f in level if _is_pack(f, pack)]
        if found:
            return found[0] if len(found) == 1 else None
        level = [c for f in level for c in _folders_in(f)]
    return None


def _folders_in(folder: Path) -> list[Path]:
    try:
        return [c for c in sorted(folder.iterdir()) if c.is_dir() and not c.is_symlink()]
    except OSError:  # unreadable: not where the pack is
        return []


def _tree(top: Path, label, fix: str) -> list[tuple[str, Path | None]]:
    """Every folder and regular file under `top` as (path relative to it, the file to copy, or None for a
    folder), parents first; `__pycache__` is left out. Each entry is looked at with lstat, so nothing but
    a regular file is ever opened. A link counts as what it leads to while that lies inside `top`;
    BadInput, naming it (`label(rel)`), for a link that leads outside or nowhere or to a folder that
    holds it, and for a pipe, device or socket."""
    root = os.path.realpath(top)
    out: list[tuple[str, Path | None]] = []

    def refuse(rel: str, why: str) -> BadInput:
        return BadInput(f"{label(rel)} {why}; h3kit copies only files and folders that lie inside the pack.", fix)

    def walk(folder: str, rel: str, above: tuple[str, ...]) -> None:
        for name in sorted(os.listdir(folder)):
            if name == "__pycache__":
                continue
            path, here = os.path.join(folder, name), f"{rel}/{name}" if rel else name
            mode = os.lstat(path).st_mode
            if stat.S_ISLNK(mode):
                target = os.readlink(path)
                path = os.path.realpath(path)
                if os.path.commonpath([root, path]) != root:
                    raise refuse(here, f"is a link to {target}, outside it")
                try:
                    mode = os.stat(path).st_mode
                except OSError:
                    raise refuse(here, f"is a link to {target}, which leads nowhere") from None
            if stat.S_ISDIR(mode):
                real = os.path.realpath(path)
                if real in above:
                    raise refuse(here, "is a link to a folder that holds it (copying it would never end)")
                out.append((here, None))
                walk(real, here, (*above, real))
            elif stat.S_ISREG(mode):
                out.append((here, Path(path)))
            else:
                raise refuse(here, "is a pipe, a device or a socket, not a file")

    try:
        walk(root, "", (root,))
    except OSError as exc:  # an unreadable folder: named, the rest of the error is the OS's
        raise BadInput(f"{exc.filename or top} cannot be read ({exc.strerror}).", fix) from None
    return out


def _copy_tree(tree: list[tuple[str, Path | None]], folder: Path) -> None:
    """`folder` made, holding the listed folders and copies of the listed files (mode: executable or not)."""
    files.make_dir(folder)
    for rel, src in tree:
        if src is None:
            files.make_dir(folder / rel)
        else:
            executable = os.stat(src).st_mode & stat.S_IXUSR
            files.write_new(folder / rel, src.read_bytes(), 0o755 if executable else 0o644)


def _record_tree(man, dest: Path) -> None:
    """Every folder, file and link under `dest` in the record; a link is recorded as a link, never followed
    (a clone may hold one, and what it points to may be anything)."""
    for root, dirs, names in os.walk(dest):
        for n in dirs + names:
            p = Path(root) / n
            if p.is_symlink():
                man.record_link(p, PACK_ROLE)
            elif p.is_dir():
                man.record_dir(p, PACK_ROLE)
            elif stat.S_ISREG(os.lstat(p).st_mode):
                man.record_file(p, PACK_ROLE)


def _not_ours(man, dest: Path) -> list[Path]:
    """What under `dest` the record does not name as the pack's, or names with other content now."""
    theirs = []
    for root, dirs, names in os.walk(dest):
        dirs[:] = [d for d in dirs if not _bytecode(Path(root) / d)]  # Python's, made when ComfyUI imported it
        for n in sorted(dirs + names):
            p = Path(root) / n
            entry = man.find(p)
            if entry is None or entry.role != PACK_ROLE or entry.pending or not man.still_ours(entry):
                theirs.append(p)
    return theirs


def _bytecode(folder: Path) -> bool:
    """A `__pycache__` folder holding only .pyc files: byte code Python wrote, nobody's data."""
    if folder.name != "__pycache__" or folder.is_symlink() or not folder.is_dir():
        return False
    return all(p.suffix == ".pyc" and stat.S_ISREG(os.lstat(p).st_mode) for p in folder.iterdir())


def _remove_ours(man, dest: Path) -> None:
    """Remove `dest`, everything in it h3kit's as it is now (`_not_ours` found nothing), deepest first, then
    its entries; a crash half-way leaves files the record still names, and the next run finishes."""
    journal = Journal(man)
    for root, dirs, _names in os.walk(dest):
        for d in [d for d in dirs if _bytecode(Path(root) / d)]:
            files.remove_tree(Path(root) / d)
            dirs.remove(d)
    for root, dirs, names in os.walk(dest, topdown=False):
        for n in names:
            journal.remove(Path(root) / n)
        for n in dirs:
            p = Path(root) / n
            if p.is_symlink():
                journal.remove(p)
            else:
                files.remove_dir(p)
    files.remove_dir(dest)
    inside = str(dest.absolute()) + os.sep
    man.entries = [e for e in man.entries if e.path != str(dest.absolute()) and not e.path.startswith(inside)]
    man.save()
