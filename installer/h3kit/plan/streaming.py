"""Whether h3kit's own DiT streamer runs, and how deep it reads ahead.

ComfyUI already streams weights where its dynamic VRAM (comfy-aimdo) is on:
NVIDIA, or ROCm (HIP) >= 7.14, with torch >= 2.8, unless a launch flag turns
it off (--cpu, --novram, --highvram, --gpu-only, --disable-dynamic-vram;
--enable-dynamic-vram forces it on). There h3kit plans flags, not its
streamer. Everywhere else ComfyUI holds the DiT whole -- in unified memory on
Apple MPS, in RAM on a CPU, in RAM behind the GPU's share on a card without
dynamic VRAM -- and the streamed loader (H3kitStreamedDiTLoader) is what lets
a DiT larger than that memory run. It still costs time (reads, casts), so it
stays off where the plan's budget arithmetic holds the whole DiT with the
profile's headroom to spare.

The memory search asks the same questions per DiT file (`policy`,
`may_stream`, `wants_stream`), so the format is chosen knowing the streamed
figures (plan/budget.py `memory_estimate(..., stream=depth)`), and the time estimate
counts the streamer (`pass_overhead`, from profiles/throughput.yaml).
`decide_streaming` then explains the chosen plan's run and fills in the
node's inputs.

At plan time the machine may have no torch yet: the versions assumed are the
ones h3kit installs (profiles/torch_builds.yaml: its torch release, and the
HIP version in its ROCm wheel tag). A caller that probed a real ComfyUI
(doctor) passes what it found as `runtime`, which beats the assumption.

`prefetch_for` is the pipeline arithmetic: one reader thread fills a ring of
buffers in block order while compute consumes them, so a block costs
max(compute, read) in the steady state.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Mapping

from h3kit.data.fingerprint import Fingerprint
from h3kit.data.settings import Settings
from h3kit.plan import page_cache

DYNAMIC_VRAM_TORCH = (2, 8)
DYNAMIC_VRAM_HIP = (7, 14)
# Launch flags under which ComfyUI's enables_dynamic_vram() is false (comfy/cli_args.py).
DYNAMIC_VRAM_OFF_FLAGS = ("--cpu", "--novram", "--highvram", "--gpu-only", "--disable-dynamic-vram")
DYNAMIC_VRAM_FORCE_FLAG = "--enable-dynamic-vram"
# Flags under which ComfyUI loads a model whole onto the GPU (model_management: HIGH_VRAM, lowvram 0).
FULL_LOAD_FLAGS = ("--highvram", "--gpu-only")
MAX_PREFETCH = 8
# A read may run this many times slower than its measured mean (other I/O, a cold extent) before
# the block waits: a read within 1/JITTER of a block's compute needs one buffer in flight, a closer one two.
JITTER = 2.0


def version_tuple(text) -> tuple[int, ...] | None:
    """'2.14.1+cu132' -> (2, 14, 1); '==2.14.1' -> (2, 14, 1); 'rocm7.2' -> (7, 2); junk -> None."""
    if text is None:
        return None
    parts = re.findall(r"\d+", str(text).split("+")[0])
    return tuple(int(p) for p in parts[:3]) if parts else None


def _gib(n: float) -> str:
    """Decimal GB, as the rest of the plan's rationale (h3kit.core.units.gb) writes sizes."""
    return f"{n / 1e9:.1f} GB"


# -- prefetch ---------------------------------------------------------------


def call_wait_s(read_s: float, compute_s: float, blocks: int, resident: int, depth: int,
                fixed_s: float = 0.0, calls: int = 4) -> tuple[float, float]:
    """(seconds one model call waits for reads, seconds the call takes) in the steady state.

    The streamed loader's order (nodes/h3kit_streaming_logic.py): the first `resident` blocks stay in
    memory; one reader reads the others in model order, wrapping to the next call, at most `depth`
    ahead of the block computing -- a read may start once compute has reached the block `depth`
    streamed blocks before it. `fixed_s` is the call's work outside the blocks (embeddings, final
    layer), done before block 0. The last of `calls` simulated calls is reported."""
    streamed = [b >= resident for b in range(blocks)]
    read_end: list[float] = []
    compute_start: list[float] = []
    t, wait, call_start = 0.0, 0.0, 0.0
    for _ in range(calls):
        call_start, wait = t, 0.0
        t += fixed_s
        for b in range(blocks):
            if streamed[b]:
                k = len(read_end)
                start = max(read_end[-1] if read_end else 0.0,
                            compute_start[k - depth] if k >= depth else 0.0)
                read_end.append(start + read_s)
                if read_end[k] > t:
                    wait += read_end[k] - t
                    t = read_end[k]
                compute_start.append(t)
            t += compute_s
    return wait, t - call_start


