"""The memory planner: from a fingerprint to an `h3kit.plan/1` by arithmetic on model sizes.

The plan is decided the way Ollama decides GPU offload -- compute what each
phase needs and compare it with what the machine has -- rather than by one
VRAM threshold. Every number about the model comes from the catalog
(profiles/models/), every per-machine choice from a profile (profiles/*.yaml);
the planner only does the arithmetic and explains it.

`make_plan` is a pure function of (fingerprint, catalog, profiles, config,
profile name): it reads no file, so a caller loads the catalog once
(h3kit.data.catalog) and plans as often as it likes. The work is split:

- `budget`: what the machine offers and what one choice of files and canvas
  needs, phase by phase, held by ComfyUI or streamed by h3kit's loader -- the
  one memory model, which calibration asks too (`budget.Measured`);
- `search`: per profile, the files and canvas that fit, best first, with their
  workflow defaults and time (`defaults`, `timing`);
- `streaming`: whether h3kit's own loader streams the DiT, and why: a policy
  per profile, a decision per candidate (`dynamic_vram`: ComfyUI's own rule,
  also doctor's; `prefetch`: the read-ahead arithmetic calibration uses;
  `loader_facts`: what the streamed loader does);
- `rationale`: one sentence per decision, and the warnings;
- `loads`: which evidence says each chosen format runs here (the format probe
  passed as `evidence` > the catalog's runs_on > unknown), the `blocked`
  sentence when nothing that loads fits (what would make it work), and the
  setup users reported working on this class of machine.

Among profiles, the best plan wins (search.Candidate.rank). `fits` and the
peaks describe the run the plan sets up: the streamed one when
settings.streaming.enabled. Nothing fits: `fits: false`, the plan that misses
by least, and warnings naming what is short and by how much.

`torch_build` is the other question this layer answers: which PyTorch wheel
the hardware needs.
"""

from __future__ import annotations

from dataclasses import fields, replace
from types import MappingProxyType
from typing import Mapping

from h3kit.core.errors import BadInput
from h3kit.data import catalog as catalog_mod
from h3kit.data.catalog import Catalog, Machine, Profile
from h3kit.data.fingerprint import Fingerprint
from h3kit.data.plan_doc import (SCHEMA, CandidateSummary, ClipTime, Estimates, FormatEvidence, MemoryBudget,
                                 PhasePeak, Plan, PlanSettings, TextEncoderStreaming, WorkflowCost)
from h3kit.plan.cost import cost_model, pinned_estimate
from h3kit.plan.comfy_version import loadable_catalog, version_args
from h3kit.plan.loads import (blocked_sentence, evidence_doc, evidence_rationale, reported_setup_rationale,
                              shortfall_fix)
from h3kit.plan.rationale import rationale_for, warnings_for
from h3kit.plan.reference import reference_run
from h3kit.plan.search import Candidate, cap_rationale, plan_profile
from h3kit.plan import streaming
from h3kit.plan import te_stream

__all__ = ["SCHEMA", "Plan", "make_plan"]


def _candidates(fingerprint: Fingerprint, machine: Machine, profiles: Mapping[str, Profile], wanted: str,
                by_flag: bool) -> tuple[list[Profile], str, list[str]]:
    """The profiles to plan with, why (empty when matching decides), and notes for the warnings."""
    if wanted != "auto":
        ok, why = catalog_mod.matches(profiles[wanted], fingerprint, machine)
        why_profile = f"Profile {wanted} was chosen by {'--profile' if by_flag else 'config.yaml'}" + \
            ("." if ok else f" although it does not match this machine ({why}).")
        notes = [] if ok else [f"Profile {wanted} does not match this machine ({why}); its plan may not suit it."]
        return [profiles[wanted]], why_profile, notes
    candidates = [p for p in profiles.values() if catalog_mod.matches(p, fingerprint, machine)[0]]
    if candidates:
        return candidates, "", []
    candidates = [p for p in profiles.values() if p.match.get("backend") == [machine.backend]] or \
        [profiles["cpu-only"]]
    return candidates, "", [f"No profile matches this machine exactly; tried {', '.join(p.name for p in candidates)}."]


