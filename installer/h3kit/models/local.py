"""Weight files from a local folder or disk instead of the network (`models fetch --from DIR`).

Same verification as a download (h3kit.models.download.verify_or_raise);
on the same disk the file is hard-linked (no space, no copy time), else
copied through `<name>.part` and renamed into place only once verified.
"""

from __future__ import annotations

import hashlib
import logging
import os
from pathlib import Path

from h3kit.core import files as core_files
from h3kit.core.files import sha256_file
from h3kit.models.download import CHUNK, Fetched, Want, progress_bar, verify_or_raise

log = logging.getLogger("h3kit.models.local")


def find_local(src_dir: Path, name: str, folder: str | None = None) -> Path | None:
    """Where a file sits in a local folder. Search order: DIR/FOLDER/NAME, DIR/NAME,
    DIR/models/FOLDER/NAME (another ComfyUI), then anywhere below DIR (first match by path order)."""
    src = Path(src_dir)
    candidates = []
    if folder:
        candidates.append(src / folder / name)
    candidates.append(src / name)
    if folder:
        candidates.append(src / "models" / folder / name)
    for c in candidates:
        if c.is_file():
            return c
    matches = sorted(p for p in src.rglob(name) if p.is_file())
    return matches[0] if matches else None


def place_from_local(want: Want, source: Path, *, link: bool = True, progress: bool | None = None) -> Fetched:
    """Hard-link (same disk) or copy `source` into place, with the same verification as a download."""
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
                return Fetched(want.dest, size, digest, str(source), verified_by, method="hardlink")
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
    return Fetched(want.dest, size, digest, str(source), verified_by, method="copy")
