"""h3kit's streamed text encoder: when the plan runs it, what its encode phase holds, and what it costs in time.

ComfyUI's CLIPLoader (and h3kit's GGUF loader) hold the whole Qwen3-VL-32B
while it encodes a prompt: 13.1 GB (q2_k_m, the smallest file known to load)
to 25.28 GiB (int8_convrot) in the catalog, 51.5 GB in bf16 (not in it) --
more than a 16 GB Mac or PC has once the OS keeps its share. The streamed loader
(H3kitStreamedTextEncoderLoader, nodes/h3kit_streaming/te_load.py) reads
the language model's layers from the file one at a time and frees them after,
so the encode phase holds a few layers (the catalog's
memory.text_encoder_stream) instead of the file, at the price of one
sequential read of the file per prompt.

It reads what h3k_loader.STREAMED_FILES names (GGUF, and plain
bf16/fp16/fp32/fp8 safetensors without scale keys); ComfyUI's quantized
safetensors (int8_convrot, nvfp4_awq, convrot_w4a4, scaled fp8) need ComfyUI's
own converters and stay with CLIPLoader.

The rule (settings key text_encoder_stream): off never streams; on plans
only files the loader reads, streamed (held only when none is left); auto tries, file by file in the search's order,
the stock load first and then the streamed one, so streaming is chosen
exactly when the stock load does not fit, or when it lets a better file fit
than any held one -- and only where one read of the file per prompt takes at
most max_time_share of target_minutes at the disk's read rate.
"""

from __future__ import annotations

from dataclasses import dataclass

from h3kit.bundled import h3k_loader
from h3kit.core.units import gb
from h3kit.data.settings import TARGET_MINUTES
from h3kit.plan import page_cache

NODE = "H3kitStreamedTextEncoderLoader"
# On a CPU the loader reads these in place (one layer set, no ring); an fp8 file is converted as it is read.
READ_IN_PLACE = ("bf16", "fp16", "fp32")
GGUF_LOADERS = ("H3kitCLIPLoaderGGUF", "CLIPLoaderGGUF")


def readable(weight) -> bool:
    """Does the streamed loader read this text encoder file? GGUF, or the plain safetensors formats h3k_loader
    names (SAFETENSORS_STREAMABLE: the one list the loaders, their refusals and descriptions read too)."""
    name = str(getattr(weight.file, "name", None) or "").lower()
    if name.endswith(".gguf"):
        return weight.file.loader in GGUF_LOADERS
    return weight.format in h3k_loader.SAFETENSORS_STREAMABLE and name.endswith(".safetensors")


@dataclass(frozen=True)
class ReadTime:
    """One read of the text encoder file per prompt."""

    read_bytes: int
    bytes_per_s: int
    seconds: float
    rate_source: str

    def phrase(self) -> str:
        return (f"one {gb(self.read_bytes)} read per prompt, about {self.seconds:.0f} s at "
                f"{self.bytes_per_s / 1e9:.2g} GB/s ({self.rate_source})")


def read_time(cat, budget, weight, measured: int | None = None) -> ReadTime | None:
    """The time one read of `weight` takes: at `measured` (settings.disk_read_bytes_per_s, which calibration's
    disk probe writes), else at the rate the catalog assumes for the plan's disk (None: no figures)."""
    ts = cat.memory.text_encoder_stream
    if ts is None:
        return None
    if measured:
        return ReadTime(int(weight.bytes), int(measured), weight.bytes / measured,
                        "measured by 'h3kit calibrate' (disk_read_bytes_per_s)")
    kind = budget.disk_kind if budget.disk_kind in dict(ts.disk_read) else "unknown"
    rate = ts.read_rate(kind)
    src = (f"assumed for {'an' if kind in ('ssd', 'hdd') else 'a disk of'} {kind if kind != 'unknown' else 'unknown kind'}"
           " until 'h3kit calibrate' measures it, catalog memory.text_encoder_stream.disk_read_per_s")
    return ReadTime(int(weight.bytes), rate, weight.bytes / rate, src)


def within_time(cat, budget, weight, target_minutes: float | None, measured: int | None = None) -> bool:
    """One read per prompt takes at most max_time_share of the clip's time target."""
    rt = read_time(cat, budget, weight, measured)
    if rt is None:
        return False
    target_s = float(target_minutes or TARGET_MINUTES) * 60.0
    return rt.seconds <= cat.memory.text_encoder_stream.max_time_share * target_s


def options(cat, settings, budget, tes: list) -> list[tuple]:
    """(text encoder, streamed?) in the order the search tries them (module docstring)."""
    mode = str(settings.text_encoder_stream)
    can_read = [te for te in tes if cat.memory.text_encoder_stream is not None and readable(te)]
    if mode == "on" and can_read:  # on: only files the loader reads, all streamed
        return [(te, True) for te in can_read]
    out = []
    for te in tes:
        can = te in can_read
        out.append((te, False))
        if mode == "auto" and can and within_time(cat, budget, te, settings.target_minutes,
                                                  settings.disk_read_bytes_per_s):
            out.append((te, True))
    return out


