"""Remove exactly what the install record lists, nothing else.

Rules, in the order they are applied:

- First, what a crash left is finished (as h3kit.comfyui.deploy.recover does for install; the
  record-before-write rule of h3kit.comfyui.journal): staging folders go, and
  each pending entry is settled: present with the hash h3kit meant to write,
  it is h3kit's and removed like the rest; with other content it is left
  alone and reported; absent, it is dropped. So h3kit's own files are never
  called "changed or added by you" after a crash.
- Only entries under the ComfyUI folder (or the portable build's launcher
  folder one level up) are touched; models and a ComfyUI h3kit set up are
  never removed here (`h3kit models remove` does models).
- A file or link whose hash still matches the record is removed. One the user
  changed is moved to a backup folder under the state dir and reported.
- A folder we created is removed once empty; things the user added inside it
  are moved to the backup, except Python's own `__pycache__` byte code and
  what h3kit's own nodes write there (`h3kit_streaming_stats.json`, told by
  its schema).
- Links are never followed: a link is removed or moved as a link, and an
  entry with a link on its way (the pack folder replaced by a link to a
  checkout elsewhere, say) is left alone and reported, so nothing outside the
  recorded ComfyUI folder is ever touched; the command then exits 4.
- Backups of the user's own files (recorded with role `backup` when a
  re-install or apply moved them out of the way) are theirs: left where
  they are, and listed.
- No record, or a corrupt one: refuse (exit 2); `--dry-run` shows what a
  guess would remove, without removing anything. The one exception: a
  staging folder an interrupted install left (named `*.h3kit-staging.disabled`
  and holding h3kit's `.h3kit-staging` mark) is always removed, record or not,
  and `--dry-run` lists it.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from h3kit.comfyui import manifest as mf
from h3kit.comfyui.backups import backup_root, move_to_backup
from h3kit.comfyui.deploy import clean_staging, staging_dirs
from h3kit.comfyui.journal import Journal
from h3kit.comfyui.links import same_as_recorded
from h3kit.comfyui.locate import NODE_DIR_NAME, ComfyInstall
from h3kit.comfyui.versions import history
from h3kit.core import files as fs
from h3kit.core.files import sha256_file

KEEP_ROLES = {mf.BACKUP_ROLE: "your own version, moved out of h3kit's way earlier: yours, left there",
              "model": "downloaded model weights are kept (remove them with 'h3kit models remove')",
              "comfyui": "the ComfyUI h3kit set up is kept (delete the folder yourself if you no longer want it)"}
LAUNCHER_NAMES = ("run_h3kit.sh", "run_h3kit.bat")
BOOTSTRAP_RECORD = "bootstrap-record.json"  # written by scripts/bootstrap.py when it puts h3kit on the PATH
UNDO_RECORDS = ("torch_before", "comfyui_upgrade")  # what 'doctor --undo' reads (h3kit.comfyui.setup)


@dataclass
class Removal:
    removed: list[str] = field(default_factory=list)
    backed_up: list[dict] = field(default_factory=list)  # {"path", "backup"}
    kept: list[dict] = field(default_factory=list)  # {"path", "why"}
    missing: list[str] = field(default_factory=list)
    staging_cleaned: list[str] = field(default_factory=list)
    behind_links: list[dict] = field(default_factory=list)  # {"path", "link"}: left alone, never followed
    settled: list[dict] = field(default_factory=list)  # pending entries a crash left: {"path", "outcome"}
    backup_dir: str | None = None

    def to_json(self) -> dict:
        return dict(self.__dict__)


def _allowed_roots(install: ComfyInstall) -> list[Path]:
    roots = [install.path]
    if install.launcher_dir is not None and install.launcher_dir != install.path:
        roots.append(install.launcher_dir)
    return roots


def _inside(path: Path, roots: list[Path]) -> bool:
    return any(path == r or r in path.parents for r in roots)


def link_on_the_way(path: Path, roots: list[Path], known: dict | None = None) -> Path | None:
    """The first folder between a root and `path` that is a link (or a root that now resolves elsewhere), else None.

    `known`: links that were there when h3kit installed (h3kit.comfyui.links); still the same, they are the
    user's layout, written through at install, and do not count."""
    root = next((r for r in roots if path == r or r in path.parents), None)
    if root is None:
        return None
    through = [root]
    for parent in reversed(path.parents):
        if parent == root or root in parent.parents:
            if parent != root and parent.is_symlink():
                if not same_as_recorded(parent, known):
                    return parent
                through.append(parent)
    try:
        real = path.resolve()
        if not path.is_symlink() and not any(b.resolve() in (real, *real.parents) for b in through):
            return root
    except OSError:
        return root
    return None


