"""The weight files in ComfyUI's model folders: fetch the missing ones, verify, remove exactly h3kit's.

Every file h3kit writes is recorded in the install manifest (role "model")
with the hash computed while its bytes arrived, so that `models remove` and
`h3kit uninstall` remove exactly those, and never a file the user put there
or changed since. A file of the right name but another size is the user's:
fetch refuses to overwrite it.
"""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path

from tqdm import tqdm

from h3kit.comfyui.journal import Journal
from h3kit.core.errors import BadInput, NotReady, VerificationFailed
from h3kit.core import files as core_files
from h3kit.data.plan_doc import Plan
from h3kit.core.files import nearest_existing, sha256_file
from h3kit.core.units import human_bytes
from h3kit.models.download import ROUNDED_SIZE_TOLERANCE, Downloader, Fetched, HostsUnreachable, check_free_space
from h3kit.comfyui.model_folders import ModelFolders, creation_root
from h3kit.models.files import (
    ROLE,
    SCHEMA,
    as_folders,
    file_state,
    files_for_plan,
    manifest_for,
    remaining,
    session_config,
)
from h3kit.models.http import mirror_base
from h3kit.models.local import find_local, place_from_local


def _intend(journal: Journal, f, want) -> None:
    """Record before write: the weight is named (pending: its size, its catalog hash when there is one, where
    its bytes go first) and the record saved before a byte is written; see Journal.settle."""
    fetch = {"part": str(want.part.absolute())}
    if not want.bytes_exact:
        fetch["size_tolerance"] = ROUNDED_SIZE_TOLERANCE
    journal.intend_file(want.dest, f.sha256, want.bytes, ROLE, fetch=fetch)
    journal.save()


def _record(journal: Journal, got: Fetched) -> None:
    # The hash was computed while the bytes arrived; re-reading 20 GB to record it would double the time.
    journal.confirm(got.path, got.sha256, got.bytes)
    journal.save()


def _ensure_folder(journal: Journal, folder: Path) -> None:
    """The model folder and its missing parents, each named in the record (pending, saved) before it is made."""
    missing = [folder, *folder.parents]
    journal.mkdirs(missing[:next(i for i, p in enumerate(missing) if p.exists())], ROLE)


def fetch(ctx, plan: Plan, comfyui_dir: Path, *, from_dir: Path | None = None, downloader: Downloader | None = None,
          free_bytes=None, catalog=None, config=None, skip_names: set | frozenset = frozenset(),
          folders: ModelFolders | None = None) -> dict:
    """Get every missing file of the plan into ComfyUI; raises NotReady / VerificationFailed.

    A file ComfyUI already sees (any folder of its search list, `folders`) is left where it is; a missing
    one goes to ComfyUI's default folder for its kind, and the free space is measured on that disk.
    `config` (h3kit.data.config.Config) names the mirror; without one, the session's is read.
    """
    comfyui_dir = Path(comfyui_dir)
    folders = folders or as_folders(comfyui_dir)
    files = files_for_plan(plan, catalog)
    man = manifest_for(ctx, comfyui_dir)
    journal = Journal(man)
    _unlink_stray_links(ctx, man)
    if [o for o in journal.settle(roles={ROLE}) if o["outcome"] != "partial"]:  # a crash's weights, before looking
        man.save()
    states = _states_without_conflicts(files, folders, man)
    todo = [f for f in files if states[f.name]["state"] != "present" and f.name not in skip_names]
    for f in todo:
        _refuse_in_the_way(f.dest(folders))
    results = [{"name": f.name, "path": states[f.name]["path"], "method": "present"} for f in files if f not in todo]
    if not todo:
        return {"schema": SCHEMA, "action": "fetch", "comfyui": str(comfyui_dir), "files": results,
                "downloaded_bytes": 0, "total_bytes": sum(f.bytes for f in files)}
    sources = _local_sources(from_dir, todo)
    need = _check_room(todo, folders, sources, states, free_bytes)
    where = ", ".join(str(t) for t in dict.fromkeys(f.dest(folders).parent for f in todo))
    ctx.progress(f"Fetching {len(todo)} file(s), {human_bytes(need)} to write into {where}.")
    dl = downloader or Downloader(mirror=mirror_base(session_config(ctx, config)))
    downloaded, unreachable = _get_all(ctx, journal, dl, todo, folders, sources, states, results)
    if unreachable:
        raise missing_files_error(comfyui_dir, unreachable, results)
    return {"schema": SCHEMA, "action": "fetch", "comfyui": str(comfyui_dir), "files": results,
            "downloaded_bytes": downloaded, "total_bytes": sum(f.bytes for f in files)}