def _in_place(budget, weight) -> bool:
    """Plain safetensors on a CPU are read in place: one layer set, no ring."""
    return budget.gpu_bytes is None and weight.format in READ_IN_PLACE


def ring_bytes(cat, budget, weight) -> int:
    ts = cat.memory.text_encoder_stream
    if _in_place(budget, weight):
        return 0
    return (ts.prefetch_layers + 1) * -(-int(weight.bytes) // ts.layers)


def working_bytes(cat, budget, weight) -> int:
    """The layers in use, the activations with ComfyUI's fp32 cast of the largest weight (text_encoder_activation,
    as for a held encoder) and the vision tower."""
    ts = cat.memory.text_encoder_stream
    sets = ts.in_place_layer_sets if _in_place(budget, weight) else ts.ring_layer_sets
    return sets * ts.layer_held + cat.memory.text_encoder_activation + ts.vision_tower


def held_encode_phase(cat, budget, te, process: int) -> tuple:
    """The text encoder loaded whole by ComfyUI: (gpu bytes | None, ram bytes)."""
    te_act = cat.memory.text_encoder_activation
    te_need = te.bytes + te_act
    if budget.gpu_bytes is None:
        return None, process + te_need
    if budget.unified:
        return te_need, process + te_need
    # ComfyUI keeps weights under its cap; the rest of the encoder waits in RAM.
    on_gpu = min(te_need, budget.weights_cap + te_act, budget.gpu_bytes)
    return on_gpu, process + (te_need - on_gpu)


def encode_phase(cat, budget, weight, process: int) -> tuple:
    """(gpu bytes | None, ram bytes) of the encode phase with the streamed loader: on a discrete GPU the layers in
    use are on the card and the ring in RAM; on a CPU and in Apple's one pool everything is in RAM."""
    work, ring = working_bytes(cat, budget, weight), ring_bytes(cat, budget, weight)
    if budget.gpu_bytes is None:
        return None, process + work + ring
    if budget.unified:
        return work, process + work + ring
    return work, process + ring


def te_page_cache(cat, budget, weight, encode_ram: int, setting: str) -> tuple[str, str]:
    """(the node's page_cache, a clause saying why): the settings' use / bypass when they name one; else bypass
    when the page cache cannot keep the file beside the encode (then every prompt reads it from the disk anyway)."""
    if setting in ("use", "bypass"):
        return setting, f"page_cache: {setting} from the settings"
    cs = page_cache.cache_share(int(weight.bytes), budget.ram_total, encode_ram, budget.headroom)
    if cs.case == page_cache.FITS:
        return "use", (f"page_cache: use, since the page cache can keep the {gb(weight.bytes)} file beside the "
                       f"encode ({gb(cs.room_bytes)} of room) and the next prompt reads it from memory")
    return "bypass", (f"page_cache: bypass, since the page cache can keep {gb(cs.room_bytes)} beside the encode, "
                      f"less than the {gb(weight.bytes)} file, so every prompt reads it from the disk anyway")


def _quality_sentence(cat, budget, te, measured: int | None) -> str:
    """Which streamed file the plan took and why: with memory out of the way, quality within the time share."""
    def q(w) -> int:
        fmt = cat.formats.get(w.format)
        return fmt.quality if fmt else 0

    others = [w for w in cat.text_encoder if readable(w) and w.id != te.id and w.comfyui_loads != "reported_broken"]
    slower = [w for w in others if q(w) > q(te)]
    lower = sorted({w.format for w in others if q(w) <= q(te)})
    out = (f"Streamed, memory no longer decides the text encoder: {te.format} (quality {q(te)}) is the best-ranked "
           "file the streamed loader reads whose one read per prompt stays within "
           f"{cat.memory.text_encoder_stream.max_time_share:.0%} of target_minutes")
    out += "".join(f"; {w.format} ranks higher, but {read_time(cat, budget, w, measured).phrase()}" for w in slower)
    return out + (f"; it ranks above {', '.join(lower)}." if lower else ".")


@dataclass(frozen=True)
class TeDecision:
    """Whether h3kit's streamed loader runs the chosen text encoder, decided once in the search (search._Space
    .candidate) and carried on the candidate: the plan's settings.text_encoder_streaming, the clip's time and the
    rationale read it, none works it out again."""

    enabled: bool
    why: str  # the clause after "because"
    held_encode_ram_bytes: int  # ComfyUI's own load of the file, for comparison
    held_encode_gpu_bytes: int | None = None
    read: ReadTime | None = None  # enabled: one read of the file per prompt
    page_cache: str | None = None  # enabled: the node's page_cache input
    cache_why: str = ""
    encode_ram_bytes: int | None = None
    encode_gpu_bytes: int | None = None

    def clip_rates(self, timing: dict) -> dict:
        """`timing` with the streamed read of the file counted in each prompt's text encode."""
        if self.read is None:
            return timing
        return {**timing, "text_encode_s": float(timing.get("text_encode_s") or 0.0) + self.read.seconds}

    def doc(self, cat) -> dict:
        """plan.settings.text_encoder_streaming as a mapping."""
        out = {"enabled": self.enabled, "why": self.why, "held_encode_ram_bytes": self.held_encode_ram_bytes}
        if not self.enabled:
            return out
        rt = self.read
        out.update(node=NODE, prefetch_layers=cat.memory.text_encoder_stream.prefetch_layers,
                   page_cache=self.page_cache, read_bytes=rt.read_bytes, disk_bytes_per_s=rt.bytes_per_s,
                   read_s=round(rt.seconds, 1), rate_source=rt.rate_source, encode_ram_bytes=self.encode_ram_bytes,
                   encode_gpu_bytes=self.encode_gpu_bytes)
        return out


def _held_why(cat, b, te, settings, held_enc: int) -> str:
    mode = str(settings.text_encoder_stream)
    if mode == "off":
        return "text_encoder_stream is off in the settings"
    if not readable(te) or cat.memory.text_encoder_stream is None:
        return (f"the {te.format} file is ComfyUI's quantized safetensors, which the streamed loader does not "
                "read (CLIPLoader loads it whole)" if not readable(te) else "the catalog has no streamed figures")
    if mode == "auto" and not within_time(cat, b, te, settings.target_minutes, settings.disk_read_bytes_per_s):
        rt = read_time(cat, b, te, settings.disk_read_bytes_per_s)
        return (f"streaming it would take {rt.phrase()}, more than "
                f"{cat.memory.text_encoder_stream.max_time_share:.0%} of target_minutes")
    return (f"ComfyUI's own load fits: the encode phase needs {gb(held_enc)} of the {gb(b.ram_bytes)} RAM "
            "budget, and streaming would only add a read of the file per prompt")


def decide(cat, b, settings, choice, est) -> TeDecision:
    """The decision for `choice` (its `te_streamed` is the search's) with its memory estimate `est`."""
    te = choice.te
    held_gpu, held_enc = held_encode_phase(cat, b, te, cat.memory.comfyui_process_ram)
    if not choice.te_streamed:
        return TeDecision(False, _held_why(cat, b, te, settings, held_enc), held_enc, held_gpu)
    enc = est.phases["encode"]
    cache, cache_why = te_page_cache(cat, b, te, enc["ram_bytes"], str(settings.page_cache))
    held_short = held_enc > b.ram_bytes or (held_gpu is not None and held_gpu > b.gpu_bytes)
    if str(settings.text_encoder_stream) == "on":
        why = "text_encoder_stream is on in the settings"
    elif held_short:
        why = (f"ComfyUI's own load of the {te.format} file would need {gb(held_enc)} in the encode phase against "
               f"the {gb(b.ram_bytes)} RAM budget" + ("" if held_gpu is None or b.unified else
                                                     f" ({gb(held_gpu)} of it on the GPU, whose budget is "
                                                     f"{gb(b.gpu_bytes)})"))
    else:
        why = (f"it lets the {te.format} file run in {gb(enc['ram_bytes'])} instead of the "
               f"{gb(held_enc)} ComfyUI's own load needs, with the rest of the run where it fits")
    return TeDecision(True, why, held_enc, held_gpu, read_time(cat, b, te, settings.disk_read_bytes_per_s), cache,
                      cache_why, enc["ram_bytes"], enc["gpu_bytes"])


def rationale(cat, c) -> list[str]:
    """The plan's sentences about the text encoder, read off the candidate's decision (`c.te_decision`)."""
    d, b, te = c.te_decision, c.budget, c.choice.te
    if not d.enabled:
        return [f"The text encoder is loaded whole, not streamed, because {d.why}."]
    ts = cat.memory.text_encoder_stream
    ring = ring_bytes(cat, b, te)
    held_as = (f"{ts.in_place_layer_sets} layer read in place" if not ring else
               f"{ts.ring_layer_sets} layers in use and a ring of {ts.prefetch_layers + 1} x "
               f"{gb(ring // (ts.prefetch_layers + 1))} read ahead")
    return [
        f"h3kit streams the text encoder ({te.format}, {gb(te.bytes)}) with its {NODE} node because {d.why}: the "
        f"{ts.layers} layers are read from the file one at a time ({held_as}, {gb(ts.layer_held)} a layer in bf16), "
        f"the vision tower ({gb(ts.vision_tower)}) only while an image is encoded, and nothing stays after the "
        f"encode: encode phase {gb(d.encode_ram_bytes)} of RAM"
        + ("" if d.encode_gpu_bytes is None or b.unified else f" and {gb(d.encode_gpu_bytes)} on the GPU")
        + f" (ComfyUI's own load: {gb(d.held_encode_ram_bytes)}).",
        _quality_sentence(cat, b, te, c.settings.disk_read_bytes_per_s),
        f"Text encoder streamed: {d.read.phrase()}, counted in the clip's time; {d.cache_why}."]