def make_plan(fingerprint: Fingerprint, catalog: Catalog, profiles: Mapping[str, Profile], *,
              profile: str | None = None, config=None, evidence=None, comfyui_version: str | None = None) -> Plan:
    """The Plan (h3kit.data.plan_doc; `.to_json()` is the h3kit.plan/1) for `fingerprint`. `profile` (a name) beats config.profile; 'auto'/None lets matching decide.

    `catalog` and `profiles` are h3kit.data.catalog.load() and load_profiles(catalog); `config` is a
    h3kit.data.config.Config or None (no config file); `evidence` the format probe measured on this machine
    (h3kit.data.format_evidence.FormatProbe, read by the caller) or None: it beats the catalog's reports;
    `comfyui_version` the version of the ComfyUI the plan is for, when known: files it is too old to load
    are left out and the flags it needs here are added (h3kit.plan.comfy_version)."""
    # the reports of what runs where can depend on the ComfyUI release (formats.<f>.runs_on.<b>.since)
    machine = replace(Machine.from_fingerprint(fingerprint), comfyui_version=comfyui_version)
    catalog, version_said = loadable_catalog(catalog, comfyui_version)
    wanted = profile or (config.profile if config is not None else "auto")
    if wanted != "auto" and wanted not in profiles:
        raise BadInput(f"There is no profile named {wanted!r}.",
                       f"Choose one of: auto, {', '.join(profiles)} (see 'h3kit profile list').")
    candidates, why_profile, notes = _candidates(fingerprint, machine, profiles, wanted, bool(profile))
    plans = [plan_profile(catalog, fingerprint, machine, p, config, evidence) for p in candidates]
    best = max(plans, key=Candidate.rank)
    if not why_profile:
        others = [p.profile.name for p in plans if p is not best]
        why_profile = (f"Profile {best.profile.name} matches this {machine.backend} machine"
                       + (f" and gives the best plan of {len(plans)} matching ({', '.join(others)} also matched)."
                          if others else "."))
    comfyui_args, args_said, version_warnings = version_args(catalog, fingerprint, machine, comfyui_version,
                                                             tuple(best.settings.comfyui_args))
    lora = catalog.weight(best.defaults["lora"]) if best.defaults["lora"] else None
    disk = best.est.disk + (lora.bytes if lora else 0)
    reference, ref_disk, ref_why, ref_warnings = reference_run(catalog, best.settings, best.choice.dit, best.defaults,
                                                               lora, disk, best.budget.disk_bytes)
    settings = _plan_settings(catalog, best, comfyui_args, reference,
                              TextEncoderStreaming(**best.te_decision.doc(catalog)))
    ch = best.choice
    return Plan(
        model=catalog.model.id,
        profile=best.profile.name,
        fits=best.fits,
        settings=settings,
        comfyui_loads=MappingProxyType({w.part: w.comfyui_loads for w in (ch.dit, ch.te, ch.vae, ch.audio_vae)
                                        + ((lora,) if lora is not None else ())}),
        evidence=MappingProxyType({part: FormatEvidence(**ev) for part, ev in evidence_doc(catalog, best).items()}),
        blocked=blocked_sentence(catalog, best, lora),
        shortfall_fix=shortfall_fix(best),
        settings_source=MappingProxyType({f.name: best.source.get(f.name, "planner") for f in fields(settings)}),
        budget=MemoryBudget(best.budget.gpu_bytes, best.budget.ram_bytes, best.budget.disk_bytes, best.budget.unified),
        estimates=_estimates(catalog, best, disk + ref_disk),
        cost=MappingProxyType(cost_model(catalog, best).to_json()),
        candidates=tuple(CandidateSummary(p.profile.name, p.est.fits, p.choice.dit.format, tuple(p.choice.canvas),
                                          p.choice.frames, p.est.streamed) for p in plans),
        rationale=tuple(rationale_for(catalog, best, why_profile) + cap_rationale(catalog, best) + best.defaults_why
                        + best.notes + streaming.rationale(catalog, best) + te_stream.rationale(catalog, best)
                        + evidence_rationale(catalog, best) + reported_setup_rationale(catalog, best)
                        + version_said + args_said + ref_why),
        warnings=tuple(notes + warnings_for(catalog, best, config) + best.defaults_warnings + version_warnings
                       + ref_warnings),
    )


def _plan_settings(catalog: Catalog, best: Candidate, comfyui_args: tuple, reference,
                   te_streaming: TextEncoderStreaming) -> PlanSettings:
    """The settings the plan hands on: the chosen files and canvas, the streaming decision, the workflow defaults."""
    ch, e, s, defaults = best.choice, best.est, best.settings, best.defaults
    return PlanSettings(
        dit_weights=ch.dit.id, quantization=ch.dit.format, text_encoder_weights=ch.te.id, vae_weights=ch.vae.id,
        audio_vae_weights=ch.audio_vae.id, shard_size_bytes=e.shard, preload_bytes=e.preload,
        vae_tile_size=s.vae_tile_size, vae_tile_overlap=s.vae_tile_overlap,
        vae_temporal_tile=s.vae_temporal_tile, max_canvas=tuple(ch.canvas), max_frames=ch.frames,
        comfyui_args=comfyui_args, comfyui_args_version_dependent=True,
        env=MappingProxyType({k: str(v) for k, v in s.env.items()}), stream_from=s.stream_from,
        streaming=streaming.to_doc(best.stream, catalog), text_encoder_streaming=te_streaming,
        canvas=tuple(defaults["canvas"]), frames=defaults["frames"], steps=defaults["steps"],
        cfg=defaults["cfg"], preset=defaults["preset"], lora=defaults["lora"], lora_strength=defaults["lora_strength"],
        reference=reference, target_minutes=defaults["target_minutes"],
        queue_guard=s.queue_guard or "refuse", timing=MappingProxyType(dict(best.timing)))


def _estimates(catalog: Catalog, best: Candidate, disk_bytes: int) -> Estimates:
    e, time = best.est, best.time
    at = pinned_estimate(catalog, best, best.defaults["canvas"], best.defaults["frames"])
    workflow = WorkflowCost(canvas=tuple(best.defaults["canvas"]), frames=best.defaults["frames"], fits=at.fits,
                            peak_gpu_bytes=at.peak_gpu, peak_ram_bytes=at.peak_ram,
                            phases=MappingProxyType({k: PhasePeak(**v) for k, v in at.phases.items()}))
    return Estimates(peak_gpu_bytes=e.peak_gpu, peak_ram_bytes=e.peak_ram, disk_bytes=disk_bytes, tokens=e.tokens,
                     activation_bytes=e.activations,
                     phases=MappingProxyType({k: PhasePeak(**v) for k, v in e.phases.items()}),
                     minutes_per_clip=time["minutes_per_clip"], seconds_per_step=time["seconds_per_step"],
                     time=ClipTime.from_json(time), workflow=workflow)
