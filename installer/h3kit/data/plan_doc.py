"""The plan as typed values: what `make_plan` returns and what a saved plan.json reads back into.

`Plan.to_json()` is the `h3kit.plan/1` document, key for key in the order the
planner has always written it, so `json.dumps(plan.to_json(), indent=2)` is
byte for byte the golden plans under tests/fixtures/plans/. `Plan.from_json`
reads a document back; it is tolerant the way the readers have always been:
a key a plan of an older h3kit (or a test's partial document) lacks comes
back as None, an empty tuple or an empty mapping, and keys it does not know
are ignored. JSON exists only at that boundary: the layers above read
attributes (`plan.settings.preload_bytes`, `plan.estimates.time`).

Field order is document order: the one generic writer below walks the
dataclass fields, so reordering a field reorders the plan's bytes.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Mapping

SCHEMA = "h3kit.plan/1"
PARTS = ("dit", "text_encoder", "vae", "audio_vae")

_EMPTY: Mapping = MappingProxyType({})


def _no_map():
    return field(default_factory=lambda: _EMPTY)


def _frozen_map(value: Any) -> Mapping:
    return MappingProxyType(dict(value)) if isinstance(value, Mapping) else _EMPTY


def _pair(value: Any) -> tuple[int, int] | None:
    return tuple(value) if isinstance(value, (list, tuple)) else None


def _strings(value: Any) -> tuple[str, ...]:
    return tuple(value) if isinstance(value, (list, tuple)) else ()


def _as_json(value: Any) -> Any:
    """A typed part as JSON values: dataclasses by field order, tuples as lists, mappings as dicts."""
    if dataclasses.is_dataclass(value):
        return value.to_json()
    if isinstance(value, tuple):
        return [_as_json(v) for v in value]
    if isinstance(value, Mapping):
        return {k: _as_json(v) for k, v in value.items()}
    return value


def _fields_json(obj) -> dict:
    return {f.name: _as_json(getattr(obj, f.name)) for f in dataclasses.fields(obj)}


def _plain(cls, doc: Any, **convert):
    """`cls` from the document's keys named like its fields (absent: the field's default), `convert` per field."""
    doc = doc if isinstance(doc, Mapping) else {}
    kwargs = {}
    for f in dataclasses.fields(cls):
        if f.name in doc:
            kwargs[f.name] = convert[f.name](doc[f.name]) if f.name in convert else doc[f.name]
        elif f.name in convert:
            kwargs[f.name] = convert[f.name](None)
    return cls(**kwargs)


class _Doc:
    """to_json for the plain parts: one key per field, in field order."""

    def to_json(self) -> dict:
        return _fields_json(self)


@dataclass(frozen=True)
class StreamedRun(_Doc):
    """The run with h3kit's loader streaming the DiT (present only when streaming is enabled)."""

    preload_bytes: int | None = None  # the loader node's input
    peak_ram_bytes: int | None = None
    peak_gpu_bytes: int | None = None  # None: no GPU
    fits: bool | None = None
    held_peak_ram_bytes: int | None = None  # ComfyUI holding the whole DiT instead
    held_fits: bool | None = None
    pass_overhead: float | None = None  # the share streaming adds to each model call
    page_cache: str | None = None  # the loader node's input: "use" the OS's page cache, or "bypass" it


@dataclass(frozen=True)
class Streaming:
    """settings.streaming: how the DiT's blocks are held, and whether h3kit's loader streams them."""

    resident: bool | None = None
    blocks: int | None = None
    block_bytes: int | None = None
    resident_blocks: int | None = None
    shard_blocks: int | None = None
    enabled: bool = False
    dynamic_vram: bool | None = None  # None: unknown (the torch or HIP version is)
    why: str = ""
    prefetch_blocks: int | None = None
    assumed: str | None = None
    streamable: bool | None = None
    streamed: StreamedRun | None = None

    def to_json(self) -> dict:
        doc = _fields_json(self)
        run = doc.pop("streamed")
        return {**doc, **(run or {})}

    @classmethod
    def from_json(cls, doc: Any) -> Streaming:
        doc = doc if isinstance(doc, Mapping) else {}
        run = StreamedRun.__dataclass_fields__
        streamed = _plain(StreamedRun, doc) if any(k in doc for k in run) else None
        return dataclasses.replace(_plain(cls, {k: v for k, v in doc.items() if k != "streamed"}), streamed=streamed)


