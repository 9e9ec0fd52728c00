"""Whether h3kit's own DiT streamer runs, decided once per candidate, and the sentences that explain it.

Where ComfyUI's dynamic VRAM is on (plan/dynamic_vram.py) h3kit plans flags,
not its streamer. Everywhere else ComfyUI holds the DiT whole -- in unified
memory on Apple MPS, in RAM on a CPU, in RAM behind the GPU's share on a card
without dynamic VRAM -- and the streamed loader (H3kitStreamedDiTLoader) is
what lets a DiT larger than that memory run. It still costs time (reads,
casts), so it stays off where the budget arithmetic holds the whole DiT with
the profile's headroom to spare.

`policy` is what decides streaming on a machine before any file is chosen: a
frozen `StreamPolicy`, made once per profile by the search, which asks it per
DiT file (`may_stream`, `wants_stream`) so the format is chosen knowing the
streamed figures (plan/budget.py `memory_estimate(..., stream=depth)`).
`decide` turns the search's chosen run into a frozen `StreamDecision` -- the
policy, both runs (held and streamed), the reason and the time it adds --
which the plan document (`to_doc`) and the rationale (`rationale`) only read.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from h3kit.data.fingerprint import Fingerprint
from h3kit.data.plan_doc import StreamedRun, Streaming
from h3kit.data.settings import Settings
from h3kit.plan import page_cache
from h3kit.plan.budget import Budget, Estimate
from h3kit.plan.dynamic_vram import assumed_runtime, dynamic_vram, version_tuple
from h3kit.plan.loader_facts import GGUF_STREAMABLE, MAX_PREFETCH, SAFETENSORS_STREAMABLE, streamable

# Flags under which ComfyUI loads a model whole onto the GPU (model_management: HIGH_VRAM, lowvram 0).
FULL_LOAD_FLAGS = ("--highvram", "--gpu-only")


def _gib(n: float) -> str:
    """Decimal GB, as the rest of the plan's rationale (h3kit.core.units.gb) writes sizes."""
    return f"{n / 1e9:.1f} GB"


@dataclass(frozen=True)
class StreamPolicy:
    """What decides streaming on this machine before any file is chosen."""

    forced: str  # stream_dit: auto | on | off
    dynamic_vram: bool | None  # ComfyUI's own streaming (None: a version it needs is unknown)
    dyn_why: str
    assumed: str | None  # where the torch / HIP versions came from
    args: tuple  # ComfyUI's launch flags
    backend: str
    depth: int  # read-ahead in blocks
    prefetch_set: bool  # prefetch_blocks came from the settings
    page_cache: str  # the settings' page_cache: auto | use | bypass
    dtype: str  # what ComfyUI computes in here


def _clamped(v: int | None, lo: int, hi: int) -> int | None:
    if isinstance(v, bool) or not isinstance(v, int):
        return None
    return min(max(v, lo), hi)


def policy(fingerprint: Fingerprint, machine, settings: Settings, budget: Budget, catalog,
           runtime: Mapping | None = None) -> StreamPolicy:
    """The policy for this machine and settings. `runtime`: probed facts {"torch", "hip", "aimdo",
    "comfyui_args", "source"} of an existing ComfyUI, which beat the versions h3kit would install."""
    args = tuple(str(a) for a in ((runtime or {}).get("comfyui_args") or settings.comfyui_args))
    backend = "cpu" if "--cpu" in args or budget.gpu_bytes is None else machine.backend
    rt = assumed_runtime(fingerprint) if runtime is None else {
        "torch": version_tuple(runtime.get("torch")), "hip": version_tuple(runtime.get("hip")),
        "source": runtime.get("source") or "the probed ComfyUI"}
    dyn, dyn_why = dynamic_vram(backend, list(args), rt.get("torch"), rt.get("hip"), (runtime or {}).get("aimdo"))
    prefetch = _clamped(settings.prefetch_blocks, 1, MAX_PREFETCH)
    return StreamPolicy(str(settings.stream_dit), dyn, dyn_why, rt.get("source"), args, backend, prefetch or 1,
                        prefetch is not None, str(settings.page_cache), catalog.comfyui.dtype_on(budget.backend))


def may_stream(pol: StreamPolicy, weight) -> bool:
    """Is h3kit's loader an option for this DiT here: a file it reads, stream_dit not off, and no dynamic VRAM
    (ComfyUI's own streaming) -- unless stream_dit is on."""
    if not streamable(weight) or pol.forced == "off":
        return False
    return pol.forced == "on" or pol.dynamic_vram is not True


def _where(budget: Budget) -> str:
    return "unified memory" if budget.unified else "RAM"


