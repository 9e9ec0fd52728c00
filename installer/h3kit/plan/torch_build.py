"""Which PyTorch build belongs on this machine, and whether ComfyUI has it.

Two halves: `torch_wheel` chooses the build from the fingerprint and the
wheel table (profiles/torch_builds.yaml), `torch_check` compares what ComfyUI
has installed with that choice and words the doctor's findings. This front
keeps one name for both, which install, doctor and comfy setup import.
"""

from __future__ import annotations

from h3kit.plan.torch_check import (build_from_metadata, check, companion_mismatches, describe_installed,
                                    doctor_findings, fix_command, local_tag)
from h3kit.plan.torch_wheel import PACKAGES, PYPI, SCHEMA, builds_table, choose, pip_index_args, requirements

__all__ = ["PACKAGES", "PYPI", "SCHEMA", "build_from_metadata", "builds_table", "check", "choose",
           "companion_mismatches", "describe_installed", "doctor_findings", "fix_command", "local_tag",
           "pip_index_args", "requirements"]
