"""What a command decided before calibration runs, handed to it typed: the machine, the plan, its evidence.

`h3kit install` fingerprints once and plans once (with the format probe as
the planner's evidence when it found a ComfyUI), deploys that plan and hands
the same values here, so the calibration measures the settings just deployed
and its re-apply keeps their profile. Only `h3kit calibrate` run by itself
fingerprints and plans for itself. Either way the plan calibration measures is
made without an earlier calibration's values (`uncalibrated`): today's
decisions start from the profile and the overrides, and a rerun never stacks
on stale calibrated values; the re-apply after it is the second plan.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from h3kit.comfyui.versions.state import ComfyState
from h3kit.data.fingerprint import Fingerprint
from h3kit.data.format_evidence import FormatProbe
from h3kit.data.plan_doc import Plan


@dataclass(frozen=True)
class Planned:
    """One command's decisions: `fingerprint` (None when a test's plan stands for an unknown machine), `plan`,
    `probe` (this ComfyUI's format probe, when one was read or measured) and `saved` (the plan is for a saved
    fingerprint, another machine, so this machine's probe is not its evidence)."""

    fingerprint: Fingerprint | None
    plan: Plan | None
    probe: FormatProbe | None = None
    saved: bool = False
    comfyui_version: str | None = None  # of the ComfyUI the plan was made for, when one was found
    comfyui: ComfyState | None = None  # the command's one inspection of that ComfyUI (h3kit.comfyui.versions.state)

    @property
    def evidence(self) -> FormatProbe | None:
        """The probe as the planner's evidence: none for another machine's plan."""
        return None if self.saved else self.probe


def uncalibrated(config):
    """`config` without its `calibrated:` section: what the plan a calibration measures is made with."""
    return dataclasses.replace(config, calibrated={}) if config is not None else None


@dataclass(frozen=True)
class Calibrated:
    """What a calibration gives back: its `h3kit.calibration/1` document, and the plan it re-applied to the pack
    with the calibrated values (None when it applied nothing: no ComfyUI, a dry run, --no-config)."""

    doc: dict
    applied: Plan | None = None
