"""Which weight formats run on this machine's device: the format probe's measurements, typed.

The probe (the calibration runner's `format_probe` job, run with ComfyUI's
own Python) builds one full-width H3 layer per weight format with ComfyUI's
own quantizers, runs it through ComfyUI's own ops on the device and dtype
ComfyUI will use for each part, and writes one `h3kit.format_probe/1`
document. The planner takes its evidence in this order: measured here (this
document) > reported (the catalog's formats.<f>.runs_on.<backend>) > unknown.

Document (`h3kit.format_probe/1`):

    {"schema": "h3kit.format_probe/1",
     "key": {"comfyui_version": "0.33.0", "torch": "2.14.1+cu130", "device": "cpu"},
     "backend": "cpu",                      # cuda | rocm | xpu | mps | cpu (the catalog's backend names)
     "parts": {"dit":          {"bf16": {"status": "runs", "seconds": 0.41, "error": null,
                                          "device": "cpu", "dtype": "float32"}, ...},
               "text_encoder": {"int8_convrot": {"status": "fails", "seconds": 0.02,
                                                  "error": "NotImplementedError: ...", ...}, ...}},
     "seconds": 12.3, "created": "2026-12-01T22:30:00Z"}

Each result may also say `dequantized` (true: ComfyUI dequantized the weight
and ran a plain matmul, as for GGUF, the text encoder's full_precision_mm and
formats its ops emulate on this device; false: the quantized kernel ran) and
carry `forward_seconds`, `out_dtype`, `layer`, `shape` and, for a failure,
`traceback`; the document `tokens`, `import_seconds`, `gguf_pack`, `python`,
`threads`, and h3kit's cache adds `machine_devices` and `comfyui_path`.

`status` is `runs`, `fails` (error: the exception's one line) or `skipped`
(the probe could not build that format here, e.g. a quantizer missing from
this ComfyUI: error says why; the planner treats it as no measurement).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path

SCHEMA = "h3kit.format_probe/1"
STATUSES = ("runs", "fails", "skipped")
PARTS = ("dit", "text_encoder")


class BadProbe(ValueError):
    """A format probe document that is not one h3kit wrote (the message says what is wrong)."""


@dataclass(frozen=True)
class FormatResult:
    """One format on one part: did ComfyUI's own ops run a full-width H3 layer in it here."""

    status: str  # runs | fails | skipped
    seconds: float | None = None
    error: str | None = None
    device: str | None = None  # the torch device it ran on ("cpu", "cuda:0", "mps")
    dtype: str | None = None  # the compute dtype ComfyUI uses for that part there
    dequantized: bool | None = None  # ComfyUI dequantized the weight for the matmul (emulated, GGUF), not quantized

    @property
    def measured(self) -> bool:
        return self.status in ("runs", "fails")

    def to_json(self) -> dict:
        return {"status": self.status, "seconds": self.seconds, "error": self.error,
                "device": self.device, "dtype": self.dtype, "dequantized": self.dequantized}


@dataclass(frozen=True)
class FormatProbe:
    """The probe's table for one (ComfyUI version, torch build, device)."""

    comfyui_version: str
    torch: str
    device: str
    backend: str
    parts: dict = field(default_factory=dict)  # part -> {format: FormatResult}
    seconds: float | None = None
    created: str | None = None
    path: Path | None = None  # where it was read from, for sentences that name the source

    def result(self, part: str, fmt: str) -> FormatResult | None:
        """The measurement of `fmt` for `part` ("dit" / "text_encoder"), or None when the probe has none."""
        res = self.parts.get(part, {}).get(fmt)
        return res if res is not None and res.measured else None

    def runs(self, part: str, fmt: str) -> bool | None:
        """True / False when measured here, None when the probe has no measurement for it."""
        res = self.result(part, fmt)
        return None if res is None else res.status == "runs"

    @property
    def source(self) -> str:
        """How a rationale names this evidence."""
        return (f"h3kit's format probe on this machine (ComfyUI {self.comfyui_version}, torch {self.torch}, "
                f"{self.device})")

    def to_json(self) -> dict:
        return {"schema": SCHEMA,
                "key": {"comfyui_version": self.comfyui_version, "torch": self.torch, "device": self.device},
                "backend": self.backend,
                "parts": {p: {f: r.to_json() for f, r in fs.items()} for p, fs in self.parts.items()},
                "seconds": self.seconds, "created": self.created}


