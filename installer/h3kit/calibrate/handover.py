"""What a command decided before calibration runs, handed to it typed: the machine, the plan, its evidence.

Every command's plan is made by one function, h3kit.steps.planning.plan_for,
which returns a `Planned`. `h3kit install` fingerprints once, finds its
ComfyUI once and inspects it once, plans once (with the format probe as the
planner's evidence when it found a ComfyUI), deploys that plan and hands the
same `Planned` here, so the calibration measures the settings just deployed,
in the ComfyUI just found, and its re-apply keeps their profile. `h3kit
calibrate` run by itself makes its `Planned` the same way (in
h3kit.steps.calibrate) before the calibration starts. Either way the plan
calibration measures is made without an earlier calibration's values
(`uncalibrated`): today's decisions start from the profile and the
overrides, and a rerun never stacks on stale calibrated values; the re-apply
after it is the second plan.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from h3kit.comfyui.locate import ComfyInstall
from h3kit.data.fingerprint import Fingerprint
from h3kit.data.format_evidence import FormatProbe
from h3kit.data.plan_doc import Plan


@dataclass(frozen=True)
class Found:
    """The ComfyUI a command found, with its one inspection (`info`: h3kit.comfyui.locate.inspect's answer) when
    it made one; None: not inspected (the format probe inspects it if it needs to), or its Python did not start."""

    install: ComfyInstall
    info: dict | None = None


@dataclass(frozen=True)
class Planned:
    """One command's decisions, made by h3kit.steps.planning.plan_for: `fingerprint` (None when a test's plan
    stands for an unknown machine), `plan`, `probe` (this ComfyUI's format probe, when one was read or measured),
    `saved` (the plan is for a saved fingerprint, another machine), `evidence` (the format probe the plan was made
    with: none for another machine's plan unless one was named), the ComfyUI's version and the ComfyUI itself."""

    fingerprint: Fingerprint | None
    plan: Plan | None
    probe: FormatProbe | None = None
    saved: bool = False
    comfyui_version: str | None = None  # of the ComfyUI the plan was made for, when one was found or named
    comfyui: Found | None = None  # the ComfyUI the plan was made for and its one inspection; None: none found
    evidence: FormatProbe | None = None  # what the planner was given as evidence


def uncalibrated(config):
    """`config` without its `calibrated:` section: what the plan a calibration measures is made with."""
    return dataclasses.replace(config, calibrated={}) if config is not None else None


@dataclass(frozen=True)
class Calibrated:
    """What a calibration gives back: its `h3kit.calibration/1` document, and the plan it re-applied to the pack
    with the calibrated values (None when it applied nothing: no ComfyUI, a dry run, --no-config)."""

    doc: dict
    applied: Plan | None = None
