"""The format probe in a command's chain, and the command's one plan: measured before any download.

Install and apply find the ComfyUI first and plan once it is known: its
format probe (h3kit.calibrate.format_probe, cached per setup) runs in its
Python and is the planner's evidence, and its version says which files it
loads and which flags it needs. A machine without a ComfyUI is planned
without either (install still reports what it can do). A plan for a saved
fingerprint (--fingerprint FILE) describes another machine, so this
machine's probe is not its evidence. Doctor plans once too, after its own
probe of the ComfyUI it checks (`plan_found`); without a ComfyUI it has
nothing to plan for.
"""

from __future__ import annotations

import dataclasses

from h3kit.calibrate.format_probe import format_evidence
from h3kit.calibrate.handover import Planned, uncalibrated
from h3kit.core.session import Session
from h3kit.data.fingerprint import Fingerprint
from h3kit.data.plan_doc import Plan
from h3kit.steps.common import plan_with as make_one_plan


def plan_for(ctx: Session, config, fingerprint: Fingerprint, notes: list[str], *, profile: str | None,
             install=None, saved: bool = False, for_calibration: bool = False, found=None) -> Planned:
    """The command's one plan, handed on typed: for `install` (a ComfyInstall, or None when none was found) with
    its format probe as evidence (not for a `saved` fingerprint's plan) and its version. `for_calibration`: a
    calibration runs next and re-applies with what it measures, so this plan is made without the config's
    earlier calibrated values (h3kit.calibrate.handover). `found`: the command's one inspection of that ComfyUI
    (h3kit.comfyui.versions.state.ComfyState), handed on so nothing after it inspects again."""
    info = found.info if found is not None else None
    probe = probe_of(ctx, install, fingerprint, notes, saved=saved, info=info) if install is not None else None
    planned = Planned(fingerprint, None, probe, saved, installed_version(install), found)
    _say_evidence(planned.evidence, notes)
    ctx.progress("Planning the profile...")
    plan = make_one_plan(fingerprint, profile, uncalibrated(config) if for_calibration else config,
                         evidence=planned.evidence, comfyui_version=planned.comfyui_version)
    return dataclasses.replace(planned, plan=plan)


def probe_of(ctx: Session, install, fingerprint: Fingerprint | None, notes: list[str], *, saved: bool,
             info: dict | None = None):
    """This ComfyUI's format probe (cached, else measured now unless a dry run); what it said goes to `notes`.
    `info`: the command's inspection of that ComfyUI, when it has one (then the probe does not inspect again)."""
    findings: list[dict] = []
    probe = format_evidence(ctx, install, fingerprint=None if saved else fingerprint, run=not ctx.dry_run,
                            findings=findings, info=info or None)
    notes += [f"format probe: {f['message']}" for f in findings if f["status"] != "ok"]
    return probe


def installed_version(install) -> str | None:
    """The version of the ComfyUI `install` (a ComfyInstall) holds, read from its tree."""
    from h3kit.comfyui.inspect import comfyui_version

    return comfyui_version(install.code_dir or install.path) if install is not None else None


def plan_found(ctx: Session, probe, config, fingerprint: Fingerprint, notes: list[str], *, saved: bool,
               comfyui_version: str | None = None) -> Plan:
    """Doctor's one plan, made once its ComfyUI is found and probed: with `probe` (a FormatProbe or None) as the
    planner's evidence (not for a `saved` fingerprint's plan, which describes another machine) and its version."""
    evidence = None if saved else probe
    _say_evidence(evidence, notes)
    ctx.progress("Planning the profile...")
    return make_one_plan(fingerprint, None, config, evidence=evidence, comfyui_version=comfyui_version)


def _say_evidence(evidence, notes: list[str]) -> None:
    if evidence is not None:
        runs = sum(r.status == "runs" for part in evidence.parts.values() for r in part.values())
        notes.append(f"planned with {evidence.source}: {runs} format/part pairs run")
