"""What the version of the target ComfyUI changes in a plan: the files it can load and the flags it needs.

Both come from the catalog (`file.comfyui_min`, `comfyui_versions:`, read by h3kit.data.comfy_versions);
the planner only applies them. A plan made before the ComfyUI is known (no version) gets neither, and
says nothing about versions; the plan made for the found ComfyUI (install, apply, doctor, calibrate) does.
"""

from __future__ import annotations

from dataclasses import replace

from h3kit.data.catalog import Catalog, Machine
from h3kit.data.comfy_versions import version_of
from h3kit.data.fingerprint import Fingerprint

PARTS = ("dit", "text_encoder", "vae", "audio_vae", "lora")


def loadable_catalog(catalog: Catalog, version: str | None) -> tuple[Catalog, list[str]]:
    """`catalog` without the files this ComfyUI version is too old to load, and one sentence per file left out."""
    v = version_of(version)
    if v is None:
        return catalog, []
    dropped, kept = [], {}
    for part in PARTS + ("reference_dit",):  # a ref2va twin too old for it is left out quietly (plan/reference.py says so)
        keep = []
        for w in getattr(catalog, part):
            need = version_of(w.file.comfyui_min)
            if need is None or v >= need:
                keep.append(w)
            elif part != "reference_dit":
                dropped.append(f"{w.file.name or w.id} needs ComfyUI {w.file.comfyui_min} or newer and this one is "
                               f"{version}, so it is not planned (update ComfyUI to use it).")
        kept[part] = keep
    changed = any(len(kept[part]) != len(getattr(catalog, part)) for part in kept)
    return (replace(catalog, **kept) if changed else catalog), dropped


def _gpu_bytes(fingerprint: Fingerprint) -> int | None:
    sizes = [g.memory_total_bytes for g in fingerprint.gpus if g.memory_total_bytes]
    return max(sizes) if sizes else None


def version_args(catalog: Catalog, fingerprint: Fingerprint, machine: Machine, version: str | None,
                 args: tuple[str, ...]) -> tuple[tuple[str, ...], list[str], list[str]]:
    """(comfyui_args with the flags this version needs here, rationale sentences, warnings)."""
    rules = catalog.comfyui_versions
    gpu = _gpu_bytes(fingerprint)
    out, said = list(args), []
    for rule in rules.flags_for(version, machine.backend, gpu):
        if rule.args[0] in out:
            continue
        out += list(rule.args)
        said.append(f"ComfyUI {version} gets {' '.join(rule.args)}: {rule.why} ({rule.source}).")
    name = fingerprint.primary_gpu.name if fingerprint.primary_gpu is not None else None
    warnings = [f"{r.problem}: {r.fix} ({r.source})."
                for r in rules.known_problems(version, machine.backend, gpu, out, gpu_name=name)]
    if version_of(version) is not None and rules.newest_tested and not rules.tested(version):
        said.append(f"ComfyUI {version} is newer than {rules.newest_tested}, the newest release h3kit's real-ComfyUI "
                    "tests have run; h3kit's nodes are expected to work there but have not been run on it.")
    return tuple(out), said, warnings
