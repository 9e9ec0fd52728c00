"""The format probe in a command's chain: measured before the plan is final and before any download.

Install and calibrate find the ComfyUI after a first plan (a machine without
one still gets a plan and a report); once the ComfyUI is known, its format
probe (h3kit.calibrate.format_probe, cached per setup) runs in its Python and
the plan is made again with it as the planner's evidence. A plan for a saved
fingerprint (--fingerprint FILE) describes another machine, so this
machine's probe is not its evidence.
"""

from __future__ import annotations

from h3kit.calibrate.format_probe import format_evidence
from h3kit.core.session import Session
from h3kit.data.fingerprint import Fingerprint
from h3kit.data.plan_doc import Plan


def probed_plan(ctx: Session, config, install, fingerprint: Fingerprint | None, plan: Plan | None, notes: list[str], *,
                profile: str | None, saved: bool) -> Plan | None:
    """`plan` made again with this machine's format probe as evidence; `plan` itself when there is none.
    `saved`: the plan is for a saved fingerprint (another machine), so this machine's probe is not its evidence."""
    findings: list[dict] = []
    probe = format_evidence(ctx, install, fingerprint=None if saved else fingerprint, run=not ctx.dry_run,
                            findings=findings)
    notes += [f"format probe: {f['message']}" for f in findings if f["status"] != "ok"]
    return plan_with(probe, config, fingerprint, plan, notes, profile=profile, saved=saved,
                     comfyui_version=installed_version(install))


def installed_version(install) -> str | None:
    """The version of the ComfyUI `install` (a ComfyInstall) holds, read from its tree."""
    from h3kit.comfyui.inspect import comfyui_version

    return comfyui_version(install.code_dir or install.path) if install is not None else None


def plan_with(probe, config, fingerprint: Fingerprint | None, plan: Plan | None, notes: list[str], *,
              profile: str | None, saved: bool, comfyui_version: str | None = None) -> Plan | None:
    """`plan` made again for the found ComfyUI: with `probe` (a FormatProbe or None) as the planner's evidence
    (not for another machine's plan), and with its version (the files it loads, the flags it needs);
    `plan` itself when there is neither."""
    from h3kit.data import catalog
    from h3kit.plan import make_plan

    evidence = None if saved else probe
    if (evidence is None and comfyui_version is None) or not plan or fingerprint is None:
        return plan
    if evidence is not None:
        runs = sum(r.status == "runs" for part in evidence.parts.values() for r in part.values())
        notes.append(f"planned with {evidence.source}: {runs} format/part pairs run")
    cat = catalog.load()
    return make_plan(fingerprint, cat, catalog.load_profiles(cat), profile=profile, config=config, evidence=evidence,
                     comfyui_version=comfyui_version)
