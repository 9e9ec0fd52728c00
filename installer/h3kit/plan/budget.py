"""Memory arithmetic: what the machine offers (the budget) and what one choice of files and canvas needs.

Phases (peaks are the max over them):
  encode  text encoder weights + its activations; runs once per prompt and is
          dropped before sampling. On a discrete GPU what does not fit spills
          to RAM. With `Choice.te_streamed` h3kit's streamed text encoder
          holds a few layers instead of the file (plan/te_stream.py).
  sample  DiT + activations, which grow with tokens = (w/32)*(h/32)*latent_frames.
  decode  video + audio VAE and one decode tile.

How the DiT is held is one of two runs (`memory_estimate(..., stream=)`):
  ComfyUI's own loading. On a CPU the whole DiT sits in RAM through the
          decode, and on Apple the whole DiT sits in the one pool (ComfyUI has
          no dynamic VRAM on either). On a discrete card `preload_bytes` of
          whole blocks stay on the GPU and the rest streams in shards (two
          buffers: one in use, one arriving) from RAM (stream_from: ram) or
          the memory-mapped file (disk, which needs dynamic VRAM).
  h3kit's streamed loader. The DiT is read from the file block by block
          into a ring of prefetch + 1 blocks (file dtype); resident blocks and
          the computing one are in the compute dtype, and the resident ones
          stay beside every phase (the next prompt's encoding too). On a CPU
          the loader's reader decides (plan/loader_facts.py): reading a plain
          float file in place through the page cache there is no ring -- each
          block is read straight into the computing block's buffers and the
          blocks read ahead wait in the OS's page cache, which gives way under
          pressure, so they are not counted; past the page cache (page_cache:
          bypass, decided here once) and for GGUF files the ring is held.
ComfyUI casts 16-bit float files to the dtype it computes in (float32 on a
CPU: a bf16 DiT takes twice its file size there); the catalog's comfyui
section says which backend, formats and parts, so the factor is data.
Unified memory (Apple) is one pool: the GPU share Metal allows is the GPU
budget, and RAM is counted once -- every phase's GPU bytes are also RAM bytes.

Every figure comes typed from the catalog and the merged settings (bytes as
ints, canvases as tuples), so nothing here parses.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import PurePath, PurePosixPath, PureWindowsPath

from h3kit.bundled import h3k_cost
from h3kit.data import comfy_argv
from h3kit.data.architecture import tokens_for
from h3kit.data.catalog import Catalog, Weight
from h3kit.data.fingerprint import Disk, Fingerprint
from h3kit.data.settings import AUTO, Settings
from h3kit.plan import loader_facts, page_cache, te_stream

GIB = 2**30


@dataclass(frozen=True)
class Budget:
    gpu_bytes: int | None  # what ComfyUI may use on the GPU (None: no GPU)
    ram_bytes: int
    disk_bytes: int
    unified: bool
    weights_cap: int | None  # ComfyUI's ceiling for weights on the GPU
    gpu_total: int | None
    reserve: int
    ram_total: int
    headroom: int
    disk_path: str | None
    disk_kind: str
    gpu_count: int
    backend: str = "cpu"  # what ComfyUI computes on under this plan: cpu | cuda | rocm | mps | xpu | directml


def _reserve(cat: Catalog, fingerprint: Fingerprint, gpu_total: int, args: list) -> int:
    """The VRAM ComfyUI keeps back: its --reserve-vram flag when the profile passes one (read as ComfyUI reads
    it, h3kit.data.comfy_argv: given twice, the last counts), else its defaults."""
    given = comfy_argv.value(args, "--reserve-vram")
    if given is not None:
        try:
            return int(float(given) * GIB)  # ComfyUI reads the flag in GiB
        except (ValueError, OverflowError):  # no number (ComfyUI would stop at start), or an infinite one
            pass
    cu = cat.comfyui
    reserve = cu.reserve_windows if fingerprint.os.system == "windows" else cu.reserve_default
    if gpu_total >= cu.large_card_from:
        reserve += cu.large_card_extra
    return reserve


def _holds(mount: PurePath, folder: PurePath) -> bool:
    return folder == mount or mount in folder.parents


def disk_for(disks: tuple[Disk, ...], folder: str | None, system: str) -> Disk | None:
    """The disk `folder` lives on: the longest mount path that contains it, compared by path components (a
    folder under /mnt/data2 is not on /mnt/data); without a folder or a match, the disk with most room."""
    if folder:
        pure = PureWindowsPath if system == "windows" else PurePosixPath  # Windows paths compare without case
        target = pure(str(folder))
        under = [d for d in disks if _holds(pure(d.path), target)]
        if under:
            return max(under, key=lambda d: len(pure(d.path).parts))
    return max(disks, key=lambda d: d.free_bytes) if disks else None


def make_budget(cat: Catalog, fingerprint: Fingerprint, settings: Settings, comfyui_path: str | None = None, *,
                cpu: bool = False) -> Budget:
    """What ComfyUI may use on this machine under `settings`; `cpu` plans as if there were no GPU."""
    gpu = fingerprint.primary_gpu
    ram_total = fingerprint.ram_total_bytes
    headroom = settings.os_ram_headroom
    ram_bytes = max(ram_total - headroom, 0)
    disk = disk_for(fingerprint.disks, comfyui_path, fingerprint.os.system)
    disk_bytes = int(disk.free_bytes) if disk else 0
    disk_path, disk_kind = (disk.path, disk.kind) if disk else (None, "unknown")
    if gpu is None or cpu:
        return Budget(None, ram_bytes, disk_bytes, False, None, None, 0, ram_total, headroom,
                      disk_path, disk_kind, 0, "cpu")
    gpu_total = int(gpu.memory_total_bytes)
    reserve = _reserve(cat, fingerprint, gpu_total, list(settings.comfyui_args))
    cu = cat.comfyui
    weights_cap = int(gpu_total * cu.weights_share - (cu.inference_minimum + reserve))
    gpu_bytes = gpu_total - reserve
    unified = bool(gpu.unified_memory)
    if unified:
        gpu_bytes = min(gpu_bytes, ram_bytes)
    return Budget(gpu_bytes, ram_bytes, disk_bytes, unified, weights_cap, gpu_total, reserve, ram_total, headroom,
                  disk_path, disk_kind, len(fingerprint.usable_gpus), fingerprint.backend)


# --- needs -----------------------------------------------------------------


@dataclass(frozen=True)
class Choice:
    dit: Weight
    te: Weight
    vae: Weight
    audio_vae: Weight
    canvas: tuple  # (width, height)
    frames: int
    te_streamed: bool = False  # h3kit's streamed text encoder runs `te` (else ComfyUI loads it whole)


@dataclass(frozen=True)
class Measured:
    """What calibration measured in ComfyUI's Python on this machine; each figure set replaces the catalog's
    arithmetic for it in `memory_estimate` (None: the catalog's)."""

    process_bytes: int | None = None  # ComfyUI's resident set before the model (baseline RSS)
    activation_bytes: int | None = None  # the sampling activations at the run's sequence
    dit_held_bytes: int | None = None  # the whole DiT as ComfyUI holds it (blocks in the compute dtype, the rest)
    block_held_bytes: int | None = None  # one block in the compute dtype
    text_encoder_held_bytes: int | None = None
    vae_held_bytes: int | None = None  # video + audio VAE as held


@dataclass
class Estimate:
    peak_gpu: int | None
    peak_ram: int
    disk: int
    tokens: int
    activations: int
    preload: int
    shard: int
    shard_blocks: int
    block: int
    resident: bool
    phases: dict = field(default_factory=dict)
    short: list = field(default_factory=list)  # (what, need, have, phase)
    streamed: bool = False  # h3kit's streamed loader runs the DiT (else ComfyUI loads it its own way)
    resident_blocks: int = 0  # with `streamed`: blocks kept for the whole run (preload = these x block)
    ring: int = 0  # with `streamed`: the read-ahead buffers (prefetch + 1 blocks, file dtype)
    block_sets: int = 0  # with `streamed`: computing blocks' buffer sets beside the resident ones (compute dtype)
    dit_held: int = 0  # bytes the whole DiT takes once loaded (the file cast to the compute dtype)
    block_held: int = 0  # one block once loaded
    page_cache: str | None = None  # with `streamed`: the loader's page_cache input, "use" or "bypass"
    cache: page_cache.CacheShare | None = None  # with `streamed`: what the page cache keeps of the streamed blocks

    @property
    def fits(self) -> bool:
        return not self.short


@dataclass(frozen=True)
class _Needs:
    """The figures every phase is built from, once per estimate."""

    process: int
    tokens: int
    act: int
    dit: int  # file bytes
    block: int  # one block's file bytes
    dit_held: int
    per_block: int  # a block computing (or resident): dequantized GGUF, or cast as ComfyUI casts
    shard_blocks: int
    shard: int
    vae_need: int
    video: int
    encode: tuple  # (gpu | None, ram)


@dataclass
class _Run:
    """One way of holding the DiT, phase by phase: {phase: (gpu | None, ram)} and how the blocks are held."""

    phases: dict
    preload: int = 0
    resident: bool = False
    buffers: int = 0
    resident_blocks: int = 0
    ring: int = 0
    block_sets: int = 0  # streamed: computing blocks' buffer sets in the compute dtype (on the GPU: its own)


def _encode_phase(cat: Catalog, budget: Budget, choice: Choice, process: int, measured: Measured) -> tuple:
    """Text encoder, once per prompt: (gpu bytes | None, ram bytes)."""
    if choice.te_streamed:
        return te_stream.encode_phase(cat, budget, choice.te, process)
    te = choice.te if measured.text_encoder_held_bytes is None else replace(choice.te,
                                                                          bytes=measured.text_encoder_held_bytes)
    return te_stream.held_encode_phase(cat, budget, te, process)


def _shard_blocks(settings: Settings, block: int) -> int:
    """Whole blocks per transfer: a transfer never splits a block, so an asked size rounds down (to one at least)."""
    if settings.shard_size_bytes != AUTO:
        return max(1, settings.shard_size_bytes // block)
    return int(settings.max_shard_blocks or 1)


def _preload(cat: Catalog, budget: Budget, settings: Settings, dit: int, block: int, act: int, shard: int) -> int:
    """DiT bytes kept on the GPU: all of it when it fits with room to spare, else whole blocks that leave
    room for activations, ComfyUI's inference minimum and two shard buffers."""
    if settings.preload_bytes != AUTO:
        preload = min(settings.preload_bytes, dit)
    else:
        resident_need = dit + cat.memory.gpu_resident_overhead
        room = budget.gpu_bytes - act - cat.comfyui.inference_minimum
        if resident_need <= budget.gpu_bytes and dit <= room and dit <= budget.weights_cap:
            return dit
        preload = max(0, min(room - 2 * shard, budget.weights_cap, dit))
    return dit if preload >= dit else (preload // block) * block


def held_bytes(cat: Catalog, weight: Weight, backend: str) -> int:
    """Bytes `weight` takes once ComfyUI loaded it on `backend` (the catalog's comfyui.cast_formats/cast_parts)."""
    return int(weight.bytes * cat.comfyui.held_factor(weight.part, weight.format, backend))


def _streamed_resident(cat: Catalog, budget: Budget, settings: Settings, block: int, per_block: int,
                       ram_peak: int, gpu_peak: int | None) -> int:
    """Blocks h3kit's loader keeps for the whole run: preload_bytes when set, else as many as the phases leave room
    for (they sit beside every phase, the next prompt's text encoding too); at least one block streams."""
    if settings.preload_bytes != AUTO:
        return max(0, min(cat.blocks - 1, settings.preload_bytes // block))
    room = budget.ram_bytes - ram_peak
    if gpu_peak is not None:
        room = min(room, budget.gpu_bytes - gpu_peak)
    return max(0, min(cat.blocks - 1, room // per_block))


def _needs(cat: Catalog, budget: Budget, settings: Settings, choice: Choice, streamed: bool,
           measured: Measured) -> _Needs:
    mem = cat.memory
    process = mem.comfyui_process_ram if measured.process_bytes is None else measured.process_bytes
    tokens = tokens_for(cat.tokens, *choice.canvas, choice.frames)
    act = h3k_cost.activation_bytes(tokens, mem.activation_bytes_per_token, mem.activation_fixed) \
        if measured.activation_bytes is None else measured.activation_bytes
    dit, block = choice.dit.bytes, cat.block_bytes(choice.dit)
    dit_held = held_bytes(cat, choice.dit, budget.backend) if measured.dit_held_bytes is None \
        else measured.dit_held_bytes
    factor = cat.streamed_block_factor(choice.dit, budget.backend) if streamed else \
        cat.comfyui.held_factor("dit", choice.dit.format, budget.backend)
    per_block = int(block * factor) if measured.block_held_bytes is None else measured.block_held_bytes
    shard_blocks = _shard_blocks(settings, block)
    tile = settings.vae_tile_size + 2 * settings.vae_tile_overlap
    tile_ws = tile * tile * settings.vae_temporal_tile * mem.vae_decode_bytes_per_voxel
    vaes = held_bytes(cat, choice.vae, budget.backend) + held_bytes(cat, choice.audio_vae, budget.backend) \
        if measured.vae_held_bytes is None else measured.vae_held_bytes
    video = h3k_cost.decoded_video_bytes(*choice.canvas, choice.frames, mem.decoded_video_bytes_per_pixel_frame)
    return _Needs(process, tokens, act, dit, block, dit_held, per_block, shard_blocks, shard_blocks * block,
                  vaes + tile_ws, video, _encode_phase(cat, budget, choice, process, measured))


def _held_run(cat: Catalog, budget: Budget, settings: Settings, n: _Needs) -> _Run:
    """ComfyUI's own loading: whole in RAM on a CPU and in the one pool on Apple (no dynamic VRAM on either, and
    still loaded while the VAE decodes); on a discrete card what its weights share holds, the rest in RAM or
    memory-mapped from the file (stream_from: disk), two shard buffers in flight."""
    if budget.gpu_bytes is None:
        return _Run({"encode": n.encode, "sample": (None, n.process + n.dit_held + n.act),
                     "decode": (None, n.process + n.dit_held + n.vae_need + n.video)})
    if budget.unified:
        sample, decode = n.dit_held + n.act, n.dit_held + n.vae_need
        return _Run({"encode": n.encode, "sample": (sample, n.process + sample),
                     "decode": (decode, n.process + decode + n.video)}, preload=n.dit, resident=True)
    preload = _preload(cat, budget, settings, n.dit, n.block, n.act, n.shard)
    resident = preload >= n.dit
    buffers = 0 if resident else 2 * n.shard
    in_ram = settings.stream_from != "disk"
    return _Run({"encode": n.encode, "sample": (preload + buffers + n.act, n.process + (n.dit - preload) * in_ram),
                 "decode": (n.vae_need, n.process + n.dit * in_ram + n.video)},
                preload=preload, resident=resident, buffers=buffers)


def _with_resident(run: _Run, blocks: int, n: _Needs, gpu: bool) -> _Run:
    """`run` with `blocks` resident blocks beside every phase (on the GPU too in Apple's one pool)."""
    extra = blocks * n.per_block
    run.phases = {p: (None if g is None else g + extra * gpu, r + extra) for p, (g, r) in run.phases.items()}
    run.resident_blocks, run.preload = blocks, blocks * n.block
    return run


def _cpu_streamed(cat: Catalog, budget: Budget, settings: Settings, choice: Choice, n: _Needs, depth: int,
                  bypass: bool) -> _Run:
    """h3kit's loader on a CPU: its reader (loader_facts.cpu_reader) decides whether a ring of reads is held;
    reading in place, the blocks read ahead wait in the OS's page cache, which gives way under pressure."""
    sets, has_ring = loader_facts.READER_MEMORY[loader_facts.cpu_reader(choice.dit.format, bypass)]
    ring = (depth + 1) * n.block if has_ring else 0
    run = _Run({"encode": n.encode, "sample": (None, n.process + n.act + ring + sets * n.per_block),
                "decode": (None, n.process + n.vae_need + n.video)}, ring=ring, block_sets=sets)
    peak = max(r for _, r in run.phases.values())
    return _with_resident(run, _streamed_resident(cat, budget, settings, n.block, n.per_block, peak, None), n, False)


def _streamed_run(cat: Catalog, budget: Budget, settings: Settings, n: _Needs, depth: int) -> _Run:
    """h3kit's loader off a CPU: blocks read from the file into a ring of depth + 1 buffers (file dtype) in RAM,
    resident blocks and the computing one in the compute dtype."""
    ring = (depth + 1) * n.block
    if budget.unified:
        sample = n.act + n.per_block
        run = _Run({"encode": n.encode, "sample": (sample, n.process + sample + ring),
                    "decode": (n.vae_need, n.process + n.vae_need + n.video)}, ring=ring, block_sets=1)
        gpu_peak = max(run.phases["encode"][0], sample + cat.comfyui.inference_minimum, n.vae_need)
        ram_peak = max(r for _, r in run.phases.values())
        return _with_resident(run, _streamed_resident(cat, budget, settings, n.block, n.per_block, ram_peak,
                                                      gpu_peak), n, True)
    preload = _preload(cat, budget, settings, n.dit, n.block, n.act, n.shard)
    resident_blocks = min(cat.blocks - 1, preload // n.block)
    return _Run({"encode": n.encode, "sample": (preload + 2 * n.shard + n.act, n.process + ring),
                 "decode": (n.vae_need, n.process + n.video)}, preload=resident_blocks * n.block,
                buffers=2 * n.shard, resident_blocks=resident_blocks, ring=ring, block_sets=2)


def cache_share(cat: Catalog, budget: Budget | None, resident_blocks: int, block: int,
                sampling_ram: int) -> page_cache.CacheShare:
    """plan.page_cache.cache_share for a streamed run: the blocks not kept resident against the budget's RAM, the
    run's peak while it samples (the steps that re-read the blocks) and the profile's OS headroom. Without
    `budget` every streamed block counts as read from the disk."""
    streamed = (cat.blocks - resident_blocks) * int(block or 0)
    if budget is None:
        return page_cache.cache_share(streamed, 0, 0, 0)
    return page_cache.cache_share(streamed, budget.ram_total, sampling_ram, budget.headroom)


def _streamed(cat: Catalog, budget: Budget, settings: Settings, choice: Choice, n: _Needs,
              depth: int) -> tuple[_Run, bool, page_cache.CacheShare]:
    """The streamed run and its page_cache decision, made once: the settings' use / bypass, else bypass exactly
    when the page cache cannot keep the streamed blocks beside the run (page_cache.loader_choice). On a CPU
    bypassing it brings the ring into the process; with less room the decision only holds more firmly."""
    def judged(run: _Run) -> tuple[bool, page_cache.CacheShare]:
        share = cache_share(cat, budget, run.resident_blocks, n.block, run.phases["sample"][1])
        return page_cache.loader_choice(share, settings.page_cache)[0], share

    if budget.gpu_bytes is not None:
        run = _streamed_run(cat, budget, settings, n, depth)
        return (run, *judged(run))
    run = _cpu_streamed(cat, budget, settings, choice, n, depth, settings.page_cache == "bypass")
    bypass, share = judged(run)
    if bypass and not run.ring:
        run = _cpu_streamed(cat, budget, settings, choice, n, depth, True)
        share = judged(run)[1]
    return run, bypass, share


def memory_estimate(cat: Catalog, budget: Budget, settings: Settings, choice: Choice, stream: int | None = None,
                    measured: Measured | None = None) -> Estimate:
    """Per-phase GPU and RAM needs of `choice` under `settings`, and what is short of `budget`: the one memory
    model, used by the planner and by calibration (which passes what it measured as `measured`).

    `stream` None: ComfyUI loads the DiT its own way (whole in RAM on a CPU and in unified memory on
    Apple, cast to the compute dtype; on a discrete card what its weights share holds, the rest in RAM
    or memory-mapped). `stream` = read-ahead depth: h3kit's streamed loader runs it, reading blocks
    from the file into a ring of depth + 1 buffers (file dtype; on a CPU only where its reader holds one)
    and keeping resident blocks and the computing one in the compute dtype."""
    n = _needs(cat, budget, settings, choice, stream is not None, measured or Measured())
    bypass, share = None, None
    if stream is None:
        run = _held_run(cat, budget, settings, n)
    else:
        run, bypass, share = _streamed(cat, budget, settings, choice, n, stream)
    phases = {p: {"gpu_bytes": g, "ram_bytes": r} for p, (g, r) in run.phases.items()}
    gpu = budget.gpu_bytes
    est = Estimate(None if gpu is None else max(g for g, _ in run.phases.values()),
                   max(r for _, r in run.phases.values()),
                   choice.dit.bytes + choice.te.bytes + choice.vae.bytes + choice.audio_vae.bytes,
                   n.tokens, n.act, run.preload, n.shard, n.shard_blocks, n.block, run.resident, phases,
                   streamed=stream is not None, resident_blocks=run.resident_blocks, ring=run.ring,
                   block_sets=run.block_sets, dit_held=n.dit_held, block_held=n.per_block,
                   page_cache=None if bypass is None else "bypass" if bypass else "use", cache=share)
    est.short.extend(_shortfalls(cat, budget, est, run))
    return est


def _shortfalls(cat: Catalog, budget: Budget, est: Estimate, run: _Run) -> list:
    """(what, need, have, phase) for each budget the estimate exceeds."""
    phases, gpu, out = est.phases, budget.gpu_bytes, []
    in_flight = est.activations + run.buffers + cat.comfyui.inference_minimum
    if gpu is not None:
        if est.peak_gpu > gpu:
            out.append(("GPU", est.peak_gpu, gpu, max(phases, key=lambda p: phases[p]["gpu_bytes"])))
        elif not run.resident and run.preload == 0 and in_flight > gpu:
            # Nothing resident still needs room for the two buffers in flight and ComfyUI's minimum.
            out.append(("GPU", in_flight, gpu, "sample"))
    if est.peak_ram > budget.ram_bytes:
        out.append(("RAM", est.peak_ram, budget.ram_bytes, max(phases, key=lambda p: phases[p]["ram_bytes"])))
    if est.disk > budget.disk_bytes:
        out.append(("disk", est.disk, budget.disk_bytes, "files"))
    return out
