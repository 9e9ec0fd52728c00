"""Calibration: measure this machine, tune the profile, write the report.

The steps, in order (each one's result lands in the `h3kit.calibration/1`
document, and a step that cannot run says why instead of failing the run):

1. the plan to measure, handed over typed (`handover.Planned`) and measured as
   it is: `h3kit install`'s own, or `h3kit calibrate`'s (h3kit.steps.calibrate),
   both made by the one plan maker (h3kit.steps.planning): fingerprint -> the
   ComfyUI found and inspected once -> its format probe (which weight formats
   run on this device, cached per setup: `format_probe`) -> plan with the
   profile and that evidence, without the earlier calibrated values;
2. the native library: H3KIT_NATIVE_LIB, the cache, else built (never in a dry run);
3. the runner (`h3kit.bundled.h3k_calibration_runner`, self-contained) in
   ComfyUI's Python when a ComfyUI is known, else in this Python: ComfyUI's
   own H3 transformer at the full width of the plan's file (read from its
   header, `arch`) and a few blocks deep, native kernels, thread scaling,
   the scaled H3-shaped DiT through the streamer, device rates and the tile
   sweep when torch sees a GPU (`runner_client`), in a work folder a killed
   run cannot leave behind for good (`workdir`);
4. disk: sequential read GB/s on the models folder's disk, here (`disk`);
5. estimates for one clip -- time via plan.timing.estimate_clip with the
   measured rates, memory extrapolated to the full depth, alternatives --
   (`estimates`); h3kit's native-kernel figure only as an appendix
   (`native_estimate`);
6. decisions, pure functions that never go above the plan's budget or its
   memory limits, the workflow defaults chosen for `target_minutes` (`decisions`);
7. with --with-model, the smallest real workflow through ComfyUI (`with_model`);
8. the report (`report`), the config's `calibrated:` section, and the
   installed pack's profile (planned again with the calibrated values, the
   measured plan's profile and evidence kept) and summary (`pack_summary`),
   when there is one.

Model numbers (layers, widths, token rule, file sizes) come from the catalog
under profiles/models/, never from this package.
"""

from __future__ import annotations

from h3kit.calibrate.arch import arch_for, from_file as arch_from_file
from h3kit.calibrate.decisions import (
    calibrated_values,
    decide,
    decide_prefetch,
    decide_timing,
    decide_workload,
    decide_preload,
    decide_shard,
    decide_threads,
    decide_tile,
    decision,
    preload_memory,
)
from h3kit.calibrate.disk import measure_disk
from h3kit.calibrate.estimates import clip_estimate
from h3kit.calibrate.native_estimate import (
    CALIBRATION_CANVAS,
    block_params,
    check_scaled,
    flops_per_pass,
    native_appendix,
    native_kind,
    scaled_dit_config,
    streamed_per_step,
    tokens_for,
)
from h3kit.calibrate.handover import Calibrated, Found, Planned
from h3kit.calibrate.orchestrate import calibrate, native_library, run_with_model
from h3kit.calibrate.pack_summary import (
    SUMMARY_FILE,
    SUMMARY_SCHEMA,
    summary_document,
    write_pack_summary,
)
from h3kit.calibrate.runner_client import BRIDGE, RUNNER, run_runner

__all__ = [
    "BRIDGE", "CALIBRATION_CANVAS", "Calibrated", "Found", "Planned", "RUNNER", "SUMMARY_FILE", "SUMMARY_SCHEMA",
    "arch_for", "arch_from_file", "calibrate", "clip_estimate", "decide_prefetch", "decide_timing", "decide_workload",
    "block_params", "calibrated_values", "check_scaled", "decide", "decide_preload", "decide_shard",
    "decide_threads", "decide_tile", "decision", "native_appendix", "flops_per_pass", "measure_disk", "native_kind",
    "native_library", "preload_memory", "run_runner", "run_with_model", "scaled_dit_config",
    "streamed_per_step", "summary_document", "tokens_for", "write_pack_summary",
]
