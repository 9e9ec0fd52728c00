"""`h3kit calibrate`'s step: find the ComfyUI to measure in, fingerprint and plan once, then calibrate that plan.

Run by itself, the calibration's plan is made the way every command's is
(h3kit.steps.planning), without the earlier calibrated values, then handed to
the calibration (h3kit.calibrate) as the typed `Planned` that install hands
it, which measures it and nothing else. The ComfyUI is the one --comfyui
names, else the config's comfyui_path; without either it runs in h3kit's own
Python, and the report says the time per clip is a table estimate.
"""

from __future__ import annotations

from h3kit import calibrate
from h3kit.calibrate.handover import Calibrated, Found
from h3kit.comfyui import locate as comfyui_locate
from h3kit.core.session import Session
from h3kit.steps.common import Fingerprinted, load_config
from h3kit.steps.options import CalibrateOptions
from h3kit.steps.planning import Probing, plan_for


def run(options: CalibrateOptions, ctx: Session) -> Calibrated:
    """Calibrate and write the report: the `h3kit.calibration/1` document and the plan re-applied (None: none)."""
    config = load_config(ctx)
    found = _comfyui(ctx, options.comfyui, config)
    ctx.progress("calibrate: fingerprint and plan...")
    said: list[dict] = []  # the format probe, before the plan: the planner's evidence of what runs here
    planned = plan_for(ctx, config, Fingerprinted.read(options.fingerprint_file), [], found=found,
                       probing=Probing.FRESH if options.fresh_probe else Probing.MEASURE, findings=said,
                       for_calibration=True, progress=False)
    skipped = tuple(f"the format probe: {f['message']}" for f in said if f["status"] != "ok")
    return calibrate.calibrate(ctx, planned, quick=options.quick, with_model=options.with_model,
                               skipped=skipped)


def _comfyui(ctx: Session, explicit: str | None, config) -> Found | None:
    """The ComfyUI to run in and its one inspection (NotReady names the fix when it is named but unusable), or
    None when none is known: no --comfyui and no comfyui_path in the config."""
    if not explicit and not config.comfyui_path:
        return None
    install = comfyui_locate.find(str(explicit) if explicit else None, config, ctx, need_write=False)
    return Found(install, comfyui_locate.inspect(install))
