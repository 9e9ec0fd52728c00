"""Record before write: the one place where h3kit changes a ComfyUI's files and its install record together.

The rule (the way package managers journal): nothing lands in a ComfyUI
before the saved record names it. Each operation of a `Journal` runs the
same four steps, written once, in `Journal._journaled`:

1. intend: the paths it will make are entered in the record as `pending`,
   with the sha256 they will have once written (and, when one replaces a
   file of h3kit's, the hash it has now: `previous`);
2. save: the record is written durably (atomic write, fsync of the file and
   its folder) before the first byte lands;
3. act: the file operation itself, through h3kit.core.files (a live file
   only ever atomically, through `.<name>.h3kit-tmp`; the crash-test hook
   sees each one);
4. confirm: the entries become final, kept by the caller's next save (a
   crash before it is settled as h3kit's).

The operations: `write` (one file), `mkdir` (one folder, or whatever a
`make` callable puts there: a clone, an unpack, a venv), `mkdirs` (missing
folders, parents made first), `rename` (a staged tree into place: every
path it makes appear is named before), `replace` (staged files over their
places), `remove` (what the record names as h3kit's). Each refuses to
overwrite what is not h3kit's (a path the record does not name, or names
with other content now): the callers move the user's file away first
(`back_up`) or leave it alone.

A crash anywhere leaves a record that names the path, so the next install,
fetch or uninstall settles every pending entry (`settle`) before anything
else: present with the expected hash (or with `previous`): ours, final;
present with other content (or a link): not ours, dropped from the record,
left alone and reported; absent: dropped. The temporary `.<name>.h3kit-tmp`
of a pending file is removed. A weight (h3kit.models) is pending with its
expected size, its catalog hash or none, and `fetch` (the `.part` its bytes
go to first): settled, a file whose size (and hash, when known) matches is
ours; one still in its `.part` stays pending ("partial") for the resume.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable

from h3kit.comfyui.backups import backup_dest
from h3kit.comfyui.manifest import BACKUP_ROLE, Entry, Manifest
from h3kit.core import files
from h3kit.core.errors import BadInput
from h3kit.core.files import sha256_bytes, sha256_file

PathLike = str | os.PathLike


class Journal:
    """The install record `record`, changed only together with the files it names (see the module doc)."""

    def __init__(self, record: Manifest):
        self.record = record

    # -- the entry states ----------------------------------------------------------------------------
    def intend_file(self, path: PathLike, sha256: str | None, size: int | None, role: str = "",
                    fetch: dict | None = None) -> Entry:
        """Name a file about to be written (pending; its hash once written, or None until known; `fetch`:
        where a download's bytes go first)."""
        p = Path(path).absolute()
        old = self.record.find(p)
        previous = None
        if old is not None and old.kind == "file":
            previous = old.previous if old.pending else old.sha256
        entry = Entry(str(p), "file", sha256, size, role, pending=True, previous=previous, fetch=fetch)
        self.record.put(entry)
        return entry

    def intend_dir(self, path: PathLike, role: str = "") -> Entry:
        """Name a folder about to be made (pending); one already recorded as ours stays as it is."""
        old = self.record.find(path)
        if old is not None and old.kind == "dir" and not old.pending:
            return old
        entry = Entry(str(Path(path).absolute()), "dir", role=role, pending=True)
        self.record.put(entry)
        return entry

    def confirm(self, path: PathLike, sha256: str | None = None, size: int | None = None) -> Entry | None:
        """The pending entry at `path` is written: final from the next save on (with the hash and size measured
        while the bytes arrived, for a weight whose hash was not known before)."""
        entry = self.record.find(path)
        if entry is not None and entry.pending:
            entry.pending, entry.previous, entry.fetch = False, None, None
            if sha256 is not None:
                entry.sha256, entry.bytes = sha256, size
        return entry

    def forget(self, path: PathLike) -> None:
        self.record.forget(path)

    def save(self) -> Path:
        return self.record.save()

    def _journaled(self, named: list[Entry], act: Callable[[], object]):
        """Steps 2-4 of the rule for entries already intended: save, act, confirm."""
        self.save()
        result = act()
        for entry in named:
            self.confirm(entry.path)
        return result

    # -- the refusal -----------------------------------------------------------------------------------
    def _refuse_theirs(self, path: PathLike) -> None:
        """BadInput when something is at `path` that the record does not name as h3kit's, as it is now."""
        p = Path(path)
        if not p.exists() and not p.is_symlink():
            return
        entry = self.record.find(p)
        if entry is not None and entry.pending and entry.kind == "file" and p.is_file() and not p.is_symlink():
            # named by a run that stopped before confirming it: ours while it holds what that run meant to write
            if sha256_file(p) in (entry.sha256, entry.previous):
                return
        if entry is None or entry.pending or not self.record.still_ours(entry):
            raise BadInput(f"{p} exists and was not written by h3kit (or was changed since); h3kit will not "
                           "overwrite it.", "Move or rename it yourself, then run the same command again.")

    # -- the five operations ---------------------------------------------------------------------------
    def write(self, path: PathLike, data: bytes | str, role: str = "", mode: int | None = None) -> Entry:
        """One file, written atomically through `.<name>.h3kit-tmp`."""
        raw = data.encode("utf-8") if isinstance(data, str) else bytes(data)
        self._refuse_theirs(path)
        entry = self.intend_file(path, sha256_bytes(raw), len(raw), role)
        self._journaled([entry], lambda: files.atomic_write(path, raw, mode, fixed_tmp=True))
        return self.record.find(path)

    def mkdir(self, path: PathLike, role: str = "", make: Callable[[Path], object] | None = None):
        """One folder: made by `make(path)` (a clone, an unpack, a venv; what it returns is returned), else
        created empty. An existing path is refused (FileExistsError): nothing is ever made into it."""
        p = Path(path)
        if p.exists() or p.is_symlink():
            raise FileExistsError(17, os.strerror(17), str(p))
        entry = self.intend_dir(p, role)
        return self._journaled([entry], lambda: (make or files.make_dir)(p))

    def mkdirs(self, folders: list[PathLike], role: str = "") -> list[Path]:
        """The folders of `folders` that are missing, named in that order in one save, made parents first."""
        missing = [Path(f) for f in folders if not Path(f).is_dir()]
        if not missing:
            return []
        named = [self.intend_dir(d, role) for d in missing]
        self.save()
        for d, entry in sorted(zip(missing, named), key=lambda pair: len(pair[0].parts)):
            files.make_dir(d)
            self.confirm(entry.path)
        return missing

    def rename(self, src: PathLike, dst: PathLike, contents: dict[str, bytes], role: str,
               roles: dict[str, str] | None = None) -> None:
        """A staged tree `src` (holding `contents`, relative path -> bytes) renamed to `dst` in one step: `dst`,
        each folder and each file it makes appear are named first (`roles`: another role for some of them);
        the staging folder's entry goes once it is gone."""
        src, dst, roles = Path(src), Path(dst), roles or {}
        if dst.exists() or dst.is_symlink():
            self._refuse_theirs(dst)  # ours or not, a rename never lands on a path that is there
            raise FileExistsError(17, os.strerror(17), str(dst))
        named = [self.intend_dir(dst, role)]
        named += [self.intend_dir(dst / rel, roles.get(rel, role)) for rel in tree_folders(contents)]
        named += [self.intend_file(dst / rel, sha256_bytes(data), len(data), roles.get(rel, role))
                  for rel, data in contents.items()]
        staged = self.record.find(src)
        if staged is not None:
            staged.pending = True  # about to vanish: a crash after the rename finds it absent, and it is dropped
        self._journaled(named, lambda: files.rename(src, dst))
        self.forget(src)

    def replace(self, src: PathLike, dst: PathLike, contents: dict[str, bytes], role: str) -> None:
        """Each staged file `src/rel` of `contents` over `dst/rel` (atomic replaces), with the folders
        `dst` lacks made first: all named in one save. A file at a place that is not h3kit's is refused."""
        src, dst = Path(src), Path(dst)
        for rel in contents:
            self._refuse_theirs(dst / rel)
        new_dirs = [dst / d for d in tree_folders(contents) if not (dst / d).is_dir()]
        named_dirs = [self.intend_dir(d, role) for d in new_dirs]
        named = [self.intend_file(dst / rel, sha256_bytes(data), len(data), role) for rel, data in contents.items()]
        self.save()
        for d, entry in zip(new_dirs, named_dirs):
            files.make_dir(d)
            self.confirm(entry.path)
        for rel, entry in zip(contents, named):
            files.replace(src / rel, dst / rel)
            self.confirm(entry.path)

    def remove(self, path: PathLike, *, known: bool = False) -> bool:
        """Remove what the record names at `path` while it is still what h3kit made (a folder with all it
        holds, and the entries under it), then drop the entry (kept out of the record by the next save);
        True when removed. A path no longer h3kit's is left where it is and its entry dropped. `known`:
        h3kit's by its name and content (the staging mark an older h3kit did not record)."""
        p = Path(path)
        entry = self.record.find(p)
        ours = known or (entry is not None and self.record.still_ours(entry))
        if ours and (p.exists() or p.is_symlink()):
            if p.is_dir() and not p.is_symlink():
                files.remove_tree(p)
            else:
                files.unlink(p)
        if entry is not None and entry.kind == "dir" and not p.exists():
            inside = str(p.absolute()) + os.sep
            self.record.entries = [e for e in self.record.entries if not e.path.startswith(inside)]
        self.forget(p)
        return ours

    # -- a user's own file, out of h3kit's way --------------------------------------------------------
    def back_up(self, path: Path, base: Path, backups: Path) -> Path:
        """Move the user's own `path` out of h3kit's way into `backups` (never following a link), recorded
        before the move with role `backup`: it stays the user's, uninstall leaves it and says where."""
        dest = backup_dest(path, base, backups)
        named = []
        if path.is_file() and not path.is_symlink():
            named.append(self.intend_file(dest, sha256_file(path), path.stat().st_size, BACKUP_ROLE))
        elif path.is_dir() and not path.is_symlink():
            named.append(self.intend_dir(dest, BACKUP_ROLE))

        def move() -> None:
            files.make_dirs(dest.parent)
            files.move(path, dest)

        self._journaled(named, move)
        return dest

    # -- after a crash ---------------------------------------------------------------------------------
    def settle(self, dry_run: bool = False, roles: set | frozenset | None = None) -> list[dict]:
        """Finish or roll back every pending entry; [{"path", "outcome": "ours"|"not ours"|"absent"|"partial"}].

        A pending file's `.<name>.h3kit-tmp` is removed (listed as outcome "temporary"). Nothing is saved.
        "partial": a download's bytes are still in its `fetch.part` file and the file itself is absent: the
        entry stays pending (the next fetch resumes it; `models remove` removes the part). `roles`: only those
        (h3kit models settles its weights without holding the install lock, so never the pack's entries).
        """
        found = []
        for entry in [e for e in self.record.pending() if roles is None or e.role in roles]:
            if entry.kind == "file":
                tmp = files.tmp_path(entry.path)
                if tmp.is_file() and not tmp.is_symlink():
                    if not dry_run:
                        files.unlink(tmp)
                    found.append({"path": str(tmp), "outcome": "temporary"})
            outcome = _resolve(entry)
            if outcome not in ("ours", "partial"):  # a partial download stays pending: fetch resumes it
                self.record.entries.remove(entry)
            found.append({"path": entry.path, "outcome": outcome})
        return found


def tree_folders(contents: dict[str, bytes]) -> list[str]:
    """Every folder the files of `contents` need (relative, parents first)."""
    return sorted({p.as_posix() for rel in contents for p in Path(rel).parents if p != Path(".")},
                  key=lambda d: (d.count("/"), d))


def _resolve(entry: Entry) -> str:
    """What a pending entry is now (see `Journal.settle`); an entry found ours is made final in place."""
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