def _is_runtime_bytecode(path: Path) -> bool:
    """Python's __pycache__ folder holding only .pyc files: regenerated, nobody's data."""
    if path.name != "__pycache__" or path.is_symlink() or not path.is_dir():
        return False
    return all(p.suffix == ".pyc" and p.is_file() and not p.is_symlink() for p in path.iterdir())


# What h3kit's own nodes write into the pack while ComfyUI runs (nodes/h3kit_streaming/logic.py STATS_FILE, the
# streamed text encoder's nodes/h3kit_streaming/te_logic.py TE_STATS_FILE): recognised by name and schema, removed
# with the pack instead of being called the user's.
NODE_OUTPUTS = {"h3kit_streaming_stats.json": "h3kit.streaming_stats/",
                "h3kit_te_streaming_stats.json": "h3kit.streaming_stats/"}


def _is_node_output(path: Path) -> bool:
    prefix = NODE_OUTPUTS.get(path.name)
    if prefix is None or path.is_symlink() or not path.is_file() or path.stat().st_size > 1 << 20:
        return False
    try:
        schema = json.loads(path.read_text(encoding="utf-8")).get("schema")
    except (OSError, ValueError, AttributeError):
        return False
    return isinstance(schema, str) and schema.startswith(prefix)


def remove(record: mf.Manifest, install: ComfyInstall, state_dir: Path, *, dry_run: bool) -> Removal:
    """Replay the record backwards (deepest first). With dry_run nothing changes."""
    out = Removal()
    _finish_interrupted(record, install, out, dry_run)
    roots = _allowed_roots(install)
    backups = backup_root(state_dir, install.path)
    base = install.path.parent if install.launcher_dir == install.path.parent else install.path

    def backup(path: Path) -> None:
        dest = backups / path.relative_to(base) if _inside(path, [base]) else backups / path.name
        if not dry_run:
            dest = move_to_backup(path, base, backups)
            out.backup_dir = str(backups)
        out.backed_up.append({"path": str(path), "backup": str(dest)})

    entries = sorted(record.entries, key=lambda e: len(Path(e.path).parts), reverse=True)
    recorded = {e.path for e in record.entries}
    known = record.extra.get("links") or {}
    for entry in entries:
        path = Path(entry.path)
        if _left_alone(entry, roots, known, out):
            continue
        if not path.exists() and not path.is_symlink():
            out.missing.append(entry.path)
            continue
        if entry.kind == "dir" and not path.is_symlink():
            _empty_dir(path, recorded, dry_run, out, backup)
            if not dry_run:
                try:
                    fs.remove_dir(path)
                except OSError:
                    out.kept.append({"path": entry.path, "why": "not empty"})
                    continue
            out.removed.append(entry.path)
        elif record.still_ours(entry):
            if not dry_run:
                fs.unlink(path)
            out.removed.append(entry.path)
        else:
            backup(path)  # changed by the user, or replaced by a link: theirs now
    return out


def _finish_interrupted(record: mf.Manifest, install: ComfyInstall, out: Removal, dry_run: bool) -> None:
    """What an interrupted run left: its staging folders cleaned, its half-done writes settled (into `out`)."""
    out.staging_cleaned = (clean_staging(install, record) if not dry_run
                           else [str(p) for p in staging_dirs(install, record)])
    if dry_run:
        for p in out.staging_cleaned:
            record.forget(p)
    out.settled = Journal(record).settle(dry_run=dry_run)
    for found in out.settled:
        if found["outcome"] == "not ours":
            out.kept.append({"path": found["path"], "why": "h3kit was writing it when it was interrupted, and it "
                                                           "holds something else now: not h3kit's, left alone"})
    if out.settled and not dry_run:
        record.save()


