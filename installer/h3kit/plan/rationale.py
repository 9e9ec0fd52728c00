"""The plan's prose: one sentence per decision with its numbers (the rationale), and the warnings.

Everything here reads a finished `Candidate`; nothing decides. The sentences
name the figures the planner used, so a reader can redo the arithmetic.
"""

from __future__ import annotations

from h3kit.core.units import gb
from h3kit.data import published_runs
from h3kit.data.catalog import Catalog, Weight
from h3kit.data.settings import AUTO
from h3kit.plan.search import Candidate

# (Choice attribute, the name a person reads, the settings key that can force that file)
PARTS = (("dit", "DiT", "dit_weights"), ("te", "text encoder", "text_encoder_weights"),
         ("vae", "video VAE", "vae_weights"), ("audio_vae", "audio VAE", None))
# ComfyUI's MiniMax H3 video VAE (comfy/ldm/minimax/vae.py): 256 px tiles unless h3kit's node sets others,
# and 17-frame clips fixed when it is built (changing them would change what it outputs).
H3_VAE_OWN_TILE = 256
H3_VAE_CLIP_FRAMES = 17


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
        if k and getattr(c.settings, k) != AUTO and c.source.get(k, "").startswith(("override", "calibration")):
            return f"{k} from the {c.source[k]}"
    return None


