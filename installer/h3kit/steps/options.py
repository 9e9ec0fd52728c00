"""What each workflow step is asked to do: typed, frozen options that `cli/` builds from the command line.

A step never sees the parsed command line: `h3kit.cli.<command>` turns its
arguments into one of these values and calls the step. So a test or a script
calls a step with exactly what a person would type, a field the step does not
know is a TypeError at once (not a `getattr` default that hides a typo), and
a step cannot change what it was asked (install's new ComfyUI is a new
`ComfyTarget`, not an edited argument).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class ComfyTarget:
    """Which ComfyUI: --comfyui PATH and --comfyui-python PATH as typed; None searches (h3kit.comfyui.locate)."""

    path: str | None = None
    python: str | None = None


@dataclass(frozen=True)
class InstallOptions:
    comfyui: ComfyTarget = field(default_factory=ComfyTarget)
    profile: str | None = None  # None: the config's, else auto
    fingerprint_file: str | None = None  # plan for this saved fingerprint instead of probing the machine
    skip_calibrate: bool = False
    skip_models: bool = False
    with_loaders: bool = False  # also install the custom node packs the chosen weights need
    allow_unverified: bool = False  # also fetch files not reported to load in ComfyUI
    offer_new_comfyui: bool = True  # no ComfyUI found: offer to set one up (--no-new-comfyui turns it off)
    new_comfyui: Path | None = None  # set up a new ComfyUI here first
    comfyui_source: str | None = None  # git URL, archive or folder the new ComfyUI comes from


@dataclass(frozen=True)
class ApplyOptions:
    comfyui: ComfyTarget = field(default_factory=ComfyTarget)
    profile: str | None = None
    preset: str | None = None  # written to config.yaml's overrides before planning (auto: the key is removed)


@dataclass(frozen=True)
class DoctorOptions:
    comfyui: ComfyTarget = field(default_factory=ComfyTarget)
    fix: bool = False
    fingerprint_file: str | None = None  # check against this saved fingerprint instead of probing the machine
    fresh_probe: bool = False  # measure the weight formats again instead of using the cached probe


@dataclass(frozen=True)
class CalibrateOptions:
    comfyui: str | None = None  # --comfyui PATH: run in this ComfyUI's Python; None: the config's comfyui_path, if any
    quick: bool = True
    with_model: bool = False  # also run the smallest real workflow when its weights are there
    fresh_probe: bool = False  # measure the weight formats again instead of using the cached probe
    fingerprint_file: str | None = None  # calibrate the plan for this saved fingerprint instead of this machine's


@dataclass(frozen=True)
class UninstallOptions:
    comfyui: ComfyTarget = field(default_factory=ComfyTarget)
    purge: bool = False  # also config, cache, reports, h3kit's own venv and a ComfyUI h3kit created


@dataclass(frozen=True)
class ModelsOptions:
    action: str  # plan | status | fetch | verify | remove
    comfyui: str | None = None  # --comfyui PATH: the ComfyUI whose models folder to use; None searches
    profile: str | None = None
    fingerprint_file: str | None = None  # plan for this saved fingerprint instead of this machine
    from_dir: Path | None = None  # take the files from this folder instead of downloading them
    with_loaders: bool = False  # also install the custom node packs the chosen weights need
