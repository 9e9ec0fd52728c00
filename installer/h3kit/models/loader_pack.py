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
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from h3kit.comfyui import locate
from h3kit.comfyui.journal import Journal
from h3kit.comfyui.setup.source import ARCHIVE, source_kind, unpack
from h3kit.core import files, net
from h3kit.core.errors import NotReady
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


def comfy_python(comfyui_dir: Path, config=None) -> Path | None:
    """ComfyUI's own interpreter, by h3kit.comfyui.locate's search order (portable python_embeded, a venv
    inside ComfyUI, then `comfyui_python` of `config`); None when none is found."""
    base = Path(comfyui_dir)
    py, _source = locate.find_python(locate.ComfyInstall(base, "given", locate.detect_layout(base)), config)
    return Path(py) if py is not None else None


def install_loader_pack(ctx, pack: LoaderPack, comfyui_dir: Path, *, git_url: str | None = None, config=None,
                        opts: PipOptions | None = None) -> dict:
    """git clone the pack into custom_nodes, pip-install its requirements with ComfyUI's Python, record every file."""
    comfyui_dir = Path(comfyui_dir)
    dest = comfyui_dir / "custom_nodes" / pack.folder
    man = manifest_for(ctx, comfyui_dir)
    entry = man.find(dest)
    interrupted = entry is not None and entry.pending and dest.is_dir() and not dest.is_symlink()
    if dest.exists() and not interrupted:
        return {"name": pack.name, "path": str(dest), "installed": False, "why": "already there"}
    local = local_source(pack)
    source = git_url or (str(local) if local else pack.git)
    why = None if local or net.is_local(source) else net.unreachable(source)
    if why:
        raise NotReady(f"{pack.name} cannot be installed: {net.host_of(source)} cannot be reached ({why}).",
                       f"Set {SOURCES_ENV} to a local checkout or .zip of {pack.name} ({pack.git}), "
                       "copied from a machine that reaches it, and run the same command again.")
    if ctx.dry_run:
        return {"name": pack.name, "path": str(dest), "installed": False,
                "why": "dry run" + (" (an interrupted clone would be redone)" if interrupted else "")}
    if interrupted:
        # The record named this folder before it existed, so a half-made clone in it is ours to redo.
        ctx.progress(f"Removing the interrupted clone of {pack.name} in {dest} ...")
        files.remove_tree(dest)
    ctx.progress(f"Installing {pack.name} from {source} into {dest} ...")

    def make(folder: Path) -> None:
        if local is not None and source_kind(str(local)) == "archive":
            unpack(local, folder)
        elif local is not None and source_kind(str(local)) == "folder":
            shutil.copytree(local, folder, symlinks=True, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            run_git(ctx, ["clone", "--depth", "1", source, str(folder)], f"Cloning {pack.name} from {source}",
                    timeout=CLONE_TIMEOUT, alternative=f"or set {SOURCES_ENV} to a local checkout or .zip of it")

    # Record before write: the folder is named (pending) before git makes it, so a crash mid-clone
    # leaves a record that says the folder is ours, and the next run redoes the clone.
    Journal(man).mkdir(dest, PACK_ROLE, make)
    for root, dirs, names in os.walk(dest):
        for d in dirs:
            man.record_dir(Path(root) / d, PACK_ROLE)
        for n in names:
            man.record_file(Path(root) / n, PACK_ROLE)
    man.save()
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