def _states_without_conflicts(files: list, folders: ModelFolders, man) -> dict[str, dict]:
    """Each file's state by name; VerificationFailed when a file of another size sits where one goes."""
    states = {f.name: file_state(f, folders, man) for f in files}
    conflicts = [s for s in states.values() if s["state"] == "conflict"]
    if conflicts:
        c = conflicts[0]
        raise VerificationFailed(
            f"{c['path']} already exists with a different size ({c['bytes_on_disk']} bytes) and h3kit will not "
            "overwrite a file it did not download.",
            "Rename or move that file (it may be another version of the model), then run 'h3kit models fetch' again.",
            details={"conflicts": conflicts})
    return states


def _local_sources(from_dir: Path | None, todo: list) -> dict[str, Path]:
    """With --from, where in that folder each missing file is ({} without it, when every file has an address)."""
    sources: dict[str, Path] = {}
    if from_dir is None:
        for f in todo:
            if not f.urls:
                raise NotReady(f"No download address is known for {f.name} ({f.unverified or 'catalog has no URL'}).",
                               "Download it yourself and run 'h3kit models fetch --from DIR'.")
        return sources
    from_dir = Path(from_dir)
    if not from_dir.is_dir():
        raise BadInput(f"--from {from_dir} is not a folder.", "Pass the folder (or USB disk) that holds the model files.")
    for f in todo:
        src = find_local(from_dir, f.name, f.folder)
        if src is None:
            raise NotReady(f"{f.name} is not in {from_dir}.",
                           f"Copy it there (from {f.urls[0] if f.urls else 'its model page'}) and run again.")
        sources[f.name] = src
    return sources


def _check_room(todo: list, folders: ModelFolders, sources: dict[str, Path], states: dict[str, dict],
                free_bytes) -> int:
    """Every target folder usable and each disk with room for what lands on it; the bytes to write."""
    for target in dict.fromkeys(f.dest(folders).parent for f in todo):
        _check_target(target, folders)
    by_target: dict[Path, int] = {}
    for f in todo:
        target = f.dest(folders).parent
        if not _same_disk(sources.get(f.name), target):
            by_target[target] = by_target.get(target, 0) + remaining(f, states[f.name])
    for target, need_here in _per_disk(by_target).items():
        check_free_space(target, need_here, free_bytes=free_bytes)
    return sum(by_target.values())


def _get_all(ctx, journal: Journal, dl: Downloader, todo: list, folders: ModelFolders, sources: dict[str, Path],
             states: dict[str, dict], results: list[dict]) -> tuple[int, list[tuple]]:
    """Copy or download each file of `todo`, appending to `results`; (bytes written, the files whose hosts did
    not answer with why)."""
    downloaded = 0
    unreachable: list[tuple] = []
    reported: set[str] = set()
    overall = tqdm(total=sum((f.exact_bytes or f.bytes) for f in todo), unit="B", unit_scale=True,
                   unit_divisor=1000, desc="all files", file=sys.stderr, disable=None if dl.progress is None else not dl.progress,
                   initial=sum(states[f.name]["bytes_on_disk"] for f in todo if states[f.name]["state"] == "partial"))
    try:
        for f in todo:
            _ensure_folder(journal, f.dest(folders).parent)
            want = f.want(folders)
            _intend(journal, f, want)
            if f.name in sources:
                got = place_from_local(want, sources[f.name], progress=dl.progress)
                overall.update(got.bytes)
            else:
                try:
                    got = dl.fetch(want, overall)
                except HostsUnreachable as dead:
                    # The other files may come from hosts that answer: get them, then name what is missing.
                    _say_unreachable(ctx, dead, reported)
                    ctx.progress(f"Skipping {f.name} (from {', '.join(dead.hosts)}).")
                    unreachable.append((f, dead))
                    continue
            _record(journal, got)
            downloaded += got.bytes
            ctx.log.info("fetched %s (%s, verified by %s)", got.path, got.method, got.verified_by)
            results.append({"name": f.name, "path": str(got.path), "method": got.method, "source": got.source,
                            "bytes": got.bytes, "sha256": got.sha256, "verified_by": got.verified_by})
    finally:
        overall.close()
    return downloaded, unreachable


def _say_unreachable(ctx, dead: HostsUnreachable, reported: set[str]) -> None:
    """Each host that did not answer, once per fetch."""
    for host, why in dead.hosts.items():
        if host not in reported:
            reported.add(host)
            ctx.progress(f"{host} cannot be reached ({why}); the files from it are skipped.")


