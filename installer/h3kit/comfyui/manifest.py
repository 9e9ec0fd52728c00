"""The install record: every file and folder h3kit creates, with its hash.

In the manner of pypa/installer: every write goes through one function that
knows what is written (path, sha256, size). Uninstall replays the record and
removes only entries whose content still matches (a file the user changed is
moved to a backup, never deleted).

Its entries change only through h3kit.comfyui.journal.Journal, which holds
the record-before-write rule (an entry is `pending` from before its write
until it is confirmed, and `settle` decides what a crash left); this module
is the data model and its storage: entries, lookups by path and role,
`still_ours`, and the JSON file. A staging folder is one entry (everything
under it is h3kit's); a backup of a user's own file has role `backup` (the
user's: uninstall leaves it and says where it is, h3kit.comfyui.backups); a
weight (h3kit.models) is pending with `fetch` (the `.part` its bytes go to).

One manifest per target (a ComfyUI folder), stored as JSON under the state
dir: `state/manifests/<slug>.json`, the slug made from the folder's resolved
real path, so a ComfyUI named through a link and by its real path is one
target (`find_record`; a record named by an older h3kit after the path as
typed is still found). A record read under another spelling of the same
folder is rebased onto the spelling in use (`Manifest.rebase`). Schema `h3kit.manifest/1`:

    {"schema": "h3kit.manifest/1", "target": "<abs path>", "created": iso,
     "updated": iso, "h3kit_version": "...",
     "entries": [{"path": "<abs>", "kind": "file"|"dir"|"link",
                  "sha256": hex|null, "bytes": int|null, "role": "node-pack"|...,
                  "created": iso,
                  "pending": true, "previous": hex|null,      # these two only while pending
                  "fetch": {"part": "<abs>", "size_tolerance": share}}],  # a pending weight only
     "extra": {...}}

A record without pending entries is byte-for-byte what h3kit 0.1.0 wrote.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from h3kit import __version__
from h3kit.core.errors import BadInput
from h3kit.core.files import atomic_write, sha256_file

SCHEMA = "h3kit.manifest/1"


def now_iso() -> str:
    return datetime.now(timezone.utc).replace(microsecond=0).isoformat()


def canonical(target: str | os.PathLike) -> str:
    """The one spelling of a folder: its resolved real path (case-folded where the file system ignores case)."""
    return os.path.normcase(os.path.realpath(os.path.abspath(target)))


def slug_for(target: Path, *, legacy: bool = False) -> str:
    """A stable file name for a target folder (readable prefix + short hash of its canonical path).

    legacy=True: the name older h3kit versions used, from the path as typed (read as a fallback only).
    """
    text = str(Path(target).absolute()) if legacy else canonical(target)
    tail = re.sub(r"[^A-Za-z0-9._-]+", "_", Path(text).name)[:40] or "root"
    return f"{tail}-{hashlib.sha256(text.encode('utf-8')).hexdigest()[:12]}"


@dataclass
class Entry:
    path: str
    kind: str  # file | dir | link
    sha256: str | None = None
    bytes: int | None = None
    role: str = ""
    created: str = field(default_factory=now_iso)
    pending: bool = False  # named before it is written; `settle` decides after a crash
    previous: str | None = None  # pending only: the hash of the file of ours it replaces
    # pending only, for a file whose bytes arrive elsewhere first (a weight download): {"part": the path they
    # are written to, "size_tolerance": share by which a rounded expected size may differ}
    fetch: dict | None = None

    def to_json(self) -> dict:
        doc = dict(self.__dict__)
        if not self.pending:  # a final entry reads as it always did
            doc.pop("pending")
            doc.pop("previous")
        if not self.pending or self.fetch is None:
            doc.pop("fetch")
        return doc


@dataclass
class Manifest:
    target: str
    entries: list[Entry] = field(default_factory=list)
    extra: dict = field(default_factory=dict)
    created: str = field(default_factory=now_iso)
    updated: str = field(default_factory=now_iso)
    path: Path | None = None  # where it is stored

    # -- recording ---------------------------------------------------------
    def find(self, path: str | os.PathLike) -> Entry | None:
        key = str(Path(path).absolute())
        for e in self.entries:
            if e.path == key:
                return e
        return None

    def record_file(self, path: str | os.PathLike, role: str = "") -> Entry:
        p = Path(path).absolute()
        entry = Entry(str(p), "file", sha256_file(p), p.stat().st_size, role)
        self.put(entry)
        return entry

    def record_dir(self, path: str | os.PathLike, role: str = "") -> Entry:
        entry = Entry(str(Path(path).absolute()), "dir", role=role)
        self.put(entry)
        return entry

    def record_link(self, path: str | os.PathLike, role: str = "") -> Entry:
        p = Path(path).absolute()
        entry = Entry(str(p), "link", sha256=hashlib.sha256(os.readlink(p).encode()).hexdigest(), role=role)
        self.put(entry)
        return entry

    def pending(self) -> list[Entry]:
        return [e for e in self.entries if e.pending]

    def forget(self, path: str | os.PathLike) -> None:
        key = str(Path(path).absolute())
        self.entries = [e for e in self.entries if e.path != key]

    def put(self, entry: Entry) -> None:
        """Enter `entry`, in the place (and with the creation time) of one at the same path."""
        old = self.find(entry.path)
        if old is not None:
            entry.created = old.created
            self.entries[self.entries.index(old)] = entry
        else:
            self.entries.append(entry)

    def rebase(self, old: str | os.PathLike, new: str | os.PathLike) -> int:
        """Rename recorded paths under the folder `old` to the same place under `new`; how many moved."""
        old_s, new_s = str(Path(old).absolute()), str(Path(new).absolute())
        moved = 0
        for e in self.entries:
            if e.path == old_s or e.path.startswith(old_s + os.sep):
                e.path = new_s + e.path[len(old_s):]
                moved += 1
        return moved

    def by_role(self, role: str) -> list[Entry]:
        return [e for e in self.entries if e.role == role]

    def still_ours(self, entry: Entry) -> bool:
        """True when the thing at entry.path is still exactly what we wrote."""
        p = Path(entry.path)
        if entry.kind == "link":
            return p.is_symlink() and hashlib.sha256(os.readlink(p).encode()).hexdigest() == entry.sha256
        if p.is_symlink():
            return False  # we never follow a link to decide a file is ours
        if entry.kind == "dir":
            return p.is_dir()
        return p.is_file() and p.stat().st_size == entry.bytes and sha256_file(p) == entry.sha256

    # -- persistence -------------------------------------------------------
    def to_json(self) -> dict:
        return {
            "schema": SCHEMA,
            "target": self.target,
            "created": self.created,
            "updated": self.updated,
            "h3kit_version": __version__,
            "entries": [e.to_json() for e in self.entries],
            "extra": self.extra,
        }

    def save(self, path: str | os.PathLike | None = None) -> Path:
        dest = Path(path) if path is not None else self.path
        if dest is None:
            raise ValueError("manifest has no storage path")
        self.updated = now_iso()
        dest.parent.mkdir(parents=True, exist_ok=True)
        # A random temporary name: h3kit models / calibrate may save a record without holding the install lock.
        atomic_write(dest, json.dumps(self.to_json(), indent=2, ensure_ascii=False) + "\n")
        self.path = dest
        return dest


BACKUP_ROLE = "backup"  # a user's own file h3kit moved out of its way (h3kit.comfyui.backups): theirs


def manifest_path(state_dir: Path, target: str | os.PathLike) -> Path:
    """Where the record of `target` is: the canonical name, else one an older h3kit wrote (see find_record)."""
    return find_record(state_dir, target) or _canonical_path(state_dir, target)


def _canonical_path(state_dir: Path, target: str | os.PathLike) -> Path:
    return Path(state_dir) / "manifests" / f"{slug_for(Path(target))}.json"


def find_record(state_dir: Path, target: str | os.PathLike) -> Path | None:
    """The stored record of `target` under any spelling: the canonical name, the name from the path as typed
    (older h3kit), or any record whose recorded target resolves to the same folder. None when there is none."""
    folder = Path(state_dir) / "manifests"
    for p in (_canonical_path(state_dir, target), folder / f"{slug_for(Path(target), legacy=True)}.json"):
        if p.is_file():
            return p
    want = canonical(target)
    try:
        others = sorted(folder.glob("*.json"))
    except OSError:
        return None
    for p in others:
        try:
            recorded = json.loads(p.read_text(encoding="utf-8")).get("target")
        except (OSError, ValueError, AttributeError):
            continue
        if isinstance(recorded, str) and canonical(recorded) == want:
            return p
    return None


def load(path: str | os.PathLike) -> Manifest:
    """Read a manifest; a corrupt one is BadInput (uninstall must not guess)."""
    p = Path(path)
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
        if data.get("schema") != SCHEMA:
            raise ValueError(f"schema is {data.get('schema')!r}, expected {SCHEMA!r}")
        entries = [Entry(**e) for e in data["entries"]]
        return Manifest(data["target"], entries, data.get("extra", {}), data.get("created", now_iso()),
                        data.get("updated", now_iso()), p)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise BadInput(
            f"The install record {p} is unreadable or corrupt ({exc}).",
            "Run the same command with --dry-run to see what h3kit would remove, or restore the file from a backup.",
        ) from exc


def load_for(state_dir: Path, target: str | os.PathLike) -> Manifest | None:
    """The record of `target` (any spelling, see find_record), its paths in `target`'s spelling; None if none."""
    path = find_record(state_dir, target)
    if path is None:
        return None
    record = load(path)
    here = Path(target).absolute()
    if record.target != str(here):
        old = Path(record.target)
        record.rebase(old, here)
        if old.parent != here.parent and canonical(old.parent) == canonical(here.parent):
            record.rebase(old.parent, here.parent)  # the portable build's launchers, one level up
        record.target = str(here)
    return record


def load_or_new(state_dir: Path, target: str | os.PathLike) -> Manifest:
    found = load_for(state_dir, target)
    if found is not None:
        return found
    path = manifest_path(state_dir, target)
    m = Manifest(str(Path(target).absolute()))
    m.path = path
    return m
