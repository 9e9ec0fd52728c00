"""Put the node pack and the launcher into a ComfyUI, record every write, verify.

A fresh install stages a complete copy of the pack beside the target (in
custom_nodes/, under a name ending in `.disabled` so a running ComfyUI skips
it) and renames it into place: one rename on one file system, so ComfyUI
never sees half a pack. A re-install stages the same way and then replaces
the pack's files one by one (each an atomic replace), keeping files the user
added (and the calibration summary an earlier run left). A folder named
ComfyUI-h3kit that h3kit's record does not claim is never touched.

Every write goes through h3kit.comfyui.journal.Journal (record before
write): the staging folder, each folder and file of the pack, the launcher
and each backup are entered in the record as pending (with the hash they
will have) and the record saved before the first byte lands; each becomes
final once written. Every run starts by finishing what a crash left
(`recover`): the staging folder goes, pending entries are settled. Before staging, the free
space of the disk is checked against the bytes to write. All file
operations go through h3kit.core.files (one place, and its crash-test hook).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from fnmatch import fnmatch
from dataclasses import dataclass, field
from pathlib import Path

import h3kit
from h3kit.bundled import h3k_profile
from h3kit.comfyui import manifest as mf
from h3kit.comfyui import workflows
from h3kit.comfyui.backups import backup_root, move_to_backup
from h3kit.comfyui.journal import Journal, tree_folders
from h3kit.comfyui.links import linked_folders
from h3kit.comfyui.inspect import marked_json
from h3kit.comfyui.launcher import write_launcher
from h3kit.comfyui.locate import ComfyInstall, run_python
from h3kit.core import files as fs
from h3kit.core.errors import BadInput, NotReady, VerificationFailed
from h3kit.core.paths import asset_dir
from h3kit.core.units import human_bytes
from h3kit.data.plan_doc import PlanSettings

PROFILE_FILE = h3k_profile.PROFILE_FILE
PROFILE_SCHEMA = h3k_profile.SCHEMA
CALIBRATION_FILE = "h3kit_calibration.json"  # h3kit.calibrate.pack_summary writes it; a re-install keeps it
STAGING_SUFFIX = ".h3kit-staging.disabled"
STAGING_MARK = ".h3kit-staging"
STAGING_TEXT = b"h3kit staging folder: safe to delete\n"
DISABLED_SUFFIX = ".disabled"  # ComfyUI-Manager's "disable": the pack folder renamed, ComfyUI skips it
EXPECTED_NODES = ("H3kitProfileInfo", "H3kitTiledVAEDecode", "H3kitMemoryGuard", "H3kitCalibrationReport", "H3kitStreamedDiTLoader",
                  "H3kitUnetLoaderGGUF", "H3kitCLIPLoaderGGUF", "H3kitStreamedTextEncoderLoader")
VERIFY_TIMEOUT = 120.0
SKIP_NAMES = {"__pycache__", ".pytest_cache", "tests"}
SELFTEST_PROGRAMS = "h3k-selftest-*"  # beside the libraries; written executable
BLOCK = 4096  # what a small file really takes on disk: sizes are rounded up to it in the space check
__all__ = ["backup_root", "move_to_backup"]  # their old home: callers and tests use these names here


@dataclass
class DeployResult:
    node_dir: Path
    manifest: mf.Manifest
    created: bool  # False: upgraded in place
    backed_up: list[str] = field(default_factory=list)
    removed_stale: list[str] = field(default_factory=list)
    launcher: dict = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


# -- what goes into the pack ---------------------------------------------------


def pack_contents(library: Path | None, settings: PlanSettings, profile: str,
                  generated: dict[str, bytes] | None = None, comfyui: Path | None = None) -> dict[str, bytes]:
    """Relative path -> bytes of every file of the pack (`generated`: files made from the plan, the workflows).

    nodes/ is the pack as it lands in ComfyUI (its node modules and the packages h3kit.bundled names);
    the build's libraries, the profile and the generated files join it."""
    files: dict[str, bytes] = {}
    nodes = asset_dir("nodes")
    for path in sorted(nodes.rglob("*")):
        rel = path.relative_to(nodes)
        if any(part in SKIP_NAMES for part in rel.parts) or path.suffix == ".pyc" or not path.is_file():
            continue
        files[rel.as_posix()] = path.read_bytes()
    if library is not None and Path(library).is_file():
        # Every variant of this build (baseline and tuned), so a pack copied to an
        # older CPU still loads: the bridge picks the variant at load time. Each
        # comes with its self-test program, which calibration runs in the pack.
        library = Path(library)
        for variant in sorted(library.parent.glob(f"libh3kit-*{library.suffix}")):
            files[f"lib/{variant.name}"] = variant.read_bytes()
        for program in sorted(library.parent.glob(SELFTEST_PROGRAMS)):
            files[f"lib/{program.name}"] = program.read_bytes()
    files[PROFILE_FILE] = profile_document(settings, profile, comfyui)
    files.update(generated or {})
    return files


