"""What one clip costs on this machine: time and peak memory, from ComfyUI's own H3 measured here.

The runner builds ComfyUI's H3 transformer at the full width of the plan's
file and a few blocks deep, times model calls at two or three token counts
and fits them (`h3_model.fit`: seconds per block per token and per token
squared, and a fixed part per call). Those rates become the `timing`
mapping the planner uses too, and one formula -- `plan.timing.estimate_clip`,
shared with the plan so the two can never disagree -- turns them into
seconds per step and minutes per clip at the plan's canvas, frames, steps
and guidance. Memory is extrapolated the same way: the measured bytes per
block and per token, times the full depth and the plan's tokens, on top of
the process's measured baseline and what ComfyUI holds of the text encoder
and VAEs.

Without a measurement (no ComfyUI known, or its Python could not build H3)
the rates are the throughput table's (`plan.timing.rates_from_table`) and
the document says plainly that the figure is a table estimate. h3kit's own
native-kernel estimate is kept only as `native_appendix`.

Pure functions of their arguments: no file, no process, no clock.
"""

from __future__ import annotations

from h3kit.calibrate.arch import FLOAT_FORMATS, held_weight_bytes
from h3kit.calibrate.native_estimate import (  # noqa: F401  (the appendix's names stay importable from here)
    CALIBRATION_CANVAS,
    NATIVE_KINDS,
    block_params,
    check_scaled,
    flops_per_pass,
    measured_rates,
    native_appendix,
    native_kind,
    scaled_dit_config,
    streamed_per_step,
)
from h3kit.data.architecture import tokens_for
from h3kit.data.catalog import Catalog
from h3kit.data.fingerprint import Fingerprint
from h3kit.data.plan_doc import Plan

DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2, "float8_e4m3fn": 1, "float8_e5m2": 1}
TIMING_RATES = ("block_s_per_token", "block_s_per_token2", "step_fixed_s", "step_fixed_s_per_token")
TABLE_NOTE = ("a table estimate: no ComfyUI ran H3 here, so the rates are the throughput table's for this "
              "device (pass --comfyui PATH to measure ComfyUI's own H3 transformer)")


def timing_module():
    """plan.timing (H2's): the one time formula the plan and calibration share."""
    from h3kit.plan import timing

    return timing


def compute_dtype(device: str) -> str:
    """The dtype ComfyUI runs H3 in there: fp32 on a CPU (FINDINGS 3.1: `--cpu` loads the DiT as fp32), else bf16."""
    return "float32" if device == "cpu" else "bfloat16"


def measured(h3_model: dict | None) -> bool:
    fit = (h3_model or {}).get("fit") or {}
    return (h3_model or {}).get("status") == "measured" and all(
        isinstance(fit.get(k), (int, float)) for k in TIMING_RATES[:3])


def calibrated_timing(h3_model: dict, table: dict, day: str) -> tuple[dict, list[str]]:
    """The `timing` mapping from the runner's fit (+ VAE, text encoder), the table filling what was not measured.

    Returns (timing, names of the rates taken from the table)."""
    fit = h3_model["fit"]
    device = h3_model.get("device") or table.get("device") or "cpu"
    dtype = h3_model.get("dtype") or compute_dtype(device)
    out = {"source": f"calibrated {day} in ComfyUI's Python ({device}, {dtype})", "device": device, "dtype": dtype}
    for key in TIMING_RATES:
        if isinstance(fit.get(key), (int, float)):
            out[key] = max(0.0, float(fit[key]))
    from_table = []
    vae = h3_model.get("vae") or {}
    te = h3_model.get("text_encoder") or {}
    for key, part in (("decode_s_per_pixel_frame", vae), ("text_encode_s", te)):
        if part.get("status") == "measured" and isinstance(part.get(key), (int, float)):
            out[key] = float(part[key])
        elif isinstance(table.get(key), (int, float)):
            out[key] = float(table[key])
            from_table.append(key)
    if from_table:
        out["source"] += f"; {', '.join(from_table)} from the {table.get('source', 'table')}"
    return out, from_table