def prefetch_for(disk_bytes_per_s: float, block_bytes: int, block_compute_s: float,
                 max_blocks: int = MAX_PREFETCH, *, blocks: int | None = None, resident_blocks: int = 0,
                 fixed_s: float = 0.0) -> dict:
    """Read-ahead depth for one block's compute time at the disk's read rate.

    read = block_bytes / rate. The depth is the smallest (up to `max_blocks`) at which the steady-state
    wait stops falling (call_wait_s), and at least 2 when a read takes over 1/JITTER of a block's
    compute, so a read that runs slower than measured still hides. Without `blocks` the model is a
    long run of streamed blocks; with `blocks` and `resident_blocks` (the first ones, as the loader
    keeps them) and `fixed_s`, the resident stretch and the fixed work give the reader time to fill
    a deeper ring. io_wait_fraction is the share of a call spent waiting for reads; disk_bound when
    that is above 1%. Also: "ring_blocks" (buffers held at once: the block computing plus those read
    ahead) and, with `blocks`, "hide_resident_blocks" (the fewest resident blocks at which the reads
    hide with `max_blocks` read ahead; None when even all but one do not)."""
    if not block_bytes or block_bytes <= 0:
        raise ValueError("block_bytes must be positive")
    if disk_bytes_per_s is None or disk_bytes_per_s <= 0:
        raise ValueError("disk_bytes_per_s must be positive")
    compute = max(float(block_compute_s or 0.0), 0.0)
    cap = max(1, min(int(max_blocks), MAX_PREFETCH))
    read = block_bytes / float(disk_bytes_per_s)
    n = int(blocks) if blocks else 16
    resident = max(0, min(int(resident_blocks or 0), n - 1)) if blocks else 0
    fixed = max(float(fixed_s or 0.0), 0.0) if blocks else 0.0
    waits = [call_wait_s(read, compute, n, resident, d, fixed) for d in range(1, cap + 1)]
    best = min(w for w, _ in waits)
    depth = next(d for d, (w, total) in enumerate(waits, 1) if w <= best + 0.005 * total)
    if read * JITTER > compute:
        depth = min(max(depth, 2), cap)
    wait, total = waits[depth - 1]
    fraction = wait / total if total > 0 else (1.0 if read > 0 else 0.0)
    out = {"prefetch_blocks": depth, "io_wait_fraction": round(fraction, 4), "read_s_per_block": read,
           "compute_s_per_block": compute, "disk_bound": fraction > 0.01, "ring_blocks": depth + 1}
    if blocks:
        out["hide_resident_blocks"] = next((r for r in range(n) if _hidden(call_wait_s(read, compute, n, r, cap, fixed))),
                                           None)
    return out


def measured_pass_overhead(fig: Mapping, streamed_share: float = 1.0, copy_s_per_block: float | None = None) -> float:
    """The share h3kit's loader adds to a model call, from measured figures instead of the table's.

    `fig` is prefetch_for's result at the measured disk rate and block compute time: its io_wait_fraction
    w of a call waiting for the disk adds w / (1 - w) of the compute. `copy_s_per_block` is the time the
    model waits while a block is read into its buffers (the CPU's in-place read, done with the compute
    stopped; None or 0 where a helper thread overlaps it, as on a GPU). Both scale with the share of
    blocks streamed (resident blocks cost neither)."""
    wait = min(max(float(fig.get("io_wait_fraction") or 0.0), 0.0), 0.99)
    compute = float(fig.get("compute_s_per_block") or 0.0)
    copy = float(copy_s_per_block or 0.0) / compute if compute > 0 else 0.0
    return round((wait / (1.0 - wait) + copy) * max(0.0, min(1.0, float(streamed_share))), 4)


def _hidden(wait_total: tuple[float, float]) -> bool:
    wait, total = wait_total
    return wait <= 0.01 * total


# -- dynamic VRAM -----------------------------------------------------------


@lru_cache(maxsize=1)
def _wheel_table() -> dict | None:
    """profiles/torch_builds.yaml, read once per process so planning again touches no file."""
    from h3kit.data.torch_builds import load

    try:
        return load()
    except Exception:  # noqa: BLE001 -- a missing or broken table only makes the versions unknown
        return None