def profile_document(settings: PlanSettings, profile: str, comfyui: Path | None = None) -> bytes:
    """h3kit_profile.json's bytes; with `comfyui`, also how the pack's panel runs this h3kit again there."""
    run_again = {}
    if comfyui is not None:
        home = os.environ.get("H3KIT_HOME")
        run_again = {"command": [sys.executable, "-m", "h3kit"], "env": {"H3KIT_HOME": home} if home else {},
                     "comfyui": str(comfyui)}
    return h3k_profile.PackProfile(profile=profile, h3kit_version=h3kit.__version__, settings=settings.to_json(),
                                   h3kit=run_again).to_bytes()


def pack_dirs(files: dict[str, bytes]) -> list[str]:
    """Every folder the pack's files need (relative, parents first)."""
    return tree_folders(files)


# -- safety checks and recovery --------------------------------------------------------


def staging_dirs(install: ComfyInstall, record: mf.Manifest | None = None) -> list[Path]:
    """Staging folders an interrupted install left: named so, real folders, with our mark or in our record."""
    claimed = {e.path for e in record.entries} if record is not None else set()
    try:
        return [p for p in install.custom_nodes.iterdir()
                if p.name.endswith(STAGING_SUFFIX) and p.is_dir() and not p.is_symlink()
                and ((p / STAGING_MARK).is_file() or str(p.absolute()) in claimed)]
    except OSError:
        return []


def clean_staging(install: ComfyInstall, record: mf.Manifest | None = None) -> list[str]:
    """Remove what an interrupted install left (only folders carrying our mark or named in the record)."""
    removed = []
    for p in staging_dirs(install, record):
        fs.remove_tree(p)
        if record is not None:
            record.forget(p)
        removed.append(str(p))
    return removed


def recover(install: ComfyInstall, record: mf.Manifest) -> list[str]:
    """Finish what a crash left, before anything else: staging folders go, pending entries are settled and the
    record saved. Notes for the user (files that are not ours are named)."""
    notes = [f"removed an interrupted install's staging folder {p}" for p in clean_staging(install, record)]
    found = Journal(record).settle()
    if found:
        ours = [f for f in found if f["outcome"] == "ours"]
        if ours:
            notes.append(f"an interrupted h3kit run had written {len(ours)} of its files; they are recorded now")
        notes += [f"{f['path']} was being written by an interrupted h3kit run and now holds something else: "
                  "left alone, not h3kit's" for f in found if f["outcome"] == "not ours"]
    if (found or notes) and (record.entries or (record.path is not None and record.path.exists())):
        record.save()  # (no record file is made for a ComfyUI h3kit never installed into)
    return notes