@dataclass(frozen=True)
class TextEncoderStreaming(_Doc):
    """settings.text_encoder_streaming: whether h3kit's streamed text encoder runs the text encoder (plan/te_stream.py);
    the workflow writer reads it and decides nothing."""

    enabled: bool = False
    why: str = ""
    held_encode_ram_bytes: int | None = None  # the encode phase with ComfyUI's own load of the same file
    node: str | None = None  # with enabled: the loader node and its inputs
    prefetch_layers: int | None = None
    page_cache: str | None = None  # "use" | "bypass"
    read_bytes: int | None = None  # read once per prompt
    disk_bytes_per_s: int | None = None
    read_s: float | None = None
    rate_source: str | None = None
    encode_ram_bytes: int | None = None
    encode_gpu_bytes: int | None = None


@dataclass(frozen=True)
class ReferenceRun(_Doc):
    """settings.reference: the reference-to-video workflow (settings key reference_to_video), when it is set up."""

    dit_weights: str | None = None  # the ref2va twin of settings.dit_weights (Catalog.reference_twin)
    steps: int | None = None
    lora: str | None = None  # a LoRA made for the ref2va DiT (the preset's `reference`), or None
    lora_strength: float | None = None


@dataclass(frozen=True)
class PlanSettings(_Doc):
    """plan.settings: the files chosen, how they are moved, the launch flags and env, the workflow defaults."""

    dit_weights: str | None = None
    quantization: str | None = None  # the DiT's format
    text_encoder_weights: str | None = None
    vae_weights: str | None = None
    audio_vae_weights: str | None = None
    shard_size_bytes: int | None = None
    preload_bytes: int | None = None
    vae_tile_size: int | None = None
    vae_tile_overlap: int | None = None
    vae_temporal_tile: int | None = None
    max_canvas: tuple[int, int] | None = None
    max_frames: int | None = None
    comfyui_args: tuple[str, ...] = ()
    comfyui_args_version_dependent: bool = True
    env: Mapping[str, str] = _no_map()
    stream_from: str | None = None  # ram | disk
    streaming: Streaming = field(default_factory=Streaming)
    text_encoder_streaming: TextEncoderStreaming = field(default_factory=TextEncoderStreaming)
    # what the generated workflows open with (plan/defaults.py)
    canvas: tuple[int, int] | None = None
    frames: int | None = None
    steps: int | None = None
    cfg: float | None = None
    preset: str | None = None
    lora: str | None = None
    lora_strength: float | None = None
    reference: ReferenceRun | None = None  # None: no reference-to-video workflow
    target_minutes: float | None = None
    queue_guard: str = "refuse"  # the pack's queue guard for graphs that cannot fit: refuse | warn
    timing: Mapping[str, Any] = _no_map()  # rates (data/settings.py TIMING_*), in their source's order

    @classmethod
    def from_json(cls, doc: Any) -> PlanSettings:
        return _plain(cls, doc, max_canvas=_pair, canvas=_pair, comfyui_args=_strings, env=_frozen_map,
                      timing=_frozen_map, streaming=Streaming.from_json,
                      text_encoder_streaming=lambda v: _plain(TextEncoderStreaming, v),
                      reference=lambda v: _plain(ReferenceRun, v) if isinstance(v, Mapping) else None)

    def weight_ids(self) -> dict[str, str | None]:
        """part -> the catalog id of the file chosen for it."""
        return {"dit": self.dit_weights, "text_encoder": self.text_encoder_weights, "vae": self.vae_weights,
                "audio_vae": self.audio_vae_weights}


@dataclass(frozen=True)
class MemoryBudget(_Doc):
    """What the machine offers the run."""

    gpu_bytes: int | None = None  # None: no GPU
    ram_bytes: int | None = None
    disk_bytes: int | None = None
    unified_memory: bool | None = None


@dataclass(frozen=True)
class PhasePeak(_Doc):
    gpu_bytes: int | None = None
    ram_bytes: int | None = None


@dataclass(frozen=True)
class ClipTime(_Doc):
    """How long one clip at the workflow defaults takes (plan/timing.py, plan/defaults.py)."""

    tokens: int | None = None
    model_calls_per_step: int | None = None
    seconds_per_step: float | None = None
    sampling_s: float | None = None
    text_encode_s: float | None = None
    decode_s: float | None = None
    seconds_per_clip: float | None = None
    minutes_per_clip: float | None = None
    source: str | None = None
    steps: int | None = None
    canvas: tuple[int, int] | None = None
    frames: int | None = None
    video_seconds: float | None = None
    meets_target: bool | None = None
    stream_pass_overhead: float | None = None

    @classmethod
    def from_json(cls, doc: Any) -> ClipTime:
        return _plain(cls, doc, canvas=_pair)