def parse(doc: dict, path: Path | None = None) -> FormatProbe:
    """A probe document into a FormatProbe; BadProbe with the offending key when it is not one."""
    where = str(path) if path else "the format probe"
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        raise BadProbe(f"{where} is not an {SCHEMA} document")
    key = doc.get("key")
    if not isinstance(key, dict) or not all(isinstance(key.get(k), str) for k in ("comfyui_version", "torch", "device")):
        raise BadProbe(f"{where}: key needs comfyui_version, torch and device as strings")
    backend = doc.get("backend")
    if not isinstance(backend, str):
        raise BadProbe(f"{where}: backend must be a string (cuda, rocm, xpu, mps or cpu)")
    found = doc.get("parts") or {}
    if not isinstance(found, dict):
        raise BadProbe(f"{where}: parts must map dit and text_encoder to their formats")
    parts = {}
    for part, formats in found.items():
        if not isinstance(formats, dict):
            raise BadProbe(f"{where}: parts.{part} must map formats to results")
        parts[part] = {}
        for fmt, res in formats.items():
            if not isinstance(res, dict) or res.get("status") not in STATUSES:
                raise BadProbe(f"{where}: parts.{part}.{fmt}.status must be one of {', '.join(STATUSES)}")
            parts[part][fmt] = FormatResult(
                status=res["status"], seconds=_seconds(res.get("seconds")),
                error=res.get("error") if isinstance(res.get("error"), str) else None,
                device=res.get("device") if isinstance(res.get("device"), str) else None,
                dtype=res.get("dtype") if isinstance(res.get("dtype"), str) else None,
                dequantized=res.get("dequantized") if isinstance(res.get("dequantized"), bool) else None)
    return FormatProbe(comfyui_version=key["comfyui_version"], torch=key["torch"], device=key["device"],
                       backend=backend, parts=parts, seconds=_seconds(doc.get("seconds")),
                       created=doc.get("created") if isinstance(doc.get("created"), str) else None, path=path)


def _seconds(value) -> float | None:
    """A number of seconds, or None for anything else (an integer past float's range included)."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return None
    try:
        return float(value)
    except OverflowError:
        return None


def load(path: Path) -> dict:
    """The JSON document at `path`, read as it is; OSError when the file cannot be read, BadProbe when it
    is no JSON, or JSON nested deeper than the parser follows (RecursionError is no ValueError)."""
    text = Path(path).read_text(encoding="utf-8", errors="replace")
    try:
        return json.loads(text)
    except RecursionError:
        raise BadProbe(f"{path} is JSON nested too deep to be a format probe") from None
    except ValueError as exc:
        raise BadProbe(f"{path} is not JSON ({exc})") from None


def read(path: Path, log: logging.Logger | None = None) -> FormatProbe | None:
    """The probe saved at `path`, or None when there is none or it is not one h3kit wrote (a stale or damaged
    cache is no evidence). A file that is there but unusable is one warning on `log` naming it: whoever
    reads the log learns which file to delete, and the next probe overwrites it anyway."""
    try:
        return parse(load(path), Path(path))
    except FileNotFoundError:
        return None
    except (OSError, BadProbe) as exc:
        why = exc if isinstance(exc, BadProbe) else f"{path} cannot be read ({exc.strerror or exc})"
        (log or logging.getLogger("h3kit")).warning("format probe cache: %s; planning without it "
                                                    "('h3kit doctor --fresh-probe' measures it again)", why)
        return None
