"""How much free disk a new ComfyUI needs, decided once before anything is fetched.

Two ceilings; the smaller one is the need:

- the torch build's figure (profiles/torch_builds.yaml, `comfyui_setup.min_free_bytes`):
  ComfyUI, its venv and a download of that build with its runtime libraries;
- when pip may take packages only from local folders (H3KIT_PIP_NO_INDEX with
  H3KIT_PIP_FIND_LINKS), what those folders can deliver: every archive in them
  unpacked (`local_unpack_factor`, measured on torch's CUDA wheels) plus
  ComfyUI's source and an empty venv (`source_and_venv_bytes`). A user who
  brought the wheels on a stick is not asked for room for a download that
  will not happen.

A torch taken from another index later (torch_source.reachable_choice, only
when pip may reach a server) is checked against its own build's figure.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from h3kit.core.errors import NotReady
from h3kit.core.files import free_bytes, nearest_existing
from h3kit.core.tools import PipOptions
from h3kit.core.units import gb

# What pip's --find-links takes from a folder (it does not look into subfolders).
ARCHIVE_SUFFIXES = (".whl", ".tar.gz", ".tgz", ".zip", ".tar.bz2")


@dataclass(frozen=True)
class DiskNeed:
    bytes: int
    why: str  # completes "a new ComfyUI ... needs about N": which ceiling this is


def local_archive_bytes(paths: list[str]) -> int:
    """The bytes of the package archives pip can find in `paths` (folders, read flat, or single files). A folder
    or file that cannot be read counts nothing: pip cannot take packages from it either, and says so itself."""
    total = 0
    for path in map(Path, paths):
        try:
            files = [path] if path.is_file() else (sorted(path.iterdir()) if path.is_dir() else [])
            total += sum(f.stat().st_size for f in files
                         if f.is_file() and f.name.lower().endswith(ARCHIVE_SUFFIXES))
        except OSError:
            continue
    return total


def need_for(table: dict, backend: str, opts: PipOptions) -> DiskNeed:
    """The free disk a new ComfyUI with `backend`'s torch needs, from `table` (`comfyui_setup`)."""
    figures = table["min_free_bytes"]
    download = DiskNeed(int(figures.get(backend, figures["cpu"])), "with this torch build")
    local = opts.local_only()
    if local is None:
        return download
    archives = local_archive_bytes(local)
    from_folders = int(archives * table["local_unpack_factor"]) + int(table["source_and_venv_bytes"])
    if from_folders >= download.bytes:
        return download
    where = " and ".join(local)
    return DiskNeed(from_folders, f"from the {gb(archives)} of packages in {where} (unpacked, with ComfyUI "
                                  "and its venv)")


def check_room(target: Path, need: DiskNeed) -> None:
    """NotReady when the disk that will hold `target` has less free than `need`."""
    where = nearest_existing(target)
    free = free_bytes(where)
    if free is not None and free < need.bytes:
        raise NotReady(f"{where} has {gb(free)} free; a new ComfyUI {need.why} needs about {gb(need.bytes)}.",
                       "Free some space, or choose a folder on another disk.")