def _left_alone(entry: mf.Entry, roots: list[Path], known: dict, out: Removal) -> bool:
    """Whether the entry is kept whatever it holds (its role, outside ComfyUI, behind a link), said in `out`."""
    path = Path(entry.path)
    if entry.role in KEEP_ROLES:
        out.kept.append({"path": entry.path, "why": KEEP_ROLES[entry.role]})
        return True
    if not _inside(path, roots):
        out.kept.append({"path": entry.path, "why": "outside the ComfyUI folder: h3kit never removes it"})
        return True
    link = path if entry.kind == "dir" and path.is_symlink() else link_on_the_way(path, roots, known)
    if link is not None:
        out.behind_links.append({"path": entry.path, "link": str(link)})
        out.kept.append({"path": entry.path, "why": f"{link} is now a link; h3kit never follows links"})
        return True
    return False


def _empty_dir(path: Path, recorded: set[str], dry_run: bool, out: Removal, backup) -> None:
    """Clear what is left in one of our folders after our files went: runtime byte code, user additions."""
    try:
        children = sorted(path.iterdir())
    except OSError:
        return
    for child in children:
        if str(child.absolute()) in recorded:
            continue  # its own entry decides (removed already, or kept and reported)
        if _is_runtime_bytecode(child) or _is_node_output(child):
            if not dry_run:
                (fs.remove_tree if child.is_dir() else fs.unlink)(child)
            out.removed.append(str(child))
        else:
            backup(child)


def guess(install: ComfyInstall) -> list[str]:
    """Without a usable record: what an uninstall would be about (shown by --dry-run only; the staging
    folders an interrupted install left, which carry h3kit's mark, are removed by uninstall even so)."""
    found = [str(p) for p in staging_dirs(install)]
    for p in [install.custom_nodes / NODE_DIR_NAME] + [d / n for d in _allowed_roots(install) for n in LAUNCHER_NAMES]:
        if p.exists() or p.is_symlink():
            found.append(str(p))
    return found


def purge_targets(locations) -> list[Path]:
    """What --purge removes besides the install: h3kit's config, cache, reports, private venv and the histories of
    ComfyUI states (never backups or logs), and the `h3kit` PATH launcher the bootstrap wrote, while its content is
    still what the bootstrap recorded."""
    own = [locations.config_file, locations.cache_dir, locations.reports_dir, locations.venv_dir,
           Path(locations.state_dir) / history.FOLDER]
    return [p for p in own + path_launchers(locations.state_dir) if p.exists() or p.is_symlink()]


def path_launchers(state_dir: Path) -> list[Path]:
    """The bootstrap's PATH launchers that are still exactly as written (scripts/bootstrap.py records them)."""
    record = Path(state_dir) / BOOTSTRAP_RECORD
    try:
        entries = json.loads(record.read_text(encoding="utf-8")).get("path_launchers", [])
    except (OSError, ValueError, AttributeError):
        return []
    found = []
    for entry in entries:
        path = Path(entry.get("path", ""))
        if path.is_file() and not path.is_symlink() and sha256_file(path) == entry.get("sha256"):
            found.append(path)
    return found + [record]


def purge(locations, dry_run: bool) -> list[str]:
    done = []
    for p in purge_targets(locations):
        if not dry_run:
            if p.is_dir() and not p.is_symlink():
                shutil.rmtree(p)
            else:
                p.unlink()
        done.append(str(p))
    return done


def forget_record(record: mf.Manifest, result: Removal) -> None:
    """Drop the record once everything in it is handled; keep it listing only what was kept, and while it
    still holds what an undo needs (a restore that failed during this uninstall)."""
    kept = {k["path"] for k in result.kept}
    record.entries = [e for e in record.entries if e.path in kept and e.role != mf.BACKUP_ROLE]
    if record.entries or any(record.extra.get(k) for k in UNDO_RECORDS):
        record.save()
    elif record.path is not None and record.path.exists():
        os.unlink(record.path)
