"""The catalog's sections about the model's use rather than its shape, typed when the catalog loads.

`model` (its id and the first ComfyUI release that runs it), `comfyui_h3`
(what a ComfyUI tree and its Python need for H3), `sampling` (the generated
workflows' defaults, and a LoRA's own where its publisher gives them), `limits` (ranges the settings checks accept),
`placement` and `reported_setups` (where weights run, setups users reported),
`measured` (points users reported, for scripts/validate_estimator.py) and
each weight file's `comfyui_loads` (does ComfyUI load it, and who says so).
Each is checked with file:line here; callers read attributes.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

from h3kit.data.yamlio import Problems, parse_size

LIMIT_KEYS = ("vae_tile_size", "vae_tile_overlap", "vae_temporal_tile")
# How sure it is that ComfyUI loads a file (file.comfyui_loads), and the planner's preference tier for it.
LOAD_TIERS = {"stock": 0, "with_loader_pack": 0, "with_h3kit_loader": 0, "unknown": 1, "reported_broken": 2}


@dataclass(frozen=True)
class WeightFile:
    """A weight's `file:`: where ComfyUI keeps it, the node that loads it, where it is downloaded from, and
    whether ComfyUI is reported to load it (comfyui_loads, with the report's source and the problem in words)."""

    name: str | None = None  # as published (ComfyUI's loaders list files by name)
    folder: str = ""  # under ComfyUI's models/
    loader: str = ""  # the ComfyUI node that loads it
    bytes: int | None = None  # exact size where it was confirmed
    sha256: str | None = None  # only a hash the publisher printed
    urls: tuple = ()  # in order of preference
    loader_pack: str | None = None  # the custom node pack the loader comes from
    source: str | None = None  # where name, bytes and urls were confirmed
    comfyui_loads: str = "unknown"  # one of LOAD_TIERS
    comfyui_compat: str | None = None  # a known problem loading it
    comfyui_loads_source: str | None = None
    unverified: str | None = None  # why no public file backs this entry
    comfyui_min: str | None = None  # the oldest ComfyUI that loads it, where newer than the model's own minimum


def _text_or_null(v: Any) -> bool:
    return v is None or isinstance(v, str)


# file: keys -> (the check, what is allowed); comfyui_loads is check_loads's.
FILE_KEYS = {
    "name": (_text_or_null, "text or null"), "folder": (lambda v: isinstance(v, str), "text"),
    "loader": (lambda v: isinstance(v, str), "text"),
    "bytes": (lambda v: v is None or _whole(v), "a whole number of bytes or null"),
    "sha256": (_text_or_null, "text or null"),
    "urls": (lambda v: isinstance(v, list) and all(isinstance(u, str) for u in v), "a list of URLs"),
    "loader_pack": (_text_or_null, "text or null"), "source": (_text_or_null, "text or null"),
    "comfyui_loads": (lambda v: v in LOAD_TIERS, ", ".join(LOAD_TIERS)),
    "comfyui_compat": (_text_or_null, "text or null"), "comfyui_loads_source": (_text_or_null, "text or null"),
    "unverified": (_text_or_null, "text or null"),
    "comfyui_min": (_text_or_null, "a ComfyUI version in quotes, or null"),
}


def parse_weight_file(f: dict, problems: Problems, kp: tuple) -> WeightFile | None:
    """The `file:` mapping of one weight, each key's type checked (check_loads checks how they agree)."""
    ok = True
    for key, value in f.items():
        if key not in FILE_KEYS:
            problems.add(kp + (key,), f"is not a file key; allowed: {', '.join(FILE_KEYS)}")
            ok = False
        elif not FILE_KEYS[key][0](value):
            if key != "comfyui_loads":  # check_loads has said what is wrong with it
                problems.add(kp + (key,), f"is {value!r}; allowed: {FILE_KEYS[key][1]}")
            ok = False
    if not ok or f.get("comfyui_loads") not in LOAD_TIERS:  # a missing comfyui_loads: check_loads said so
        return None
    return WeightFile(f.get("name"), f.get("folder", ""), f.get("loader", ""), f.get("bytes"), f.get("sha256"),
                      tuple(f.get("urls") or ()), f.get("loader_pack"), f.get("source"), f["comfyui_loads"],
                      f.get("comfyui_compat"), f.get("comfyui_loads_source"), f.get("unverified"),
                      f.get("comfyui_min"))


@dataclass(frozen=True)
class LoaderPack:
    """A custom node pack some weight files' loaders come from (the catalog's `loader_packs:`)."""

    name: str
    git: str | None = None  # the repository h3kit clones
    folder: str = ""  # under ComfyUI's custom_nodes/
    requirements: str = "requirements.txt"  # installed with ComfyUI's own python -m pip
    nodes: tuple = ()
    source: str | None = None


def parse_loader_packs(section: Any, problems: Problems) -> dict:
    """name -> LoaderPack."""
    if section is None:
        return {}
    if not isinstance(section, dict):
        problems.add(("loader_packs",), "must map a pack's name to {git, folder, requirements, nodes, source}")
        return {}
    out = {}
    for name, p in section.items():
        kp = ("loader_packs", name)
        if not isinstance(p, dict) or not all(isinstance(p.get(k), str) for k in ("git", "folder")):
            problems.add(kp, "must be {git: URL, folder: NAME, requirements: FILE, nodes: [...], source}")
            continue
        out[name] = LoaderPack(str(name), p["git"], p["folder"], str(p.get("requirements") or "requirements.txt"),
                               _str_list(p, "nodes", problems, kp), p.get("source"))
    return out


@dataclass(frozen=True)
class Model:
    id: str
    name: str
    comfyui_min_version: str  # the first ComfyUI release with H3 support


@dataclass(frozen=True)
class ComfyModule:
    """A module ComfyUI's Python must import for H3 (`import`), the package that provides it, and why."""

    import_name: str
    package: str
    why: str
    min_version: str | None = None

    def to_json(self) -> dict:
        """As the catalog writes it (doctor and install print it): import, package, [min_version,] why."""
        out = {"import": self.import_name, "package": self.package}
        if self.min_version is not None:
            out["min_version"] = self.min_version
        return {**out, "why": self.why}


@dataclass(frozen=True)
class ComfyH3:
    """What a ComfyUI tree and its Python need to run H3 (the catalog's `comfyui_h3:`)."""

    files: tuple = ()  # paths in the tree that exist when H3 support is there
    nodes: tuple = ()
    modules: tuple = ()  # ComfyModule, ...
    encoders: tuple = ()  # what SaveVideo's MP4 needs from PyAV
    release_tag_pattern: str = "v{version}"
    update: dict = field(default_factory=dict)  # layout -> the update action h3kit names for it


@dataclass(frozen=True)
class Sampling:
    """The generated workflows' sampling defaults; each default is ComfyUI's own H3 template's value."""

    steps: int = 20
    sampler: str = "res_multistep"
    scheduler: str = "simple"
    cfg: float = 1.0
    shift_video: float = 12.0
    shift_audio: float = 3.0
    fps: float = 24.0
    seed: int = 0
    frames: int = 124  # the workflows open with at most this many frames


@dataclass(frozen=True)
class LoraSampling:
    """lora[].sampling: the sampler, scheduler and flow shifts the LoRA's publisher gives for it; the workflows
    that load the LoRA sample with these (a turbo LoRA is distilled on one schedule)."""

    sampler: str
    scheduler: str
    shift_video: float
    shift_audio: float
    source: str


LORA_SAMPLING_KEYS = ("sampler", "scheduler", "shift_video", "shift_audio", "source")
MAX_SHIFT = 100.0  # MiniMaxH3SigmaShift's own limit (comfy_extras/nodes_minimax_h3.py)


@dataclass(frozen=True)
class Limits:
    """[min, max] or [min, max, multiple] for the VAE tile settings."""

    vae_tile_size: tuple
    vae_tile_overlap: tuple
    vae_temporal_tile: tuple


@dataclass(frozen=True)
class Placement:
    """Where ComfyUI puts `part` weights in `formats` on `backend`: their evidence is `evidence_from`'s."""

    part: str
    backend: str
    formats: tuple
    evidence_from: str
    source: str


@dataclass(frozen=True)
class ReportedSetup:
    """A setup users reported working: the machine class (backend, gpu_memory bytes (min, max)) and its files."""

    id: str
    backend: str | None
    gpu_memory: tuple  # (min bytes | None, max bytes | None)
    files: dict  # part -> weight id
    comfyui_args: tuple
    source: str


@dataclass(frozen=True)
class MeasuredPoint:
    """A run users reported: the machine (as written), the settings (as config.yaml spells them), the figures."""

    id: str
    machine: dict
    settings: dict
    reported: dict  # quantity -> size as written ("20.6 GB")
    source: str
    assumption: str | None = None


def _whole(v: Any, minimum: int = 1) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= minimum


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def parse_model(section: dict, problems: Problems) -> Model | None:
    mid, version = section.get("id"), section.get("comfyui_min_version")
    id_ok, version_ok = isinstance(mid, str), isinstance(version, str) and bool(version.strip())
    if not id_ok:
        problems.add(("model", "id"), "must be the model's id (a string)")
    if not version_ok:
        problems.add(("model", "comfyui_min_version"), f"is {version!r}; allowed: a ComfyUI version in quotes, "
                                                       "like \"0.31.0\"")
    return Model(mid, str(section.get("name") or mid), version) if id_ok and version_ok else None


def _str_list(section: dict, key: str, problems: Problems, base: tuple) -> tuple:
    value = section.get(key) or []
    if not isinstance(value, list) or not all(isinstance(x, str) for x in value):
        problems.add(base + (key,), f"must be a list of strings, not {value!r}")
        return ()
    return tuple(value)


def parse_comfyui_h3(section: Any, problems: Problems) -> ComfyH3:
    if section is None:
        return ComfyH3()
    base = ("comfyui_h3",)
    if not isinstance(section, dict):
        problems.add(base, "must be a mapping (files, nodes, modules, encoders, update)")
        return ComfyH3()
    modules = []
    for i, m in enumerate(section.get("modules") or []):
        if not isinstance(m, dict) or not all(isinstance(m.get(k), str) for k in ("import", "package", "why")):
            problems.add(base + ("modules", i), "must be {import: NAME, package: PIP-NAME, why: SENTENCE}")
            continue
        if m.get("min_version") is not None and not isinstance(m["min_version"], str):
            problems.add(base + ("modules", i, "min_version"), f"is {m['min_version']!r}; allowed: a version in quotes")
            continue
        modules.append(ComfyModule(m["import"], m["package"], m["why"], m.get("min_version")))
    update = section.get("update") or {}
    if not isinstance(update, dict) or not all(isinstance(v, str) for v in update.values()):
        problems.add(base + ("update",), "must map a ComfyUI layout (portable, desktop) to the update action in words")
        update = {}
    pattern = section.get("release_tag_pattern", "v{version}")
    if not isinstance(pattern, str) or "{version}" not in pattern:
        problems.add(base + ("release_tag_pattern",), f"is {pattern!r}; allowed: a tag with {{version}} in it")
        pattern = "v{version}"
    return ComfyH3(_str_list(section, "files", problems, base), _str_list(section, "nodes", problems, base),
                   tuple(modules), _str_list(section, "encoders", problems, base), pattern, dict(update))


def parse_sampling(section: Any, problems: Problems) -> Sampling:
    """The section's values over Sampling's defaults (a catalog may leave any of them, or all, out)."""
    if section is None:
        return Sampling()
    if not isinstance(section, dict):
        problems.add(("sampling",), "must be a mapping (steps, sampler, scheduler, cfg, fps, ...)")
        return Sampling()
    defaults = asdict(Sampling())
    values = {}
    for key, default in defaults.items():
        v = section.get(key, default)
        if isinstance(default, str):
            ok = isinstance(v, str) and bool(v)
        elif isinstance(default, int):
            ok = _whole(v, 0 if key == "seed" else 1)
        else:
            ok = _number(v) and v > 0
        if not ok:
            kind = "a name" if isinstance(default, str) else "a whole number" if isinstance(default, int) else "a number > 0"
            problems.add(("sampling", key), f"is {v!r}; allowed: {kind}")
            continue
        values[key] = v  # as written: an fps of 24 stays the whole number the reports print
    return Sampling(**{**defaults, **values})


def parse_lora_sampling(section: Any, problems: Problems, kp: tuple) -> LoraSampling | None:
    """A LoRA's `sampling:` (None when it has none), every key checked: names, shifts in MiniMaxH3SigmaShift's
    range, and where the values come from."""
    if section is None:
        return None
    if not isinstance(section, dict) or set(section) != set(LORA_SAMPLING_KEYS):
        problems.add(kp, f"must be a mapping of exactly {', '.join(LORA_SAMPLING_KEYS)}, not {section!r}")
        return None
    ok = True
    for key in ("sampler", "scheduler", "source"):
        if not (isinstance(section[key], str) and section[key].strip()):
            problems.add(kp + (key,), f"is {section[key]!r}; allowed: " + ("the text of the source" if key == "source"
                                                                            else "a ComfyUI name"))
            ok = False
    for key in ("shift_video", "shift_audio"):
        if not (_number(section[key]) and 0 < section[key] <= MAX_SHIFT):
            problems.add(kp + (key,), f"is {section[key]!r}; allowed: a number above 0 and at most {MAX_SHIFT:g}")
            ok = False
    if not ok:
        return None
    return LoraSampling(section["sampler"], section["scheduler"], float(section["shift_video"]),
                        float(section["shift_audio"]), section["source"])


def parse_limits(section: dict, problems: Problems) -> Limits | None:
    values = {}
    for key in LIMIT_KEYS:
        v = section.get(key)
        if not (isinstance(v, list) and len(v) in (2, 3) and all(_whole(x, 0) for x in v) and v[0] <= v[1]
                and (len(v) == 2 or v[2] > 0)):
            problems.add(("limits", key), f"is {v!r}; allowed: [MIN, MAX] or [MIN, MAX, MULTIPLE] whole numbers")
            continue
        values[key] = tuple(v)
    return Limits(**values) if len(values) == len(LIMIT_KEYS) else None


@dataclass(frozen=True)
class SequenceCap:
    """`sequence_caps:`: on `backend`, no plan runs a longer H3 sequence than `shape` (width, height, frames) gives."""

    backend: str
    shape: tuple  # (width, height, frames): the largest shape reported running there
    failing: str  # what was seen failing, and where
    source: str


def parse_sequence_caps(data: dict, problems: Problems, backends: tuple) -> tuple:
    """The `sequence_caps:` list: [{backend, shape: [W, H, FRAMES], failing, source}, ...]."""
    out = []
    for i, cap in enumerate(data.get("sequence_caps") or ()):
        kp = ("sequence_caps", i)
        shape = cap.get("shape") if isinstance(cap, dict) else None
        if not (isinstance(cap, dict) and set(cap) == {"backend", "shape", "failing", "source"}
                and cap["backend"] in backends and isinstance(shape, list) and len(shape) == 3
                and all(_whole(x, 1) for x in shape) and isinstance(cap["failing"], str)
                and isinstance(cap["source"], str)):
            problems.add(kp, f"must be {{backend: one of {', '.join(backends)}, shape: [WIDTH, HEIGHT, FRAMES], "
                             "failing: what fails beyond it, source}")
            continue
        out.append(SequenceCap(cap["backend"], tuple(shape), cap["failing"], cap["source"]))
    return tuple(out)


def parse_placement(data: dict) -> tuple:
    """The `placement:` rules (format_support.check has checked them)."""
    return tuple(Placement(r["part"], r["backend"], tuple(r["formats"]), r["evidence_from"], str(r["source"]))
                 for r in data.get("placement") or ())


def parse_reported_setups(data: dict, problems: Problems) -> tuple:
    """The `reported_setups:` (format_support.check has checked files and source), gpu_memory in bytes."""
    out = []
    for i, setup in enumerate(data.get("reported_setups") or ()):
        if not isinstance(setup, dict) or not isinstance(setup.get("files"), dict):
            continue
        machine = setup.get("machine") or {}
        limits = machine.get("gpu_memory") or [None, None]
        sizes = [parse_size(x) if x is not None else None for x in limits] if isinstance(limits, list) else []
        if len(sizes) != 2 or any(s is None and x is not None for s, x in zip(sizes, limits)):
            problems.add(("reported_setups", i, "machine", "gpu_memory"),
                         f"is {limits!r}; allowed: [MIN, MAX] sizes like \"9 GiB\" (null for open)")
            continue
        args = setup.get("comfyui_args") or []
        out.append(ReportedSetup(str(setup.get("id") or i), machine.get("backend"), tuple(sizes), dict(setup["files"]),
                                 tuple(str(a) for a in args), str(setup["source"])))
    return tuple(out)


def parse_measured(data: dict, problems: Problems) -> tuple:
    out = []
    for i, point in enumerate(data.get("measured") or ()):
        ok = isinstance(point, dict) and isinstance(point.get("id"), str) and all(
            isinstance(point.get(k), dict) for k in ("machine", "settings", "reported"))
        if not ok or not all(parse_size(v) for v in point["reported"].values()):
            problems.add(("measured", i), "must be {id, machine: {...}, settings: {...}, reported: {QUANTITY: SIZE}, "
                                          "source}")
            continue
        out.append(MeasuredPoint(point["id"], dict(point["machine"]), dict(point["settings"]), dict(point["reported"]),
                                 str(point.get("source") or ""), point.get("assumption")))
    return tuple(out)


def check_loads(packs: dict, problems: Problems, kp: tuple, f: dict) -> None:
    """file.comfyui_loads is one of LOAD_TIERS and agrees with loader_pack, comfyui_compat and its source."""
    loads = f.get("comfyui_loads")
    where = kp + ("comfyui_loads",)
    if loads not in LOAD_TIERS:
        hint = " (YAML reads yes/no as true/false)" if isinstance(loads, bool) else ""
        problems.add(where, f"is {loads!r}{hint}; allowed: {', '.join(LOAD_TIERS)} (does ComfyUI load this file?)")
        return
    pack = f.get("loader_pack")
    if loads == "stock" and pack:
        problems.add(where, f"is 'stock' (ComfyUI's own loader) but loader_pack is {pack!r}; use with_loader_pack")
    if loads in ("with_loader_pack", "with_h3kit_loader") and pack not in packs:
        problems.add(where, f"is {loads!r} but loader_pack is {pack!r}; allowed: one of loader_packs "
                            f"({', '.join(packs) or 'none listed'})")
    if loads == "with_h3kit_loader" and not str(f.get("loader", "")).startswith("H3kit"):
        problems.add(where, f"is 'with_h3kit_loader' but loader is {f.get('loader')!r}; name h3kit's node (H3kit...)")
    if loads in ("with_loader_pack", "with_h3kit_loader", "reported_broken") and not isinstance(f.get("comfyui_loads_source"), str):
        problems.add(where, f"is {loads!r} but comfyui_loads_source is missing; name where it was reported (a URL)")
    if loads in ("reported_broken", "with_h3kit_loader") and not isinstance(f.get("comfyui_compat"), str):
        problems.add(where, f"is {loads!r} but comfyui_compat is missing; say how loading fails"
                            + (" with the stock node" if loads == "with_h3kit_loader" else ""))
    if loads == "unknown" and not (isinstance(f.get("comfyui_compat"), str) or isinstance(f.get("unverified"), str)):
        problems.add(where, "is 'unknown' but neither comfyui_compat nor unverified says why")