def assumed_runtime(fingerprint: Fingerprint, table: dict | None = None) -> dict:
    """The torch (and HIP) h3kit would install on this machine: {"torch", "hip", "source"}."""
    from h3kit.plan import torch_wheel

    table = table if table is not None else _wheel_table()
    if table is None:
        return {"torch": None, "hip": None, "source": "unknown (profiles/torch_builds.yaml could not be read)"}
    try:
        choice = torch_wheel.choose(fingerprint, table)
    except (KeyError, ValueError, TypeError):
        return {"torch": None, "hip": None, "source": "unknown (no torch build chosen for this machine)"}
    torch = version_tuple((choice.get("packages") or {}).get("torch"))
    build = str(choice.get("build") or "")
    hip = version_tuple(build[len("rocm"):]) if re.fullmatch(r"rocm\d+\.\d+", build) else None
    return {"torch": torch, "hip": hip, "source": f"the torch h3kit installs ({build or 'unknown build'})"}


def dynamic_vram(backend: str, args: list, torch: tuple | None, hip: tuple | None,
                 aimdo: bool | None = None) -> tuple[bool | None, str]:
    """(on?, why) by ComfyUI's own rule (main.py dynamic_vram_supported / cli_args.enables_dynamic_vram);
    None when a version it needs is unknown."""
    forced = DYNAMIC_VRAM_FORCE_FLAG in args
    off = [f for f in DYNAMIC_VRAM_OFF_FLAGS if f in args]
    if aimdo is False:
        return False, "comfy-aimdo does not import in ComfyUI's Python"
    if off and not forced:
        return False, f"{off[0]} in the launch flags turns it off"
    if backend not in ("cuda", "rocm"):  # comfy-aimdo has CUDA and ROCm libraries only, forced or not
        return False, f"ComfyUI has no dynamic VRAM on {backend.upper() if backend != 'cpu' else 'a CPU'}"
    if backend == "rocm" and not forced:
        if hip is None:
            return None, "the ROCm (HIP) version is unknown"
        if hip[:2] < DYNAMIC_VRAM_HIP:
            return False, f"ROCm {'.'.join(map(str, hip[:2]))} < {'.'.join(map(str, DYNAMIC_VRAM_HIP))}"
    if forced:
        return True, f"{DYNAMIC_VRAM_FORCE_FLAG} in the launch flags"
    if torch is None:
        return None, "the torch version is unknown"
    if torch[:2] < DYNAMIC_VRAM_TORCH:
        return False, f"torch {'.'.join(map(str, torch[:2]))} < {'.'.join(map(str, DYNAMIC_VRAM_TORCH))}"
    return True, f"torch {'.'.join(map(str, torch))} on {backend.upper()}"


# -- the decision -----------------------------------------------------------

# What H3kitStreamedDiTLoader reads (nodes/h3kit_streaming_logic.py refuse_unsupported turns away ComfyUI's
# quantized safetensors, whose weights need ComfyUI's converters): plain safetensors of the first three, GGUF
# files of the rest (the catalog's format names), their blocks dequantized per use by ComfyUI-GGUF's code --
# tests/real_comfyui/test_gguf_loaders_real_comfyui.py runs a GGUF DiT through it.
SAFETENSORS_STREAMABLE = ("bf16", "fp16", "fp32")
GGUF_STREAMABLE = ("q8_0", "q6_k", "q5_0", "q5_k_m", "q4_k_m", "q3_k_m", "q2_k")
STREAMABLE_FORMATS = SAFETENSORS_STREAMABLE + GGUF_STREAMABLE


def _clamped(v: int | None, lo: int, hi: int) -> int | None:
    if isinstance(v, bool) or not isinstance(v, int):
        return None
    return min(max(v, lo), hi)


def streamable(weight) -> bool:
    """Can h3kit's streamed loader read this DiT file?"""
    file = getattr(weight, "file", None)
    fmt, name = getattr(weight, "format", None), str(getattr(file, "name", None) or "").lower()
    return ((fmt in SAFETENSORS_STREAMABLE and name.endswith(".safetensors"))
            or (fmt in GGUF_STREAMABLE and name.endswith(".gguf")))


