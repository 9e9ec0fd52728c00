"""What one clip costs on this machine: time and peak memory, from ComfyUI's own H3 measured here.

The runner builds ComfyUI's H3 transformer at the full width of the plan's
file and a few blocks deep, times model calls at two or three token counts
and fits them (`h3_model.fit`: seconds per block per token and per token
squared, and a fixed part per call). Those rates become the `timing`
mapping the planner uses too, and one formula -- `plan.timing.estimate_clip`,
shared with the plan so the two can never disagree -- turns them into
seconds per step and minutes per clip at the plan's canvas, frames, steps
and guidance. Memory is the plan's one model too (`plan.budget.memory_estimate`,
asked by `clip_memory`) with what was measured passed in: the process's
baseline, the activations per row at the plan's sequence, the bytes per
block times the file's depth, and what ComfyUI holds of the text encoder and
VAEs where that is known.

Without a measurement (no ComfyUI known, or its Python could not build H3)
the rates are the throughput table's (`plan.timing.rates_from_table`) and
the document says plainly that the figure is a table estimate. h3kit's own
native-kernel estimate is kept only as `native_appendix`.

Pure functions of their arguments: no file, no process, no clock.
"""

from __future__ import annotations

from h3kit.calibrate.arch import FLOAT_FORMATS, held_weight_bytes
from h3kit.calibrate.native_estimate import CALIBRATION_CANVAS
from h3kit.data.catalog import Catalog
from h3kit.data.figures import DTYPE_BYTES
from h3kit.data.fingerprint import Fingerprint
from h3kit.data.plan_doc import Plan
from h3kit.data.settings import AUTO, Settings
from h3kit.plan import timing as plan_timing  # aliased: `timing` here is the rates mapping
from h3kit.plan.budget import Choice, Measured, held_bytes, make_budget, memory_estimate
TIMING_RATES = ("block_s_per_token", "block_s_per_token2", "step_fixed_s", "step_fixed_s_per_token")
TABLE_NOTE = ("a table estimate: no ComfyUI ran H3 here, so the rates are the throughput table's for this "
              "device (pass --comfyui PATH to measure ComfyUI's own H3 transformer)")


def measured(h3_model: dict | None) -> bool:
    fit = (h3_model or {}).get("fit") or {}
    return (h3_model or {}).get("status") == "measured" and all(
        isinstance(fit.get(k), (int, float)) for k in TIMING_RATES[:3])


def calibrated_timing(h3_model: dict, table: dict, day: str) -> tuple[dict, list[str]]:
    """The `timing` mapping from the runner's fit (+ VAE, text encoder), the table filling what was not measured.

    Returns (timing, names of the rates taken from the table)."""
    fit = h3_model["fit"]
    device = h3_model.get("device") or table.get("device") or "cpu"
    dtype = h3_model.get("dtype") or table.get("dtype")  # the table's is the catalog's compute dtype there
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
ANCHOR_POINT_ROWS = 32  # the fewest rows a model call has (text 8 + stereo audio 16 + video 8): nodes/h3k_calibration_runner fit.ANCHOR_ROWS


def measure_points(tokens: int, arch: dict, table: dict, quick: bool, blocks_built: int | None = None,
                   tm=None) -> list[int]:
    """Token counts for the runner to time: up to the plan's own rows when a call there is affordable.

    A fit measured far below the plan's rows extrapolates whatever small-sequence overheads it caught
    (on a CPU the per-row cost at 160 rows is about twice that at 900). So the largest point is the
    plan's row count when the throughput table says a call of the built blocks there stays within
    POINT_BUDGET_S, else the largest count that does; the others are its half and quarter."""
    tm = tm or plan_timing
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
    tm = tm or plan_timing
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


