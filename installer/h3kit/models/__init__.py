"""The weight files a plan needs, in ComfyUI's model folders: plan, status, fetch, verify, remove.

The plan names weight variants by catalog id (`settings.dit_weights`,
`text_encoder_weights`, `vae_weights`; the audio VAE is the catalog's one).
Each variant's `file:` entry in profiles/models/*.yaml says what to fetch
and where it goes; this module turns that into files under
`<ComfyUI>/models/<folder>/`, downloads them with h3kit.models.download, and records
every file it writes in the install manifest (role "model") so that
`models remove` and `h3kit uninstall` remove exactly those and never a file
the user put there.

Sizes: `bytes` in `h3kit.models/1` is the catalog's planning size, the same
figure the planner adds up into `estimates.disk_bytes`, so the two totals
agree. `exact_bytes` is the confirmed file size when the catalog has one;
downloads are verified against it (or against what the server announces).

Where a file counts as present, in this order: the catalog folder, then the
older folder ComfyUI still reads for it (`unet` for diffusion_models, `clip`
for text_encoders), as in ComfyUI's folder_paths.py.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

from tqdm import tqdm

from h3kit.models import download

from h3kit.comfy import manifest as manifest_mod
from h3kit.models.download import ROUNDED_SIZE_TOLERANCE, Downloader, Want, check_free_space, human_bytes
from h3kit.core.session import Session
from h3kit.core.errors import BadInput, NotReady, VerificationFailed
from h3kit.core.subproc import run as run_tool

SCHEMA = "h3kit.models/1"
ROLE = "model"
PACK_ROLE = "loader-pack"
# ComfyUI reads these folders for the same kind of file (comfy folder_paths.py).
FOLDER_ALIASES = {"diffusion_models": ("diffusion_models", "unet"), "text_encoders": ("text_encoders", "clip")}


@dataclass
class ModelFile:
    weight_id: str
    part: str
    name: str
    bytes: int  # planning size: the catalog `size`, as the planner counts it
    exact_bytes: int | None
    folder: str
    urls: list
    sha256: str | None
    loader: str
    loader_pack: dict | None  # {name, git, folder, requirements, nodes} or None
    comfyui_compat: str | None = None
    unverified: str | None = None

    def dest(self, comfyui_dir: Path) -> Path:
        return Path(comfyui_dir) / "models" / self.folder / self.name

    def candidates(self, comfyui_dir: Path) -> list[Path]:
        return [Path(comfyui_dir) / "models" / f / self.name for f in FOLDER_ALIASES.get(self.folder, (self.folder,))]

    def want(self, comfyui_dir: Path) -> Want:
        exact = self.exact_bytes is not None
        return Want(self.name, self.dest(comfyui_dir), list(self.urls), self.exact_bytes if exact else self.bytes,
                    self.sha256, bytes_exact=exact)

    def size_matches(self, size: int) -> bool:
        if self.exact_bytes is not None:
            return size == self.exact_bytes
        return abs(size - self.bytes) <= self.bytes * ROUNDED_SIZE_TOLERANCE

    def to_json(self) -> dict:
        pack = {"name": self.loader_pack["name"], "git": self.loader_pack.get("git")} if self.loader_pack else None
        return {"id": self.weight_id, "part": self.part, "name": self.name, "bytes": self.bytes,
                "exact_bytes": self.exact_bytes, "folder": self.folder, "urls": list(self.urls),
                "sha256": self.sha256, "loader": {"node": self.loader, "pack": pack},
                "comfyui_compat": self.comfyui_compat, "unverified": self.unverified}


# -- from plan to files ----------------------------------------------------------

def _catalog(catalog=None):
    if catalog is not None:
        return catalog
    from h3kit.data.catalog import load

    return load()


def files_for_plan(plan: dict, catalog=None) -> list[ModelFile]:
    """The files `plan` needs, DiT first, each from its catalog entry."""
    cat = _catalog(catalog)
    settings = plan.get("settings") or {}
    ids = [settings.get("dit_weights"), settings.get("text_encoder_weights"), settings.get("vae_weights"),
           settings.get("audio_vae_weights") or (cat.audio_vae[0].id if cat.audio_vae else None)]
    packs = cat.data.get("loader_packs") or {}
    out: list[ModelFile] = []
    for wid in ids:
        if not wid:
            continue
        w = cat.weight(wid)
        if w is None:
            raise BadInput(f"The plan names weight '{wid}', which the model catalog does not list.",
                           "Re-run 'h3kit plan' with this h3kit version, or fix the override in config.yaml.")
        f = w.file or {}
        pack_name = f.get("loader_pack")
        pack = dict(packs.get(pack_name) or {}, name=pack_name) if pack_name else None
        out.append(ModelFile(w.id, w.part, f.get("name") or f"{w.id}.safetensors", w.bytes, f.get("bytes"),
                             f.get("folder", ""), list(f.get("urls") or []), f.get("sha256"),
                             f.get("loader", ""), pack, f.get("comfyui_compat"), f.get("unverified")))
    return out


def loader_packs(files: list[ModelFile], comfyui_dir: Path | None) -> list[dict]:
    """Custom node packs the files need, and whether each is installed in `comfyui_dir`."""
    seen: dict[str, dict] = {}
    for f in files:
        if not f.loader_pack:
            continue
        p = f.loader_pack
        entry = seen.setdefault(p["name"], {"name": p["name"], "git": p.get("git"), "folder": p.get("folder", p["name"]),
                                            "needed_by": [], "installed": None})
        entry["needed_by"].append(f.name)
        if comfyui_dir is not None:
            entry["installed"] = (Path(comfyui_dir) / "custom_nodes" / entry["folder"]).is_dir()
    return list(seen.values())


def plan_doc(plan: dict, *, comfyui_dir: Path | None = None, catalog=None) -> dict:
    files = files_for_plan(plan, catalog)
    total = sum(f.bytes for f in files)
    warnings = []
    for pack in loader_packs(files, comfyui_dir):
        if not pack["installed"]:
            where = "this ComfyUI" if comfyui_dir else "ComfyUI"
            verb = "needs" if len(pack["needed_by"]) == 1 else "need"
            warnings.append(f"{', '.join(pack['needed_by'])} {verb} the custom node pack {pack['name']} "
                            f"({pack['git']}), not installed in {where}: 'h3kit models fetch --with-loaders' installs it.")
    for f in files:
        if f.comfyui_compat:
            warnings.append(f"{f.name}: {f.comfyui_compat}.")
        if f.unverified:
            warnings.append(f"{f.name}: {f.unverified}.")
    disk = (plan.get("estimates") or {}).get("disk_bytes")
    return {"schema": SCHEMA, "action": "plan", "profile": plan.get("profile"),
            "files": [f.to_json() for f in files], "total_bytes": total, "plan_disk_bytes": disk,
            "loader_packs": loader_packs(files, comfyui_dir), "warnings": warnings}


# -- what is on disk ---------------------------------------------------------------

def _manifest(ctx, comfyui_dir: Path) -> manifest_mod.Manifest:
    return manifest_mod.load_or_new(ctx.locations.state_dir, comfyui_dir)


def file_state(f: ModelFile, comfyui_dir: Path, man: manifest_mod.Manifest) -> dict:
    """present | missing | partial | conflict (a file of that name with another size: the user's, left alone)."""
    for path in f.candidates(comfyui_dir):
        if path.is_file():
            size = path.stat().st_size
            entry = man.find(path)
            ours = entry is not None and entry.role == ROLE
            ok = f.size_matches(size) or (ours and entry.bytes == size and f.exact_bytes is None)
            # The hash recorded when h3kit wrote the file ('models verify' re-computes it).
            return {"name": f.name, "path": str(path), "state": "present" if ok else "conflict",
                    "bytes_on_disk": size, "by_h3kit": ours, "sha256_recorded": entry.sha256 if ours else None}
    part = f.want(comfyui_dir).part
    if part.is_file():
        return {"name": f.name, "path": str(f.dest(comfyui_dir)), "state": "partial",
                "bytes_on_disk": part.stat().st_size, "by_h3kit": False}
    return {"name": f.name, "path": str(f.dest(comfyui_dir)), "state": "missing", "bytes_on_disk": 0, "by_h3kit": False}


def status_doc(ctx, plan: dict, comfyui_dir: Path, *, catalog=None) -> dict:
    files = files_for_plan(plan, catalog)
    man = _manifest(ctx, comfyui_dir)
    rows = []
    for f in files:
        row = f.to_json()
        row.update(file_state(f, comfyui_dir, man))
        rows.append(row)
    return {"schema": SCHEMA, "action": "status", "comfyui": str(comfyui_dir), "files": rows,
            "total_bytes": sum(f.bytes for f in files),
            "missing_bytes": sum(_remaining(f, r) for f, r in zip(files, rows)),
            "loader_packs": loader_packs(files, comfyui_dir)}


def _remaining(f: ModelFile, row: dict) -> int:
    if row["state"] == "present":
        return 0
    size = f.exact_bytes or f.bytes
    return max(0, size - (row["bytes_on_disk"] if row["state"] == "partial" else 0))


# -- fetch ---------------------------------------------------------------------------

def _record(man: manifest_mod.Manifest, got: download.Fetched) -> None:
    # The hash was computed while the bytes arrived; re-reading 20 GB to record it would double the time.
    man.forget(got.path)
    man.entries.append(manifest_mod.Entry(str(Path(got.path).absolute()), "file", got.sha256, got.bytes, ROLE))
    man.save()


def _ensure_folder(man: manifest_mod.Manifest, folder: Path) -> None:
    missing = []
    p = folder
    while not p.exists():
        missing.append(p)
        p = p.parent
    folder.mkdir(parents=True, exist_ok=True)
    for d in reversed(missing):
        man.record_dir(d, ROLE)


def fetch(ctx, plan: dict, comfyui_dir: Path, *, from_dir: Path | None = None, downloader: Downloader | None = None,
          free_bytes=None, catalog=None) -> dict:
    """Get every missing file of the plan into ComfyUI; raises NotReady / VerificationFailed."""
    comfyui_dir = Path(comfyui_dir)
    files = files_for_plan(plan, catalog)
    man = _manifest(ctx, comfyui_dir)
    states = {f.name: file_state(f, comfyui_dir, man) for f in files}
    conflicts = [s for s in states.values() if s["state"] == "conflict"]
    if conflicts:
        c = conflicts[0]
        raise VerificationFailed(
            f"{c['path']} already exists with a different size ({c['bytes_on_disk']} bytes) and h3kit will not "
            "overwrite a file it did not download.",
            "Rename or move that file (it may be another version of the model), then run 'h3kit models fetch' again.",
            details={"conflicts": conflicts})
    todo = [f for f in files if states[f.name]["state"] != "present"]
    results = [{"name": f.name, "path": states[f.name]["path"], "method": "present"} for f in files if f not in todo]
    if not todo:
        return {"schema": SCHEMA, "action": "fetch", "comfyui": str(comfyui_dir), "files": results,
                "downloaded_bytes": 0, "total_bytes": sum(f.bytes for f in files)}

    sources: dict[str, Path] = {}
    if from_dir is not None:
        from_dir = Path(from_dir)
        if not from_dir.is_dir():
            raise BadInput(f"--from {from_dir} is not a folder.", "Pass the folder (or USB disk) that holds the model files.")
        for f in todo:
            src = download.find_local(from_dir, f.name, f.folder)
            if src is None:
                raise NotReady(f"{f.name} is not in {from_dir}.",
                               f"Copy it there (from {f.urls[0] if f.urls else 'its model page'}) and run again.")
            sources[f.name] = src
    else:
        for f in todo:
            if not f.urls:
                raise NotReady(f"No download address is known for {f.name} ({f.unverified or 'catalog has no URL'}).",
                               "Download it yourself and run 'h3kit models fetch --from DIR'.")

    need = sum(_remaining(f, states[f.name]) for f in todo if not _same_disk(sources.get(f.name), comfyui_dir))
    models_dir = comfyui_dir / "models"
    check_free_space(models_dir, need, free_bytes=free_bytes)
    ctx.progress(f"Fetching {len(todo)} file(s), {human_bytes(need)} to write into {models_dir}.")

    dl = downloader or Downloader(mirror=mirror_base(ctx))
    downloaded = 0
    overall = tqdm(total=sum((f.exact_bytes or f.bytes) for f in todo), unit="B", unit_scale=True,
                   unit_divisor=1000, desc="all files", file=sys.stderr, disable=None if dl.progress is None else not dl.progress,
                   initial=sum(states[f.name]["bytes_on_disk"] for f in todo if states[f.name]["state"] == "partial"))
    try:
        for f in todo:
            _ensure_folder(man, f.dest(comfyui_dir).parent)
            man.save()
            want = f.want(comfyui_dir)
            if f.name in sources:
                got = download.place_from_local(want, sources[f.name], progress=dl.progress)
                overall.update(got.bytes)
            else:
                got = dl.fetch(want, overall)
            _record(man, got)
            downloaded += got.bytes
            ctx.log.info("fetched %s (%s, verified by %s)", got.path, got.method, got.verified_by)
            results.append({"name": f.name, "path": str(got.path), "method": got.method, "source": got.source,
                            "bytes": got.bytes, "sha256": got.sha256, "verified_by": got.verified_by})
    finally:
        overall.close()
    return {"schema": SCHEMA, "action": "fetch", "comfyui": str(comfyui_dir), "files": results,
            "downloaded_bytes": downloaded, "total_bytes": sum(f.bytes for f in files)}


def _same_disk(src: Path | None, comfyui_dir: Path) -> bool:
    """A --from file on the same disk is hard-linked: it needs no space."""
    if src is None:
        return False
    try:
        target = Path(comfyui_dir)
        while not target.exists():
            target = target.parent
        return os.stat(src).st_dev == os.stat(target).st_dev
    except OSError:
        return False


def mirror_base(ctx) -> str | None:
    """The mirror base URL: config `models.mirror`, else env HF_ENDPOINT (huggingface_hub's own variable)."""
    try:
        import yaml

        path = ctx.locations.config_file
        data = yaml.safe_load(path.read_text(encoding="utf-8")) if path.is_file() else None
        mirror = ((data or {}).get("models") or {}).get("mirror") if isinstance(data, dict) else None
        if mirror:
            return str(mirror)
    except (OSError, ValueError, AttributeError):
        pass
    env = os.environ.get("HF_ENDPOINT")
    return env if env and env.rstrip("/") != download.DEFAULT_HF_ENDPOINT else None


# -- verify / remove ---------------------------------------------------------------------

def verify(ctx, plan: dict, comfyui_dir: Path, *, catalog=None) -> dict:
    """Re-hash every present file against the catalog hash, else the hash recorded when h3kit wrote it."""
    files = files_for_plan(plan, catalog)
    man = _manifest(ctx, comfyui_dir)
    rows, bad = [], []
    for f in files:
        st = file_state(f, Path(comfyui_dir), man)
        row = {"name": f.name, "path": st["path"], "state": st["state"]}
        if st["state"] == "present":
            ctx.progress(f"Hashing {f.name} ...")
            digest = manifest_mod.sha256_file(st["path"])
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


def remove(ctx, comfyui_dir: Path, *, plan: dict | None = None, catalog=None) -> dict:
    """Delete the model files h3kit recorded for this ComfyUI; a file the user put there or changed stays."""
    comfyui_dir = Path(comfyui_dir)
    man = _manifest(ctx, comfyui_dir)
    removed, kept = [], []
    for entry in [e for e in man.by_role(ROLE) if e.kind == "file"]:
        p = Path(entry.path)
        if not p.exists() and not p.is_symlink():
            man.forget(p)
            continue
        if man.still_ours(entry):
            if not ctx.dry_run:
                p.unlink()
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
            for path in f.candidates(comfyui_dir):
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


# -- loader packs -----------------------------------------------------------------------------

def comfy_python(comfyui_dir: Path, ctx=None) -> Path | None:
    """ComfyUI's own interpreter: issue #6's search order (portable python_embeded, venv inside ComfyUI,
    config comfyui_python) when that module is present, else the same folders checked here."""
    base = Path(comfyui_dir)
    try:
        from h3kit.comfy import locate as comfy

        cfg = None
        if ctx is not None:
            try:
                from h3kit.data import config as config_mod

                cfg = config_mod.load(ctx.locations)
            except Exception:  # noqa: BLE001 - a broken config must not hide the venv next to ComfyUI
                cfg = None
        py, _ = comfy.find_python(comfy.ComfyInstall(base, "given", comfy.detect_layout(base)), cfg)
        if py is not None:
            return Path(py)
    except (ImportError, AttributeError, TypeError):
        pass
    for rel in ("../python_embeded/python.exe", "../python_embeded/python", ".venv/bin/python", "venv/bin/python",
                ".venv/Scripts/python.exe", "venv/Scripts/python.exe"):
        if (base / rel).exists():
            return (base / rel).absolute()
    return None


def install_loader_pack(ctx, pack: dict, comfyui_dir: Path, *, git_url: str | None = None) -> dict:
    """git clone the pack into custom_nodes, pip-install its requirements with ComfyUI's Python, record every file."""
    comfyui_dir = Path(comfyui_dir)
    dest = comfyui_dir / "custom_nodes" / pack["folder"]
    if dest.exists():
        return {"name": pack["name"], "path": str(dest), "installed": False, "why": "already there"}
    source = git_url or pack["git"]
    if ctx.dry_run:
        return {"name": pack["name"], "path": str(dest), "installed": False, "why": "dry run"}
    ctx.progress(f"Installing {pack['name']} from {source} into {dest} ...")
    res = run_tool(["git", "clone", "--depth", "1", source, str(dest)], timeout=600)
    if not res.ok:
        raise NotReady(f"Cloning {pack['name']} from {source} failed ({res.detail or res.status}).",
                       "Check that git is installed and the network (or HTTPS_PROXY) works, then run again.")
    man = _manifest(ctx, comfyui_dir)
    man.record_dir(dest, PACK_ROLE)
    for root, dirs, names in os.walk(dest):
        for d in dirs:
            man.record_dir(Path(root) / d, PACK_ROLE)
        for n in names:
            man.record_file(Path(root) / n, PACK_ROLE)
    man.save()
    req = dest / pack.get("requirements", "requirements.txt")
    python = comfy_python(comfyui_dir, ctx) if req.is_file() else None
    if req.is_file() and python is None:
        raise NotReady(f"Cannot find the Python that runs the ComfyUI in {comfyui_dir}, needed to install "
                       f"{pack['name']}'s requirements (the pack itself is in {dest}).",
                       f"Run ComfyUI's python -m pip install -r {req} yourself, or set comfyui_python in config.yaml.")
    if req.is_file():
        pip = run_tool([str(python), "-m", "pip", "install", "-r", str(req)], timeout=1800)
        if not pip.ok:
            raise NotReady(f"Installing {pack['name']}'s requirements with {python} failed ({pip.detail}).",
                           f"Run '{python} -m pip install -r {req}' yourself to see the full error.")
    return {"name": pack["name"], "path": str(dest), "installed": True, "python": str(python) if python else None,
            "requirements": str(req) if req.is_file() else None}


# -- for install and doctor ------------------------------------------------------------------

def doctor_findings(plan: dict, comfyui_dir) -> list[dict]:
    """Findings for `h3kit doctor`: files present, loader packs installed, known load problems. Never raises."""
    try:
        ctx = Session()
        comfyui_dir = Path(comfyui_dir)
        files = files_for_plan(plan)
        man = _manifest(ctx, comfyui_dir)
        out = []
        for f in files:
            st = file_state(f, comfyui_dir, man)
            check = f"model file {f.name}"
            if st["state"] == "present":
                out.append(_finding(check, "ok", f"present in models/{Path(st['path']).parent.name}", None))
            elif st["state"] == "conflict":
                out.append(_finding(check, "fail", f"{st['path']} has {st['bytes_on_disk']} bytes, not the expected "
                                    "size", "Move that file away and run 'h3kit models fetch'."))
            else:
                out.append(_finding(check, "warn", f"{st['state']} ({human_bytes(f.exact_bytes or f.bytes)})",
                                    "h3kit models fetch"))
            if f.comfyui_compat:
                out.append(_finding(f"loads in ComfyUI: {f.name}", "warn", f.comfyui_compat,
                                    "Prefer another format ('h3kit profile list'), or use a loader pack that supports it."))
        for pack in loader_packs(files, comfyui_dir):
            if pack["installed"]:
                out.append(_finding(f"loader pack {pack['name']}", "ok", "installed in custom_nodes", None))
            else:
                out.append(_finding(f"loader pack {pack['name']}", "fail",
                                    f"{', '.join(pack['needed_by'])} needs {pack['name']} ({pack['git']}), which is "
                                    "not in custom_nodes", "h3kit models fetch --with-loaders"))
        return out
    except Exception as exc:  # noqa: BLE001 - doctor must keep going
        return [_finding("model files", "warn", f"could not check the model files ({exc})", "h3kit models status")]


def _finding(check: str, status: str, message: str, fix: str | None) -> dict:
    return {"check": check, "status": status, "message": message, "fix": fix}


def ensure_models(ctx, plan: dict, comfyui_dir, *, skip: bool, with_loaders: bool) -> dict:
    """The install step: state the total, ask (or --yes / --no-models), fetch, install loader packs on request."""
    comfyui_dir = Path(comfyui_dir)
    if skip:
        try:
            total = plan_doc(plan)["total_bytes"]
        except Exception:  # noqa: BLE001 - skipping must never fail the install
            total = None
        ctx.progress(f"Skipping the model files (--no-models); the plan needs {human_bytes(total)}: "
                     "run 'h3kit models fetch' later.")
        return {"schema": SCHEMA, "action": "ensure", "comfyui": str(comfyui_dir), "total_bytes": total,
                "skipped": True, "reason": "--no-models"}
    doc = status_doc(ctx, plan, comfyui_dir)
    missing = [r for r in doc["files"] if r["state"] != "present"]
    total, todo = doc["total_bytes"], doc["missing_bytes"]
    base = {"schema": SCHEMA, "action": "ensure", "comfyui": str(comfyui_dir), "total_bytes": total,
            "missing_bytes": todo, "files": doc["files"], "fetched": None, "loader_packs": doc["loader_packs"]}
    ctx.progress(f"The plan needs {len(doc['files'])} model files, {human_bytes(total)} in total; "
                 f"{human_bytes(todo)} still to download.")
    packs_needed = [p for p in doc["loader_packs"] if not p["installed"]]
    if not missing and not (with_loaders and packs_needed):
        return dict(base, skipped=False, reason="all present")
    if ctx.dry_run:
        return dict(base, skipped=True, reason="dry run")
    if missing and not ctx.confirm(f"Download {human_bytes(todo)} of model files into {comfyui_dir / 'models'} now?"):
        ctx.progress("Not downloading now; run 'h3kit models fetch' when you are ready.")
        return dict(base, skipped=True, reason="declined")
    if with_loaders:
        files = files_for_plan(plan)
        cat_packs = {f.loader_pack["name"]: f.loader_pack for f in files if f.loader_pack}
        base["loader_packs"] = [install_loader_pack(ctx, cat_packs[p["name"]], comfyui_dir) for p in packs_needed]
    if missing:
        base["fetched"] = fetch(ctx, plan, comfyui_dir)
    return dict(base, skipped=False, reason=None)