def ensure_ours(install: ComfyInstall, record: mf.Manifest) -> bool:
    """True when the pack folder exists and is ours; BadInput when a foreign one is in the way."""
    target = install.node_dir
    if not target.exists() and not target.is_symlink():
        return False
    entry = record.find(target)
    if entry is not None and entry.kind == "dir" and not target.is_symlink() and target.is_dir():
        return True
    try:
        what = sorted(p.name for p in target.iterdir())[:5] if target.is_dir() and not target.is_symlink() else []
    except OSError:
        what = []
    kind = "a symlink" if target.is_symlink() else ("a folder" if target.is_dir() else "a file")
    shown = f" holding {', '.join(what)}" if what else ""
    raise BadInput(f"{target} already exists ({kind}{shown}) and was not installed by h3kit; h3kit will not overwrite it.",
                   "Move or rename it yourself (it may be another copy of this pack), then run the install again.")


def disabled_copy(install: ComfyInstall, record: mf.Manifest | None) -> Path | None:
    """Our pack as ComfyUI-Manager disabled it (renamed to `ComfyUI-h3kit.disabled`, or moved into
    `custom_nodes/.disabled/`), or None. Ours: the recorded name is gone, the other is a real folder (not a
    link), and at least half of the recorded pack files are there under the other name, hashes matching."""
    target = install.node_dir
    if record is None or record.find(target) is None or target.exists() or target.is_symlink():
        return None
    files = [e for e in record.entries if e.kind == "file" and e.path.startswith(str(target) + os.sep)]
    for other in (target.with_name(target.name + DISABLED_SUFFIX), install.custom_nodes / ".disabled" / target.name):
        if not files or other.is_symlink() or not other.is_dir() or other.parent.is_symlink():
            continue
        moved = [mf.Entry(str(other) + e.path[len(str(target)):], "file", e.sha256, e.bytes) for e in files]
        if 2 * sum(record.still_ours(e) for e in moved) >= len(files):
            return other
    return None


def _refuse_disabled(install: ComfyInstall, record: mf.Manifest, command: str) -> None:
    """Install and apply leave a disabled pack as the user left it (a second copy beside it would orphan it)."""
    disabled = disabled_copy(install, record)
    if disabled is not None:
        raise NotReady(f"The h3kit node pack is disabled (ComfyUI-Manager renamed it to {disabled}), so h3kit "
                       f"changes nothing.", "Enable it again in ComfyUI-Manager (or rename it back to "
                       f"{install.node_dir.name}), then run h3kit {command}; 'h3kit uninstall' removes it as it is.")


