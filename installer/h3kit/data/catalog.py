"""The model catalog (profiles/models/*.yaml) and the named profiles (profiles/*.yaml).

Both are data: every model size, block count, format rule and measured point
lives in the YAML with its source, and every profile's match rules and
settings live in its own file. This module reads them, checks them (errors
name file:line and key) and turns them into typed values -- sizes in bytes,
canvases as tuples, the model's shape in data/architecture.py, its other
sections in data/catalog_sections.py -- so the planner does arithmetic and
never parses; no raw YAML outlives the check. It also answers two questions
the planner asks: which weight variants exist, and can this machine run a
given format.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from h3kit.core.errors import BadInput
from h3kit.core.paths import asset_dir
from h3kit.core.units import gb
from h3kit.data import figures, format_support, speed
from h3kit.data import throughput as throughput_mod
from h3kit.data import settings as settings_mod
from h3kit.data.architecture import (Architecture, Canvas, Frames, Tokens, parse_architecture, parse_canvas,
                                     parse_frames, parse_tokens)
from h3kit.data.catalog_sections import (LOAD_TIERS, ComfyH3, Limits, LoraSampling, Model, Sampling, WeightFile,
                                         check_loads, parse_comfyui_h3, parse_limits, parse_loader_packs,
                                         parse_lora_sampling, parse_measured, parse_model, parse_placement,
                                         parse_reported_setups, parse_sampling, parse_sequence_caps, parse_weight_file)
from h3kit.data.comfy_versions import ComfyVersions, parse_comfy_versions
from h3kit.data.figures import DTYPE_BYTES, ComfyMemory, MemoryModel
from h3kit.data.fingerprint import Fingerprint
from h3kit.data.yamlio import Problems, YamlDoc, is_one_of, load_yaml, parse_size

CATALOG_SCHEMA = "h3kit.catalog/1"
PROFILE_SCHEMA = "h3kit.profile/1"
BACKENDS = ("cuda", "rocm", "xpu", "mps", "directml", "cpu")
REQUIREMENT_KEYS = ("backends", "not_backends", "min_compute_capability", "min_cuda_driver", "compute_capability_major",
                    "loader_pack")


@dataclass(frozen=True)
class Weight:
    """One weight file variant; `file` is what a download needs (folder, loader, name, urls, sha256) and whether
    ComfyUI loads it."""

    id: str
    part: str  # dit | text_encoder | vae | audio_vae | lora
    format: str
    bytes: int
    quality: int
    variant: str | None = None  # full | pruned (DiT only)
    file: WeightFile = WeightFile()
    sampling: LoraSampling | None = None  # a LoRA's own sampler and shifts (lora[].sampling), else None

    @property
    def comfyui_loads(self) -> str:
        """stock | with_loader_pack | with_h3kit_loader | unknown | reported_broken (file.comfyui_loads)."""
        return self.file.comfyui_loads

    @property
    def load_tier(self) -> int:
        """0 loads (stock or with its pack), 1 unknown, 2 reported broken: the planner tries lower tiers first."""
        return LOAD_TIERS[self.comfyui_loads]

    @property
    def load_report(self) -> str:
        """The load problem or uncertainty in words, with where it was reported."""
        note = self.file.comfyui_compat or self.file.unverified or ""
        src = self.file.comfyui_loads_source
        return f"{note}; see {src}" if note and src else note or (f"see {src}" if src else "")


@dataclass(frozen=True)
class Machine:
    """What the format rules look at, read once from a fingerprint."""

    backend: str  # cuda | rocm | xpu | mps | directml | cpu
    compute_capability: tuple | None
    cuda_driver: tuple | None
    comfyui_version: str | None = None  # the target ComfyUI, when known (make_plan's comfyui_version)
    torch_version: str | None = None  # its torch, when known: some reports hold only from a torch release

    @classmethod
    def from_fingerprint(cls, fingerprint: Fingerprint) -> "Machine":
        gpu = fingerprint.primary_gpu
        if gpu is None:
            return cls("cpu", None, None)
        return cls(fingerprint.backend, _version(gpu.compute_capability), _version(gpu.cuda_driver_version))


_version = format_support.version


@dataclass(frozen=True)
class Catalog:
    """A checked catalog, every section typed (check_catalog builds it; tests copy it with dataclasses.replace).
    Nothing here holds the YAML itself: a figure the planner or a report needs is a typed attribute."""

    path: Path
    model: Model
    architecture: Architecture
    canvas: Canvas
    canvas_ladder: tuple  # ((width, height), ...), largest first: the canvases the planner tries
    frames: Frames
    frames_ladder: tuple  # the frame counts the planner tries
    tokens: Tokens
    memory: MemoryModel
    comfyui: ComfyMemory
    formats: dict  # name -> format_support.Format
    limits: Limits
    dit: list[Weight]
    text_encoder: list[Weight]
    vae: list[Weight]
    audio_vae: list[Weight]
    lora: list[Weight] = field(default_factory=list)
    reference_dit: list[Weight] = field(default_factory=list)  # `dit_reference:`, the ref2va twins of `dit:`
    sampling: Sampling = Sampling()
    comfyui_h3: ComfyH3 = ComfyH3()
    comfyui_versions: ComfyVersions = ComfyVersions()
    loader_packs: dict = field(default_factory=dict)  # name -> LoaderPack
    avoid_args: tuple = ()  # ComfyUI flags that harm this model
    placement: tuple = ()  # Placement, ...: where ComfyUI puts a part's weights off the machine's backend
    sequence_caps: tuple = ()  # SequenceCap, ...: the longest H3 sequence a backend is known to run
    reported_setups: tuple = ()  # ReportedSetup, ...
    measured: tuple = ()  # MeasuredPoint, ...: what users reported (scripts/validate_estimator.py)
    sequence: speed.Sequence | None = None  # the DiT's joint sequence, for the time estimate
    work: speed.Work | None = None  # FLOPs outside the DiT blocks
    presets: dict = field(default_factory=dict)  # name -> speed.Preset
    throughput: Any = None  # data.throughput.Throughput read beside the catalog (load()), so planning reads no file

    @property
    def blocks(self) -> int:
        """The DiT's block count (architecture.blocks), the figure the planner reads most."""
        return self.architecture.blocks

    def block_bytes(self, weight: Weight) -> int:
        return -(-weight.bytes // self.blocks)

    def streamed_block_factor(self, weight: Weight, backend: str) -> float:
        """Bytes in memory per byte of file for one block h3kit's streamed loader computes with: a GGUF block is
        dequantized into the compute dtype (formats.<f>.bits_per_weight), other files are cast as ComfyUI casts."""
        fmt = self.formats.get(weight.format)
        bits = fmt.bits_per_weight if fmt else None
        if bits:
            return DTYPE_BYTES[self.comfyui.dtype_on(backend)] * 8 / bits
        return self.comfyui.held_factor(weight.part, weight.format, backend)

    def weight(self, weight_id: str) -> Weight | None:
        for w in self.dit + self.text_encoder + self.vae + self.audio_vae + self.lora + self.reference_dit:
            if w.id == weight_id:
                return w
        return None

    def reference_twin(self, dit: Weight) -> Weight | None:
        """The reference-to-video (ref2va) DiT of the same variant and format as the fl2va `dit`, or None."""
        return next((w for w in self.reference_dit if (w.variant, w.format) == (dit.variant, dit.format)), None)

    def evidence(self, fmt: str, machine: Machine, part: str = "dit", probe=None) -> format_support.Evidence:
        """Does `fmt` run for `part` on `machine`: measured by `probe` (a FormatProbe) > reported here > unknown."""
        return format_support.evidence(self.formats, self.placement, fmt, part, machine.backend, probe,
                                       machine.comfyui_version, machine.torch_version)

    def runnable(self, fmt: str, machine: Machine, part: str = "dit", probe=None) -> tuple[bool, str]:
        """Can `machine` run weights in `fmt` for `part`? (answer, the reason in words). A format measured or
        reported to fail there never runs; one the probe measured running runs, and so does one reported running
        off CUDA (the `requires` rules describe CUDA builds: drivers, compute capabilities); else they decide."""
        ev = self.evidence(fmt, machine, part, probe)
        if ev.status == "fails":
            return False, ev.phrase()
        if ev.kind == "measured" or (ev.status == "runs" and ev.backend != "cuda"):
            return True, ""
        return format_support.requirements(fmt, self.formats[fmt], machine)


def _weights(data: dict, problems: Problems, key: str, part: str, formats: dict) -> list[Weight]:
    items = data.get(key)
    if not isinstance(items, list) or not items:
        problems.add((key,), "must be a non-empty list of weight variants")
        return []
    out: list[Weight] = []
    seen: set = set()
    for i, item in enumerate(items):
        kp = (key, i)
        if not isinstance(item, dict):
            problems.add(kp, "must be a mapping with id, format, size and file")
            continue
        for required in ("id", "format", "size", "file"):
            if required not in item:
                problems.add(kp, f"is missing '{required}'")
        wid, fmt, size = item.get("id"), item.get("format"), parse_size(item.get("size"))
        if not isinstance(wid, str) or wid in seen:
            problems.add(kp + ("id",), f"must be a unique string id, not {wid!r}")
        seen.add(wid)
        if fmt not in formats:
            problems.add(kp + ("format",), f"is {fmt!r}; allowed: the formats listed under 'formats' ({', '.join(formats)})")
            continue
        if size is None or size == 0:
            problems.add(kp + ("size",), f"is {item.get('size')!r}; allowed: a size like \"40.23 GB\" or \"25.28 GiB\"")
            continue
        if not isinstance(item.get("file", {}), dict):
            problems.add(kp + ("file",), "must be a mapping (folder, loader, name, urls, sha256)")
            continue
        if part == "dit" and item.get("variant") not in ("full", "pruned"):
            problems.add(kp + ("variant",), f"is {item.get('variant')!r}; allowed: full, pruned")
        check_loads(data.get("loader_packs") or {}, problems, kp + ("file",), item.get("file") or {})
        # a bad `file:` is reported; the weight stays (the catalog is refused anyway) so its id raises nothing more
        file = parse_weight_file(item.get("file") or {}, problems, kp + ("file",)) or WeightFile()
        sampling = parse_lora_sampling(item.get("sampling"), problems, kp + ("sampling",)) if part == "lora" else None
        out.append(Weight(wid, part, fmt, size, int(formats[fmt].get("quality", 0)), item.get("variant"), file,
                          sampling))
    return out


def _begin(doc: YamlDoc, schema: str, layout: str, fix: str) -> tuple[Problems, dict]:
    """A collector for `doc`, stopping at once when the file is not a mapping; the schema key checked."""
    problems, data = Problems(doc), doc.data
    if not isinstance(data, dict):
        problems.add((), f"must be a mapping ({layout})")
        problems.raise_if_any(fix)
    if data.get("schema") != schema:
        problems.add(("schema",), f"is {data.get('schema')!r}; allowed: {schema}")
    return problems, data


def check_catalog(doc: YamlDoc) -> Catalog:
    problems, data = _begin(doc, CATALOG_SCHEMA, "schema, model, architecture, formats, dit, ...",
                            "Restore the file from h3kit's checkout.")
    for section in ("model", "architecture", "canvas", "frames", "tokens", "memory", "comfyui", "formats", "limits"):
        if not isinstance(data.get(section), dict):
            problems.add((section,), "must be a mapping")
    problems.raise_if_any("Restore the file from h3kit's checkout.")
    formats = data["formats"]
    for name, spec in formats.items():
        if not isinstance(spec, dict) or not isinstance(spec.get("quality"), int):
            problems.add(("formats", name), "must be a mapping with an integer 'quality'")
            continue
        for rk in spec.get("requires") or {}:
            if rk not in REQUIREMENT_KEYS:
                problems.add(("formats", name, "requires", rk), f"is not a known requirement; allowed: {', '.join(REQUIREMENT_KEYS)}")
        for rk in ("backends", "not_backends"):
            for j, b in enumerate((spec.get("requires") or {}).get(rk, [])):
                if b not in BACKENDS:
                    problems.add(("formats", name, "requires", rk, j), f"is {b!r}; allowed: {', '.join(BACKENDS)}")
    figures.check(data, problems)
    format_support.check(data, problems)
    architecture = parse_architecture(data["architecture"], problems)
    canvas, canvas_ladder = parse_canvas(data["canvas"], problems)
    frames, frames_ladder = parse_frames(data["frames"], problems)
    tokens = parse_tokens(data["tokens"], problems)
    model = parse_model(data["model"], problems)
    limits = parse_limits(data["limits"], problems)
    sampling = parse_sampling(data.get("sampling"), problems)
    comfyui_h3 = parse_comfyui_h3(data.get("comfyui_h3"), problems)
    comfyui_versions = parse_comfy_versions(data.get("comfyui_versions"), problems)
    packs = parse_loader_packs(data.get("loader_packs"), problems)
    avoid = data.get("comfyui_avoid_args") or []
    if not isinstance(avoid, list) or not all(isinstance(a, str) for a in avoid):
        problems.add(("comfyui_avoid_args",), f"must be a list of ComfyUI flags, not {avoid!r}")
    weights = {part: _weights(data, problems, part, part, formats) for part in ("dit", "text_encoder", "vae", "audio_vae")}
    lora = _weights(data, problems, "lora", "lora", formats) if "lora" in data else []
    reference = _weights(data, problems, "dit_reference", "dit", formats) if "dit_reference" in data else []
    speed.check(data, problems, [w.id for w in lora])
    setups, measured = parse_reported_setups(data, problems), parse_measured(data, problems)
    caps = parse_sequence_caps(data, problems, BACKENDS)
    problems.raise_if_any("Restore the file from h3kit's checkout, or correct the value named (see the comments at its top).")
    return Catalog(doc.path, model, architecture, canvas, canvas_ladder, frames, frames_ladder, tokens,
                   figures.memory_model(data["memory"]), figures.comfy_memory(data["comfyui"]),
                   format_support.parse_formats(formats), limits,
                   **weights, lora=lora, reference_dit=reference, sampling=sampling, comfyui_h3=comfyui_h3,
                   comfyui_versions=comfyui_versions, loader_packs=packs,
                   avoid_args=tuple(avoid), placement=parse_placement(data), reported_setups=setups,
                   sequence_caps=caps,
                   measured=measured, sequence=speed.sequence(data), work=speed.work(data), presets=speed.presets(data))


# Parsed files by (path, mtime, size): plans are made many times per process
# (install, tests) but an edited file is always read again.
_parsed: dict = {}


def _stamp(paths: list[Path]) -> tuple:
    return tuple((str(p), p.stat().st_mtime_ns, p.stat().st_size) for p in paths)


def load(models_dir: Path | None = None, model: str = "minimax-h3") -> Catalog:
    """Read and check the catalog of `model` (profiles/models/<model>.yaml)."""
    folder = models_dir or asset_dir("profiles") / "models"
    path = folder / f"{model}.yaml"
    if not path.is_file():
        raise BadInput(f"The model catalog {path} does not exist.", "Reinstall h3kit; the catalog ships with it.")
    table = folder.parent / "throughput.yaml"
    key = ("catalog",) + _stamp([path] + ([table] if table.is_file() else []))
    if key not in _parsed:
        checked = check_catalog(load_yaml(path))
        _parsed[key] = replace(checked, throughput=throughput_mod.load(table) if table.is_file() else None)
    return _parsed[key]


# --- profiles ----------------------------------------------------------------

PROFILE_KEYS = ("schema", "name", "description", "match", "settings", "why", "notes")
MATCH_KEYS = ("backend", "gpu_memory", "ram", "unified_memory", "gpu_count", "compute_capability")


@dataclass
class Profile:
    name: str
    description: str
    match: dict  # sizes in bytes: gpu_memory and ram are (min, max | None)
    settings: settings_mod.Settings  # typed (data.settings.typed); the file's own spelling is `written`
    path: Path
    why: dict = field(default_factory=dict)  # settings key -> the reason (and source) for the profile's value
    written: dict = field(default_factory=dict)  # the settings as the file spells them ("4 GB", [1344, 768])
    written_match: dict = field(default_factory=dict)  # `match` as the file spells it, for showing
    notes: str | None = None


def _range(doc: YamlDoc, problems: Problems, kp: tuple, value: Any) -> tuple | None:
    if not isinstance(value, list) or len(value) != 2:
        problems.add(kp, f"must be [MIN, MAX] sizes (MAX may be null), not {value!r}")
        return None
    lo = parse_size(value[0]) if value[0] is not None else 0
    hi = parse_size(value[1]) if value[1] is not None else None
    if lo is None or (value[1] is not None and hi is None) or (hi is not None and hi < lo):
        problems.add(kp, f"is {value!r}; allowed: [MIN, MAX] with sizes like \"10 GiB\", MIN <= MAX, MAX may be null")
        return None
    return (lo, hi)


def check_profile(doc: YamlDoc, catalog: Catalog) -> Profile:
    problems, data = _begin(doc, PROFILE_SCHEMA, "schema, name, description, match and settings",
                            "See the other files in profiles/ for the layout.")
    name = data.get("name")
    if name != doc.path.stem:
        problems.add(("name",), f"is {name!r}; it must equal the file name without .yaml ({doc.path.stem!r})")
    for key in data:
        if key not in PROFILE_KEYS:
            problems.add((key,), f"is not a profile key; allowed: {', '.join(PROFILE_KEYS)}")
    match = data.get("match")
    parsed: dict = {}
    if not isinstance(match, dict):
        problems.add(("match",), f"must be a mapping with some of {', '.join(MATCH_KEYS)}")
    else:
        for key, value in match.items():
            kp = ("match", key)
            if key == "backend":
                values = value if isinstance(value, list) else [value]
                for v in values:
                    if (msg := is_one_of(BACKENDS)(v)):
                        problems.add(kp, msg)
                parsed[key] = values
            elif key in ("gpu_memory", "ram"):
                parsed[key] = _range(doc, problems, kp, value)
            elif key == "unified_memory":
                if not isinstance(value, bool):
                    problems.add(kp, f"must be true or false, not {value!r}")
                parsed[key] = value
            elif key == "gpu_count":
                if not isinstance(value, list) or len(value) != 2 or not all(isinstance(x, int) or x is None for x in value):
                    problems.add(kp, f"must be [MIN, MAX] whole numbers (MAX may be null), not {value!r}")
                parsed[key] = value
            elif key == "compute_capability":
                if not isinstance(value, list) or len(value) != 2 or not all(isinstance(x, str) or x is None for x in value):
                    problems.add(kp, f"must be [\"MIN\", \"MAX\"] version strings like \"8.9\" (null for open), not {value!r}")
                parsed[key] = value
            else:
                problems.add(kp, f"is not a match key; allowed: {', '.join(MATCH_KEYS)}")
    settings = data.get("settings")
    if not isinstance(settings, dict):
        problems.add(("settings",), "must be a mapping of settings")
        settings = {}
    settings_mod.check(settings, ("settings",), problems, catalog, complete=True, source="profile")
    why = data.get("why") or {}
    if not isinstance(why, dict):
        problems.add(("why",), "must be a mapping of settings key: the reason for the profile's value (with its source)")
        why = {}
    for key, text in why.items():
        if key not in settings:
            problems.add(("why", key), f"explains a setting this profile does not set; allowed: {', '.join(settings)}")
        elif not isinstance(text, str) or not text.strip():
            problems.add(("why", key), "must be a sentence giving the reason and its source")
    notes = data.get("notes")
    if notes is not None and not isinstance(notes, str):
        problems.add(("notes",), "must be text (a sentence or a paragraph)")
    problems.raise_if_any("Correct the value named; the allowed values are listed in the message.")
    return Profile(name, str(data.get("description", "")), parsed, settings_mod.typed(settings), doc.path,
                   dict(why), dict(settings), dict(match) if isinstance(match, dict) else {}, notes)


def _other_kind(doc: YamlDoc) -> bool:
    """A file that says it is another h3kit document (the torch wheel table, ComfyUI node signatures) shares
    the profiles/ folder but is not a profile; a profile with a mistyped schema version is still checked."""
    data = doc.data  # the loader's own look at the file, before it is checked as a profile
    schema = data.get("schema") if isinstance(data, dict) else None
    return isinstance(schema, str) and schema.startswith("h3kit.") and not schema.startswith("h3kit.profile/")


def load_profiles(catalog: Catalog, folder: Path | None = None) -> dict[str, Profile]:
    """All named profiles, by name (sorted)."""
    folder = folder or asset_dir("profiles")
    paths = sorted(folder.glob("*.yaml"))
    key = ("profiles", id(catalog)) + _stamp(paths)
    if key not in _parsed:
        out: dict[str, Profile] = {}
        for path in paths:
            doc = load_yaml(path)
            if not _other_kind(doc):
                profile = check_profile(doc, catalog)
                out[profile.name] = profile
        _parsed[key] = out
    return dict(_parsed[key])


def matches(profile: Profile, fingerprint: Fingerprint, machine: Machine) -> tuple[bool, str]:
    """Does the profile's `match` block accept this machine? (answer, reason when not)."""
    m = profile.match
    gpus, gpu = fingerprint.usable_gpus, fingerprint.primary_gpu
    gpu_mem = (gpu.memory_total_bytes or 0) if gpu else 0
    ram = fingerprint.ram_total_bytes
    if "backend" in m and machine.backend not in m["backend"]:
        return False, f"backend {machine.backend} is not {'/'.join(m['backend'])}"
    for key, have in (("gpu_memory", gpu_mem), ("ram", ram)):
        rng = m.get(key)
        if rng and (have < rng[0] or (rng[1] is not None and have > rng[1])):
            bounds = f"{gb(rng[0])} to {gb(rng[1])}" if rng[1] is not None else f"{gb(rng[0])} and up"
            return False, f"{key.replace('_', ' ')} {gb(have)} is outside the profile's range of {bounds}"
    if "unified_memory" in m and fingerprint.unified_memory != m["unified_memory"]:
        return False, "unified memory differs"
    if "gpu_count" in m:
        lo, hi = m["gpu_count"]
        if len(gpus) < (lo or 0) or (hi is not None and len(gpus) > hi):
            return False, f"{len(gpus)} GPUs is outside the profile's range"
    if "compute_capability" in m:
        lo, hi = (_version(v) if v else None for v in m["compute_capability"])
        cc = machine.compute_capability
        if cc is None or (lo and cc < lo) or (hi and cc > hi):
            return False, "compute capability is outside the profile's range"
    return True, ""
