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
          there is no ring: each block is read straight into the computing
          block's buffers, and the blocks read ahead wait in the OS's page
          cache, which gives way under pressure (slower reads, never an
          out-of-memory), so they are not counted.
ComfyUI casts 16-bit float files to the dtype it computes in (float32 on a
CPU: a bf16 DiT takes twice its file size there); the catalog's comfyui
section says which backend, formats and parts, so the factor is data.
Unified memory (Apple) is one pool: the GPU share Metal allows is the GPU
budget, and RAM is counted once -- every phase's GPU bytes are also RAM bytes.

Every figure comes typed from the catalog and the merged settings (bytes as
ints, canvases as tuples), so nothing here parses.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import PurePath, PurePosixPath, PureWindowsPath

from h3kit.data.architecture import tokens_for
from h3kit.data.catalog import Catalog, Weight
from h3kit.data.fingerprint import Disk, Fingerprint
from h3kit.data.settings import AUTO, Settings
from h3kit.plan import te_stream

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
    """The VRAM ComfyUI keeps back: its --reserve-vram flag when the profile passes one, else its defaults."""
    if "--reserve-vram" in args:
        i = args.index("--reserve-vram")
        try:
            return int(float(args[i + 1]) * GIB)  # ComfyUI reads the flag in GiB
        except (IndexError, ValueError):
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
    dit_held: int = 0  # bytes the whole DiT takes once loaded (the file cast to the compute dtype)
    block_held: int = 0  # one block once loaded

    @property
    def fits(self) -> bool:
        return not self.short


def _encode_phase(cat: Catalog, budget: Budget, choice: Choice, process: int) -> tuple:
    """Text encoder, once per prompt: (gpu bytes | None, ram bytes)."""
    if choice.te_streamed:
        return te_stream.encode_phase(cat, budget, choice.te, process)
    return te_stream.held_encode_phase(cat, budget, choice.te, process)


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