def policy(fingerprint: Fingerprint, machine, settings: Settings, budget, runtime: Mapping | None = None) -> dict:
    """What decides streaming on this machine before any file is chosen: {"forced" (stream_dit), "dynamic_vram",
    "dyn_why", "assumed" (where the versions came from), "args", "backend", "depth" (read-ahead), "prefetch_set"}."""
    args = [str(a) for a in ((runtime or {}).get("comfyui_args") or settings.comfyui_args)]
    backend = "cpu" if "--cpu" in args or budget.gpu_bytes is None else machine.backend
    rt = assumed_runtime(fingerprint) if runtime is None else {
        "torch": version_tuple(runtime.get("torch")), "hip": version_tuple(runtime.get("hip")),
        "source": runtime.get("source") or "the probed ComfyUI"}
    dyn, dyn_why = dynamic_vram(backend, args, rt.get("torch"), rt.get("hip"), (runtime or {}).get("aimdo"))
    prefetch = _clamped(settings.prefetch_blocks, 1, MAX_PREFETCH)
    return {"forced": str(settings.stream_dit), "dynamic_vram": dyn, "dyn_why": dyn_why,
            "assumed": rt.get("source"), "args": args, "backend": backend, "depth": prefetch or 1,
            "prefetch_set": prefetch is not None, "page_cache": str(settings.page_cache)}


def may_stream(pol: Mapping, weight) -> bool:
    """Is h3kit's loader an option for this DiT here: a file it reads, stream_dit not off, and no dynamic VRAM
    (ComfyUI's own streaming) -- unless stream_dit is on."""
    if not streamable(weight) or pol["forced"] == "off":
        return False
    return pol["forced"] == "on" or pol["dynamic_vram"] is not True


def _where(budget) -> str:
    return "unified memory" if budget.unified else "RAM"


def _dit_short(held) -> list:
    """What ComfyUI's own loading leaves short where the DiT lives (sampling, and the decode it stays loaded for)."""
    return [s for s in held.short if s[0] in ("RAM", "GPU") and s[3] in ("sample", "decode")]


def held_falls_short(pol: Mapping, held, budget) -> str | None:
    """Why ComfyUI loading the DiT its own way does not do here (a clause), or None when it does."""
    discrete = budget.gpu_bytes is not None and not budget.unified
    full_load = [f for f in FULL_LOAD_FLAGS if f in pol["args"]]  # ComfyUI's HIGH_VRAM: no partial loading
    if discrete and held.resident:
        return None
    if full_load and discrete:
        return (f"{full_load[0]} makes ComfyUI load the whole DiT ({_gib(held.dit_held)}) onto the GPU, which has "
                f"{_gib(budget.gpu_bytes)} for it")
    short = _dit_short(held)
    if not short:
        return None
    what, need, have, phase = max(short, key=lambda s: s[1] - s[2])
    pool = "the GPU share of unified memory" if what == "GPU" and budget.unified else \
        "the GPU" if what == "GPU" else _where(budget)
    held_as = "" if held.block_held == held.block else f" (cast to {pol.get('dtype', 'float32')}: {_gib(held.dit_held)})"
    return (f"ComfyUI would hold the whole DiT{held_as} in {_where(budget)}: {_gib(need)} at the {phase} peak "
            f"against {_gib(have)} in {pool}")


def _why(pol: Mapping, held, budget) -> tuple[bool, str]:
    """(does h3kit stream?, why) before asking whether the file can be streamed at all."""
    forced, dyn = pol["forced"], pol["dynamic_vram"]
    if forced in ("on", "off"):
        return forced == "on", f"stream_dit is {forced} in the settings"
    if dyn:
        return False, f"ComfyUI's dynamic VRAM already streams the weights ({pol['dyn_why']})"
    if budget.gpu_bytes is not None and not budget.unified and held.resident:
        return False, "the whole DiT stays on the GPU"
    short = held_falls_short(pol, held, budget)
    if short:
        return True, short
    spare = budget.ram_bytes - held.peak_ram
    if held.short:
        return False, (f"streaming the DiT would not help: {held.short[0][0]} is short in the {held.short[0][3]} "
                       "phase either way")
    return False, (f"ComfyUI can hold the whole DiT in {_where(budget)} ({_gib(held.peak_ram)} at the peak) with "
                   f"{_gib(spare)} to spare beyond the {_gib(budget.headroom)} headroom, so streaming "
                   "would only cost time")


def wants_stream(pol: Mapping, held, budget) -> bool:
    """Would h3kit stream a DiT that ComfyUI would load as `held` (the search and decide_streaming share this)?"""
    return _why(pol, held, budget)[0]