def held_falls_short(pol: StreamPolicy, held: Estimate, budget: Budget) -> str | None:
    """Why ComfyUI loading the DiT its own way does not do here (a clause), or None when it does."""
    discrete = budget.gpu_bytes is not None and not budget.unified
    full_load = [f for f in FULL_LOAD_FLAGS if f in pol.args]  # ComfyUI's HIGH_VRAM: no partial loading
    if discrete and held.resident:
        return None
    if full_load and discrete:
        return (f"{full_load[0]} makes ComfyUI load the whole DiT ({_gib(held.dit_held)}) onto the GPU, which has "
                f"{_gib(budget.gpu_bytes)} for it")
    # what ComfyUI's own loading leaves short where the DiT lives (sampling, and the decode it stays loaded for)
    short = [s for s in held.short if s[0] in ("RAM", "GPU") and s[3] in ("sample", "decode")]
    if not short:
        return None
    what, need, have, phase = max(short, key=lambda s: s[1] - s[2])
    pool = "the GPU share of unified memory" if what == "GPU" and budget.unified else \
        "the GPU" if what == "GPU" else _where(budget)
    held_as = "" if held.block_held == held.block else f" (cast to {pol.dtype}: {_gib(held.dit_held)})"
    return (f"ComfyUI would hold the whole DiT{held_as} in {_where(budget)}: {_gib(need)} at the {phase} peak "
            f"against {_gib(have)} in {pool}")


def _why(pol: StreamPolicy, held: Estimate, budget: Budget) -> tuple[bool, str]:
    """(does h3kit stream?, why) before asking whether the file can be streamed at all."""
    if pol.forced in ("on", "off"):
        return pol.forced == "on", f"stream_dit is {pol.forced} in the settings"
    if pol.dynamic_vram:
        return False, f"ComfyUI's dynamic VRAM already streams the weights ({pol.dyn_why})"
    if budget.gpu_bytes is not None and not budget.unified and held.resident:
        return False, "the whole DiT stays on the GPU"
    short = held_falls_short(pol, held, budget)
    if short:
        return True, short
    if held.short:
        return False, (f"streaming the DiT would not help: {held.short[0][0]} is short in the {held.short[0][3]} "
                       "phase either way")
    return False, (f"ComfyUI can hold the whole DiT in {_where(budget)} ({_gib(held.peak_ram)} at the peak) with "
                   f"{_gib(budget.ram_bytes - held.peak_ram)} to spare beyond the {_gib(budget.headroom)} headroom, "
                   "so streaming would only cost time")


def wants_stream(pol: StreamPolicy, held: Estimate, budget: Budget) -> bool:
    """Would h3kit stream a DiT that ComfyUI would load as `held` (the search and `decide` share this)?"""
    return _why(pol, held, budget)[0]


def pass_overhead(catalog, est: Estimate) -> float:
    """The share h3kit's loader adds to one model call for this estimate (0 when it does not stream): the
    throughput table's figures, read from the disk (`stream_overhead`) or from the page cache
    (`stream_cached_overhead`) by what the cache holds next to the run (the estimate's `cache`), over the
    share of blocks streamed."""
    if not est.streamed or est.cache is None:
        return 0.0
    table = getattr(catalog, "throughput", None)
    disk = float(getattr(table, "stream_overhead", 0.0) or 0.0)
    cached = float(getattr(table, "stream_cached_overhead", disk) or 0.0)
    return page_cache.stream_overhead(est.cache.share, disk, cached, catalog.blocks - est.resident_blocks,
                                      catalog.blocks)


@dataclass(frozen=True)
class StreamDecision:
    """The streaming candidate: the policy it was decided under, ComfyUI's own run of the DiT and (enabled)
    h3kit's streamed one, the reason, and the share it adds to each model call."""

    policy: StreamPolicy
    enabled: bool
    why: str
    streamable: bool
    held: Estimate
    streamed: Estimate | None  # with enabled
    pass_overhead: float
    wanted: bool  # h3kit would stream, were the file one its loader reads


def decide(pol: StreamPolicy, catalog, budget: Budget, dit, est: Estimate, held: Estimate | None) -> StreamDecision:
    """The decision for the search's chosen run `est` of `dit` (`held`: ComfyUI's own run when `est` is the
    streamed one). The search streamed exactly where the policy wants it and the loader reads the file."""
    held = held if est.streamed else est
    if est.streamed and held is None:
        raise ValueError("a streamed estimate needs the held one beside it")
    can = streamable(dit)
    wanted, why = _why(pol, held, budget)
    if wanted and not can:
        name = getattr(getattr(dit, "file", None), "name", None) or "the chosen file"
        why = (f"{why}, but the streamed loader reads plain {'/'.join(SAFETENSORS_STREAMABLE)} safetensors and "
               f"{'/'.join(GGUF_STREAMABLE)} GGUF files and the chosen DiT is "
               f"{getattr(dit, 'format', None) or 'unknown'} ({name})")
    streamed = est if est.streamed else None
    return StreamDecision(pol, streamed is not None, why, can, held, streamed,
                          pass_overhead(catalog, est) if streamed else 0.0, wanted)


