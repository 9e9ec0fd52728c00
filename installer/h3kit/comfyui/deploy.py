"""Put the node pack and the launcher into a ComfyUI, record every write, verify.

A fresh install stages a complete copy of the pack beside the target (in
custom_nodes/, under a name ending in `.disabled` so a running ComfyUI skips
it) and renames it into place: one rename on one file system, so ComfyUI
never sees half a pack. A re-install stages the same way and then replaces
the pack's files one by one (each an atomic replace), keeping files the user
added. A folder named ComfyUI-h3kit that h3kit's record does not claim is
never touched. Every file and folder created goes into the manifest
(h3kit.comfyui.manifest) with its sha256; the manifest is saved last.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path

import h3kit
from h3kit import bundled
from h3kit.comfyui import manifest as mf
from h3kit.comfyui.inspect import marked_json
from h3kit.comfyui.launcher import accepted_flags, filter_args, launcher_name, render
from h3kit.comfyui.locate import ComfyInstall, run_python
from h3kit.core.errors import BadInput, NotReady, VerificationFailed
from h3kit.core.files import atomic_write
from h3kit.core.paths import asset_dir

PROFILE_FILE = "h3kit_profile.json"
PROFILE_SCHEMA = "h3kit.node-profile/1"
STAGING_SUFFIX = ".h3kit-staging.disabled"
STAGING_MARK = ".h3kit-staging"
DISABLED_SUFFIX = ".disabled"  # ComfyUI-Manager's "disable": the pack folder renamed, ComfyUI skips it
EXPECTED_NODES = ("H3kitProfileInfo", "H3kitTiledVAEDecode", "H3kitMemoryGuard", "H3kitCalibrationReport")
VERIFY_TIMEOUT = 120.0
SKIP_NAMES = {"__pycache__", ".pytest_cache", "tests"}


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


def pack_contents(library: Path | None, settings: dict, profile: str,
                  generated: dict[str, bytes] | None = None) -> dict[str, bytes]:
    """Relative path -> bytes of every file of the pack (`generated`: files made from the plan, the workflows)."""
    files: dict[str, bytes] = {}
    nodes = asset_dir("nodes")
    for path in sorted(nodes.rglob("*")):
        rel = path.relative_to(nodes)
        if any(part in SKIP_NAMES for part in rel.parts) or path.suffix == ".pyc" or not path.is_file():
            continue
        files[rel.as_posix()] = path.read_bytes()
    files.update(bundled.package_files())
    if library is not None and Path(library).is_file():
        # Every variant of this build (baseline and tuned), so a pack copied to an
        # older CPU still loads: the bridge picks the variant at load time.
        library = Path(library)
        for variant in sorted(library.parent.glob(f"libh3kit-*{library.suffix}")):
            files[f"lib/{variant.name}"] = variant.read_bytes()
    files[PROFILE_FILE] = profile_document(settings, profile)
    files.update(generated or {})
    return files


def profile_document(settings: dict, profile: str) -> bytes:
    doc = {"schema": PROFILE_SCHEMA, "profile": profile, "h3kit_version": h3kit.__version__, "settings": settings}
    return (json.dumps(doc, indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode("utf-8")


# -- safety checks ----------------------------------------------------------------


def staging_dirs(install: ComfyInstall) -> list[Path]:
    try:
        return [p for p in install.custom_nodes.iterdir()
                if p.name.endswith(STAGING_SUFFIX) and p.is_dir() and not p.is_symlink() and (p / STAGING_MARK).is_file()]
    except OSError:
        return []


def clean_staging(install: ComfyInstall) -> list[str]:
    """Remove what an interrupted install left (only folders carrying our staging mark)."""
    removed = []
    for p in staging_dirs(install):
        shutil.rmtree(p)
        removed.append(str(p))
    return removed


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


def backup_root(state_dir: Path, target: str | os.PathLike) -> Path:
    return Path(state_dir) / "backups" / mf.slug_for(Path(target)) / mf.now_iso().replace(":", "")


def move_to_backup(path: Path, base: Path, backups: Path) -> Path:
    """Move `path` (never following a link) under `backups`, keeping its place relative to `base`."""
    try:
        rel = path.relative_to(base)
    except ValueError:
        rel = Path(path.name)
    dest = backups / rel
    n = 0
    while dest.exists() or dest.is_symlink():  # two backups within one second: keep both
        n += 1
        dest = backups / rel.with_name(f"{rel.name}.{n}")
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.move(str(path), str(dest))  # a symlink is moved as a link
    return dest


# -- writing ----------------------------------------------------------------------


def _write_tree(root: Path, files: dict[str, bytes]) -> None:
    for rel, data in files.items():
        dest = root / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(data)


def _record_tree(record: mf.Manifest, root: Path, role: str) -> None:
    record.record_dir(root, role)
    for dirpath, dirnames, filenames in os.walk(root):  # os.walk never follows links by default
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            if p.is_symlink():
                record.record_link(p, role)
            elif p.is_dir():
                record.record_dir(p, role)
            else:
                record.record_file(p, role)


def deploy(install: ComfyInstall, *, settings: dict, profile: str, library: Path | None,
           state_dir: Path, cache_dir: Path, progress=None, windows: bool | None = None,
           generated: dict[str, bytes] | None = None) -> DeployResult:
    """Install or upgrade the pack and launcher; returns what was done (manifest saved)."""
    say = progress or (lambda msg: None)
    record = mf.load_or_new(state_dir, install.path)
    _refuse_disabled(install, record, "install")
    notes = [f"removed an interrupted install's staging folder {p}" for p in clean_staging(install)]
    ours = ensure_ours(install, record)
    target = install.node_dir
    if ours and (target / STAGING_MARK).is_file():
        (target / STAGING_MARK).unlink()  # left by a crash right after the rename
    files = pack_contents(library, settings, profile, generated)
    if library is None:
        notes.append("no native library was built: the pack works, nodes that need it say so")
    staging = install.custom_nodes / (target.name + STAGING_SUFFIX)
    say(f"Staging the node pack ({len(files)} files) in {staging}")
    staging.mkdir()  # a folder already there without our mark is someone else's: EEXIST, exit 3
    try:
        (staging / STAGING_MARK).write_text("h3kit staging folder: safe to delete\n", encoding="utf-8")
        _write_tree(staging, files)
    except OSError:
        shutil.rmtree(staging, ignore_errors=True)  # a full disk must not keep a half-written copy
        raise
    result = DeployResult(target, record, created=not ours, notes=notes)
    if not ours:
        record.record_dir(target, "node-pack")
        record.save()  # claim the name before it exists, so a crash after the rename still leaves it ours
        os.rename(staging, target)  # the mark travels along, so a crash just before this still gets cleaned up
        (target / STAGING_MARK).unlink()
        _record_tree(record, target, "node-pack")
        say(f"Installed the node pack into {target}")
    else:
        _upgrade(record, staging, target, files, state_dir, install, result)
        shutil.rmtree(staging)
        say(f"Upgraded the node pack in {target} in place")
    result.launcher = write_launcher(install, record, settings, profile, state_dir, cache_dir, windows)
    record.extra.update({"comfyui": str(install.path), "layout": install.layout, "node_dir": str(target),
                         "profile": profile, "launcher": result.launcher})
    record.save()
    return result


def _upgrade(record: mf.Manifest, staging: Path, target: Path, files: dict[str, bytes], state_dir: Path,
             install: ComfyInstall, result: DeployResult) -> None:
    backups = None
    for rel in files:
        src, dest = staging / rel, target / rel
        for parent in reversed(dest.relative_to(target).parents[:-1]):
            d = target / parent
            if not d.exists():
                d.mkdir()
                record.record_dir(d, "node-pack")
        if dest.exists() or dest.is_symlink():
            entry = record.find(dest)
            if entry is None or not record.still_ours(entry):
                backups = backups or backup_root(state_dir, install.path)
                result.backed_up.append(str(move_to_backup(dest, target, backups)))
        os.replace(src, dest)
        record.record_file(dest, "node-pack")
    shipped = {str((target / rel).absolute()) for rel in files}
    for entry in [e for e in record.by_role("node-pack") if e.kind == "file"]:
        if entry.path.startswith(str(target) + os.sep) and entry.path not in shipped:
            if record.still_ours(entry):
                Path(entry.path).unlink()
                result.removed_stale.append(entry.path)
            record.forget(entry.path)


def write_launcher(install: ComfyInstall, record: mf.Manifest, settings: dict, profile: str,
                   state_dir: Path, cache_dir: Path, windows: bool | None = None) -> dict:
    """Write (or rewrite) run_h3kit.sh/.bat; returns {path, args, dropped, detail} (path None when skipped)."""
    windows = sys.platform == "win32" if windows is None else windows
    where = install.launcher_dir
    wanted = [str(a) for a in settings.get("comfyui_args") or []]
    env = {str(k): str(v) for k, v in (settings.get("env") or {}).items()}
    if where is None or install.python is None:
        why = "the Desktop app starts ComfyUI itself" if where is None else "ComfyUI's Python is unknown"
        return {"path": None, "args": [], "dropped": wanted, "detail": f"no launcher written: {why}"}
    flags, detail = accepted_flags(install, cache_dir)
    kept, dropped = filter_args(wanted, flags or set())
    path = where / launcher_name(install, windows)
    entry = record.find(path)
    if path.exists() or path.is_symlink():
        if entry is None:
            return {"path": None, "args": kept, "dropped": dropped,
                    "detail": f"{path} exists and was not written by h3kit: left alone, no launcher written"}
        if not record.still_ours(entry):
            move_to_backup(path, where, backup_root(state_dir, install.path))
    text = render(install, install.python, kept, env, profile, windows)
    path.write_bytes(text.encode("utf-8"))
    if path.suffix == ".sh":
        path.chmod(0o755)
    record.record_file(path, "launcher")
    return {"path": str(path), "args": kept, "dropped": dropped, "detail": detail}


def rewrite_profile(install: ComfyInstall, record: mf.Manifest, settings: dict, profile: str) -> Path:
    """`h3kit apply`: a new h3kit_profile.json, written atomically and recorded."""
    path = install.node_dir / PROFILE_FILE
    atomic_write(path, profile_document(settings, profile))
    record.record_file(path, "node-pack")
    return path


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


def apply(install: ComfyInstall, settings: dict, profile: str, state_dir: Path, cache_dir: Path,
          dry_run: bool = False, generated: dict[str, bytes] | None = None) -> dict:
    """Rewrite the pack's profile, its generated files (workflows) and the launcher; the `h3kit.apply/1` document.

    One function for `h3kit apply` and for calibration's "apply what was
    measured": the nodes re-read the profile at their next run, the workflows
    open with the new defaults, and the launcher's flags take effect when
    ComfyUI is restarted. A generated file the user edited in place is kept.
    """
    record = mf.load_or_new(state_dir, install.path)
    _refuse_disabled(install, record, "apply")
    if record.find(install.node_dir) is None or not install.node_dir.is_dir():
        raise NotReady(f"h3kit is not installed in {install.path}, so there is nothing to apply.",
                       f'Run h3kit install --comfyui "{install.path}" first.')
    before = installed_profile(install)
    doc = {"schema": "h3kit.apply/1", "comfyui": str(install.path), "profile": profile,
           "previous_profile": before.get("profile"),
           "changed": before.get("settings") != settings or before.get("profile") != profile}
    if dry_run:
        doc["dry_run"] = True
        return doc
    path = rewrite_profile(install, record, settings, profile)
    doc["generated"], doc["kept"] = write_generated(install, record, generated or {})
    launcher = write_launcher(install, record, settings, profile, state_dir, cache_dir)
    record.extra.update({"profile": profile, "launcher": launcher})
    record.save()
    doc.update({"profile_file": str(path), "launcher": launcher, "manifest": str(record.path)})
    return doc


def write_generated(install: ComfyInstall, record: mf.Manifest, files: dict[str, bytes]) -> tuple[list[str], list[str]]:
    """Write plan-made pack files (recorded); one the user changed since h3kit wrote it is left as it is."""
    written, kept = [], []
    for rel, data in sorted(files.items()):
        dest = install.node_dir / rel
        entry = record.find(dest)
        if (dest.exists() or dest.is_symlink()) and (entry is None or not record.still_ours(entry)):
            kept.append(str(dest))
            continue
        for parent in reversed(dest.relative_to(install.node_dir).parents[:-1]):
            folder = install.node_dir / parent
            if not folder.is_dir():
                folder.mkdir()
                record.record_dir(folder, "node-pack")
        atomic_write(dest, data)
        record.record_file(dest, "node-pack")
        written.append(str(dest))
    return written, kept


def installed_profile(install: ComfyInstall) -> dict:
    """The profile document the pack holds now ({} when absent or unreadable)."""
    try:
        return json.loads((install.node_dir / PROFILE_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
