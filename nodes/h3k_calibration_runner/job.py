"""The runner's job and its result, typed: what h3kit asks the runner to measure, and what it answers.

One module for both sides: h3kit builds a `Job` (h3kit.calibrate.orchestrate,
reached as `h3kit.bundled.h3k_calibration_runner.job`) and writes its
`to_json()` as the job file; the runner reads it back with `Job.from_json`
and writes a `Result`, which h3kit reads with `Result.from_json`. Standard
library only, like the rest of the runner.

On the wire the job is `{"plan": {"settings": {...}, "budget": {...}},
"scaled_dit", "budget", "tile_candidates", "h3_arch", "h3_canvas",
"h3_device", "h3_points", "h3_point_seconds", "h3_prompt", ...}` (the keys
an older h3kit wrote; a bare `h3kit.plan/1` document is read as a job holding
only that plan). Of the plan the runner reads only the settings in
`JobSettings` and the GPU budget; every other key is optional, and its
absence means the runner's own default (h3_model.py lists them).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from types import MappingProxyType
from typing import Any, Mapping

JOB_SCHEMA = "h3kit.calibration-job/1"
RESULT_SCHEMA = "h3kit.calibration-run/1"
TILE_CANDIDATES = (128, 256, 384, 512, 640, 768)
H3_PARTS = ("vae", "text_encoder")


def _frozen(value: Any) -> Mapping:
    return MappingProxyType(dict(value)) if isinstance(value, Mapping) else MappingProxyType({})


def _pair(value: Any) -> tuple[int, int] | None:
    return (int(value[0]), int(value[1])) if isinstance(value, (list, tuple)) and len(value) == 2 else None


def _int(value: Any) -> int | None:
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _plain(value: Any) -> Any:
    """JSON values: mappings as dicts, tuples as lists, all the way down."""
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


@dataclass(frozen=True)
class JobSettings:
    """The plan settings the runner reads: ComfyUI's flags, the streamer's sizes, the VAE tile, the workload."""

    comfyui_args: tuple[str, ...] = ()
    shard_size_bytes: int | None = None
    preload_bytes: int | None = None
    vae_tile_size: int | None = None
    canvas: tuple[int, int] | None = None
    max_canvas: tuple[int, int] | None = None
    frames: int | None = None
    max_frames: int | None = None

    @classmethod
    def from_json(cls, doc: Any) -> JobSettings:
        doc = doc if isinstance(doc, Mapping) else {}
        return cls(comfyui_args=tuple(str(a) for a in doc.get("comfyui_args") or ()),
                   shard_size_bytes=_int(doc.get("shard_size_bytes")), preload_bytes=_int(doc.get("preload_bytes")),
                   vae_tile_size=_int(doc.get("vae_tile_size")), canvas=_pair(doc.get("canvas")),
                   max_canvas=_pair(doc.get("max_canvas")), frames=_int(doc.get("frames")),
                   max_frames=_int(doc.get("max_frames")))

    def to_json(self) -> dict:
        return {f.name: _plain(getattr(self, f.name)) for f in fields(self)}


@dataclass(frozen=True)
class Job:
    """What to measure. `scaled_dit`: the scaled DiT's shape (None: not run); the `h3_*` fields: where and how
    ComfyUI's own H3 is built and timed; `device_*`: the device sweep's sizes (None: the runner's own)."""

    settings: JobSettings = field(default_factory=JobSettings)
    gpu_budget_bytes: int | None = None  # the tile sweep stays under it
    quick: bool = False
    scaled_dit: Mapping | None = None
    tile_candidates: tuple[int, ...] = TILE_CANDIDATES
    h3_arch: Mapping = field(default_factory=lambda: _frozen(None))
    catalog_architecture: Mapping = field(default_factory=lambda: _frozen(None))  # when no h3_arch is named
    h3_canvas: Mapping = field(default_factory=lambda: _frozen(None))
    h3_device: str | None = None
    h3_points: tuple[int, ...] = ()
    h3_point_seconds: tuple[float, ...] = ()  # the table's seconds per call at each point (the time limit)
    h3_prompt: str | None = None
    h3_blocks_built: int | None = None
    h3_parts: tuple[str, ...] = H3_PARTS
    h3_vae: Mapping = field(default_factory=lambda: _frozen(None))
    h3_text_encoder: Mapping = field(default_factory=lambda: _frozen(None))
    # {pack, node, dit_path, inputs}: the installed workflow's streamed DiT loader, timed whole (streamed_pass.py)
    h3_streamed: Mapping = field(default_factory=lambda: _frozen(None))
    device_matmul_size: int | None = None
    device_copy_bytes: int | None = None

    def device(self) -> str | None:
        """The device the job names; "cpu" when the plan's flags say --cpu; else None (ComfyUI's own choice)."""
        if self.h3_device:
            return self.h3_device
        return "cpu" if "--cpu" in self.settings.comfyui_args else None

    @classmethod
    def from_json(cls, doc: Any) -> Job:
        """A job file's document; a bare plan document (its schema or its settings at the top) is a job with
        only that plan."""
        doc = doc if isinstance(doc, Mapping) else {}
        if "plan" not in doc and ("settings" in doc or str(doc.get("schema", "")).startswith("h3kit.plan/")):
            doc = {"plan": doc}
        plan = doc.get("plan") if isinstance(doc.get("plan"), Mapping) else {}
        budget = doc.get("budget") if isinstance(doc.get("budget"), Mapping) else plan.get("budget") or {}
        catalog = doc.get("catalog") if isinstance(doc.get("catalog"), Mapping) else {}
        scaled = doc.get("scaled_dit")
        return cls(
            settings=JobSettings.from_json(plan.get("settings")), gpu_budget_bytes=_int(budget.get("gpu_bytes")),
            quick=bool(doc.get("quick")), scaled_dit=_frozen(scaled) if isinstance(scaled, Mapping) else None,
            tile_candidates=tuple(int(t) for t in doc.get("tile_candidates") or TILE_CANDIDATES),
            h3_arch=_frozen(doc.get("h3_arch")), catalog_architecture=_frozen(catalog.get("architecture")),
            h3_canvas=_frozen(doc.get("h3_canvas")), h3_device=str(doc.get("h3_device") or doc.get("device") or "")
            or None, h3_points=tuple(int(p) for p in doc.get("h3_points") or ()),
            h3_point_seconds=tuple(float(s) for s in doc.get("h3_point_seconds") or ()
                                   if isinstance(s, (int, float))),
            h3_prompt=doc.get("h3_prompt") if isinstance(doc.get("h3_prompt"), str) else None,
            h3_blocks_built=_int(doc.get("h3_blocks_built")),
            h3_parts=tuple(doc["h3_parts"]) if isinstance(doc.get("h3_parts"), (list, tuple)) else H3_PARTS,
            h3_vae=_frozen(doc.get("h3_vae")), h3_text_encoder=_frozen(doc.get("h3_text_encoder")),
            h3_streamed=_frozen(doc.get("h3_streamed")),
            device_matmul_size=_int(doc.get("device_matmul_size")),
            device_copy_bytes=_int(doc.get("device_copy_bytes")))

    def to_json(self) -> dict:
        budget = {"gpu_bytes": self.gpu_budget_bytes}
        doc = {"schema": JOB_SCHEMA, "plan": {"settings": self.settings.to_json(), "budget": budget},
               "budget": budget, "quick": self.quick, "tile_candidates": list(self.tile_candidates),
               "h3_parts": list(self.h3_parts)}
        optional = {"scaled_dit": self.scaled_dit, "h3_arch": self.h3_arch, "h3_canvas": self.h3_canvas,
                    "catalog": {"architecture": self.catalog_architecture} if self.catalog_architecture else None,
                    "h3_device": self.h3_device, "h3_points": self.h3_points,
                    "h3_point_seconds": self.h3_point_seconds, "h3_prompt": self.h3_prompt,
                    "h3_blocks_built": self.h3_blocks_built, "h3_vae": self.h3_vae,
                    "h3_text_encoder": self.h3_text_encoder, "h3_streamed": self.h3_streamed,
                    "device_matmul_size": self.device_matmul_size,
                    "device_copy_bytes": self.device_copy_bytes}
        doc.update({k: _plain(v) for k, v in optional.items() if v})
        return doc


@dataclass(frozen=True)
class Result:
    """The runner's answer: each part measured, skipped or failed with its own `status` and `reason`; `status`
    and `reason` of the whole only when the runner did not finish (h3kit says so, the runner never does)."""

    runner: Mapping = field(default_factory=lambda: _frozen(None))  # the Python, numpy and torch it ran with
    native: Mapping = field(default_factory=lambda: _frozen(None))
    inference: Mapping = field(default_factory=lambda: _frozen(None))  # the scaled DiT
    device: Mapping = field(default_factory=lambda: _frozen(None))
    tiles: tuple[Mapping, ...] = ()
    h3_model: Mapping | None = None
    streamed_pass: Mapping | None = None
    skipped: tuple[str, ...] = ()
    seconds: float | None = None
    stderr_tail: str | None = None
    status: str | None = None  # "error": the runner did not finish
    reason: str | None = None

    @classmethod
    def from_json(cls, doc: Any) -> Result:
        doc = doc if isinstance(doc, Mapping) else {}
        h3 = doc.get("h3_model")
        return cls(runner=_frozen(doc.get("runner")), native=_frozen(doc.get("native")),
                   inference=_frozen(doc.get("inference")), device=_frozen(doc.get("device")),
                   tiles=tuple(_frozen(t) for t in doc.get("tiles") or ()),
                   h3_model=_frozen(h3) if isinstance(h3, Mapping) else None,
                   streamed_pass=_frozen(doc["streamed_pass"]) if isinstance(doc.get("streamed_pass"), Mapping)
                   else None,
                   skipped=tuple(str(s) for s in doc.get("skipped") or ()),
                   seconds=doc.get("seconds") if isinstance(doc.get("seconds"), (int, float)) else None,
                   stderr_tail=doc.get("stderr_tail"), status=doc.get("status"), reason=doc.get("reason"))

    @classmethod
    def failed(cls, reason: str) -> Result:
        """The runner did not finish: no part was read."""
        return cls(status="error", reason=reason)

    @classmethod
    def not_run(cls, reason: str) -> Result:
        """The runner was not started (nothing it could measure): each part says why."""
        why = _frozen({"status": "skipped", "reason": reason})
        return cls(native=why, inference=why, device=why)

    @property
    def finished(self) -> bool:
        return self.status != "error"

    def to_json(self) -> dict:
        doc = {"schema": RESULT_SCHEMA}
        doc.update({f.name: _plain(getattr(self, f.name)) for f in fields(self)
                    if getattr(self, f.name) is not None})
        return doc