def bytes_to_write(files: dict[str, bytes]) -> int:
    """What staging the pack takes on disk: every file and folder rounded up to a block, plus the mark."""
    blocks = sum(-(-len(data) // BLOCK) or 1 for data in files.values())
    return (blocks + len(pack_dirs(files)) + 2) * BLOCK


def check_space(install: ComfyInstall, files: dict[str, bytes]) -> None:
    """NotReady (exit 3), before anything is written, when the disk of custom_nodes/ has too little room."""
    need, free = bytes_to_write(files), fs.free_bytes(install.custom_nodes)
    if free is not None and free < need:
        raise NotReady(f"Not enough free space on the disk that holds {install.custom_nodes}: the node pack needs "
                       f"{human_bytes(need)}, and {human_bytes(free)} is free. Nothing was written.",
                       "Free space on that disk (or install into a ComfyUI on a disk with room), then run the "
                       "install again.")


# -- writing ----------------------------------------------------------------------


def _stage(staging: Path, files: dict[str, bytes], record: mf.Manifest) -> None:
    """The complete pack in `staging` (recorded first as one pending entry; removed whole on a failure)."""
    Journal(record).mkdir(staging, "staging")  # one there is not ours (ours went in recover): refused
    try:
        fs.write_new(staging / STAGING_MARK, STAGING_TEXT)
        for rel in pack_dirs(files):
            fs.make_dir(staging / rel)
        for rel, data in files.items():
            fs.write_new(staging / rel, data, 0o755 if fnmatch(rel, f"lib/{SELFTEST_PROGRAMS}") else None)
    except OSError:
        shutil.rmtree(staging, ignore_errors=True)  # a full disk must not keep a half-written copy
        record.forget(staging)
        try:
            record.save()
        except OSError:
            pass  # the same full disk: the next run's recover() removes the entry
        raise


def deploy(install: ComfyInstall, *, settings: PlanSettings, profile: str, library: Path | None,
           state_dir: Path, cache_dir: Path, progress=None, windows: bool | None = None,
           generated: dict[str, bytes] | None = None) -> DeployResult:
    """Install or upgrade the pack and launcher; returns what was done (manifest saved)."""
    say = progress or (lambda msg: None)
    record = mf.load_or_new(state_dir, install.path)
    _refuse_disabled(install, record, "install")
    notes = recover(install, record)
    ours = ensure_ours(install, record)
    target = install.node_dir
    mark = target / STAGING_MARK
    if ours and mark.is_file() and not mark.is_symlink():
        Journal(record).remove(mark, known=True)  # a crash right after the rename left it (or an older h3kit's)
    files = pack_contents(library, settings, profile, generated, install.path)
    if library is None:
        notes.append("no native library was built: the pack works, nodes that need it say so")
    check_space(install, files)
    staging = install.custom_nodes / (target.name + STAGING_SUFFIX)
    say(f"Staging the node pack ({len(files)} files) in {staging}")
    _stage(staging, files, record)
    result = DeployResult(target, record, created=not ours, notes=notes)
    if not ours:
        _move_into_place(record, staging, target, files)
        say(f"Installed the node pack into {target}")
    else:
        _upgrade(record, staging, target, files, state_dir, install, result)
        say(f"Upgraded the node pack in {target} in place")
    result.launcher = write_launcher(install, record, settings, profile, state_dir, cache_dir, windows)
    if result.launcher.get("backup"):
        result.backed_up.append(result.launcher["backup"])
    notes += [f"moved your edited copy of {Path(b).name} out of the way before writing h3kit's: it is in {b}"
              for b in result.backed_up]
    record.extra.update({"comfyui": str(install.path), "layout": install.layout, "node_dir": str(target),
                         "profile": profile, "launcher": result.launcher, "links": linked_folders(install)})
    record.save()
    return result


def _move_into_place(record: mf.Manifest, staging: Path, target: Path, files: dict[str, bytes]) -> None:
    """The fresh install's one rename (every path it makes appear named first), then the mark goes."""
    journal = Journal(record)
    journal.rename(staging, target, {**files, STAGING_MARK: STAGING_TEXT}, "node-pack", {STAGING_MARK: "staging"})
    journal.remove(target / STAGING_MARK, known=True)


def _upgrade(record: mf.Manifest, staging: Path, target: Path, files: dict[str, bytes], state_dir: Path,
             install: ComfyInstall, result: DeployResult) -> None:
    journal = Journal(record)
    backups = backup_root(state_dir, install.path)
    for rel in files:  # the user's own files where ours go: out of the way first, each recorded as theirs
        dest = target / rel
        if dest.exists() or dest.is_symlink():
            entry = record.find(dest)
            if entry is None or not record.still_ours(entry):
                result.backed_up.append(str(journal.back_up(dest, target, backups)))
    journal.replace(staging, target, files, "node-pack")
    shipped = {str((target / rel).absolute()) for rel in files} | {str((target / CALIBRATION_FILE).absolute())}
    for entry in [e for e in record.by_role("node-pack") if e.kind == "file"]:
        if entry.path.startswith(str(target) + os.sep) and entry.path not in shipped:
            if journal.remove(entry.path):
                result.removed_stale.append(entry.path)
    journal.save()
    journal.remove(staging)


def rewrite_profile(install: ComfyInstall, record: mf.Manifest, settings: PlanSettings, profile: str,
                    state_dir: Path | None = None) -> tuple[Path, str | None]:
    """`h3kit apply`: a new h3kit_profile.json, recorded before it is written atomically; (path, backup).

    One the user edited by hand (its hash is not the recorded one) is first moved to a backup (with a
    state_dir; recorded as theirs), and the backup's path returned so the caller says so.
    """
    path = install.node_dir / PROFILE_FILE
    entry = record.find(path)
    backup = None
    if (path.exists() or path.is_symlink()) and (entry is None or not record.still_ours(entry)) and state_dir:
        backup = str(Journal(record).back_up(path, install.node_dir, backup_root(state_dir, install.path)))
    Journal(record).write(path, profile_document(settings, profile, install.path), "node-pack")
    return path, backup


# -- verification ---------------------------------------------------------------------

# Runs in ComfyUI's Python, with ComfyUI on sys.path, the way ComfyUI imports a pack.
VERIFY_SCRIPT = r"""
import importlib.util, json, os, sys
comfy_dir, pack = sys.argv[1], sys.argv[2]
sys.path.insert(0, comfy_dir)
out = {"nodes": [], "bad": [], "error": None}
try:
    spec = importlib.util.spec_from_file_location("h3kit_verify_pack", os.path.join(pack, "__init__.py"),
                                                  submodule_search_locations=[pack])
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    mapping = getattr(mod, "NODE_CLASS_MAPPINGS", {})
    out["nodes"] = sorted(mapping)
    for name, cls in mapping.items():
        try:
            if not isinstance(cls.INPUT_TYPES(), dict) or not hasattr(cls, cls.FUNCTION):
                out["bad"].append(name)
        except Exception as exc:
            out["bad"].append("%s (%s)" % (name, exc))
except Exception as exc:
    out["error"] = "%s: %s" % (type(exc).__name__, exc)
print("H3KIT-VERIFY " + json.dumps(out))
"""


def parse_verify_output(text: str) -> dict | None:
    return marked_json(text, "H3KIT-VERIFY")


def verify(install: ComfyInstall, timeout: float = VERIFY_TIMEOUT) -> dict:
    """Import the pack in ComfyUI's Python; VerificationFailed (exit 4) unless every node is there."""
    result = run_python(install, ["-c", VERIFY_SCRIPT, str(install.path), str(install.node_dir)], timeout)
    found = parse_verify_output(result.stdout)
    fix = f"Run 'h3kit doctor --comfyui \"{install.path}\"' and see the log; re-run 'h3kit install' after fixing."
    if found is None:
        raise VerificationFailed(f"Importing the node pack with ComfyUI's Python failed ({result.detail or result.status}).", fix)
    missing = [n for n in EXPECTED_NODES if n not in found["nodes"]]
    if found.get("error") or missing or found.get("bad"):
        why = found.get("error") or (f"missing nodes {', '.join(missing)}" if missing else f"broken nodes {', '.join(found['bad'])}")
        raise VerificationFailed(f"The node pack in {install.node_dir} did not import cleanly in ComfyUI's Python ({why}).", fix)
    return {"verified": True, "nodes": found["nodes"]}


# -- apply: the config and profile, again, onto an installed pack ------------------------


def apply(install: ComfyInstall, settings: PlanSettings, profile: str, state_dir: Path, cache_dir: Path,
          dry_run: bool = False, generated: dict[str, bytes] | None = None) -> dict:
    """Rewrite the pack's profile, its generated files (workflows) and the launcher; the `h3kit.apply/1` document.

    One function for `h3kit apply` and for calibration's "apply what was
    measured": the nodes re-read the profile at their next run, the workflows
    open with the new defaults, and the launcher's flags take effect when
    ComfyUI is restarted. A generated file the user edited in place is kept;
    a hand-edited h3kit_profile.json is moved to a backup first (`backed_up`).
    """
    record = mf.load_or_new(state_dir, install.path)
    _refuse_disabled(install, record, "apply")
    notes = [] if dry_run else recover(install, record)
    if record.find(install.node_dir) is None or not install.node_dir.is_dir():
        raise NotReady(f"h3kit is not installed in {install.path}, so there is nothing to apply.",
                       f'Run h3kit install --comfyui "{install.path}" first.')
    before = installed_profile(install)
    doc = {"schema": "h3kit.apply/1", "comfyui": str(install.path), "profile": profile,
           "previous_profile": before.get("profile"),
           "changed": before.get("settings") != settings.to_json() or before.get("profile") != profile}
    if dry_run:
        doc["dry_run"] = True
        return doc
    path, backup = rewrite_profile(install, record, settings, profile, state_dir)
    doc["generated"], doc["kept"] = write_generated(install, record, generated or {})
    doc["removed"] = drop_unplanned_workflows(install, record, generated) if generated else []
    launcher = write_launcher(install, record, settings, profile, state_dir, cache_dir)
    record.extra.update({"profile": profile, "launcher": launcher})
    record.save()
    doc.update({"profile_file": str(path), "launcher": launcher, "manifest": str(record.path), "notes": notes,
                "backed_up": [b for b in (backup, launcher.get("backup")) if b]})
    doc["restart_needed"], doc["restart_why"] = restart_needed(before.get("settings") or {}, settings, launcher)
    return doc


def restart_needed(before: dict, settings: PlanSettings, launcher: dict) -> tuple[bool, str]:
    """Whether a running ComfyUI must be restarted for the new profile: only its launch flags and environment
    need one (the nodes re-read the profile at their next run), and why, in one sentence."""
    old_args, new_args = list(before.get("comfyui_args") or []), list(settings.comfyui_args)
    old_env, new_env = dict(before.get("env") or {}), dict(settings.env)
    where = launcher.get("path") or "its launcher"
    if old_args != new_args:
        return True, (f"The launch flags changed ({' '.join(old_args) or 'none'} -> {' '.join(new_args) or 'none'}): "
                      f"restart ComfyUI with {where} for them to take effect.")
    if old_env != new_env:
        return True, f"ComfyUI's environment changed: restart ComfyUI with {where} for it to take effect."
    return False, "The launch flags are unchanged: no restart is needed; the nodes use the new profile at their next run."


def write_generated(install: ComfyInstall, record: mf.Manifest, files: dict[str, bytes]) -> tuple[list[str], list[str]]:
    """Write plan-made pack files (recorded); one the user changed since h3kit wrote it is left as it is."""
    written, kept = [], []
    for rel, data in sorted(files.items()):
        dest = install.node_dir / rel
        entry = record.find(dest)
        if (dest.exists() or dest.is_symlink()) and (entry is None or not record.still_ours(entry)):
            kept.append(str(dest))
            continue
        journal = Journal(record)
        journal.mkdirs([install.node_dir / p for p in reversed(dest.relative_to(install.node_dir).parents[:-1])],
                       "node-pack")
        journal.write(dest, data, "node-pack")
        written.append(str(dest))
    return written, kept


def drop_unplanned_workflows(install: ComfyInstall, record: mf.Manifest, files: dict[str, bytes]) -> list[str]:
    """Remove the workflows an earlier plan made and this one does not (the reference-to-video workflow after
    reference_to_video: off): ComfyUI would list them, naming files this plan no longer fetches. Only a file
    still as h3kit wrote it goes; one the user edited stays."""
    wanted = {str((install.node_dir / rel).absolute()) for rel in files}
    folders = tuple(str((install.node_dir / d).absolute()) + os.sep for d in (workflows.UI_DIR, workflows.API_DIR))
    stale = [e for e in record.entries if e.kind == "file" and e.path.startswith(folders) and e.path not in wanted
             and record.still_ours(e)]
    journal = Journal(record)
    return [e.path for e in stale if journal.remove(e.path)]


def installed_profile(install: ComfyInstall) -> dict:
    """The profile document the pack holds now ({} when absent or unreadable)."""
    try:
        return json.loads((install.node_dir / PROFILE_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
