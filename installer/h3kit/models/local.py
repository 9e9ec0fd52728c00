"""Weight files from a local folder or disk instead of the network (`models fetch --from DIR`).

Same verification as a download (h3kit.models.download.verify_or_raise);
on the same disk the file is hard-linked (no space, no copy time), else
copied through `<name>.part` and renamed into place only once verified.
A source that is a link (a Hugging Face cache: snapshots/<rev>/<file> ->
../../blobs/<sha256>) is followed to the file it leads to, and that file is
linked or copied: what lands in ComfyUI is never a link.
"""

from __future__ import annotations

import hashlib
import logging
import os
import stat
from pathlib import Path

from h3kit.core import bounded_read
from h3kit.core import files as core_files
from h3kit.core.errors import BadInput
from h3kit.core.files import sha256_file
from h3kit.core import logs
from h3kit.models.download import CHUNK, Fetched, Want, progress_bar, verify_or_raise

log = logging.getLogger("h3kit.models.local")
REF_CAP = 4096  # a Hugging Face ref holds one 40-digit commit hash


def find_local(src_dir: Path, name: str, folder: str | None = None) -> Path | None:
    """Where a file sits in a local folder. Search order: DIR/FOLDER/NAME, DIR/NAME,
    DIR/models/FOLDER/NAME (another ComfyUI), then anywhere below DIR (first match by path order).

    A match may be a link (a Hugging Face cache names every file through one) when it leads to a regular
    file; what lands in ComfyUI is that file (`place_from_local`). A match that leads nowhere is passed
    over for a later one, and named (BadInput) when no match leads anywhere."""
    src = Path(src_dir)
    candidates = []
    if folder:
        candidates.append(src / folder / name)
    candidates.append(src / name)
    if folder:
        candidates.append(src / "models" / folder / name)
    dangling: list[Path] = []
    found = _first_file(candidates, dangling) or _first_file(_walk_for(src, name), dangling)
    if found is None and dangling:
        raise _dangling(dangling[0])
    return found


def _first_file(paths: list[Path], dangling: list[Path]) -> Path | None:
    """The first of `paths` that is (or leads to) a regular file; the links met on the way that lead
    nowhere are added to `dangling`."""
    for p in paths:
        kind = _kind(p)
        if kind == "file":
            return p
        if kind == "dangling":
            dangling.append(p)
    return None


def _walk_for(src: Path, name: str) -> list[Path]:
    """Every entry called `name` below `src`, sorted; linked folders are not entered (a link to a parent
    would never end) and unreadable ones are passed over."""
    found = []
    for root, _dirs, names in os.walk(src, followlinks=False, onerror=lambda exc: None):
        if name in names:
            found.append(Path(root) / name)
    return sorted(found, key=lambda p: (not _is_main_snapshot(p), p))


def _is_main_snapshot(path: Path) -> bool:
    """Whether `path` lies in a Hugging Face cache's snapshot of the revision refs/main names (a cache keeps
    every revision it fetched; the one `main` points at is what the hub serves now)."""
    parts = path.parts
    if "snapshots" not in parts:
        return False
    at = len(parts) - 1 - parts[::-1].index("snapshots")
    if at + 1 >= len(parts):
        return False
    ref = Path(*parts[:at]) / "refs" / "main"
    try:  # a commit hash and a newline; read bounded, since a pipe or a link to /dev/zero there never ends
        return bounded_read.read_text(ref, REF_CAP, "ascii").strip() == parts[at + 1]
    except bounded_read.UnreadableFile as exc:
        if not exc.absent:
            logs.skipped(exc.skipped)
        return False


def _kind(path: Path) -> str:
    """'file' (a regular file, or a link that leads to one), 'dangling' (a link that leads nowhere), else
    'other' (absent, a folder, a pipe, a device: nothing to place; never opened)."""
    try:
        st = os.stat(path)
    except OSError:
        return "dangling" if os.path.islink(path) else "other"
    return "file" if stat.S_ISREG(st.st_mode) else "other"


def _dangling(path: Path) -> BadInput:
    try:
        target = os.readlink(path)
    except OSError:
        target = "?"
    return BadInput(f"{path} is a link to {target}, which does not exist.",
                    "Copy the model files themselves into the --from folder (a Hugging Face cache needs its "
                    "blobs folder beside snapshots; 'cp -rL' copies what links point to), then run again.")


def real_file(source: Path) -> Path:
    """The regular file `source` is or leads to (links followed to the end); BadInput when it leads nowhere
    or to something that is not a file (a pipe or a device is never opened)."""
    try:
        real = Path(os.path.realpath(source, strict=True))
        mode = os.stat(real).st_mode
    except OSError:
        if os.path.islink(source):
            raise _dangling(source) from None
        raise BadInput(f"{source} cannot be read.", "Check the --from folder, then run again.") from None
    if not stat.S_ISREG(mode):
        raise BadInput(f"{source} is not a regular file ({real}).",
                       "Put the model file itself into the --from folder, then run again.")
    return real


def place_from_local(want: Want, source: Path, *, link: bool = True, progress: bool | None = None) -> Fetched:
    """Hard-link (same disk) or copy `source` into place, with the same verification as a download."""
    named = source
    # A link hard-linked is the link itself on Linux (dangling in ComfyUI when relative): link or copy the
    # file it leads to.
    source = real_file(source)
    want.dest.parent.mkdir(parents=True, exist_ok=True)
    size = source.stat().st_size
    if link:
        try:
            same_disk = os.stat(source).st_dev == os.stat(want.dest.parent).st_dev
        except OSError:
            same_disk = False
        if same_disk:
            digest = sha256_file(source) if want.sha256 else None
            verified_by = verify_or_raise(want, source, size, digest)
            tmp = want.part
            tmp.unlink(missing_ok=True)
            try:
                os.link(source, tmp)
            except OSError as exc:
                log.info("hard link %s -> %s failed (%s); copying instead", source, tmp, exc)
            else:
                core_files.replace(tmp, want.dest)
                if digest is None:
                    digest = sha256_file(want.dest)
                return Fetched(want.dest, size, digest, str(named), verified_by, method="hardlink")
    hasher = hashlib.sha256()
    bar = progress_bar(size, 0, want.name, progress)
    try:
        with open(source, "rb") as fin, core_files.naming(want.part), open(want.part, "wb") as fout:
            while True:
                block = fin.read(CHUNK)
                if not block:
                    break
                fout.write(block)
                hasher.update(block)
                bar.update(len(block))
    finally:
        bar.close()
    digest = hasher.hexdigest()
    verified_by = verify_or_raise(want, want.part, want.part.stat().st_size, digest)
    core_files.replace(want.part, want.dest)
    return Fetched(want.dest, size, digest, str(named), verified_by, method="copy")