def pass_overhead(catalog, est, budget=None) -> float:
    """The share h3kit's loader adds to one model call for this estimate (0 when it does not stream): the
    throughput table's figures, read from the disk (`stream_overhead`) or from the page cache
    (`stream_cached_overhead`) by what the cache holds next to the run (plan.page_cache), over the share of
    blocks streamed. Without `budget` every streamed block counts as read from the disk."""
    share = plan_cache_share(catalog, est, budget)
    if share is None:
        return 0.0
    table = getattr(catalog, "throughput", None)
    disk = float(getattr(table, "stream_overhead", 0.0) or 0.0)
    cached = float(getattr(table, "stream_cached_overhead", disk) or 0.0)
    return page_cache.stream_overhead(share.share, disk, cached, catalog.blocks - est.resident_blocks, catalog.blocks)


def plan_cache_share(catalog, est, budget=None):
    """plan.page_cache.cache_share for a streamed estimate (None when it does not stream): the blocks not kept
    resident against the budget's RAM, the run's peak while it samples (the steps that re-read the blocks) and
    the profile's OS headroom."""
    if not getattr(est, "streamed", False):
        return None
    streamed = (catalog.blocks - est.resident_blocks) * int(est.block or 0)
    if budget is None:
        return page_cache.cache_share(streamed, 0, 0, 0)
    sampling = ((getattr(est, "phases", None) or {}).get("sample") or {}).get("ram_bytes")
    return page_cache.cache_share(streamed, budget.ram_total, sampling or est.peak_ram, budget.headroom)