@dataclass(frozen=True)
class WorkflowCost(_Doc):
    """The run the installed workflows open with (the defaults' canvas and frames), the plan's loading decisions
    kept: plan/cost.py `pinned_estimate`, which the pack's cost model (`Plan.cost`) gives too."""

    canvas: tuple[int, int] | None = None
    frames: int | None = None
    fits: bool | None = None
    peak_gpu_bytes: int | None = None
    peak_ram_bytes: int | None = None
    phases: Mapping[str, PhasePeak] = _no_map()

    @classmethod
    def from_json(cls, doc: Any) -> WorkflowCost:
        return _plain(cls, doc, canvas=_pair, phases=_phases)


def _phases(value: Any) -> Mapping:
    return MappingProxyType({k: _plain(PhasePeak, v) for k, v in value.items()}) \
        if isinstance(value, Mapping) else _EMPTY


@dataclass(frozen=True)
class Estimates(_Doc):
    """The peaks and the time of the run the plan sets up."""

    peak_gpu_bytes: int | None = None
    peak_ram_bytes: int | None = None
    disk_bytes: int | None = None  # the weight files, LoRA included
    tokens: int | None = None
    activation_bytes: int | None = None
    phases: Mapping[str, PhasePeak] = _no_map()  # encode | sample | decode
    minutes_per_clip: float | None = None
    seconds_per_step: float | None = None
    time: ClipTime = field(default_factory=ClipTime)
    workflow: WorkflowCost = field(default_factory=WorkflowCost)

    @classmethod
    def from_json(cls, doc: Any) -> Estimates:
        return _plain(cls, doc, phases=_phases, time=ClipTime.from_json, workflow=WorkflowCost.from_json)


@dataclass(frozen=True)
class FormatEvidence(_Doc):
    """Which evidence says a chosen file's format runs here (plan/loads.py)."""

    format: str | None = None
    status: str | None = None  # runs | fails | unknown
    kind: str | None = None  # measured | reported | unknown
    source: str | None = None
    backend: str | None = None


@dataclass(frozen=True)
class CandidateSummary(_Doc):
    """One profile the planner tried, and what it would have given."""

    profile: str | None = None
    fits: bool | None = None
    quantization: str | None = None
    max_canvas: tuple[int, int] | None = None
    max_frames: int | None = None
    streamed: bool | None = None

    @classmethod
    def from_json(cls, doc: Any) -> CandidateSummary:
        return _plain(cls, doc, max_canvas=_pair)


@dataclass(frozen=True)
class Plan(_Doc):
    """An `h3kit.plan/1`: the profile, the settings it resolved to, estimates and the reasons for each choice."""

    schema: str = SCHEMA
    model: str | None = None
    profile: str | None = None
    fits: bool | None = None
    settings: PlanSettings = field(default_factory=PlanSettings)
    comfyui_loads: Mapping[str, str] = _no_map()  # part -> how sure it is that ComfyUI loads it
    evidence: Mapping[str, FormatEvidence] = _no_map()
    blocked: str | None = None  # what stops the chosen files from running here, or None
    shortfall_fix: str | None = None  # for a plan that does not fit: what to do, for the resource that is short
    settings_source: Mapping[str, str] = _no_map()  # settings key -> where its value came from
    budget: MemoryBudget = field(default_factory=MemoryBudget)
    estimates: Estimates = field(default_factory=Estimates)
    cost: Mapping[str, Any] = _no_map()  # the pack's cost model (nodes/h3k_cost, an h3kit.cost/1), from plan/cost.py
    candidates: tuple[CandidateSummary, ...] = ()
    rationale: tuple[str, ...] = ()  # one sentence per decision, with the numbers
    warnings: tuple[str, ...] = ()

    @classmethod
    def from_json(cls, doc: Any) -> Plan:
        """A saved plan (or the `plan` of a job or report) read back; anything absent takes its default."""
        def evidence(value):
            return MappingProxyType({k: _plain(FormatEvidence, v) for k, v in value.items()}) \
                if isinstance(value, Mapping) else _EMPTY

        def candidates(value):
            return tuple(CandidateSummary.from_json(v) for v in value) if isinstance(value, list) else ()
        return _plain(cls, doc, settings=PlanSettings.from_json, comfyui_loads=_frozen_map, evidence=evidence,
                      settings_source=_frozen_map, budget=lambda v: _plain(MemoryBudget, v),
                      estimates=Estimates.from_json, cost=_frozen_map, candidates=candidates, rationale=_strings, warnings=_strings)

    @property
    def streams_dit(self) -> bool:
        """Whether the run this plan sets up streams the DiT with h3kit's loader."""
        return bool(self.settings.streaming.enabled)