def _unlink_stray_links(ctx, man) -> None:
    """A link that leads nowhere where a weight was named but never confirmed: what an older h3kit left when
    --from held links (it hard-linked the link itself and stopped before confirming). It appeared while
    h3kit's write was in flight and holds nothing, so it goes and the weight is placed again; a link at
    a confirmed weight's place is someone's since (see _refuse_in_the_way)."""
    for entry in man.by_role(ROLE):
        p = Path(entry.path)
        if entry.kind == "file" and entry.pending and entry.fetch is not None and p.is_symlink() and not p.exists():
            ctx.log.info("removing the dangling link %s -> %s an interrupted fetch left", p, os.readlink(p))
            core_files.unlink(p)


def _refuse_in_the_way(dest: Path) -> None:
    """BadInput when something that is not a weight file holds a missing weight's place (a link that
    leads nowhere or to a folder, a folder, a pipe): it is the user's, and a weight never lands over it."""
    if not os.path.lexists(dest):
        return
    if dest.is_symlink():
        target = os.readlink(dest)
        why = f"a link to {target}, which " + ("is not a file" if dest.exists() else "does not exist")
    else:
        why = "not a file"
    raise BadInput(f"{dest} is {why}; h3kit will not replace it with the model file.",
                   "Move or remove it yourself (or reconnect the drive the link points to), then run the same "
                   "command again.")


def missing_files_error(comfyui_dir: Path, unreachable: list[tuple], results: list[dict]) -> NotReady:
    """One error for every file no host could send: which, where each goes, and the commands that finish the job."""
    hosts: dict[str, str] = {}
    for _f, dead in unreachable:
        hosts.update(dead.hosts)
    names = ", ".join(f.name for f, _ in unreachable)
    where = "\n".join(f"  {dead.want.dest}  ({human_bytes(f.exact_bytes or f.bytes)}, from {f.urls[0] if f.urls else '?'})"
                      for f, dead in unreachable)
    comfy = shell_word(str(comfyui_dir))
    return NotReady(
        f"{len(unreachable)} model file(s) could not be downloaded because "
        + "; ".join(f"{h} cannot be reached ({w})" for h, w in hosts.items()) + f": {names}.",
        f"put them where they go:\n{where}\n"
        f"  either copy them from a machine that has them into a folder DIR and run: "
        f"h3kit models fetch --comfyui {comfy} --from DIR\n"
        f"  or set models.mirror in config.yaml (or HF_ENDPOINT) to a reachable mirror and run: h3kit install",
        details={"missing": [{"name": f.name, "path": str(dead.want.dest), "bytes": f.exact_bytes or f.bytes,
                              "urls": f.urls} for f, dead in unreachable],
                 "hosts": hosts, "files": results})


def shell_word(text: str) -> str:
    """A path as one word to paste into a shell: bare when safe, in double quotes for spaces and the like,
    in POSIX single quotes when double ones would still let the shell expand something ($, `, !)."""
    if any(c in text for c in '$`"\\!'):
        return shlex.quote(text)
    return f'"{text}"' if any(c in text for c in " '&();<>|*?") else text


def _same_disk(src: Path | None, target: Path) -> bool:
    """A --from file on the same disk as its target folder is hard-linked: it needs no space."""
    if src is None:
        return False
    try:
        return os.stat(src).st_dev == os.stat(nearest_existing(target)).st_dev
    except OSError:
        return False


def _check_target(target: Path, folders: ModelFolders) -> None:
    """BadInput, before anything is written, when a folder a file goes to cannot be made or written: a
    configured default on a drive that is not there, or under a file. Folders are made only under a root
    that exists (model_folders.creation_root), never as a chain down from the disk below a missing mount."""
    base = nearest_existing(target)
    root, what = creation_root(folders, target)
    if base.is_dir() and not os.path.exists(root):
        raise BadInput(f"The model files would go to {target}, but {root} ({what}) does not exist: the drive it is "
                       "on is not connected, so h3kit creates nothing there.",
                       "Connect that drive (or fix that entry: is_default, base_path), then run the same command again.")
    why = None
    if not base.is_dir():
        why = f"{base} is not a folder"
    elif not os.access(base, os.W_OK | os.X_OK):
        why = f"{base} is read-only for this user"
    if why:
        origin = "ComfyUI's own models folder" if not folders.shared(target) else f"its model-path configuration ({folders.detail})"
        raise BadInput(f"The model files would go to {target}, from {origin}, but {why}.",
                       "Fix that entry (is_default) or connect that drive, or fix the folder's permissions, "
                       "then run the same command again.")