POINT_BUDGET_S = {"quick": 1.0, "full": 3.0}  # one timed model call of the runner's built blocks
# Below about 128 rows a full-width block on a CPU is bound by reading its weights, not by arithmetic, so
# a fit through such points overestimates the plan's rows (H1a measured +17% from 46/92 rows, +2% from
# 172/499): the smallest point is at least this many rows whenever the plan has them.
MIN_POINT_ROWS = 160
BYPASS_CHUNK_BYTES = 64 << 20  # the streamed loader's read past the page cache (nodes BYPASS_READ)
ANCHOR_POINT_ROWS = 32  # the fewest rows a model call has (text 8 + stereo audio 16 + video 8): nodes/h3k_calibration_runner fit.ANCHOR_ROWS


def measure_points(tokens: int, arch: dict, table: dict, quick: bool, blocks_built: int | None = None,
                   tm=None) -> list[int]:
    """Token counts for the runner to time: up to the plan's own rows when a call there is affordable.

    A fit measured far below the plan's rows extrapolates whatever small-sequence overheads it caught
    (on a CPU the per-row cost at 160 rows is about twice that at 900). So the largest point is the
    plan's row count when the throughput table says a call of the built blocks there stays within
    POINT_BUDGET_S, else the largest count that does; the others are its half and quarter."""
    tm = tm or timing_module()
    budget = POINT_BUDGET_S["quick" if quick else "full"]
    if blocks_built is None:
        blocks_built = points_blocks(quick)
    # three points a factor of four apart in both runs: two close points leave the per-block constant (and
    # the fixed cost it is folded into, times the file's depth) to the noise of each
    fractions = (2, 4)
    top = int(tokens)
    while top > 64 and call_seconds(top, arch, table, blocks_built, tm) > budget:
        top //= 2
    # the floor: --quick keeps its top point where it was with two points (its quarter may then dip into the
    # weight-read-bound rows; three points still pin the line better than two close ones)
    top = max(64, top, min(int(tokens), MIN_POINT_ROWS * (2 if quick else max(fractions))))
    # and the fewest rows a call has, where a block is almost all its constant (the runner's fit.fit_anchored
    # takes the constant there: fitted through the three alone it moved 3x between two quick runs)
    return sorted({ANCHOR_POINT_ROWS, top, *(max(32, top // f) for f in fractions)})


def points_blocks(quick: bool) -> int:
    """How many blocks the runner times its points with: one in --quick (the second is its check), else two."""
    return 1 if quick else 2


def call_seconds(tokens: int, arch: dict, table: dict, blocks_built: int, tm=None) -> float:
    """The throughput table's seconds for one model call of `blocks_built` blocks of `arch` at `tokens` rows."""
    tm = tm or timing_module()
    lin, pair = tm.block_flops(arch)
    ref_lin, ref_pair = tm.block_flops({"hidden": 5376, "heads": 56, "head_dim": 128, "ffn": 14336})
    a = table.get("block_s_per_token", 0.0) * lin / ref_lin  # the table's rates are for H3's own width
    b = table.get("block_s_per_token2", 0.0) * pair / ref_pair
    return blocks_built * (a * tokens + b * tokens * tokens)


def workload(plan: Plan, catalog: Catalog) -> dict:
    """What the plan's workflows run: canvas, frames, steps, cfg (the plan's defaults, else its limits)."""
    s = plan.settings
    streamed = s.streaming.streamed if s.streaming.enabled else None
    sampling = catalog.sampling
    canvas = s.canvas or s.max_canvas or CALIBRATION_CANVAS[:2]
    return {"canvas": [int(canvas[0]), int(canvas[1])], "frames": int(s.frames or s.max_frames or 22),
            "steps": int(s.steps or sampling.steps),
            "cfg": float(s.cfg if s.cfg is not None else sampling.cfg),
            "preset": s.preset, "quantization": s.quantization,
            # h3kit's streamer makes each model call longer by this share (the plan's figure, an assumption
            # until the disk is calibrated); 0 when ComfyUI holds the model
            "pass_overhead": float((streamed.pass_overhead if streamed is not None else None) or 0.0)}


def clip_time(arch: dict, timing: dict, work: dict, cat, tm) -> dict:
    """E.time for one workload: plan.timing.estimate_clip plus the workload it was for."""
    fps = cat.sampling.fps
    res = tm.estimate_clip(_formula_arch(arch), timing, tuple(work["canvas"]), work["frames"], work["steps"],
                           work["cfg"], cat, pass_overhead=work.get("pass_overhead", 0.0))
    keys = ("source", "tokens", "seconds_per_step", "model_calls_per_step", "minutes_per_clip", "seconds_per_clip",
            "text_encode_s", "sampling_s", "decode_s", "seconds_per_call")
    out = {k: res.get(k) for k in keys}
    out.update(steps=work["steps"], cfg=work["cfg"], canvas=list(work["canvas"]), frames=work["frames"],
               video_seconds=round(work["frames"] / fps, 2))
    out["source"] = out["source"] or timing.get("source")
    return out


def _formula_arch(arch: dict) -> dict:
    """The arch estimate_clip reads: the catalog's names (`blocks`) next to ours (`blocks_total`)."""
    return {**arch, "blocks": arch.get("blocks_total") or arch.get("blocks")}


def _held_part(weight, device: str, te: bool) -> int:
    """Bytes ComfyUI keeps of a text encoder or VAE file: fp16 for a float text encoder, fp32 for a VAE on a CPU."""
    if weight is None:
        return 0
    if weight.format.lower() not in FLOAT_FORMATS:
        return weight.bytes
    stored = 4 if weight.format.lower() in ("fp32", "f32") else 2
    held = 2 if te else (4 if device == "cpu" else 2)
    return int(weight.bytes * held / stored)


def memory_estimate(h3_model: dict | None, arch: dict, plan: Plan, cat, fingerprint: Fingerprint, tokens: int,
                    device: str, weights: dict | None = None, held_parts: dict | None = None,
                    rule_tokens: int | None = None) -> dict:
    """E.memory: peak RSS (and device memory on a GPU) of the real workflow at `tokens`, with its formula.

    peak RSS = baseline + DiT weights as ComfyUI holds them (all blocks in the compute dtype, the rest)
    + text encoder + VAEs as held + max(activations at `tokens`, the load-time copy of a file being cast).
    `weights` ({dit, text_encoder, vae, audio_vae}: catalog Weights) defaults to the plan's files;
    `held_parts` ({text_encoder, vae}: bytes) replaces what the catalog says ComfyUI holds of those."""
    s = plan.settings
    mem = (h3_model or {}).get("memory") or {}
    dtype = (h3_model or {}).get("dtype") or compute_dtype(device)
    dbytes = DTYPE_BYTES.get(dtype, 4)
    weights = weights or {k: cat.weight(w or "") for k, w in s.weight_ids().items()}
    dit = weights.get("dit")
    fmt = dit.format if dit is not None else s.quantization
    held = held_weight_bytes(arch, fmt, dbytes)
    blocks = arch.get("blocks_total") or cat.blocks
    per_block = held["per_block"]
    if mem.get("weights_bytes_per_block") and (fmt or "").lower() in FLOAT_FORMATS and arch.get("from") != "catalog":
        per_block = int(mem["weights_bytes_per_block"])  # what torch really allocated per built block
    dit_held = int((per_block or 0) * blocks + (held["other"] or 0))
    streaming = s.streaming
    streamed = bool(streaming.enabled)
    if streamed:  # h3kit's loader: resident blocks and the computing one cast, a ring of file-dtype reads
        # (none on a CPU reading through the page cache: blocks are read in place there, the read-ahead waits
        # in the cache; past it, page_cache bypass, the ring holds the blocks read ahead and one 64 MiB chunk)
        ahead = int(streaming.prefetch_blocks or 1) * int(streaming.block_bytes or 0)
        bypass = streaming.streamed is not None and streaming.streamed.page_cache == "bypass"
        ring = (ahead + BYPASS_CHUNK_BYTES if bypass else 0) if device == "cpu" else \
            (int(streaming.prefetch_blocks or 1) + 1) * int(streaming.block_bytes or 0)
        dit_held = int((per_block or 0) * (int(streaming.resident_blocks or 0) + 1) + ring
                       + (held["other"] or 0))
    te_held = _held_part(weights.get("text_encoder"), device, te=True)
    vae_held = _held_part(weights.get("vae"), device, te=False) + _held_part(weights.get("audio_vae"), device, te=False)
    if held_parts:
        te_held, vae_held = int(held_parts.get("text_encoder", te_held)), int(held_parts.get("vae", vae_held))
    if mem.get("activation_bytes_per_token"):  # measured per row of the packed sequence the runner ran
        activations = int(mem["activation_bytes_per_token"] * tokens)
    else:  # the catalog's figure was fitted per token of its `tokens:` rule, so it is counted that way
        activations = int(cat.memory.activation_bytes_per_token * (rule_tokens or tokens))
    file_bytes = arch.get("file_bytes") or (dit.bytes if dit is not None else 0)
    cast = (not streamed and (fmt or "").lower() in FLOAT_FORMATS and file_bytes
            and abs(dit_held - file_bytes) > 0.05 * file_bytes)
    transient = int(file_bytes) if cast else 0
    baseline = int(mem.get("baseline_rss_bytes") or cat.memory.comfyui_process_ram)
    on_gpu = device != "cpu" and bool(plan.budget.gpu_bytes)
    plan_est = plan.estimates
    if on_gpu:  # the DiT's GPU share is the plan's arithmetic; RAM keeps what is not resident plus the offloaded parts
        resident = streaming.resident_blocks or 0
        ram_dit = max(0, blocks - resident) * (per_block or 0) + (held["other"] or 0)
        peak_rss = baseline + ram_dit + te_held + vae_held
        gpu = plan_est.peak_gpu_bytes
        if gpu and mem.get("activation_bytes_per_token"):
            gpu = int(gpu - (plan_est.activation_bytes or 0) + activations)
    else:
        peak_rss = baseline + dit_held + te_held + vae_held + max(activations, transient)
        gpu = None
    return {
        "peak_rss_bytes": int(peak_rss), "peak_gpu_bytes": gpu,
        "gpu_total_bytes": max((g.memory_total_bytes or 0 for g in fingerprint.gpus), default=None) or None,
        "ram_total_bytes": fingerprint.memory.total_bytes,
        "parts": {"baseline_rss_bytes": baseline, "dit_weights_bytes": dit_held, "text_encoder_bytes": te_held,
                  "vae_bytes": vae_held, "activation_bytes": activations, "load_copy_bytes": transient},
        "formula": ("baseline + DiT weights held (" + (f"{blocks} blocks x {per_block} B + {held['other']} B"
                    if per_block is not None else "unknown") + ") + text encoder + VAEs held + "
                    "max(activations at the tokens, the file read while it is cast to the compute dtype)"
                    + ("; activations and bytes per block measured in ComfyUI's Python" if mem else
                       "; bytes per token from the catalog (nothing measured)")),
    }


def _rule_tokens(cat, work: dict) -> int:
    return tokens_for(cat.tokens, work["canvas"][0], work["canvas"][1], work["frames"])


def _ladder_below(ladder, current, key):
    lower = [x for x in ladder if key(x) < key(current)]
    return max(lower, key=key) if lower else None


def alternatives(arch: dict, timing: dict, work: dict, h3_model, plan: Plan, cat, fingerprint: Fingerprint,
                 device: str, tm) -> list[dict]:
    """Faster (and, within the memory limits, better) workloads than the plan's, each with its minutes."""
    options = []
    fast = cat.presets.get("fast")
    if fast is not None and fast.steps < work["steps"]:
        options.append(("the fast preset", "fewer sampling steps" + (" with the turbo LoRA" if fast.lora else ""),
                        {**work, "steps": fast.steps, "cfg": fast.cfg, "preset": "fast"}))
    elif work["steps"] >= 12 and work.get("preset") != "fast":
        options.append((f"{work['steps'] // 2} steps", "half the sampling steps (softer detail)",
                        {**work, "steps": work["steps"] // 2}))
    w, h = work["canvas"]
    smaller = _ladder_below(cat.canvas_ladder, (w, h), key=lambda c: c[0] * c[1])
    if smaller:
        options.append((f"{smaller[0]}x{smaller[1]}", "a smaller canvas", {**work, "canvas": list(smaller)}))
    fewer = _ladder_below(cat.frames_ladder, work["frames"], key=int)
    if fewer:
        options.append((f"{fewer} frames", "a shorter clip", {**work, "frames": int(fewer)}))
    max_canvas = tuple(plan.settings.max_canvas or (w, h))
    if tuple(work["canvas"]) != max_canvas:
        options.append((f"{max_canvas[0]}x{max_canvas[1]}", "the largest canvas that fits in memory (better)",
                        {**work, "canvas": list(max_canvas)}))
    out = []
    for label, why, alt in options:
        t = clip_time(arch, timing, alt, cat, tm)
        m = memory_estimate(h3_model, arch, plan, cat, fingerprint, t["tokens"], device,
                            rule_tokens=_rule_tokens(cat, alt))
        out.append({"label": label, "why": why, "preset": alt.get("preset"), "canvas": alt["canvas"],
                    "frames": alt["frames"], "steps": alt["steps"], "quantization": alt.get("quantization"),
                    "minutes_per_clip": t["minutes_per_clip"], "peak_gpu_bytes": m["peak_gpu_bytes"],
                    "peak_rss_bytes": m["peak_rss_bytes"]})
    out += _quantization_alternative(arch, timing, work, h3_model, plan, cat, fingerprint, device, tm)
    return out


def _quantization_alternative(arch, timing, work, h3_model, plan, cat, fingerprint, device, tm) -> list[dict]:
    """The next smaller DiT file of the same variant that this machine can run: less memory, about the same time."""
    from h3kit.data.catalog import Machine

    s = plan.settings
    current = cat.weight(s.dit_weights or "")
    if current is None:
        return []
    machine = Machine.from_fingerprint(fingerprint)
    smaller = [w for w in cat.dit if w.variant == current.variant and w.bytes < current.bytes
               and w.load_tier == 0 and cat.runnable(w.format, machine)[0]]
    if not smaller:
        return []
    pick = max(smaller, key=lambda w: w.bytes)
    alt_arch = {k: v for k, v in arch.items() if k not in ("block_params", "other_params", "block_file_bytes",
                                                           "other_file_bytes")}
    alt_arch.update(file_bytes=pick.bytes, **({"block_params": arch["block_params"], "other_params": arch["other_params"]}
                                              if "block_params" in arch else {}))
    t = clip_time(alt_arch, timing, {**work, "quantization": pick.format}, cat, tm)
    weights = {"dit": pick, **{k: cat.weight(w or "") for k, w in s.weight_ids().items() if k != "dit"}}
    m = memory_estimate(None if pick.format.lower() not in FLOAT_FORMATS else h3_model, alt_arch, plan, cat,
                        fingerprint, t["tokens"], device, weights, rule_tokens=_rule_tokens(cat, work))
    return [{"label": pick.format, "why": f"a smaller DiT file ({pick.bytes / 1e9:.1f} GB instead of "
             f"{current.bytes / 1e9:.1f} GB): less memory, a little lower quality", "preset": work.get("preset"),
             "canvas": work["canvas"], "frames": work["frames"], "steps": work["steps"], "quantization": pick.format,
             "minutes_per_clip": t["minutes_per_clip"], "peak_gpu_bytes": m["peak_gpu_bytes"],
             "peak_rss_bytes": m["peak_rss_bytes"]}]


def clip_estimate(cat, plan: Plan, fingerprint: Fingerprint, h3_model: dict | None, arch: dict, *, day: str,
             device: str, tm=None, native_appendix: dict | None = None, pass_overhead: float | None = None,
             weights: dict | None = None) -> dict:
    """doc["estimates"]: the clip's time and memory at the plan's workload, alternatives, the timing used.

    `cat` is the Catalog, `arch` the file's dims (calibrate.arch), `h3_model` the runner's block (or None),
    `device` the plan's device (cpu | cuda | mps | rocm | xpu), `tm` plan.timing (a stand-in in tests).
    `pass_overhead`: what streaming adds to each model call as measured (calibration's disk and copy
    figures), replacing the plan's assumed share; None keeps the plan's. `weights` ({dit, text_encoder, vae,
    audio_vae}: catalog Weights, their bytes those of the files really there) replaces the plan's files."""
    tm = tm or timing_module()
    table = tm.rates_from_table(fingerprint, cat, compute_dtype(device),
                                weight_format=plan.settings.quantization)
    if measured(h3_model):
        timing, from_table = calibrated_timing(h3_model, table, day)
        kind, note = "measured", ("from ComfyUI's own H3 transformer, built at the file's full width "
                                  f"({arch.get('from')}) and {(h3_model.get('arch') or {}).get('blocks_built', 'a few')} "
                                  "blocks deep, timed here and extrapolated to the full depth")
    else:
        timing, from_table = dict(table), ["all"]
        why = (h3_model or {}).get("reason")
        kind, note = "table", TABLE_NOTE + (f"; the measurement did not run: {why}" if why else "")
    work = workload(plan, cat)
    streams = bool(work.get("pass_overhead"))
    if pass_overhead is not None and streams:
        work["pass_overhead"] = float(pass_overhead)
    t = clip_time(arch, timing, work, cat, tm)
    t["pass_overhead"] = work.get("pass_overhead", 0.0)
    t["pass_overhead_from"] = None if not streams else \
        "measured: the disk's read speed and the CPU's in-place read (calibrate)" if pass_overhead is not None else \
        "the plan (profiles/throughput.yaml `streaming`)"
    m = memory_estimate(h3_model if kind == "measured" else None, arch, plan, cat, fingerprint, t["tokens"], device,
                        weights, rule_tokens=_rule_tokens(cat, work))
    return {
        "label": "estimate",
        "kind": kind,
        "note": note,
        "canvas": [*work["canvas"], work["frames"]],
        "tokens": t["tokens"],
        "seconds_per_step": t["seconds_per_step"],
        "minutes_per_clip": t["minutes_per_clip"],
        "peak_ram_bytes": m["peak_rss_bytes"],
        "peak_gpu_bytes": m["peak_gpu_bytes"],
        "time": t,
        "memory": m,
        "alternatives": alternatives(arch, timing, work, h3_model if kind == "measured" else None, plan, cat,
                                     fingerprint, device, tm),
        "timing": timing,
        "timing_from_table": from_table,
        "arch": arch,
        "formulas": {
            "tokens": f"the catalog's token rule at {work['canvas'][0]}x{work['canvas'][1]}x{work['frames']} = {t['tokens']}",
            "seconds_per_step": "calls per step (1 at cfg 1, else 2) x (blocks x (a T + b T^2) + fixed), "
                                "a, b and fixed from " + ("the fit measured in ComfyUI" if kind == "measured"
                                                         else "the throughput table"),
            "minutes_per_clip": "steps x seconds per step + text encode + VAE decode",
            "peak_ram_bytes": m["formula"],
        },
        "native_appendix": native_appendix or {},
    }