def to_doc(d: StreamDecision, catalog) -> Streaming:
    """settings.streaming of the plan document, read off the decision."""
    run, held = d.streamed, d.held
    shown = run or held
    resident = run.resident_blocks if run else catalog.blocks if held.resident else held.preload // held.block
    streamed = None if run is None else StreamedRun(
        preload_bytes=run.preload, peak_ram_bytes=run.peak_ram, peak_gpu_bytes=run.peak_gpu, fits=run.fits,
        held_peak_ram_bytes=held.peak_ram, held_fits=held.fits, pass_overhead=round(d.pass_overhead, 4),
        page_cache=run.page_cache)
    return Streaming(resident=shown.resident, blocks=catalog.blocks, block_bytes=shown.block,
                     resident_blocks=resident, shard_blocks=shown.shard_blocks, enabled=d.enabled,
                     dynamic_vram=d.policy.dynamic_vram, why=d.why, prefetch_blocks=d.policy.depth,
                     assumed=d.policy.assumed, streamable=d.streamable, streamed=streamed)


# -- the prose --------------------------------------------------------------


def rationale(catalog, c) -> list[str]:
    """The sentences that explain candidate `c`'s StreamDecision (`c.stream`) with the figures it rests on."""
    d = c.stream
    if not d.enabled:
        return [_off_sentence(catalog, d, c.choice.dit)]
    run, budget, pol = d.streamed, c.budget, d.policy
    off = "" if pol.dynamic_vram else f"; ComfyUI's dynamic VRAM is off here ({pol.dyn_why})"
    return ([f"h3kit streams the DiT from disk with its own loader because {d.why}{off}.",
             _ring_sentence(catalog, d), _peaks_sentence(d, budget), _overhead_sentence(catalog, d),
             page_cache.loader_choice(run.cache, pol.page_cache)[1]]
            + ([f"Even streamed, the plan needs {_gib(run.peak_ram)} of {_where(budget)} against "
                f"{_gib(budget.ram_bytes)}."] if not run.fits else [])
            + (["The weights are on a hard disk, so every step waits for the streamed blocks; "
                "an SSD or a smaller format is much faster."] if budget.disk_kind == "hdd" else []))


def _off_sentence(catalog, d: StreamDecision, dit) -> str:
    sentence = f"h3kit's own streamer is off because {d.why}."
    alt = [w for w in catalog.dit if streamable(w)]
    # the same variant, at least the chosen file's quality, smallest first (else the best quality there is)
    q = getattr(dit, "quality", 0) or 0
    alt.sort(key=lambda w: (w.variant != getattr(dit, "variant", None), w.quality < q,
                            w.bytes if w.quality >= q else -w.quality))
    if d.wanted and alt:
        sentence += (f" ComfyUI will hold the whole DiT; with dit_weights: {alt[0].id} (overrides) h3kit "
                     "can stream it instead.")
    return sentence


def _ring_sentence(catalog, d: StreamDecision) -> str:
    run, pol = d.streamed, d.policy
    depth, resident = pol.depth, run.resident_blocks
    if run.ring and run.page_cache == "bypass" and run.peak_gpu is None:
        how = (f"into a ring of {depth + 1} x {_gib(run.block)} read past the page cache, each block widened on "
               "the CPU as it arrives ")
    elif run.ring:
        how = f"(a ring of {depth + 1} x {_gib(run.block)} in the file's dtype) "
    else:
        how = ("by the OS into its page cache, since on the CPU each block is read straight into the computing "
               "block's buffers ")
    return (f"{resident} of {catalog.blocks} blocks stay resident ({_gib(resident * run.block_held)} in "
            f"{pol.dtype}) and {depth} block(s) read ahead " + how
            + ("(prefetch_blocks from the settings)." if pol.prefetch_set else
               "(one reading while one computes; calibration measures the disk and may change this)."))


def _peaks_sentence(d: StreamDecision, budget: Budget) -> str:
    run, held = d.streamed, d.held
    gpu = "" if run.peak_gpu is None else f" and {_gib(run.peak_gpu)} of the {_gib(budget.gpu_bytes)} GPU budget"
    held_gpu = "" if held.peak_gpu is None else f", GPU {_gib(held.peak_gpu)}"
    return (f"Streamed, the run peaks at {_gib(run.peak_ram)} of the {_gib(budget.ram_bytes)} {_where(budget)} "
            f"budget{gpu}; ComfyUI holding the DiT itself would peak at {_gib(held.peak_ram)}{held_gpu} "
            f"({'fits' if held.fits else 'does not fit'}).")


def _overhead_sentence(catalog, d: StreamDecision) -> str:
    run, over, blocks = d.streamed, d.pass_overhead, catalog.blocks
    streamed = blocks - run.resident_blocks
    if run.cache.case == page_cache.DOES_NOT_FIT:
        full = over * blocks / max(1, streamed)
        return (f"The time estimate counts streaming as {over:.0%} more per model call ({streamed} of {blocks} "
                f"blocks streamed x {full:.0%}, the upper end of the +26-84% per pass the native H3 engine h3.c "
                "measured, profiles/throughput.yaml `streaming`); that is an assumption: no disk read rate is "
                "known before 'h3kit calibrate' measures it.")
    return (f"{page_cache.sentence(run.cache)} The time estimate counts streaming as {over:.0%} more per model "
            f"call ({streamed} of {blocks} blocks streamed, {run.cache.share:.0%} of their bytes at "
            "profiles/throughput.yaml `streaming` `cached_pass_overhead`, the rest at its `pass_overhead`); an "
            "assumption until 'h3kit calibrate' measures the reads.")