def _measured(h3_model: dict | None, arch: dict, fmt: str | None, dbytes: int, tokens: int, streamed: bool,
              held_parts: dict | None) -> Measured:
    """What calibration hands the plan's memory model: the runner's baseline, activations per row at `tokens`
    and bytes per built block, and the DiT's held bytes from the file's header (the catalog's figures stand
    where nothing was measured or read)."""
    mem = (h3_model or {}).get("memory") or {}
    float_file = (fmt or "").lower() in FLOAT_FORMATS
    per_block = dit_held = None
    if arch.get("from") != "catalog":  # the file's own header: its parameter split
        held = held_weight_bytes(arch, fmt, dbytes)
        blocks = arch.get("blocks_total") or 0
        per_block = held["per_block"]
        if mem.get("weights_bytes_per_block") and float_file:
            per_block = int(mem["weights_bytes_per_block"])  # what torch really allocated per built block
        if per_block is not None:
            dit_held = int(per_block * blocks + (held["other"] or 0))
        if streamed and not float_file:  # h3kit's loader dequantizes a GGUF block: the catalog's factor says how
            per_block = None
    return Measured(
        process_bytes=int(mem["baseline_rss_bytes"]) if mem.get("baseline_rss_bytes") else None,
        activation_bytes=int(mem["activation_bytes_per_token"] * tokens) if mem.get("activation_bytes_per_token")
        else None,
        dit_held_bytes=dit_held, block_held_bytes=per_block,
        text_encoder_held_bytes=(held_parts or {}).get("text_encoder"), vae_held_bytes=(held_parts or {}).get("vae"))


def _memory_settings(plan: Plan, fingerprint: Fingerprint) -> Settings:
    """The settings the plan's memory model needs, read back from the plan: its deployed shard, preload (the
    streamed loader's when it streams), VAE tiles, flags and page_cache, and the RAM headroom its budget kept."""
    s, st = plan.settings, plan.settings.streaming
    run = st.streamed if st.enabled else None
    preload = run.preload_bytes if run is not None and run.preload_bytes is not None else s.preload_bytes
    headroom = max(0, int(fingerprint.ram_total_bytes or 0) - int(plan.budget.ram_bytes or 0))
    # ComfyUI maps the off-card part of a held DiT from the file only with dynamic VRAM (as the search sizes it)
    discrete = plan.budget.gpu_bytes is not None and not plan.budget.unified_memory
    stream_from = "ram" if discrete and not st.enabled and st.dynamic_vram is not True else s.stream_from
    return Settings(shard_size_bytes=s.shard_size_bytes if s.shard_size_bytes else AUTO,
                    preload_bytes=AUTO if preload is None else int(preload), max_shard_blocks=1,
                    vae_tile_size=int(s.vae_tile_size or 0), vae_tile_overlap=int(s.vae_tile_overlap or 0),
                    vae_temporal_tile=int(s.vae_temporal_tile or 0), stream_from=stream_from,
                    comfyui_args=tuple(s.comfyui_args or ()), os_ram_headroom=headroom,
                    page_cache=(run.page_cache if run is not None and run.page_cache else AUTO))


def _choice(plan: Plan, cat, weights: dict, work: dict) -> tuple[Choice, set]:
    """The Choice the model sizes (the plan's files where `weights` names none) and the parts `weights` leaves
    out (None there: not on this machine), which hold nothing."""
    planned = {k: cat.weight(w or "") for k, w in plan.settings.weight_ids().items()}
    keys = ("dit", "text_encoder", "vae", "audio_vae")
    given = {k: weights[k] if k in weights else planned.get(k) for k in keys}
    missing = {k for k in keys if given[k] is None}
    parts = {k: given[k] or planned.get(k) or _part_of(cat, k) for k in keys}
    te_streamed = bool(plan.settings.text_encoder_streaming.enabled) and "text_encoder" not in missing
    return Choice(parts["dit"], parts["text_encoder"], parts["vae"], parts["audio_vae"], tuple(work["canvas"]),
                  int(work["frames"]), te_streamed), missing


def _part_of(cat, key: str):
    return {"dit": cat.dit, "text_encoder": cat.text_encoder, "vae": cat.vae, "audio_vae": cat.audio_vae}[key][0]


