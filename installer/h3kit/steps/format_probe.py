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
    return plan_with(probe, config, fingerprint, plan, notes, profile=profile, saved=saved)


def plan_with(probe, config, fingerprint: Fingerprint | None, plan: Plan | None, notes: list[str], *,
              profile: str | None, saved: bool) -> Plan | None:
    """`plan` made again with `probe` (a FormatProbe or None) as the planner's evidence, for commands that
    already hold the probe (doctor); `plan` itself when there is no probe or the plan is another machine's."""
    from h3kit.data import catalog
    from h3kit.plan import make_plan

    if probe is None or saved or not plan or fingerprint is None:
        return plan
    runs = sum(r.status == "runs" for part in probe.parts.values() for r in part.values())
    notes.append(f"planned with {probe.source}: {runs} format/part pairs run")
    cat = catalog.load()
    return make_plan(fingerprint, cat, catalog.load_profiles(cat), profile=profile, config=config, evidence=probe)