def decide_streaming(fingerprint: Fingerprint, machine, settings: Settings, est, catalog, *, budget=None,
                     dit_weight=None, runtime: Mapping | None = None, choice=None, held=None) -> tuple[dict, list[str]]:
    """({"enabled", "dynamic_vram", "why", "prefetch_blocks", "resident_blocks", ...}, rationale sentences).

    `est` is the chosen plan's budget.Estimate (held by ComfyUI, or streamed when the search chose h3kit's
    loader); `budget` its Budget (recomputed from the fingerprint and `settings` when absent); `choice` the
    budget.Choice it was made for (needed to size the other way of running); `held` the held estimate when
    `est` is the streamed one; `runtime` optional probed facts {"torch", "hip", "aimdo", "comfyui_args",
    "source"} of an existing ComfyUI, which beat the versions h3kit would install. Keys beyond the
    interface: "assumed", "streamable", and with streaming on "preload_bytes" (the node's input),
    "peak_ram_bytes", "peak_gpu_bytes", "fits" (the streamed run), "held_peak_ram_bytes", "held_fits"
    and "pass_overhead" (the share added to each model call)."""
    from h3kit.plan.budget import memory_estimate, make_budget

    if budget is None:
        budget = make_budget(catalog, fingerprint, settings, cpu=machine.backend == "cpu")
    pol = policy(fingerprint, machine, settings, budget, runtime)
    blocks, depth = int(catalog.blocks), pol["depth"]
    if dit_weight is None:
        dit_weight = choice.dit if choice is not None else \
            next((w for w in catalog.dit if catalog.block_bytes(w) == int(est.block)), None)
    if est.streamed and held is None:
        if choice is None:
            raise ValueError("decide_streaming needs choice= (or held=) when est is the streamed run")
        held = memory_estimate(catalog, budget, settings, choice)
    held = held if est.streamed else est
    fmt = str(getattr(dit_weight, "format", "") or "")
    can = dit_weight is not None and streamable(dit_weight)
    pol = dict(pol, dtype=catalog.comfyui.dtype_on(budget.backend))
    wanted, why = _why(pol, held, budget)
    enabled = wanted and can
    kept = blocks if held.resident else int(held.preload) // int(held.block)
    result = {"enabled": enabled, "dynamic_vram": pol["dynamic_vram"], "why": why, "prefetch_blocks": depth,
              "resident_blocks": kept, "assumed": pol["assumed"], "streamable": can}
    if not enabled:
        if wanted:
            name = getattr(getattr(dit_weight, "file", None), "name", None) or "the chosen file"
            why = (f"{why}, but the streamed loader reads plain {'/'.join(SAFETENSORS_STREAMABLE)} safetensors and "
                   f"{'/'.join(GGUF_STREAMABLE)} GGUF files and the "
                   f"chosen DiT is {fmt or 'unknown'} ({name})")
            result["why"] = why
        sentence = f"h3kit's own streamer is off because {why}."
        alt = [w for w in catalog.dit if streamable(w)]
        # the same variant, at least the chosen file's quality, smallest first (else the best quality there is)
        q = getattr(dit_weight, "quality", 0) or 0
        alt.sort(key=lambda w: (w.variant != getattr(dit_weight, "variant", None), w.quality < q,
                                w.bytes if w.quality >= q else -w.quality))
        if wanted and alt:
            sentence += (f" ComfyUI will hold the whole DiT; with dit_weights: {alt[0].id} (overrides) h3kit "
                         "can stream it instead.")
        return result, [sentence]
    streamed = est if est.streamed else memory_estimate(catalog, budget, settings, choice, depth) if choice is not None else None
    if streamed is None:
        raise ValueError("decide_streaming needs choice= to size the streamed run")
    resident = streamed.resident_blocks
    over = pass_overhead(catalog, streamed, budget)
    cache = plan_cache_share(catalog, streamed, budget)
    bypass, cache_sentence = page_cache.loader_choice(cache, pol.get("page_cache", "auto"))
    off = "" if pol["dynamic_vram"] else f"; ComfyUI's dynamic VRAM is off here ({pol['dyn_why']})"
    rationale = [f"h3kit streams the DiT from disk with its own loader because {why}{off}.",
                 f"{resident} of {blocks} blocks stay resident ({_gib(resident * streamed.block_held)} in "
                 f"{pol['dtype']}) and {depth} block(s) read ahead "
                 + (f"(a ring of {depth + 1} x {_gib(streamed.block)} in the file's dtype) " if streamed.ring else
                    "into a ring of 64 MiB reads past the page cache, each widened on the CPU as it arrives "
                    if bypass else "by the OS into its page cache, since on the CPU each block is read straight "
                    "into the computing block's buffers ")
                 + ("(prefetch_blocks from the settings)." if pol["prefetch_set"] else
                    "(one reading while one computes; calibration measures the disk and may change this).")]
    gpu = "" if streamed.peak_gpu is None else \
        f" and {_gib(streamed.peak_gpu)} of the {_gib(budget.gpu_bytes)} GPU budget"
    held_gpu = "" if held.peak_gpu is None else f", GPU {_gib(held.peak_gpu)}"
    rationale.append(f"Streamed, the run peaks at {_gib(streamed.peak_ram)} of the {_gib(budget.ram_bytes)} "
                     f"{_where(budget)} budget{gpu}; ComfyUI holding the DiT itself would peak at "
                     f"{_gib(held.peak_ram)}{held_gpu} ({'fits' if held.fits else 'does not fit'}).")
    full = over * blocks / max(1, blocks - resident)
    if cache.case == page_cache.DOES_NOT_FIT:
        rationale.append(f"The time estimate counts streaming as {over:.0%} more per model call ({blocks - resident} "
                         f"of {blocks} blocks streamed x {full:.0%}, the upper end of the +26-84% per pass the native "
                         "H3 engine h3.c measured, profiles/throughput.yaml `streaming`); that is an assumption: no "
                         "disk read rate is known before 'h3kit calibrate' measures it.")
    else:
        rationale.append(f"{page_cache.sentence(cache)} The time estimate counts streaming as {over:.0%} more per "
                         f"model call ({blocks - resident} of {blocks} blocks streamed, {cache.share:.0%} of their "
                         "bytes at profiles/throughput.yaml `streaming` `cached_pass_overhead`, the rest at its "
                         "`pass_overhead`); an assumption until 'h3kit calibrate' measures the reads.")
    rationale.append(cache_sentence)
    result.update(resident_blocks=resident, preload_bytes=streamed.preload, peak_ram_bytes=streamed.peak_ram,
                  peak_gpu_bytes=streamed.peak_gpu, fits=streamed.fits, held_peak_ram_bytes=held.peak_ram,
                  held_fits=held.fits, pass_overhead=round(over, 4), page_cache="bypass" if bypass else "use")
    if not streamed.fits:
        rationale.append(f"Even streamed, the plan needs {_gib(streamed.peak_ram)} of {_where(budget)} against "
                         f"{_gib(budget.ram_bytes)}.")
    if budget.disk_kind == "hdd":
        rationale.append("The weights are on a hard disk, so every step waits for the streamed blocks; "
                         "an SSD or a smaller format is much faster.")
    return result, rationale
