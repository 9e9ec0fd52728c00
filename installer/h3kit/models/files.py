"""From a plan to files: which weight files it needs, where each goes in ComfyUI, and what is on disk now.

Sizes: `bytes` in `h3kit.models/1` is the catalog's planning size, the same
figure the planner adds up into `estimates.disk_bytes`, so the two totals
agree. `exact_bytes` is the confirmed file size when the catalog has one;
downloads are verified against it (or against what the server announces).

Where a file counts as present: any folder of its search list, as the
ComfyUI itself reports it (h3kit.comfyui.model_folders: extra_model_paths.yaml,
the Desktop's and Stability Matrix's shared folders, --extra-model-paths-config);
where a missing one goes: that module's `target_dir`. A bare ComfyUI folder
(no install at hand) gets ComfyUI's built-in folders.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from h3kit.comfyui import manifest as manifest_mod
from h3kit.comfyui.model_folders import ModelFolders
from h3kit.core.errors import BadInput
from h3kit.data.catalog_sections import LoaderPack
from h3kit.data.plan_doc import Plan
from h3kit.models.download import ROUNDED_SIZE_TOLERANCE, Want

SCHEMA = "h3kit.models/1"
ROLE = "model"
PACK_ROLE = "loader-pack"


def as_folders(where: ModelFolders | Path | str) -> ModelFolders:
    """The folders to use: ComfyUI's own answer when the caller has one, else a bare folder's built-in ones."""
    return where if isinstance(where, ModelFolders) else ModelFolders.built_in(Path(where) / "models")

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
    loader_pack: LoaderPack | None
    comfyui_compat: str | None = None
    unverified: str | None = None
    comfyui_loads: str = "unknown"  # the catalog's file.comfyui_loads

    def dest(self, where: ModelFolders | Path) -> Path:
        """Where this file goes when it is missing (ComfyUI's default folder for its kind)."""
        return as_folders(where).target_dir(self.folder) / self.name

    def candidates(self, where: ModelFolders | Path) -> list[Path]:
        """Every place ComfyUI would find it, in ComfyUI's order."""
        out: list[Path] = []
        for folder in as_folders(where).search_list(self.folder):
            if folder / self.name not in out:
                out.append(folder / self.name)
        return out

    def want(self, where: ModelFolders | Path) -> Want:
        exact = self.exact_bytes is not None
        return Want(self.name, self.dest(where), list(self.urls), self.exact_bytes if exact else self.bytes,
                    self.sha256, bytes_exact=exact)

    def size_matches(self, size: int) -> bool:
        if self.exact_bytes is not None:
            return size == self.exact_bytes
        return abs(size - self.bytes) <= self.bytes * ROUNDED_SIZE_TOLERANCE

    def to_json(self) -> dict:
        pack = {"name": self.loader_pack.name, "git": self.loader_pack.git} if self.loader_pack else None
        return {"id": self.weight_id, "part": self.part, "name": self.name, "bytes": self.bytes,
                "exact_bytes": self.exact_bytes, "folder": self.folder, "urls": list(self.urls),
                "sha256": self.sha256, "loader": {"node": self.loader, "pack": pack},
                "comfyui_compat": self.comfyui_compat, "unverified": self.unverified,
                "comfyui_loads": self.comfyui_loads}


# -- from plan to files ----------------------------------------------------------

def _catalog(catalog=None):
    if catalog is not None:
        return catalog
    from h3kit.data.catalog import load

    return load()


def files_for_plan(plan: Plan, catalog=None) -> list[ModelFile]:
    """The files `plan` needs, DiT first, then text encoder, VAEs and the preset's LoRA, each from its catalog entry;
    then, when the plan sets up the reference-to-video workflow, its ref2va DiT and its LoRA."""
    cat = _catalog(catalog)
    settings = plan.settings
    ref = settings.reference
    ids = [settings.dit_weights, settings.text_encoder_weights, settings.vae_weights,
           settings.audio_vae_weights or (cat.audio_vae[0].id if cat.audio_vae else None),
           settings.lora,  # the preset's LoRA (the fast preset's Turbo LoRA), when it uses one
           ref.dit_weights if ref else None, ref.lora if ref else None]
    packs = cat.loader_packs
    out: list[ModelFile] = []
    for wid in dict.fromkeys(ids):  # a file named twice is one download
        if not wid:
            continue
        w = cat.weight(wid)
        if w is None:
            raise BadInput(f"The plan names weight '{wid}', which the model catalog does not list.",
                           "Re-run 'h3kit plan' with this h3kit version, or fix the override in config.yaml.")
        f = w.file
        pack = (packs.get(f.loader_pack) or LoaderPack(f.loader_pack)) if f.loader_pack else None
        out.append(ModelFile(w.id, w.part, f.name or f"{w.id}.safetensors", w.bytes, f.bytes, f.folder, list(f.urls),
                             f.sha256, f.loader, pack, f.comfyui_compat, f.unverified, w.comfyui_loads))
    return out


def loader_packs(files: list[ModelFile], comfyui_dir: Path | None) -> list[dict]:
    """Custom node packs the files need, and whether each is installed in `comfyui_dir`."""
    seen: dict[str, dict] = {}
    for f in files:
        if not f.loader_pack:
            continue
        p = f.loader_pack
        entry = seen.setdefault(p.name, {"name": p.name, "git": p.git, "folder": p.folder or p.name,
                                         "needed_by": [], "installed": None})
        entry["needed_by"].append(f.name)
        if comfyui_dir is not None:
            entry["installed"] = (Path(comfyui_dir) / "custom_nodes" / entry["folder"]).is_dir()
    return list(seen.values())


def plan_doc(plan: Plan, *, comfyui_dir: Path | None = None, catalog=None) -> dict:
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
        if f.comfyui_compat and f.comfyui_loads == "with_h3kit_loader":
            warnings.append(f"{f.name} loads through h3kit's node {f.loader}, not the stock one ({f.comfyui_compat}).")
        elif f.comfyui_compat:
            warnings.append(f"{f.name}: {f.comfyui_compat}.")
        if f.unverified:
            warnings.append(f"{f.name}: {f.unverified}.")
    disk = plan.estimates.disk_bytes
    return {"schema": SCHEMA, "action": "plan", "profile": plan.profile,
            "files": [f.to_json() for f in files], "total_bytes": total, "plan_disk_bytes": disk,
            "loader_packs": loader_packs(files, comfyui_dir), "warnings": warnings}


# -- the user's settings ---------------------------------------------------------

def session_config(ctx, config=None):
    """The Config the caller read, else the one h3kit.data.config reads for this session (the only reader)."""
    if config is not None:
        return config
    from h3kit.data import config as config_mod

    return config_mod.load(ctx.locations)


# -- what is on disk ---------------------------------------------------------------

def manifest_for(ctx, comfyui_dir: Path) -> manifest_mod.Manifest:
    return manifest_mod.load_or_new(ctx.locations.state_dir, comfyui_dir)


def file_state(f: ModelFile, where: ModelFolders | Path, man: manifest_mod.Manifest) -> dict:
    """present | missing | partial | conflict (a file of that name with another size: the user's, left alone).
    `shared`: found (or, missing, to go) outside the ComfyUI's own models folder."""
    folders = as_folders(where)
    for path in f.candidates(folders):
        if path.is_file():
            size = path.stat().st_size
            entry = man.find(path)
            ours = entry is not None and entry.role == ROLE
            ok = f.size_matches(size) or (ours and entry.bytes == size and f.exact_bytes is None)
            # The hash recorded when h3kit wrote the file ('models verify' re-computes it).
            return {"name": f.name, "path": str(path), "state": "present" if ok else "conflict",
                    "bytes_on_disk": size, "by_h3kit": ours, "sha256_recorded": entry.sha256 if ours else None,
                    "shared": folders.shared(path)}
    dest = f.dest(folders)
    part = f.want(folders).part
    if part.is_file():
        return {"name": f.name, "path": str(dest), "state": "partial",
                "bytes_on_disk": part.stat().st_size, "by_h3kit": False, "shared": folders.shared(dest)}
    return {"name": f.name, "path": str(dest), "state": "missing", "bytes_on_disk": 0, "by_h3kit": False,
            "shared": folders.shared(dest)}


def status_doc(ctx, plan: Plan, comfyui_dir: Path, *, catalog=None, folders: ModelFolders | None = None) -> dict:
    files = files_for_plan(plan, catalog)
    man = manifest_for(ctx, comfyui_dir)
    folders = folders or as_folders(comfyui_dir)
    rows = []
    for f in files:
        row = f.to_json()
        row.update(file_state(f, folders, man))
        rows.append(row)
    return {"schema": SCHEMA, "action": "status", "comfyui": str(comfyui_dir), "model_folders": folders.to_json(),
            "files": rows,
            "total_bytes": sum(f.bytes for f in files),
            "missing_bytes": sum(remaining(f, r) for f, r in zip(files, rows)),
            "loader_packs": loader_packs(files, comfyui_dir)}


def remaining(f: ModelFile, row: dict) -> int:
    if row["state"] == "present":
        return 0
    size = f.exact_bytes or f.bytes
    return max(0, size - (row["bytes_on_disk"] if row["state"] == "partial" else 0))