def _per_disk(by_target: dict[Path, int]) -> dict[Path, int]:
    """The bytes to write, added up per disk (the first target folder on each names it): two folders on one
    disk share its free space, a shared models drive is measured on its own."""
    disks: dict[object, tuple[Path, int]] = {}
    for target, need in by_target.items():
        try:
            key = os.stat(nearest_existing(target)).st_dev
        except OSError:
            key = target
        first, total = disks.get(key, (target, 0))
        disks[key] = (first, total + need)
    return dict(disks.values())


# -- verify / remove ---------------------------------------------------------------------

def verify(ctx, plan: Plan, comfyui_dir: Path, *, catalog=None, folders: ModelFolders | None = None) -> dict:
    """Re-hash every present file against the catalog hash, else the hash recorded when h3kit wrote it."""
    files = files_for_plan(plan, catalog)
    man = manifest_for(ctx, comfyui_dir)
    folders = folders or as_folders(comfyui_dir)
    rows, bad = [], []
    for f in files:
        st = file_state(f, folders, man)
        row = {"name": f.name, "path": st["path"], "state": st["state"]}
        if st["state"] == "present":
            ctx.progress(f"Hashing {f.name} ...")
            digest = sha256_file(st["path"])
            entry = man.find(st["path"])
            expected = f.sha256 or (entry.sha256 if entry is not None else None)
            row.update(sha256=digest, expected_sha256=expected,
                       ok=None if expected is None else digest == expected,
                       checked_against="catalog" if f.sha256 else ("manifest" if expected else "size only"))
            if expected is not None and digest != expected:
                bad.append(row)
        elif st["state"] == "conflict":
            bad.append(row)
        rows.append(row)
    doc = {"schema": SCHEMA, "action": "verify", "comfyui": str(comfyui_dir), "files": rows,
           "total_bytes": sum(f.bytes for f in files)}
    if bad:
        raise VerificationFailed(
            f"{len(bad)} model file(s) do not match: {', '.join(r['name'] for r in bad)}.",
            "Remove them ('h3kit models remove' removes the ones h3kit downloaded) and run 'h3kit models fetch' again.",
            details=doc)
    return doc


def remove(ctx, comfyui_dir: Path, *, plan: Plan | None = None, catalog=None,
           folders: ModelFolders | None = None) -> dict:
    """Delete the model files h3kit recorded for this ComfyUI; a file the user put there or changed stays."""
    comfyui_dir = Path(comfyui_dir)
    man = manifest_for(ctx, comfyui_dir)
    removed, kept = [], []
    # A crash left weights named but unsettled: a complete one becomes final (and goes below), a partial
    # download's part file is h3kit's and goes now, anything else is not h3kit's and stays.
    for found in Journal(man).settle(dry_run=ctx.dry_run, roles={ROLE}):
        entry = man.find(found["path"])
        if found["outcome"] == "not ours":
            kept.append({"path": found["path"], "why": "h3kit was writing it when it was interrupted, and it holds "
                                                       "something else now: not h3kit's"})
        elif found["outcome"] == "partial" and entry is not None and entry.role == ROLE:
            part = Path(entry.fetch["part"])
            if not ctx.dry_run:
                core_files.unlink(part)
                man.forget(entry.path)
            removed.append(str(part))
    for entry in [e for e in man.by_role(ROLE) if e.kind == "file" and not e.pending]:
        p = Path(entry.path)
        if not p.exists() and not p.is_symlink():
            man.forget(p)
            continue
        if man.still_ours(entry):
            if not ctx.dry_run:
                core_files.unlink(p)
                man.forget(p)
            removed.append(str(p))
        else:
            # Theirs now: reported once, then no longer h3kit's to remove (uninstall leaves it too).
            kept.append({"path": str(p), "why": "changed since h3kit wrote it"})
            if not ctx.dry_run:
                man.forget(p)
    recorded = {e.path for e in man.entries}
    if plan is not None:
        for f in files_for_plan(plan, catalog):
            for path in f.candidates(folders or as_folders(comfyui_dir)):
                if path.is_file() and str(path.absolute()) not in recorded and str(path) not in removed:
                    kept.append({"path": str(path), "why": "not downloaded by h3kit"})
    for entry in sorted((e for e in man.by_role(ROLE) if e.kind == "dir"), key=lambda e: -len(e.path)):
        d = Path(entry.path)
        if not ctx.dry_run and d.is_dir() and not any(d.iterdir()):
            d.rmdir()
        if not d.exists():
            man.forget(d)
    if not ctx.dry_run and man.path is not None and (man.path.exists() or man.entries):
        man.save()
    return {"schema": SCHEMA, "action": "remove", "comfyui": str(comfyui_dir), "removed": removed, "kept": kept,
            "dry_run": ctx.dry_run}
