"""The memory planner: from a fingerprint to an `h3kit.plan/1` by arithmetic on model sizes.

The plan is decided the way Ollama decides GPU offload -- compute what each
phase needs and compare it with what the machine has -- rather than by one
VRAM threshold. Every number about the model comes from the catalog
(profiles/models/), every per-machine choice from a profile (profiles/*.yaml);
this module only does the arithmetic and explains it.

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

Selection, per matching profile: the highest-quality runnable format whose
smallest file fits at the profile's min canvas and min frames; then the
largest canvas and frame count that fit with it. Files ComfyUI is reported
to load (its own loader, or a loader pack) are tried first; files with no
report come next, and files reported not to load only when nothing else
fits (the catalog's file.comfyui_loads), each such fallback warned about
with the report. Among profiles, the best plan wins (fits, loads, format
quality, canvas, frames). Nothing fits: `fits: false`, the cheapest plan,
and warnings naming what is short and by how much.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from h3kit.data import catalog as catalog_mod
from h3kit.data.catalog import LOAD_TIERS, Catalog, Machine, Profile, Weight
from h3kit.core.errors import BadInput
from h3kit.data.yamlio import parse_size

SCHEMA = "h3kit.plan/1"
GB = 10**9
GIB = 2**30


def gb(n: float | None) -> str:
    return "n/a" if n is None else f"{n / GB:.1f} GB"


# --- budgets ---------------------------------------------------------------


@dataclass
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
    if "--reserve-vram" in args:
        i = args.index("--reserve-vram")
        try:
            return int(float(args[i + 1]) * GIB)  # ComfyUI reads the flag in GiB
        except (IndexError, ValueError):
            pass
    r = cat.data["comfyui"]["reserve"]
    reserve = parse_size(r["windows"] if fp["os"]["system"] == "windows" else r["default"])
    if gpu_total >= parse_size(r["large_card_from"]):
        reserve += parse_size(r["large_card_extra"])
    return reserve


def make_budget(cat: Catalog, fp: dict, settings: dict, comfyui_path: str | None = None) -> Budget:
    gpus = [g for g in fp.get("gpus") or [] if g.get("backend")]
    gpu = max(gpus, key=lambda g: g["memory_total_bytes"]) if gpus else None
    ram_total = int(fp["memory"]["total_bytes"])
    headroom = parse_size(settings["os_ram_headroom"])
    ram_bytes = max(ram_total - headroom, 0)
    disks = fp.get("disks") or []
    disk = None
    if comfyui_path:
        under = [d for d in disks if str(comfyui_path).startswith(d["path"])]
        disk = max(under, key=lambda d: len(d["path"])) if under else None
    if disk is None and disks:
        disk = max(disks, key=lambda d: d["free_bytes"])
    disk_bytes = int(disk["free_bytes"]) if disk else 0
    if gpu is None or settings.get("_cpu"):
        return Budget(None, ram_bytes, disk_bytes, False, None, None, 0, ram_total, headroom,
                      disk and disk["path"], disk["kind"] if disk else "unknown", 0)
    gpu_total = int(gpu["memory_total_bytes"])
    reserve = _reserve(cat, fp, gpu_total, settings.get("comfyui_args") or [])
    cu = cat.data["comfyui"]
    weights_cap = int(gpu_total * cu["weights_share"] - (parse_size(cu["inference_minimum"]) + reserve))
    gpu_bytes = gpu_total - reserve
    unified = bool(gpu.get("unified_memory"))
    if unified:
        gpu_bytes = min(gpu_bytes, ram_bytes)
    return Budget(gpu_bytes, ram_bytes, disk_bytes, unified, weights_cap, gpu_total, reserve, ram_total, headroom,
                  disk and disk["path"], disk["kind"] if disk else "unknown", len(gpus))


# --- needs -----------------------------------------------------------------


@dataclass
class Choice:
    dit: Weight
    te: Weight
    vae: Weight
    audio_vae: Weight
    canvas: tuple
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
    short: list = field(default_factory=list)  # (what, need, have)

    @property
    def fits(self) -> bool:
        return not self.short


def tokens_for(cat: Catalog, canvas: tuple, frames: int) -> int:
    t = cat.data["tokens"]
    px = t["spatial_tokens_px"]
    latent_frames = math.ceil(frames / t["temporal_compression"])
    return (canvas[0] // px) * (canvas[1] // px) * latent_frames


def _encode_phase(cat: Catalog, budget: Budget, choice: Choice, process: int) -> tuple:
    """Text encoder, once per prompt: (gpu bytes | None, ram bytes)."""
    te_act = parse_size(cat.data["memory"]["text_encoder_activation"])
    te_need = choice.te.bytes + te_act
    if budget.gpu_bytes is None:
        return None, process + te_need
    if budget.unified:
        return te_need, process + te_need
    # ComfyUI keeps weights under its cap; the rest of the encoder waits in RAM.
    on_gpu = min(te_need, budget.weights_cap + te_act, budget.gpu_bytes)
    return on_gpu, process + (te_need - on_gpu)


def _shard_blocks(settings: dict, block: int) -> int:
    if settings.get("shard_size_bytes", "auto") != "auto":
        return max(1, parse_size(settings["shard_size_bytes"]) // block)
    return int(settings.get("max_shard_blocks") or 1)


def _preload(cat: Catalog, budget: Budget, settings: dict, dit: int, block: int, act: int, shard: int) -> int:
    """DiT bytes kept on the GPU: all of it when it fits with room to spare, else whole blocks that leave
    room for activations, ComfyUI's inference minimum and two shard buffers."""
    if settings.get("preload_bytes", "auto") != "auto":
        preload = min(parse_size(settings["preload_bytes"]), dit)
    else:
        resident_need = dit + parse_size(cat.data["memory"]["gpu_resident_overhead"])
        room = budget.gpu_bytes - act - parse_size(cat.data["comfyui"]["inference_minimum"])
        if resident_need <= budget.gpu_bytes and dit <= room and dit <= budget.weights_cap:
            return dit
        preload = max(0, min(room - 2 * shard, budget.weights_cap, dit))
    return dit if preload >= dit else (preload // block) * block


def estimate(cat: Catalog, budget: Budget, settings: dict, choice: Choice) -> Estimate:
    """Per-phase GPU and RAM needs of `choice` under `settings`, and what is short of `budget`."""
    mem = cat.data["memory"]
    process = parse_size(mem["comfyui_process_ram"])
    inference_min = parse_size(cat.data["comfyui"]["inference_minimum"])
    tokens = tokens_for(cat, choice.canvas, choice.frames)
    act = tokens * int(mem["activation_bytes_per_token"]) + parse_size(mem["activation_fixed"])
    dit, block = choice.dit.bytes, cat.block_bytes(choice.dit)
    from_disk = settings["stream_from"] == "disk"
    gpu = budget.gpu_bytes
    enc_gpu, enc_ram = _encode_phase(cat, budget, choice, process)

    # sample: the DiT, resident or streamed in shards of whole blocks
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

    # decode: VAE + one tile; the DiT has left the GPU (and waits in RAM when it streams from there)
    tile = settings["vae_tile_size"] + 2 * settings["vae_tile_overlap"]
    tile_ws = tile * tile * settings["vae_temporal_tile"] * int(mem["vae_decode_bytes_per_voxel"])
    video = choice.canvas[0] * choice.canvas[1] * choice.frames * int(mem["decoded_video_bytes_per_pixel_frame"])
    vae_need = choice.vae.bytes + choice.audio_vae.bytes + tile_ws
    if gpu is None:
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
            est.short.append(("GPU", act + buffers + inference_min, gpu, "sample"))
    if peak_ram > budget.ram_bytes:
        est.short.append(("RAM", peak_ram, budget.ram_bytes, max(phases, key=lambda p: phases[p]["ram_bytes"])))
    if disk > budget.disk_bytes:
        est.short.append(("disk", disk, budget.disk_bytes, "files"))
    return est


# --- settings merge ----------------------------------------------------------


def merge_settings(profile: Profile, config) -> tuple[dict, dict]:
    """profile < calibrated < overrides; returns (settings, where each value came from)."""
    settings = dict(profile.settings)
    source = {k: f"profile {profile.name}" for k in settings}
    if config is not None:
        for section, label in (("calibrated", "calibration"), ("overrides", "override")):
            for k, v in (getattr(config, section) or {}).items():
                settings[k] = v
                line = config.line_of(section, k)
                source[k] = f"{label} ({config.raw}:{line})" if config.raw else label
    return settings, source


# --- choosing ----------------------------------------------------------------


def _ladder(cat: Catalog, settings: dict) -> tuple[list, list]:
    max_w, max_h = settings["max_canvas"]
    min_w, min_h = settings.get("min_canvas") or cat.data["canvas"]["ladder"][-1]
    canvases = [tuple(c) for c in cat.data["canvas"]["ladder"]
                if c[0] * c[1] <= max_w * max_h and c[0] <= max_w and c[0] * c[1] >= min_w * min_h]
    if not canvases:
        canvases = [(min_w, min_h)]
    frames = [f for f in cat.data["frames"]["ladder"] if settings["min_frames"] <= f <= settings["max_frames"]]
    if frames and settings["max_frames"] not in frames:  # a cap between two rungs (e.g. 209) is itself a rung
        frames.append(settings["max_frames"])
    return canvases, frames or [settings["min_frames"]]


def _pick(weights: list[Weight], cat: Catalog, machine: Machine, settings: dict, key: str,
          formats: list | None = None) -> tuple[list[Weight], list[str]]:
    """Runnable weights -- files ComfyUI loads first (quality order among them, its own loader before a
    loader pack), then unreported ones, then ones reported broken; smaller first at equal rank -- plus
    reasons for those left out."""
    if settings.get(key, "auto") != "auto":
        return [w for w in weights if w.id == settings[key]], []
    out, skipped = [], []
    for w in weights:
        if formats is not None and w.format not in formats:
            continue
        ok, why = cat.runnable(w.format, machine)
        if ok:
            out.append(w)
        elif why not in skipped:
            skipped.append(why)
    return sorted(out, key=lambda w: (w.load_tier, -w.quality, w.comfyui_loads != "stock", w.bytes)), skipped


@dataclass
class Candidate:
    profile: Profile
    settings: dict
    source: dict
    budget: Budget
    choice: Choice
    est: Estimate
    skipped: list
    searched: bool  # canvas/frames chosen by search (not fixed by the user)
    machine: Machine

    @property
    def loads(self) -> tuple:
        """The chosen files' load tiers, worst first: a smaller tuple is a plan more sure to load in ComfyUI."""
        ch = self.choice
        return tuple(sorted((w.load_tier for w in (ch.dit, ch.te, ch.vae, ch.audio_vae)), reverse=True))

    def rank(self) -> tuple:
        ch = self.choice
        return (self.est.fits, tuple(-t for t in self.loads), ch.dit.quality, ch.canvas[0] * ch.canvas[1],
                ch.frames, -ch.dit.bytes)


def plan_profile(cat: Catalog, fp: dict, machine: Machine, profile: Profile, config) -> Candidate:
    settings, source = merge_settings(profile, config)
    if profile.match.get("backend") == ["cpu"]:
        settings["_cpu"] = True
    budget = make_budget(cat, fp, settings, getattr(config, "comfyui_path", None))
    formats = settings["formats"]
    if settings.get("quantization", "auto") != "auto":
        formats = [settings["quantization"]]
    dits, skipped = _pick(cat.dit, cat, machine, settings, "dit_weights", formats)
    if not dits:  # the user forced something this machine cannot run: keep it, warn later
        dits = [w for w in cat.dit if w.format in formats or w.id == settings.get("dit_weights")]
    tes, _ = _pick(cat.text_encoder, cat, machine, settings, "text_encoder_weights")
    vaes, _ = _pick(cat.vae, cat, machine, settings, "vae_weights")
    tes = tes or sorted(cat.text_encoder, key=lambda w: w.bytes)
    vaes = vaes or sorted(cat.vae, key=lambda w: w.bytes)
    audio = cat.audio_vae[0]
    canvases, frames = _ladder(cat, settings)
    fixed_canvas = source.get("max_canvas", "").startswith(("override", "calibration"))
    fixed_frames = source.get("max_frames", "").startswith(("override", "calibration"))
    if fixed_canvas:
        canvases = [tuple(settings["max_canvas"])]
    if fixed_frames:
        frames = [settings["max_frames"]]
    small = (canvases[-1], frames[0])

    def first_fit(dit, tes, vaes, canvas, nframes):
        for te in tes:
            for vae in vaes:
                ch = Choice(dit, te, vae, audio, canvas, nframes)
                est = estimate(cat, budget, settings, ch)
                if est.fits:
                    return ch, est
        return None

    def search(dits, tes, vaes):
        """The best DiT that fits at the smallest canvas, then the largest canvas and frames it allows."""
        chosen = next((found for dit in dits if (found := first_fit(dit, tes, vaes, *small))), None)
        if chosen is None:
            return None
        dit = chosen[0].dit
        for canvas in canvases:
            found = first_fit(dit, tes, vaes, canvas, frames[0])
            if found:
                chosen = found
                for nframes in reversed(frames):
                    bigger = first_fit(dit, tes, vaes, canvas, nframes)
                    if bigger:
                        chosen = bigger
                        break
                break
        return chosen

    # Files ComfyUI loads first; widen to unreported, then to reported-broken files only when nothing fits.
    chosen = None
    for level in sorted(set(LOAD_TIERS.values())):
        allowed = [[w for w in ws if w.load_tier <= level] for ws in (dits, tes, vaes)]
        if all(allowed) and (chosen := search(*allowed)):
            break
    if chosen is None:  # nothing fits: the cheapest plan, honestly marked
        dit = min(dits, key=lambda w: w.bytes)
        ch = Choice(dit, min(tes, key=lambda w: w.bytes), min(vaes, key=lambda w: w.bytes), audio, *small)
        return Candidate(profile, settings, source, budget, ch, estimate(cat, budget, settings, ch), skipped, False, machine)
    return Candidate(profile, settings, source, budget, chosen[0], chosen[1], skipped, not (fixed_canvas and fixed_frames), machine)


# --- the plan document ---------------------------------------------------------

PARTS = (("dit", "DiT", "dit_weights"), ("te", "text encoder", "text_encoder_weights"),
         ("vae", "video VAE", "vae_weights"), ("audio_vae", "audio VAE", None))


def _pool(cat: Catalog, part: str) -> list[Weight]:
    return {"dit": cat.dit, "te": cat.text_encoder, "vae": cat.vae, "audio_vae": cat.audio_vae}[part]


def _chosen_files(c: Candidate):
    """(part, label, weight, settings key) of each chosen file."""
    for part, label, key in PARTS:
        yield part, label, getattr(c.choice, part), key


def _user_set(c: Candidate, key: str | None) -> str | None:
    """The config line that forced this part's file (its id, or for the DiT its format), else None."""
    keys = [key, "quantization"] if key == "dit_weights" else [key]
    for k in keys:
        if k and c.settings.get(k, "auto") != "auto" and c.source.get(k, "").startswith(("override", "calibration")):
            return f"{k} from the {c.source[k]}"
    return None


def _why_not_loadable(cat: Catalog, c: Candidate, part: str, w: Weight) -> str:
    """Why no file of this part that ranks better for loading was used: not allowed, not runnable, or too big."""
    s = c.settings
    formats = [s["quantization"]] if s.get("quantization", "auto") != "auto" else s["formats"]
    not_allowed: list[str] = []
    cannot_run: list[str] = []
    left_out: list[str] = []  # runnable-check failures the rationale already gave ("Left out: ...")
    too_big: list[str] = []
    for alt in sorted(_pool(cat, part), key=lambda a: a.bytes):
        if alt.load_tier >= w.load_tier:
            continue
        ok, why = cat.runnable(alt.format, c.machine)
        if part == "dit" and alt.format not in formats:
            if alt.format not in not_allowed:
                not_allowed.append(alt.format)
        elif not ok and part == "dit" and why in c.skipped:
            if alt.format not in left_out:
                left_out.append(alt.format)
        elif not ok:
            if why not in cannot_run:
                cannot_run.append(why)
        else:
            too_big.append(f"{alt.variant + ' ' if alt.variant else ''}{alt.format} ({gb(alt.bytes)})")
    reasons = list(cannot_run)
    if left_out:
        reasons.append(f"{', '.join(left_out)} {'is' if len(left_out) == 1 else 'are'} left out above")
    if not_allowed:
        reasons.append(f"{', '.join(not_allowed)} {'is' if len(not_allowed) == 1 else 'are'} not among profile "
                       f"{c.profile.name}'s formats")
    if too_big:
        reasons.append(", ".join(too_big) + (" does not fit" if len(too_big) == 1 else " do not fit"))
    return "; ".join(reasons) or "none is listed"


def _loads_rationale(cat: Catalog, c: Candidate) -> list[str]:
    """One sentence per chosen file that needs a loader pack or is a fallback, with the report and its source."""
    out = []
    packs = cat.data.get("loader_packs") or {}
    for part, label, w, key in _chosen_files(c):
        name = w.file.get("name") or w.id
        what = f"{label} {w.variant + ' ' if w.variant else ''}{w.format} ({name})"
        if w.comfyui_loads == "with_loader_pack":
            pack = w.file.get("loader_pack")
            out.append(f"{what} loads with the custom node pack {pack} "
                       f"({(packs.get(pack) or {}).get('git', 'see loader_packs')}), not ComfyUI's own loader; "
                       f"reported loading: {w.file.get('comfyui_loads_source')}. "
                       "'h3kit models fetch --with-loaders' installs the pack.")
        elif w.load_tier and not _user_set(c, key):
            state = ("is reported not to load in ComfyUI" if w.comfyui_loads == "reported_broken"
                     else "has no report of loading in ComfyUI")
            better = "that loads" if w.comfyui_loads == "reported_broken" else "reported to load"
            out.append(f"Fallback: {what} {state}: {w.load_report}. It is used because no "
                       f"{label} file {better} fits or runs here: {_why_not_loadable(cat, c, part, w)}.")
    return out


def _loads_warnings(c: Candidate) -> list[str]:
    out = []
    for _, label, w, key in _chosen_files(c):
        if not w.load_tier:
            continue
        name = w.file.get("name") or w.id
        forced = _user_set(c, key)
        better = "that loads" if w.comfyui_loads == "reported_broken" else "reported to load"
        because = f"you set it ({forced})" if forced else f"no {label} file {better} in ComfyUI fits this machine"
        if w.comfyui_loads == "reported_broken":
            out.append(f"The {label} file {name} is reported not to load in ComfyUI: {w.load_report}. It is in the "
                       f"plan only because {because}; check that report before downloading it.")
        else:
            out.append(f"The {label} file {name} has not been reported loading in ComfyUI ({w.load_report}); "
                       f"it is in the plan because {because}.")
    return out


def _profile_reasons(c: Candidate) -> list[str]:
    """The profile's written reasons (its `why:` block) for limits that decided this plan."""
    out = []
    ch, s = c.choice, c.settings
    for key, why in c.profile.why.items():
        if not c.source.get(key, "").startswith("profile"):
            continue  # the user replaced the profile's value
        bound = {"max_frames": ch.frames == s.get("max_frames"),
                 "max_canvas": list(ch.canvas) == list(s.get("max_canvas") or [])}.get(key, True)
        if bound:
            out.append(f"{key} {s[key]} is profile {c.profile.name}'s limit: {why}.")
    return out


def _rationale(cat: Catalog, c: Candidate, why_profile: str) -> list[str]:
    b, e, ch, s = c.budget, c.est, c.choice, c.settings
    out = [why_profile]
    if b.gpu_bytes is None:
        out.append(f"No usable GPU: everything runs from RAM; RAM budget {gb(b.ram_bytes)} = {gb(b.ram_total)} "
                   f"- {gb(b.headroom)} OS headroom; disk {gb(b.disk_bytes)} free at {b.disk_path}.")
    elif b.unified:
        out.append(f"Unified memory counted once: GPU budget {gb(b.gpu_bytes)} (Metal's usable share {gb(b.gpu_total)} "
                   f"- {gb(b.reserve)} ComfyUI reserve) inside a RAM budget of {gb(b.ram_bytes)} = {gb(b.ram_total)} "
                   f"- {gb(b.headroom)} OS headroom; disk {gb(b.disk_bytes)} free.")
    else:
        out.append(f"GPU budget {gb(b.gpu_bytes)} = {gb(b.gpu_total)} card - {gb(b.reserve)} ComfyUI reserve "
                   f"(weights capped at {gb(b.weights_cap)}); RAM budget {gb(b.ram_bytes)} = {gb(b.ram_total)} "
                   f"- {gb(b.headroom)} OS headroom; disk {gb(b.disk_bytes)} free.")
    if b.gpu_count > 1:
        out.append(f"{b.gpu_count} GPUs found; ComfyUI runs a workflow on one, so the plan uses the largest.")
    for why in c.skipped:
        out.append(f"Left out: {why}.")
    why_format = (c.source.get("quantization", "profile") if s.get("quantization", "auto") != "auto"
                  else "highest-quality format that fits among files ComfyUI loads" if not ch.dit.load_tier
                  else "a fallback, see below")
    if b.gpu_bytes is None:
        out.append(f"DiT {ch.dit.variant} {ch.dit.format}: {gb(ch.dit.bytes)} ({why_format}), held whole in RAM with "
                   f"activations ({gb(e.activations)}) at {ch.canvas[0]}x{ch.canvas[1]}x{ch.frames}: sample phase "
                   f"{gb(e.phases['sample']['ram_bytes'])} of the {gb(b.ram_bytes)} RAM budget.")
    else:
        out.append(f"DiT {ch.dit.variant} {ch.dit.format}: {gb(ch.dit.bytes)} ({why_format}); {gb(e.preload)} of it "
                   f"stays on the GPU, leaving {gb(b.gpu_bytes - e.preload)} of the {gb(b.gpu_bytes)} GPU budget for "
                   f"activations ({gb(e.activations)}) at {ch.canvas[0]}x{ch.canvas[1]}x{ch.frames}.")
    if b.gpu_bytes is not None:
        if e.resident:
            out.append(f"Streaming off: all {cat.blocks} blocks ({gb(e.block)} each) stay resident "
                       f"(DiT {gb(ch.dit.bytes)} + activations {gb(e.activations)} fit the GPU budget).")
        else:
            resident_blocks = e.preload // e.block
            src = "the memory-mapped file on disk" if s["stream_from"] == "disk" else "RAM"
            out.append(f"Streaming on: {resident_blocks} of {cat.blocks} blocks ({gb(e.block)} each) resident "
                       f"(preload {gb(e.preload)}), the other {cat.blocks - resident_blocks} stream from {src} "
                       f"{e.shard_blocks} block(s) ({gb(e.shard)}) per transfer, two buffers on the GPU.")
        asked = s.get("shard_size_bytes", "auto")
        if asked != "auto" and parse_size(asked) != e.shard:
            out.append(f"shard_size_bytes {asked} was rounded to {e.shard_blocks} whole block(s) = {e.shard} bytes: "
                       "a transfer never splits a block.")
            if s["stream_from"] == "disk" and b.disk_kind == "hdd":
                out.append("The model disk is a spinning disk: streaming from it starves the GPU; move models to an SSD.")
    enc = e.phases["encode"]
    out.append(f"Text encoder {ch.te.format}: {gb(ch.te.bytes)}, runs once per prompt and is dropped before sampling "
               f"(peak {'' if enc['gpu_bytes'] is None else 'GPU ' + gb(enc['gpu_bytes']) + ', '}RAM {gb(enc['ram_bytes'])}).")
    out.append(f"Video VAE {ch.vae.format} {gb(ch.vae.bytes)} + audio VAE {gb(ch.audio_vae.bytes)}; decode tiles "
               f"{s['vae_tile_size']} px, overlap {s['vae_tile_overlap']}, {s['vae_temporal_tile']} frames: decode peak "
               + (f"{gb(e.phases['decode']['gpu_bytes'])} on the GPU." if b.gpu_bytes is not None else
                  f"{gb(e.phases['decode']['ram_bytes'])} of RAM (the DiT is still loaded)."))
    out.append(f"Canvas {ch.canvas[0]}x{ch.canvas[1]} at {ch.frames} frames ({e.tokens} tokens): "
               + ("the largest that fits within the profile's limit "
                  f"{s['max_canvas'][0]}x{s['max_canvas'][1]}x{s['max_frames']}." if c.searched and e.fits
                  else "the smallest the profile allows, and even that does not fit (see warnings)." if not e.fits
                  else "set by the user."))
    out += _profile_reasons(c)
    out += _loads_rationale(cat, c)
    out.append(f"Disk: {gb(e.disk)} of weight files against {gb(b.disk_bytes)} free.")
    args, env = s.get("comfyui_args") or [], s.get("env") or {}
    out.append(f"ComfyUI flags {args or 'none'} and env {env or 'none'} from {c.source.get('comfyui_args', 'the profile')} "
               "(version-dependent: deploy keeps only flags the installed ComfyUI accepts).")
    for k, src in sorted(c.source.items()):
        if src.startswith(("override", "calibration")):
            out.append(f"{k} = {s[k]!r} from the {src}.")
    return out


def _warnings(cat: Catalog, c: Candidate, config) -> list[str]:
    out = []
    for what, need, have, phase in c.est.short:
        out.append(f"{what} is short: the {phase} phase needs {gb(need)} but the {what} budget is {gb(have)} "
                   f"(short by {gb(need - have)}).")
    user = [k for k, v in c.source.items() if v.startswith("override")]
    if c.est.short and user:
        out.append(f"Your overrides ({', '.join(sorted(user))}) are kept as you set them although the plan does not fit; "
                   "remove them from config.yaml to let h3kit choose.")
    for k in ("quantization", "dit_weights", "text_encoder_weights", "vae_weights"):
        v = c.settings.get(k, "auto")
        if v == "auto":
            continue
        fmt = v if k == "quantization" else (cat.weight(v).format if cat.weight(v) else None)
        ok, why = cat.runnable(fmt, c.machine) if fmt else (True, "")
        if not ok:
            out.append(f"{k} = {v!r} ({c.source.get(k)}): {why}; kept because you set it.")
    out += _loads_warnings(c)
    avoid = cat.data.get("comfyui_avoid_args", [])
    bad = [a for a in c.settings.get("comfyui_args") or [] if a in avoid]
    if bad:
        out.append(f"comfyui_args {bad} are known to give black frames with H3 (it computes in bf16); remove them.")
    if config is not None:
        out += list(config.notes)
    return out


def make_plan(fingerprint: dict, *, profile: str | None = None, config=None) -> dict:
    """An h3kit.plan/1 for `fingerprint`. `profile` (a name) beats config.profile; 'auto'/None lets matching decide."""
    cat = catalog_mod.load()
    profiles = catalog_mod.load_profiles(cat)
    machine = Machine.from_fingerprint(fingerprint)
    wanted = profile or (config.profile if config is not None else "auto")
    if wanted != "auto" and wanted not in profiles:
        raise BadInput(f"There is no profile named {wanted!r}.",
                       f"Choose one of: auto, {', '.join(profiles)} (see 'h3kit profile list').")
    notes: list[str] = []
    if wanted != "auto":
        candidates = [profiles[wanted]]
        ok, why = catalog_mod.matches(profiles[wanted], fingerprint, machine)
        why_profile = f"Profile {wanted} was chosen by {'--profile' if profile else 'config.yaml'}" + \
            ("." if ok else f" although it does not match this machine ({why}).")
        if not ok:
            notes.append(f"Profile {wanted} does not match this machine ({why}); its plan may not suit it.")
    else:
        candidates = [p for p in profiles.values() if catalog_mod.matches(p, fingerprint, machine)[0]]
        if not candidates:
            candidates = [p for p in profiles.values() if p.match.get("backend") == [machine.backend]] or \
                [profiles["cpu-only"]]
            notes.append(f"No profile matches this machine exactly; tried {', '.join(p.name for p in candidates)}.")
        why_profile = ""
    plans = [plan_profile(cat, fingerprint, machine, p, config) for p in candidates]
    best = max(plans, key=Candidate.rank)
    if not why_profile:
        others = [p.profile.name for p in plans if p is not best]
        why_profile = (f"Profile {best.profile.name} matches this {machine.backend} machine"
                       + (f" and gives the best plan of {len(plans)} matching ({', '.join(others)} also matched)." if others else "."))
    ch, e, s, b = best.choice, best.est, best.settings, best.budget
    settings = {
        "dit_weights": ch.dit.id,
        "quantization": ch.dit.format,
        "text_encoder_weights": ch.te.id,
        "vae_weights": ch.vae.id,
        "audio_vae_weights": ch.audio_vae.id,
        "shard_size_bytes": e.shard,
        "preload_bytes": e.preload,
        "vae_tile_size": s["vae_tile_size"],
        "vae_tile_overlap": s["vae_tile_overlap"],
        "vae_temporal_tile": s["vae_temporal_tile"],
        "max_canvas": list(ch.canvas),
        "max_frames": ch.frames,
        "comfyui_args": list(s.get("comfyui_args") or []),
        "comfyui_args_version_dependent": True,
        "env": {k: str(v) for k, v in (s.get("env") or {}).items()},
        "stream_from": s["stream_from"],
        "streaming": {"resident": e.resident, "blocks": cat.blocks, "block_bytes": e.block,
                      "resident_blocks": cat.blocks if e.resident else e.preload // e.block,
                      "shard_blocks": e.shard_blocks},
    }
    return {
        "schema": SCHEMA,
        "model": cat.data["model"]["id"],
        "profile": best.profile.name,
        "fits": e.fits,
        "settings": settings,
        "comfyui_loads": {w.part: w.comfyui_loads for _, _, w, _ in _chosen_files(best)},
        "settings_source": {k: best.source.get(k, "planner") for k in settings},
        "budget": {"gpu_bytes": b.gpu_bytes, "ram_bytes": b.ram_bytes, "disk_bytes": b.disk_bytes,
                   "unified_memory": b.unified},
        "estimates": {"peak_gpu_bytes": e.peak_gpu, "peak_ram_bytes": e.peak_ram, "disk_bytes": e.disk,
                      "tokens": e.tokens, "activation_bytes": e.activations, "phases": e.phases},
        "candidates": [{"profile": p.profile.name, "fits": p.est.fits, "quantization": p.choice.dit.format,
                        "max_canvas": list(p.choice.canvas), "max_frames": p.choice.frames} for p in plans],
        "rationale": _rationale(cat, best, why_profile),
        "warnings": notes + _warnings(cat, best, config),
    }
