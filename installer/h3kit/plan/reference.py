"""The reference-to-video workflow a plan sets up when the settings key reference_to_video is on.

H3's reference-to-video node (MiniMaxH3ReferenceToVideo) needs the ref2va
checkpoint, not the fl2va DiT the other workflows load. It has the same
architecture, so the plan's choice of DiT carries over: its twin of the same
variant and format (`Catalog.reference_twin`, the catalog's `dit_reference:`)
runs with the same loader, streaming and memory figures, and only its file
is new. Steps and LoRA come from the preset's `reference:` where it has one
(the fast preset: ComfyUI's own 4-step ref2v LoRA), else the preset's steps
with no LoRA; `steps` in the settings wins, as for the other workflows.
Off (the default), nothing is planned, downloaded or generated for it.
"""

from __future__ import annotations

from h3kit.core.units import gb
from h3kit.data.catalog import Catalog, Weight
from h3kit.data.plan_doc import ReferenceRun
from h3kit.data.settings import Settings


def reference_run(cat: Catalog, settings: Settings, dit: Weight, defaults: dict, lora: Weight | None,
                  disk_needed: int, disk_free: int) -> tuple[ReferenceRun | None, int, list[str], list[str]]:
    """(the reference run or None, the bytes it adds on disk, rationale sentences, warnings).
    `defaults`: plan/defaults.py's workflow defaults; `lora`: the preset's LoRA the plan already counts;
    `disk_needed`: the plan's files without this run; `disk_free`: the disk they go to."""
    if not settings.reference_to_video:
        return None, 0, [], []
    twin = cat.reference_twin(dit)
    if twin is None:
        have = ", ".join(sorted({f"{w.variant} {w.format}" for w in cat.reference_dit})) or "none"
        return None, 0, [], [f"reference_to_video is on, but no reference-to-video (ref2va) DiT of the planned DiT's "
                             f"kind ({dit.variant} {dit.format}) is published, so that workflow is not set up; "
                             f"set dit_weights to a DiT whose kind has one ({have})."]
    preset = cat.presets.get(defaults.get("preset") or "")
    ref = preset.reference if preset is not None else None
    steps = settings.steps or (ref.steps if ref is not None else defaults["steps"])
    ref_lora = cat.weight(ref.lora) if ref is not None and ref.lora else None
    run = ReferenceRun(twin.id, int(steps), ref_lora.id if ref_lora else None,
                       ref.lora_strength if ref_lora else None)
    extra = twin.bytes + (ref_lora.bytes if ref_lora is not None and ref_lora is not lora else 0)
    with_lora = f" with its LoRA {ref_lora.id}" if ref_lora else " with no LoRA"
    why = [f"reference_to_video is on: the reference-to-video workflow loads {twin.file.name or twin.id} "
           f"({gb(twin.bytes)}), the ref2va twin of the planned DiT ({dit.variant} {dit.format}), and samples "
           f"{steps} steps{with_lora}" + (f" (preset {preset.name}'s reference setting)" if ref is not None else "")
           + f"; its files add {gb(extra)} on disk."]
    warnings = []
    if disk_needed <= disk_free < disk_needed + extra:
        warnings.append(f"the reference-to-video files need {gb(extra)} more on disk than the other workflows' "
                        f"{gb(disk_needed)}, and the disk has {gb(disk_free)} free; free space or set "
                        "reference_to_video: off.")
    return run, extra, why, warnings
