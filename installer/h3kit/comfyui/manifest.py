"""The install record: every file and folder h3kit creates, with its hash.

In the manner of pypa/installer: every write goes through one function that
knows what is written (path, sha256, size). Uninstall replays the record and
removes only entries whose content still matches (a file the user changed is
moved to a backup, never deleted).

**Record before write** (the way package managers journal). Nothing lands in
a ComfyUI before the record names it:

1. `intend_file` / `intend_dir` enter the path as `pending`, with the sha256
   it will have once written (and, when it replaces a file of ours, the hash
   it has now: `previous`); `save` writes the record durably (atomic write,
   fsync of the file and its folder) before the first byte lands;
2. the write itself (`h3kit.core.files`; a live file only ever atomically,
   through `.<name>.h3kit-tmp`);
3. `confirm` makes the entry final, kept by the next save.

`write_file` is the three steps for one file. A crash anywhere leaves a
record that names the path, so the next install or uninstall settles every
pending entry (`settle`) before anything else: present with the expected hash
(or with `previous`): ours, final; present with other content (or a link):
not ours, dropped from the record, left alone and reported; absent: dropped.
The temporary `.<name>.h3kit-tmp` of a pending file is removed. A staging
folder is one entry: everything under it is h3kit's, and it is removed whole
(h3kit.comfyui.deploy.clean_staging) before the pending entries are settled.
A backup of a user's own file is recorded with role `backup`: it is the
user's, so uninstall leaves it and says where it is. A weight (h3kit.models)
is pending with its expected size, its catalog hash or none, and `fetch`
(the `.part` its bytes go to first): settled, a file whose size (and hash,
when known) matches is ours; one still in its `.part` stays pending
("partial") for the resume.

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
                  "pending": true, "previous": hex|null}],   # the last two only while pending
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
from h3kit.core import files
from h3kit.core.files import atomic_write, sha256_bytes, sha256_file

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
        self._put(entry)
        return entry

    def record_dir(self, path: str | os.PathLike, role: str = "") -> Entry:
        entry = Entry(str(Path(path).absolute()), "dir", role=role)
        self._put(entry)
        return entry

    def record_link(self, path: str | os.PathLike, role: str = "") -> Entry:
        p = Path(path).absolute()
        entry = Entry(str(p), "link", sha256=hashlib.sha256(os.readlink(p).encode()).hexdigest(), role=role)
        self._put(entry)
        return entry

    # -- record before write (the rule in the module docstring) -------------
    def intend_file(self, path: str | os.PathLike, sha256: str | None, size: int | None, role: str = "") -> Entry:
        """Name a file about to be written (pending; its hash once written, or None until known)."""
        p = Path(path).absolute()
        old = self.find(p)
        previous = None
        if old is not None and old.kind == "file":
            previous = old.previous if old.pending else old.sha256
        entry = Entry(str(p), "file", sha256, size, role, pending=True, previous=previous)
        self._put(entry)
        return entry

    def intend_dir(self, path: str | os.PathLike, role: str = "") -> Entry:
        """Name a folder about to be made (pending); one already recorded as ours stays as it is."""
        old = self.find(path)
        if old is not None and old.kind == "dir" and not old.pending:
            return old
        entry = Entry(str(Path(path).absolute()), "dir", role=role, pending=True)
        self._put(entry)
        return entry

    def confirm(self, path: str | os.PathLike) -> Entry | None:
        """The pending entry at `path` is written: final from the next save on."""
        entry = self.find(path)
        if entry is not None and entry.pending:
            entry.pending, entry.previous = False, None
        return entry

    def pending(self) -> list[Entry]:
        return [e for e in self.entries if e.pending]

    def write_file(self, path: str | os.PathLike, data: bytes | str, role: str = "", mode: int | None = None) -> Entry:
        """Record before write, for one file: pending + durable save, the atomic write, then final (saved by
        the caller's next save; a crash before that is settled as ours)."""
        raw = data.encode("utf-8") if isinstance(data, str) else bytes(data)
        self.intend_file(path, sha256_bytes(raw), len(raw), role)
        self.save()
        atomic_write(path, raw, mode, fixed_tmp=True)
        return self.confirm(path)

    def settle(self, dry_run: bool = False, roles: set | frozenset | None = None) -> list[dict]:
        """Finish or roll back every pending entry; [{"path", "outcome": "ours"|"not ours"|"absent"|"partial"}].

        A pending file's `.<name>.h3kit-tmp` is removed (listed as outcome "temporary"). Nothing is saved.
        "partial": a download's bytes are still in its `fetch.part` file and the file itself is absent: the
        entry stays pending (the next fetch resumes it; `models remove` removes the part). `roles`: only those
        (h3kit models settles its weights without holding the install lock, so never the pack's entries).
        """
        found = []
        for entry in [e for e in self.pending() if roles is None or e.role in roles]:
            if entry.kind == "file":
                tmp = files.tmp_path(entry.path)
                if tmp.is_file() and not tmp.is_symlink():
                    if not dry_run:
                        files.unlink(tmp)
                    found.append({"path": str(tmp), "outcome": "temporary"})
            outcome = self._resolve(entry)
            if outcome not in ("ours", "partial"):  # a partial download stays pending: fetch resumes it
                self.entries.remove(entry)
            found.append({"path": entry.path, "outcome": outcome})
        return found

    @staticmethod
    def _resolve(entry: Entry) -> str:
        p = Path(entry.path)
        if p.is_symlink():
            return "not ours"  # we never write a link where a file or folder was named
        if not p.exists():
            part = Path((entry.fetch or {}).get("part") or p)
            return "partial" if part != p and part.is_file() and not part.is_symlink() else "absent"
        if entry.kind == "dir":
            if not p.is_dir():
                return "not ours"
        else:
            if not p.is_file():
                return "not ours"
            size = p.stat().st_size
            if entry.fetch is not None and entry.bytes is not None:  # a weight: a wrong size settles it unhashed
                if abs(size - entry.bytes) > entry.bytes * entry.fetch.get("size_tolerance", 0):
                    return "not ours"
            digest = sha256_file(p)
            # Without a hash known before the write (a weight the catalog publishes no sha256 for), the size did.
            if (entry.sha256 is not None or entry.fetch is None) and digest not in (entry.sha256, entry.previous):
                return "not ours"
            entry.sha256, entry.bytes = digest, size
        entry.pending, entry.previous, entry.fetch = False, None, None
        return "ours"

    def back_up(self, path: Path, base: Path, backups: Path) -> Path:
        """Move the user's own `path` out of h3kit's way into `backups` (never following a link), recorded
        before the move with role `backup`: it stays the user's, uninstall leaves it and says where."""
        dest = backup_dest(path, base, backups)
        if path.is_file() and not path.is_symlink():
            self.intend_file(dest, sha256_file(path), path.stat().st_size, BACKUP_ROLE)
        elif path.is_dir() and not path.is_symlink():
            self.intend_dir(dest, BACKUP_ROLE)
        self.save()
        files.make_dirs(dest.parent)
        files.move(path, dest)
        self.confirm(dest)
        return dest

    def forget(self, path: str | os.PathLike) -> None:
        key = str(Path(path).absolute())
        self.entries = [e for e in self.entries if e.path != key]

    def _put(self, entry: Entry) -> None:
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


# -- backups: a user's own file, moved out of h3kit's way ----------------------------------------------

BACKUP_ROLE = "backup"


def backup_root(state_dir: Path, target: str | os.PathLike) -> Path:
    return Path(state_dir) / "backups" / slug_for(Path(target)) / now_iso().replace(":", "")


def backup_dest(path: Path, base: Path, backups: Path) -> Path:
    """Where `path` goes under `backups`: its place relative to `base`, numbered when taken (two in one second)."""
    try:
        rel = Path(path).relative_to(base)
    except ValueError:
        rel = Path(Path(path).name)
    dest = backups / rel
    n = 0
    while dest.exists() or dest.is_symlink():
        n += 1
        dest = backups / rel.with_name(f"{rel.name}.{n}")
    return dest


def move_to_backup(path: Path, base: Path, backups: Path) -> Path:
    """Move `path` (never following a link) under `backups`, keeping its place relative to `base` (unrecorded:
    uninstall's own backups, made as the record goes away)."""
    dest = backup_dest(path, base, backups)
    files.make_dirs(dest.parent)
    files.move(path, dest)  # a symlink is moved as a link
    return dest


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


def lock_path(state_dir: Path, target: str | os.PathLike) -> Path:
    """The lock file of one ComfyUI (h3kit.core.lock): in h3kit's state folder, never inside ComfyUI."""
    return Path(state_dir) / "locks" / f"{slug_for(Path(target))}.lock"


def home_lock_path(state_dir: Path) -> Path:
    return Path(state_dir) / "locks" / "h3kit-home.lock"


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
