"""Memory arithmetic: what the machine offers (the budget) and what one choice of files and canvas needs.

Phases (peaks are the max over them):
  encode  text encoder weights + its activations; runs once per prompt and is
          dropped before sampling. On a discrete GPU what does not fit spills
          to RAM.
  sample  DiT: `preload_bytes` resident on the GPU, the rest streamed in
          shards of whole blocks (two shard buffers: one in use, one
          arriving) from RAM or from the memory-mapped file on disk;
          activations grow with tokens = (w/32)*(h/32)*latent_frames.
  decode  video + audio VAE and one decode tile; the DiT has left the GPU (it
          waits in RAM when streamed from RAM).
Unified memory (Apple) is one pool: the GPU share Metal allows is the GPU
budget, and RAM is counted once -- every phase's GPU bytes are also RAM bytes.

Every figure comes typed from the catalog and the merged settings (bytes as
ints, canvases as tuples), so nothing here parses.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import PurePath, PurePosixPath, PureWindowsPath

from h3kit.data.catalog import Catalog, Weight, tokens_for

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


def _reserve(cat: Catalog, fp: dict, gpu_total: int, args: list) -> int:
    """The VRAM ComfyUI keeps back: its --reserve-vram flag when the profile passes one, else its defaults."""
    if "--reserve-vram" in args:
        i = args.index("--reserve-vram")
        try:
            return int(float(args[i + 1]) * GIB)  # ComfyUI reads the flag in GiB
        except (IndexError, ValueError):
            pass
    cu = cat.comfyui
    reserve = cu.reserve_windows if fp["os"]["system"] == "windows" else cu.reserve_default
    if gpu_total >= cu.large_card_from:
        reserve += cu.large_card_extra
    return reserve


def _holds(mount: PurePath, folder: PurePath) -> bool:
    return folder == mount or mount in folder.parents


def disk_for(disks: list[dict], folder: str | None, system: str) -> dict | None:
    """The disk `folder` lives on: the longest mount path that contains it, compared by path components (a
    folder under /mnt/data2 is not on /mnt/data); without a folder or a match, the disk with most room."""
    if folder:
        pure = PureWindowsPath if system == "windows" else PurePosixPath  # Windows paths compare without case
        target = pure(str(folder))
        under = [d for d in disks if _holds(pure(d["path"]), target)]
        if under:
            return max(under, key=lambda d: len(pure(d["path"]).parts))
    return max(disks, key=lambda d: d["free_bytes"]) if disks else None


def make_budget(cat: Catalog, fp: dict, settings: dict, comfyui_path: str | None = None, *,
                cpu: bool = False) -> Budget:
    """What ComfyUI may use on this machine under `settings`; `cpu` plans as if there were no GPU."""
    gpus = [g for g in fp.get("gpus") or [] if g.get("backend")]
    gpu = max(gpus, key=lambda g: g["memory_total_bytes"]) if gpus else None
    ram_total = int(fp["memory"]["total_bytes"])
    headroom = settings["os_ram_headroom"]
    ram_bytes = max(ram_total - headroom, 0)
    disk = disk_for(fp.get("disks") or [], comfyui_path, (fp.get("os") or {}).get("system", ""))
    disk_bytes = int(disk["free_bytes"]) if disk else 0
    disk_path, disk_kind = (disk["path"], disk["kind"]) if disk else (None, "unknown")
    if gpu is None or cpu:
        return Budget(None, ram_bytes, disk_bytes, False, None, None, 0, ram_total, headroom,
                      disk_path, disk_kind, 0)
    gpu_total = int(gpu["memory_total_bytes"])
    reserve = _reserve(cat, fp, gpu_total, settings.get("comfyui_args") or [])
    cu = cat.comfyui
    weights_cap = int(gpu_total * cu.weights_share - (cu.inference_minimum + reserve))
    gpu_bytes = gpu_total - reserve
    unified = bool(gpu.get("unified_memory"))
    if unified:
        gpu_bytes = min(gpu_bytes, ram_bytes)
    return Budget(gpu_bytes, ram_bytes, disk_bytes, unified, weights_cap, gpu_total, reserve, ram_total, headroom,
                  disk_path, disk_kind, len(gpus))


# --- needs -----------------------------------------------------------------


@dataclass(frozen=True)
class Choice:
    dit: Weight
    te: Weight
    vae: Weight
    audio_vae: Weight
    canvas: tuple  # (width, height)
    frames: int


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

    @property
    def fits(self) -> bool:
        return not self.short


def _encode_phase(cat: Catalog, budget: Budget, choice: Choice, process: int) -> tuple:
    """Text encoder, once per prompt: (gpu bytes | None, ram bytes)."""
    te_act = cat.memory.text_encoder_activation
    te_need = choice.te.bytes + te_act
    if budget.gpu_bytes is None:
        return None, process + te_need
    if budget.unified:
        return te_need, process + te_need
    # ComfyUI keeps weights under its cap; the rest of the encoder waits in RAM.
    on_gpu = min(te_need, budget.weights_cap + te_act, budget.gpu_bytes)
    return on_gpu, process + (te_need - on_gpu)


def _shard_blocks(settings: dict, block: int) -> int:
    """Whole blocks per transfer: a transfer never splits a block, so an asked size rounds down (to one at least)."""
    if settings.get("shard_size_bytes", "auto") != "auto":
        return max(1, settings["shard_size_bytes"] // block)
    return int(settings.get("max_shard_blocks") or 1)


def _preload(cat: Catalog, budget: Budget, settings: dict, dit: int, block: int, act: int, shard: int) -> int:
    """DiT bytes kept on the GPU: all of it when it fits with room to spare, else whole blocks that leave
    room for activations, ComfyUI's inference minimum and two shard buffers."""
    if settings.get("preload_bytes", "auto") != "auto":
        preload = min(settings["preload_bytes"], dit)
    else:
        resident_need = dit + cat.memory.gpu_resident_overhead
        room = budget.gpu_bytes - act - cat.comfyui.inference_minimum
        if resident_need <= budget.gpu_bytes and dit <= room and dit <= budget.weights_cap:
            return dit
        preload = max(0, min(room - 2 * shard, budget.weights_cap, dit))
    return dit if preload >= dit else (preload // block) * block


def estimate(cat: Catalog, budget: Budget, settings: dict, choice: Choice) -> Estimate:
    """Per-phase GPU and RAM needs of `choice` under `settings`, and what is short of `budget`."""
    mem = cat.memory
    process = mem.comfyui_process_ram
    inference_min = cat.comfyui.inference_minimum
    tokens = tokens_for(cat.data["tokens"], *choice.canvas, choice.frames)
    act = tokens * mem.activation_bytes_per_token + mem.activation_fixed
    dit, block = choice.dit.bytes, cat.block_bytes(choice.dit)
    from_disk = settings["stream_from"] == "disk"
    gpu = budget.gpu_bytes
    enc_gpu, enc_ram = _encode_phase(cat, budget, choice, process)

    shard_blocks = _shard_blocks(settings, block)
    shard = shard_blocks * block
    if gpu is None:
        preload, resident, buffers = 0, False, 0
        smp_gpu, smp_ram = None, process + dit + act
    else:
        preload = _preload(cat, budget, settings, dit, block, act, shard)
        resident = preload >= dit
        buffers = 0 if resident else 2 * shard
        smp_gpu = preload + buffers + act
        if budget.unified:  # one pool; streamed blocks come from the SSD page cache
            smp_ram = process + smp_gpu
        else:
            smp_ram = process + (0 if from_disk else dit - preload)

    tile = settings["vae_tile_size"] + 2 * settings["vae_tile_overlap"]
    tile_ws = tile * tile * settings["vae_temporal_tile"] * mem.vae_decode_bytes_per_voxel
    video = choice.canvas[0] * choice.canvas[1] * choice.frames * mem.decoded_video_bytes_per_pixel_frame
    vae_need = choice.vae.bytes + choice.audio_vae.bytes + tile_ws
    if gpu is None:  # the DiT is still in RAM while the VAE decodes
        dec_gpu, dec_ram = None, process + dit + vae_need + video
    elif budget.unified:
        dec_gpu, dec_ram = vae_need, process + vae_need + video
    else:
        dec_gpu, dec_ram = vae_need, process + (0 if from_disk else dit) + video

    phases = {"encode": {"gpu_bytes": enc_gpu, "ram_bytes": enc_ram},
              "sample": {"gpu_bytes": smp_gpu, "ram_bytes": smp_ram},
              "decode": {"gpu_bytes": dec_gpu, "ram_bytes": dec_ram}}
    peak_gpu = None if gpu is None else max(enc_gpu, smp_gpu, dec_gpu)
    peak_ram = max(enc_ram, smp_ram, dec_ram)
    disk = dit + choice.te.bytes + choice.vae.bytes + choice.audio_vae.bytes
    est = Estimate(peak_gpu, peak_ram, disk, tokens, act, preload, shard, shard_blocks, block, resident, phases)
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
