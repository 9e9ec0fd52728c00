"""What several commands do first: read the config, fingerprint and plan, find the ComfyUI.

Workflow steps sit between the CLI and the domain packages: they call the
domain in the documented order and report through the `Session`, and never
parse arguments or print themselves.
"""

from __future__ import annotations

from h3kit.comfy import locate as comfyui
from h3kit.comfy.inspect import torch_fit_findings
from h3kit.core.session import Session as Context


def load_config(ctx: Context):
    from h3kit.data import config

    return config.load(ctx.locations)


def _plan(fingerprint: dict, profile: str | None, config) -> dict:
    """The planner over the shipped catalog and profiles (it reads no file itself)."""
    from h3kit.data import catalog
    from h3kit.plan import make_plan

    cat = catalog.load()
    return make_plan(fingerprint, cat, catalog.load_profiles(cat), profile=profile, config=config)


def current_plan(ctx: Context, config, profile: str | None, notes: list[str]) -> tuple[dict, dict]:
    """(fingerprint, plan) for this machine now."""
    from h3kit.fingerprint import collect

    ctx.progress("Fingerprinting this machine...")
    fingerprint = collect()
    ctx.progress("Planning the profile...")
    return fingerprint, _plan(fingerprint, profile, config)


def saved_plan(config, profile: str | None, notes: list[str], fingerprint_file: str) -> tuple[dict, dict | None]:
    """(fingerprint, plan) for a saved fingerprint file (--fingerprint FILE), instead of this machine."""
    from h3kit.fingerprint.schema import load_file

    fingerprint = load_file(fingerprint_file)
    notes.append(f"using the saved fingerprint {fingerprint_file}, not this machine's")
    return fingerprint, _plan(fingerprint, profile, config)


def generated_files(plan: dict | None) -> dict[str, bytes]:
    """The files deploy and apply make from the plan: the H3 workflows, in both formats."""
    if not plan:
        return {}
    from h3kit.comfy import workflows
    from h3kit.data import catalog

    return workflows.pack_files(plan, catalog.load(), plan["profile"])


def locate(args, ctx: Context, config, *, need_write: bool) -> comfyui.ComfyInstall:
    install = comfyui.find(getattr(args, "comfyui", None), config, ctx, need_write=need_write,
                           python=getattr(args, "comfyui_python", None))
    for note in install.notes:
        ctx.progress(note)
    return install


def torch_findings(fingerprint: dict | None, info: dict) -> list[dict]:
    """Torch build against the hardware (h3kit.plan.torch_build); the basic checks without a fingerprint."""
    if fingerprint is None:
        return torch_fit_findings(fingerprint, info)
    from h3kit.plan.torch_build import doctor_findings

    return doctor_findings(fingerprint, info)


def loud(findings: list[dict]) -> list[str]:
    return [f"{f['message']} Fix: {f['fix']}" if f.get("fix") else f["message"]
            for f in findings if f["status"] in ("warn", "fail")]


