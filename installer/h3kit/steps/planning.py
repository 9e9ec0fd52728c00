"""Every command's one plan, made by one function: `plan_for`, for install, apply, doctor, models, plan and calibrate.

What it decides, each in this one place:

- whose machine: the command's one fingerprint (h3kit.steps.common.fingerprinted), this machine's or a saved
  one (--fingerprint FILE, `saved`);
- the evidence: a format probe the command names (`h3kit plan --format-probe FILE`) is taken as it is;
  otherwise the probe of the ComfyUI the command found (h3kit.calibrate.format_probe: cached per setup, else
  measured now, never in a dry run), read the way the command asks (`Probing`). A plan for a saved fingerprint
  describes another machine, so this machine's probe is not its evidence: it is still read or measured and
  reported (doctor shows its table), and `models`, which only reads the cache for evidence, does not read it;
- the ComfyUI's version: one the command names (`--comfyui-version`), else the found ComfyUI's, read from the
  folder that holds its code, else none;
- the config: without its earlier calibrated values when a calibration runs next (h3kit.calibrate.handover).

A command without a ComfyUI is planned without a probe or a version. The found ComfyUI and its one inspection
go on in the `Planned` (h3kit.calibrate.handover), so a calibration after it neither finds nor inspects again.
"""

from __future__ import annotations

from enum import Enum

from h3kit.calibrate.format_probe import cached, format_evidence
from h3kit.calibrate.handover import Found, Planned, uncalibrated
from h3kit.core.session import Session
from h3kit.data.format_evidence import FormatProbe
from h3kit.data import catalog
from h3kit.plan import make_plan
from h3kit.steps.common import Fingerprinted


class Probing(Enum):
    """How a command reads the format probe of the ComfyUI it found."""

    MEASURE = "measure"  # the cached probe while its setup is the same, else measured now (never in a dry run)
    FRESH = "fresh"  # measured now, whatever the cache holds (--fresh-probe)
    CACHE = "cache"  # the cache as it is, without starting ComfyUI's Python (models)
    NONE = "none"  # no probe (doctor, when ComfyUI's Python does not start)


def plan_for(ctx: Session, config, machine: Fingerprinted, notes: list[str], *, profile: str | None = None,
             found: Found | None = None, probing: Probing = Probing.MEASURE, findings: list[dict] | None = None,
             evidence: FormatProbe | None = None, comfyui_version: str | None = None,
             for_calibration: bool = False, progress: bool = True) -> Planned:
    """The command's one plan, handed on typed (the module doc says what it decides, and how).

    `found`: the ComfyUI the command found, with its one inspection when it made one (None: none found).
    `probing`: how that ComfyUI's format probe is read. `findings`: where the probe's findings (check
    formats.probe) go; None: its warnings become `notes` lines. `evidence` and `comfyui_version`: named by the
    command (`h3kit plan`), taken over the found ComfyUI's. `for_calibration`: a calibration runs next and
    re-applies with what it measures, so this plan is made without the config's earlier calibrated values.
    `progress`: say "Planning the profile..." (not for the commands whose answer is the plan: plan, models)."""
    probe = _probe(ctx, machine, found, probing, findings, notes) if found is not None else None
    if evidence is None and not machine.saved:
        evidence = probe
    version = comfyui_version or (installed_version(found.install) if found is not None else None)
    _say_evidence(evidence, notes)
    if progress:
        ctx.progress("Planning the profile...")
    cat = catalog.load()  # the planner over the shipped catalog and profiles (it reads no file itself)
    plan = make_plan(machine.fingerprint, cat, catalog.load_profiles(cat), profile=profile,
                     config=uncalibrated(config) if for_calibration else config, evidence=evidence,
                     comfyui_version=version)
    return Planned(machine.fingerprint, plan, probe, machine.saved, version, found, evidence)


def _probe(ctx: Session, machine: Fingerprinted, found: Found, probing: Probing, findings: list[dict] | None,
           notes: list[str]) -> FormatProbe | None:
    """The found ComfyUI's format probe, read as `probing` says; what it said goes to `findings`, else to `notes`."""
    if probing is Probing.NONE:
        return None
    if probing is Probing.CACHE:  # evidence only: for another machine's plan there is nothing to read it for
        return None if machine.saved else cached(ctx.locations.cache_dir, found.install.path)
    said: list[dict] = findings if findings is not None else []
    probe = format_evidence(ctx, found.install, fingerprint=None if machine.saved else machine.fingerprint,
                            info=found.info, fresh=probing is Probing.FRESH, findings=said)
    if findings is None:
        notes += [f"format probe: {f['message']}" for f in said if f["status"] != "ok"]
    return probe


def installed_version(install) -> str | None:
    """The version of the ComfyUI `install` (a ComfyInstall) holds, read from the folder that holds its code."""
    from h3kit.comfyui.inspect import comfyui_version

    return comfyui_version(install.code_dir or install.path)


def _say_evidence(evidence: FormatProbe | None, notes: list[str]) -> None:
    if evidence is not None:
        runs = sum(r.status == "runs" for part in evidence.parts.values() for r in part.values())
        notes.append(f"planned with {evidence.source}: {runs} format/part pairs run")