def memory_estimate(cat: Catalog, budget: Budget, settings: Settings, choice: Choice, stream: int | None = None) -> Estimate:
    """Per-phase GPU and RAM needs of `choice` under `settings`, and what is short of `budget`.

    `stream` None: ComfyUI loads the DiT its own way (whole in RAM on a CPU and in unified memory on
    Apple, cast to the compute dtype; on a discrete card what its weights share holds, the rest in RAM
    or memory-mapped). `stream` = read-ahead depth: h3kit's streamed loader runs it, reading blocks
    from the file into a ring of depth + 1 buffers (file dtype) and keeping resident blocks and the
    computing one in the compute dtype."""
    mem = cat.memory
    process = mem.comfyui_process_ram
    inference_min = cat.comfyui.inference_minimum
    tokens = tokens_for(cat.tokens, *choice.canvas, choice.frames)
    act = tokens * mem.activation_bytes_per_token + mem.activation_fixed
    dit, block = choice.dit.bytes, cat.block_bytes(choice.dit)
    dit_held, cast = held_bytes(cat, choice.dit, budget.backend), cat.comfyui.held_factor("dit", choice.dit.format,
                                                                                          budget.backend)
    # a computing (or resident) block of h3kit's loader: dequantized GGUF, or cast as ComfyUI casts
    per_block = int(block * (cat.streamed_block_factor(choice.dit, budget.backend) if stream is not None else cast))
    from_disk = settings.stream_from == "disk" or stream is not None
    gpu = budget.gpu_bytes
    enc_gpu, enc_ram = _encode_phase(cat, budget, choice, process)
    # the CPU reads in place (nodes/h3kit_streaming.py, "direct"): its read-ahead is page cache, not RSS
    ring = (stream + 1) * block if stream is not None and gpu is not None else 0

    shard_blocks = _shard_blocks(settings, block)
    shard = shard_blocks * block
    tile = settings.vae_tile_size + 2 * settings.vae_tile_overlap
    tile_ws = tile * tile * settings.vae_temporal_tile * mem.vae_decode_bytes_per_voxel
    video = choice.canvas[0] * choice.canvas[1] * choice.frames * mem.decoded_video_bytes_per_pixel_frame
    vae_need = held_bytes(cat, choice.vae, budget.backend) + held_bytes(cat, choice.audio_vae, budget.backend) + tile_ws
    resident_blocks = 0
    if gpu is None:
        preload, resident, buffers = 0, False, 0
        if stream is None:  # held whole, and still there while the VAE decodes
            smp_gpu, smp_ram = None, process + dit_held + act
            dec_gpu, dec_ram = None, process + dit_held + vae_need + video
        else:
            smp_gpu, smp_ram = None, process + act + ring + per_block
            dec_gpu, dec_ram = None, process + vae_need + video
            resident_blocks = _streamed_resident(cat, budget, settings, block, per_block,
                                                 max(enc_ram, smp_ram, dec_ram), None)
            enc_ram, smp_ram, dec_ram = (x + resident_blocks * per_block for x in (enc_ram, smp_ram, dec_ram))
            preload = resident_blocks * block
    elif budget.unified:
        buffers = 0
        if stream is None:  # ComfyUI has no dynamic VRAM on Apple: the DiT is loaded whole into the one pool
            preload, resident = dit, True  # and stays loaded beside the VAE (free_memory unloads only for room)
            smp_gpu = dit_held + act
            smp_ram = process + smp_gpu
            dec_gpu = dit_held + vae_need
            dec_ram = process + dec_gpu + video
        else:
            resident = False
            smp_gpu = act + per_block
            smp_ram = process + smp_gpu + ring
            dec_gpu, dec_ram = vae_need, process + vae_need + video
            resident_blocks = _streamed_resident(
                cat, budget, settings, block, per_block, max(enc_ram, smp_ram, dec_ram),
                max(enc_gpu, smp_gpu + inference_min, dec_gpu))
            extra = resident_blocks * per_block
            enc_gpu, smp_gpu, dec_gpu = enc_gpu + extra, smp_gpu + extra, dec_gpu + extra
            enc_ram, smp_ram, dec_ram = enc_ram + extra, smp_ram + extra, dec_ram + extra
            preload = resident_blocks * block
    else:
        preload = _preload(cat, budget, settings, dit, block, act, shard)
        resident = preload >= dit and stream is None
        buffers = 0 if resident else 2 * shard
        smp_gpu = preload + buffers + act
        # h3kit's loader (stream) reads from the file into its ring; ComfyUI keeps what the card does not
        # hold in RAM (stream_from: ram) or maps it from the file (disk)
        smp_ram = process + ring + (0 if from_disk else dit - preload)
        dec_gpu, dec_ram = vae_need, process + (0 if from_disk else dit) + video
        if stream is not None:
            resident_blocks = min(cat.blocks - 1, preload // block)
            preload = resident_blocks * block

    phases = {"encode": {"gpu_bytes": enc_gpu, "ram_bytes": enc_ram},
              "sample": {"gpu_bytes": smp_gpu, "ram_bytes": smp_ram},
              "decode": {"gpu_bytes": dec_gpu, "ram_bytes": dec_ram}}
    peak_gpu = None if gpu is None else max(enc_gpu, smp_gpu, dec_gpu)
    peak_ram = max(enc_ram, smp_ram, dec_ram)
    disk = dit + choice.te.bytes + choice.vae.bytes + choice.audio_vae.bytes
    est = Estimate(peak_gpu, peak_ram, disk, tokens, act, preload, shard, shard_blocks, block, resident, phases,
                   streamed=stream is not None, resident_blocks=resident_blocks, ring=ring, dit_held=dit_held,
                   block_held=per_block)
    if gpu is not None:
        if peak_gpu > gpu:
            est.short.append(("GPU", peak_gpu, gpu, max(phases, key=lambda p: phases[p]["gpu_bytes"])))
        elif not resident and preload == 0 and act + buffers + inference_min > gpu:
            # Nothing resident still needs room for the two buffers in flight and ComfyUI's minimum.
            est.short.append(("GPU", act + buffers + inference_min, gpu, "sample"))
    if peak_ram > budget.ram_bytes:
        est.short.append(("RAM", peak_ram, budget.ram_bytes, max(phases, key=lambda p: phases[p]["ram_bytes"])))
    if disk > budget.disk_bytes:
        est.short.append(("disk", disk, budget.disk_bytes, "files"))
    return est