def _why_not_loadable(cat: Catalog, c: Candidate, part: str, w: Weight) -> str:
    """Why no file of this part that ranks better for loading was used: not allowed, not runnable, or too big."""
    s = c.settings
    formats = [s.quantization] if s.quantization != AUTO else list(s.formats)
    not_allowed: list[str] = []
    cannot_run: list[str] = []
    left_out: list[str] = []  # runnable-check failures the rationale already gave ("Left out: ...")
    too_big: list[str] = []
    for alt in sorted(_pool(cat, part), key=lambda a: a.bytes):
        if alt.load_tier >= w.load_tier:
            continue
        ok, why = cat.runnable(alt.format, c.machine, alt.part, c.probe)
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
    packs = cat.loader_packs
    for part, label, w, key in _chosen_files(c):
        name = w.file.name or w.id
        what = f"{label} {w.variant + ' ' if w.variant else ''}{w.format} ({name})"
        streamed_te = part == "te" and c.choice.te_streamed
        if w.comfyui_loads == "with_h3kit_loader":
            pack = w.file.loader_pack
            node = "H3kitStreamedTextEncoderLoader" if streamed_te else w.file.loader
            out.append(f"{what} loads through h3kit's own node {node} (it reuses {pack}'s "
                       f"dequantizing ops; the stock node fails: {w.file.comfyui_compat}); shown by "
                       f"{w.file.comfyui_loads_source}. 'h3kit models fetch --with-loaders' installs {pack}.")
        elif w.comfyui_loads == "with_loader_pack":
            pack = w.file.loader_pack
            out.append(f"{what} loads with the custom node pack {pack} "
                       f"({packs[pack].git if pack in packs else 'see loader_packs'}), not ComfyUI's own loader; "
                       f"reported loading: {w.file.comfyui_loads_source}. "
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
        name = w.file.name or w.id
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
        bound = {"max_frames": ch.frames == s.max_frames,
                 "max_canvas": ch.canvas == s.max_canvas}.get(key, True)
        if bound:
            out.append(f"{key} {c.written[key]} is profile {c.profile.name}'s limit: {why}.")
    return out


def _mac_native_engine(backend: str) -> list[str]:
    """On a Mac: how the native engine compared with ComfyUI on the same Mac, figures from published_runs.yaml."""
    pair = published_runs.load().native_comparison() if backend == "mps" else None
    if pair is None:
        return []
    native, comfy = pair
    fast, slow = native.published.seconds_per_step, comfy.published.seconds_per_step
    return [f"On an {native.machine.gpu} the native engine antirez/h3.c ran H3 about {slow / fast:.1f}x faster than "
            f"ComfyUI ({fast:g} vs {slow:g} s/step; normalised to equal rows its poster gives "
            f"~{slow / native.normalised.seconds_per_step:.1f}x; {native.source.split(' (')[0]}), but h3kit plans "
            "ComfyUI."]


def rationale_for(cat: Catalog, c: Candidate, why_profile: str) -> list[str]:
    """One sentence per decision in `c`, with the numbers it rests on."""
    b = c.budget
    out = [why_profile, _budget_sentence(b)]
    if b.gpu_count > 1:
        out.append(f"{b.gpu_count} GPUs found; ComfyUI runs a workflow on one, so the plan uses the largest.")
    out += [f"Left out: {why}." for why in c.skipped]
    out += _dit_sentences(cat, c)
    out += _parts_sentences(c)
    out += _canvas_and_sources(cat, c)
    return out


def _budget_sentence(b) -> str:
    """What the machine offers the plan: the GPU and RAM budgets and the free disk."""
    if b.gpu_bytes is None:
        return (f"No usable GPU: everything runs from RAM; RAM budget {gb(b.ram_bytes)} = {gb(b.ram_total)} "
                f"- {gb(b.headroom)} OS headroom; disk {gb(b.disk_bytes)} free at {b.disk_path}.")
    if b.unified:
        return (f"Unified memory counted once: GPU budget {gb(b.gpu_bytes)} (Metal's usable share {gb(b.gpu_total)} "
                f"- {gb(b.reserve)} ComfyUI reserve) inside a RAM budget of {gb(b.ram_bytes)} = {gb(b.ram_total)} "
                f"- {gb(b.headroom)} OS headroom; disk {gb(b.disk_bytes)} free.")
    return (f"GPU budget {gb(b.gpu_bytes)} = {gb(b.gpu_total)} card - {gb(b.reserve)} ComfyUI reserve "
            f"(weights capped at {gb(b.weights_cap)}); RAM budget {gb(b.ram_bytes)} = {gb(b.ram_total)} "
            f"- {gb(b.headroom)} OS headroom; disk {gb(b.disk_bytes)} free.")


def _dit_sentences(cat: Catalog, c: Candidate) -> list[str]:
    """How the DiT is held (or streamed), and the shard size when it was rounded to whole blocks."""
    b, e, ch, s = c.budget, c.est, c.choice, c.settings
    out = []
    why_format = (c.source.get("quantization", "profile") if s.quantization != AUTO
                  else "highest-quality format that fits among files ComfyUI loads" if not ch.dit.load_tier
                  else "a fallback, see below")
    cast = "" if e.block_held == e.block else f" as {cat.comfyui.dtype_on(b.backend)}"
    if b.gpu_bytes is None and e.streamed:
        out.append(f"DiT {ch.dit.variant} {ch.dit.format}: {gb(ch.dit.bytes)} ({why_format}), streamed from disk by "
                   f"h3kit's loader: {e.resident_blocks} of {cat.blocks} blocks resident{cast} "
                   f"({gb(e.resident_blocks * e.block_held)}) and one computing block ({gb(e.block_held)}) that each "
                   "block is read into " + (f"(from a ring of {gb(e.ring)} read past the page cache)" if e.ring else
                                            "(the blocks read ahead wait in the OS's page cache)")
                   + f", with activations ({gb(e.activations)}) at "
                   f"{ch.canvas[0]}x{ch.canvas[1]}x{ch.frames}: sample phase {gb(e.phases['sample']['ram_bytes'])} of "
                   f"the {gb(b.ram_bytes)} RAM budget.")
    elif b.gpu_bytes is None:
        out.append(f"DiT {ch.dit.variant} {ch.dit.format}: {gb(ch.dit.bytes)} ({why_format}), held whole in RAM"
                   + (f"{cast} ({gb(e.dit_held)}: ComfyUI casts it to the dtype it computes in there)" if cast else "")
                   + f" with activations ({gb(e.activations)}) at {ch.canvas[0]}x{ch.canvas[1]}x{ch.frames}: "
                   f"sample phase {gb(e.phases['sample']['ram_bytes'])} of the {gb(b.ram_bytes)} RAM budget.")
    else:
        out.append(f"DiT {ch.dit.variant} {ch.dit.format}: {gb(ch.dit.bytes)} ({why_format}); {gb(e.preload)} of it "
                   f"stays on the GPU, leaving {gb(b.gpu_bytes - e.preload)} of the {gb(b.gpu_bytes)} GPU budget for "
                   f"activations ({gb(e.activations)}) at {ch.canvas[0]}x{ch.canvas[1]}x{ch.frames}.")
    if b.gpu_bytes is not None and e.streamed:
        out.append(f"h3kit's loader keeps {e.resident_blocks} of {cat.blocks} blocks ({gb(e.block)} each) resident "
                   f"(preload {gb(e.preload)}) and reads the other {cat.blocks - e.resident_blocks} from the file on "
                   f"disk as they are needed, through a ring of {gb(e.ring)} in RAM.")
    elif b.gpu_bytes is not None:
        if e.resident:
            out.append(f"ComfyUI's own loading: all {cat.blocks} blocks ({gb(e.block)} each) stay resident "
                       f"(DiT {gb(ch.dit.bytes)} + activations {gb(e.activations)} fit the GPU budget).")
        else:
            resident_blocks = e.preload // e.block
            src = "the memory-mapped file on disk" if s.stream_from == "disk" else "RAM"
            out.append(f"ComfyUI's own loading: {resident_blocks} of {cat.blocks} blocks ({gb(e.block)} each) resident "
                       f"(preload {gb(e.preload)}), the other {cat.blocks - resident_blocks} stream from {src} "
                       f"{e.shard_blocks} block(s) ({gb(e.shard)}) per transfer, two buffers on the GPU.")
    asked = s.shard_size_bytes
    if b.gpu_bytes is not None and asked != AUTO and asked != e.shard:
        out.append(f"shard_size_bytes {c.written['shard_size_bytes']} was rounded to {e.shard_blocks} whole "
                   f"block(s) = {e.shard} bytes: a transfer never splits a block.")
        if s.stream_from == "disk" and b.disk_kind == "hdd":
            out.append("The model disk is a spinning disk: streaming from it starves the GPU; move models to an SSD.")
    return out


def _parts_sentences(c: Candidate) -> list[str]:
    """The text encoder's and the VAEs' phases."""
    b, e, ch, s = c.budget, c.est, c.choice, c.settings
    out = []
    enc = e.phases["encode"]
    streamed = ", streamed layer by layer from the file by h3kit's loader," if ch.te_streamed else ""
    out.append(f"Text encoder {ch.te.format}: {gb(ch.te.bytes)}{streamed} runs once per prompt and is dropped before sampling "
               f"(peak {'' if enc['gpu_bytes'] is None else 'GPU ' + gb(enc['gpu_bytes']) + ', '}RAM {gb(enc['ram_bytes'])}).")
    out.append(f"Video VAE {ch.vae.format} {gb(ch.vae.bytes)} + audio VAE {gb(ch.audio_vae.bytes)}; decode tiles "
               f"{s.vae_tile_size} px, overlap {s.vae_tile_overlap} (h3kit Tiled VAE Decode sets them on the H3 "
               f"video VAE for the decode; its own are {H3_VAE_OWN_TILE} px): decode peak "
               + (f"{gb(e.phases['decode']['gpu_bytes'])} on the GPU." if b.gpu_bytes is not None else
                  f"{gb(e.phases['decode']['ram_bytes'])} of RAM "
                  + ("(with the resident blocks)." if e.streamed else "(the DiT is still loaded).")))
    out.append(f"The H3 video VAE chunks time itself ({H3_VAE_CLIP_FRAMES}-frame clips), so vae_temporal_tile "
               f"({s.vae_temporal_tile} frames) only applies to other VAEs.")
    return out


def _canvas_and_sources(cat: Catalog, c: Candidate) -> list[str]:
    """The canvas, the limits and files that decided it, the disk, the flags, and every value config.yaml set."""
    b, e, ch, s = c.budget, c.est, c.choice, c.settings
    out = []
    out.append(f"Canvas {ch.canvas[0]}x{ch.canvas[1]} at {ch.frames} frames ({e.tokens} tokens): "
               + ("the largest that fits within the profile's limit "
                  f"{s.max_canvas[0]}x{s.max_canvas[1]}x{s.max_frames}." if c.searched and e.fits
                  else "the smallest the profile allows, and even that does not fit (see warnings)." if not e.fits
                  else "set by the user."))
    out += _profile_reasons(c)
    out += _loads_rationale(cat, c)
    out.append(f"Disk: {gb(e.disk)} of weight files against {gb(b.disk_bytes)} free.")
    out += _mac_native_engine(b.backend)
    args, env = list(s.comfyui_args), dict(s.env)
    out.append(f"ComfyUI flags {args or 'none'} and env {env or 'none'} from {c.source.get('comfyui_args', 'the profile')} "
               "(version-dependent: deploy keeps only flags the installed ComfyUI accepts).")
    for k, src in sorted(c.source.items()):
        if src.startswith(("override", "calibration")):
            value = c.written[k]
            if isinstance(value, bool) and k == "stream_dit":  # YAML 1.1 reads a bare on/off as true/false
                value = "on" if value else "off"
            out.append(f"{k} = {value!r} from the {src}.")
    return out


def warnings_for(cat: Catalog, c: Candidate, config) -> list[str]:
    """What is short and by how much, settings kept although they do not suit, files not known to load."""
    out = []
    for what, need, have, phase in c.est.short:
        out.append(f"{what} is short: the {phase} phase needs {gb(need)} but the {what} budget is {gb(have)} "
                   f"(short by {gb(need - have)}).")
    user = [k for k, v in c.source.items() if v.startswith("override")]
    if c.est.short and user:
        out.append(f"Your overrides ({', '.join(sorted(user))}) are kept as you set them although the plan does not fit; "
                   "remove them from config.yaml to let h3kit choose.")
    for k in ("quantization", "dit_weights", "text_encoder_weights", "vae_weights"):
        v = getattr(c.settings, k)
        if v == AUTO:
            continue
        fmt = v if k == "quantization" else (cat.weight(v).format if cat.weight(v) else None)
        part = cat.weight(v).part if k != "quantization" and cat.weight(v) else "dit"
        ok, why = cat.runnable(fmt, c.machine, part, c.probe) if fmt else (True, "")
        if not ok:
            out.append(f"{k} = {v!r} ({c.source.get(k)}): {why}; kept because you set it.")
    out += _loads_warnings(c)
    avoid = cat.avoid_args
    bad = [a for a in c.settings.comfyui_args if a in avoid]
    if bad:
        out.append(f"comfyui_args {bad} are known to give black frames with H3 (it computes in bf16); remove them.")
    if config is not None:
        out += list(config.notes)
    return out