def clip_memory(h3_model: dict | None, arch: dict, plan: Plan, cat, fingerprint: Fingerprint, work: dict,
                tokens: int, device: str, weights: dict | None = None, held_parts: dict | None = None) -> dict:
    """E.memory: the plan's memory model (plan/budget.py memory_estimate) at the workload `work`, fed what was
    measured here -- ComfyUI's baseline, the activations per row at the sequence's `tokens`, the bytes per block
    torch allocated, the DiT's parameter split from its header -- with the plan's deployed settings.
    `weights` ({dit, text_encoder, vae, audio_vae}: catalog Weights, None for a part not there) replaces the
    plan's files; `held_parts` ({text_encoder, vae}: bytes) what ComfyUI holds of those."""
    s = plan.settings
    choice, missing = _choice(plan, cat, weights or {}, work)
    streamed = bool(s.streaming.enabled)
    settings = _memory_settings(plan, fingerprint)
    budget = make_budget(cat, fingerprint, settings, cpu=device == "cpu" or plan.budget.gpu_bytes is None)
    held = dict(held_parts or {})
    if "text_encoder" in missing:
        held.setdefault("text_encoder", 0)
    if missing & {"vae", "audio_vae"}:
        held.setdefault("vae", sum(held_bytes(cat, getattr(choice, k), budget.backend)
                                   for k in ("vae", "audio_vae") if k not in missing))
    dtype = (h3_model or {}).get("dtype") or cat.comfyui.dtype_on(device)
    measured = _measured(h3_model, arch, choice.dit.format, DTYPE_BYTES.get(dtype, 4), tokens, streamed,
                         held)
    est = memory_estimate(cat, budget, settings, choice, int(s.streaming.prefetch_blocks or 1) if streamed else None,
                          measured)
    return {
        "peak_rss_bytes": int(est.peak_ram), "peak_gpu_bytes": est.peak_gpu,
        "gpu_total_bytes": max((g.memory_total_bytes or 0 for g in fingerprint.gpus), default=None) or None,
        "ram_total_bytes": fingerprint.memory.total_bytes,
        "parts": {"baseline_rss_bytes": int(measured.process_bytes or cat.memory.comfyui_process_ram),
                  "dit_weights_bytes": _dit_bytes(est), "text_encoder_bytes": _held_te(cat, budget, choice, measured),
                  "vae_bytes": _held_vaes(cat, budget, choice, measured), "activation_bytes": est.activations,
                  "ring_bytes": est.ring},
        "phases": est.phases,
        "formula": ("the plan's memory model (docs/plan.md, 'How it decides'): the largest of its encode, sample "
                    "and decode phases, "
                    + ("h3kit's loader holding its resident blocks, the computing ones and its ring" if streamed
                       else "ComfyUI holding the DiT its own way")
                    + ("; baseline, activations and bytes per block measured in ComfyUI's Python"
                       if (h3_model or {}).get("memory") else "; the catalog's figures (nothing measured)")),
    }


def _dit_bytes(est) -> int:
    """What the DiT holds at the sampling peak: all of it held, else resident + computing blocks and the ring."""
    if not est.streamed:
        return int(est.dit_held)
    return int((est.resident_blocks + est.block_sets) * est.block_held + est.ring)


def _held_te(cat, budget, choice: Choice, measured: Measured) -> int:
    if measured.text_encoder_held_bytes is not None:
        return int(measured.text_encoder_held_bytes)
    return int(held_bytes(cat, choice.te, budget.backend))


def _held_vaes(cat, budget, choice: Choice, measured: Measured) -> int:
    if measured.vae_held_bytes is not None:
        return int(measured.vae_held_bytes)
    return int(held_bytes(cat, choice.vae, budget.backend) + held_bytes(cat, choice.audio_vae, budget.backend))


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
        m = clip_memory(h3_model, arch, plan, cat, fingerprint, alt, t["tokens"], device)
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
    m = clip_memory(None if pick.format.lower() not in FLOAT_FORMATS else h3_model, alt_arch, plan, cat,
                    fingerprint, work, t["tokens"], device, weights)
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
    tm = tm or plan_timing
    table = tm.rates_from_table(fingerprint, cat, cat.comfyui.dtype_on(device),
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
    m = clip_memory(h3_model if kind == "measured" else None, arch, plan, cat, fingerprint, work, t["tokens"], device,
                    weights)
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

