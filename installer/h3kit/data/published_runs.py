"""profiles/published_runs.yaml: H3 runs people published (machine, setup, figures), typed, to hold estimates to.

scripts/validate_estimator.py --published plans each run's machine with its setup forced and prints h3kit's
estimate next to the published figure; the plan's rationale on a Mac quotes the native-engine comparison
from here. Every key is checked when the file is read (an unknown one, a bad figure or a catalog id the
catalog lacks names file:line), so a figure is never silently dropped.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from h3kit.core.paths import asset_dir
from h3kit.data.yamlio import Problems, YamlDoc, load_yaml, parse_size

SCHEMA = "h3kit.published-runs/1"
BACKENDS = ("cuda", "mps", "rocm", "xpu", "cpu")
ENGINES = ("comfyui", "h3.c")
FIX = "Restore profiles/published_runs.yaml from h3kit's checkout, or correct the key named."
RUN_KEYS = ("id", "machine", "setup", "published", "normalised", "reason", "assumption", "source")
MACHINE_KEYS = ("backend", "gpu", "gpu_memory", "ram", "compute_capability", "cuda_driver", "unified_memory")
SETUP_KEYS = ("engine", "dit", "dit_file", "text_encoder", "vae", "lora", "canvas", "frames", "steps", "cfg",
              "sampler", "comfyui", "torch", "flags")
FIGURE_KEYS = ("seconds_per_step", "seconds_per_clip", "peak_gpu")
NORMALISED_KEYS = ("seconds_per_step", "rows", "comfyui_run", "why")
NOT_FOUND_KEYS = ("id", "claim", "cited_as", "why")
# setup key -> catalog part whose ids it names
ID_PARTS = {"dit": "dit", "text_encoder": "text_encoder", "vae": "vae", "lora": "lora"}


@dataclass(frozen=True)
class RunMachine:
    backend: str
    gpu: str
    gpu_memory_bytes: int | None  # None on unified memory: the fingerprint takes Metal's share of `ram`
    ram_bytes: int
    compute_capability: str | None
    cuda_driver: str | None
    unified_memory: bool


@dataclass(frozen=True)
class Setup:
    engine: str
    dit: str
    dit_file: str | None  # the file the run loaded when it is not the catalog's `dit` (same shapes)
    text_encoder: str | None
    vae: str | None
    lora: str | None
    canvas: tuple  # (width, height)
    frames: int
    steps: int
    cfg: float
    sampler: str | None
    comfyui: str | None
    torch: str | None
    flags: tuple


@dataclass(frozen=True)
class Figures:
    seconds_per_step: float | None
    seconds_per_clip: float | None
    peak_gpu_bytes: int | None


@dataclass(frozen=True)
class Normalised:
    seconds_per_step: float
    rows: int
    comfyui_run: str | None  # the ComfyUI run on the same machine it was rescaled to
    why: str


@dataclass(frozen=True)
class Run:
    id: str
    machine: RunMachine
    setup: Setup
    published: Figures
    normalised: Normalised | None
    reason: str | None  # why the estimate cannot be held to this run; None: it must be within 1.5x
    assumption: str | None
    source: str


@dataclass(frozen=True)
class NotFound:
    id: str
    claim: str
    cited_as: str
    why: str


@dataclass(frozen=True)
class PublishedRuns:
    runs: tuple
    not_found: tuple
    path: Path

    def run(self, run_id: str) -> Run | None:
        return next((r for r in self.runs if r.id == run_id), None)

    def native_comparison(self) -> tuple[Run, Run] | None:
        """(the h3.c run, the ComfyUI run on the same Mac it was compared with), or None when the table has none."""
        for r in self.runs:
            if r.setup.engine == "h3.c" and r.machine.backend == "mps" and r.normalised and r.normalised.comfyui_run:
                other = self.run(r.normalised.comfyui_run)
                if other is not None and other.published.seconds_per_step and r.published.seconds_per_step:
                    return r, other
        return None


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0


def _whole(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v > 0


def _text(v: Any) -> bool:
    return isinstance(v, str) and bool(v.strip())


def _opt_text(v: Any) -> str | None:
    return v if _text(v) else None


def _mapping(problems: Problems, kp: tuple, item: Any, keys: tuple) -> dict:
    """`item` as a dict, with a problem for each key the schema does not know."""
    if not isinstance(item, dict):
        problems.add(kp, f"must be a mapping with {', '.join(keys)}")
        return {}
    for k in item:
        if k not in keys:
            problems.add(kp + (k,), f"is not a key of this table; allowed: {', '.join(keys)}")
    return item


def _machine(problems: Problems, kp: tuple, item: Any) -> RunMachine | None:
    m = _mapping(problems, kp, item, MACHINE_KEYS)
    if m.get("backend") not in BACKENDS:
        problems.add(kp + ("backend",), f"is {m.get('backend')!r}; allowed: {', '.join(BACKENDS)}")
    if not _text(m.get("gpu")):
        problems.add(kp + ("gpu",), "must be the GPU's name as its driver reports it")
    unified = m.get("unified_memory", False)
    if not isinstance(unified, bool):
        problems.add(kp + ("unified_memory",), f"is {unified!r}; allowed: true or false")
    ram = parse_size(m.get("ram"))
    if not ram:
        problems.add(kp + ("ram",), f"is {m.get('ram')!r}; allowed: a size like \"64 GB\"")
    gpu_mem = parse_size(m.get("gpu_memory")) if m.get("gpu_memory") is not None else None
    if m.get("gpu_memory") is not None and not gpu_mem:
        problems.add(kp + ("gpu_memory",), f"is {m.get('gpu_memory')!r}; allowed: a size like \"16 GiB\"")
    if gpu_mem is None and unified is not True:
        problems.add(kp + ("gpu_memory",), "is needed unless unified_memory is true")
    for k in ("compute_capability", "cuda_driver"):
        if m.get(k) is not None and not isinstance(m.get(k), str):
            problems.add(kp + (k,), f"is {m.get(k)!r}; allowed: a quoted version like \"12.0\"")
    if not ram or m.get("backend") not in BACKENDS or not _text(m.get("gpu")):
        return None
    return RunMachine(m["backend"], m["gpu"], gpu_mem, ram, m.get("compute_capability"), m.get("cuda_driver"),
                      unified is True)


def _setup(problems: Problems, kp: tuple, item: Any, ids: dict | None) -> Setup | None:
    s = _mapping(problems, kp, item, SETUP_KEYS)
    if s.get("engine") not in ENGINES:
        problems.add(kp + ("engine",), f"is {s.get('engine')!r}; allowed: {', '.join(ENGINES)}")
    for key, part in ID_PARTS.items():
        v = s.get(key)
        if key == "dit" and not _text(v):
            problems.add(kp + (key,), "must be the catalog id of the DiT the plan uses")
        elif v is not None and not _text(v):
            problems.add(kp + (key,), f"is {v!r}; allowed: a catalog id or null")
        elif v is not None and ids is not None and v not in ids.get(part, ()):
            problems.add(kp + (key,), f"is {v!r}, not a {part} id of the catalog")
    canvas = s.get("canvas")
    if not (isinstance(canvas, list) and len(canvas) == 2 and all(_whole(x) for x in canvas)):
        problems.add(kp + ("canvas",), f"is {canvas!r}; allowed: [WIDTH, HEIGHT] whole numbers")
        canvas = None
    for k in ("frames", "steps"):
        if not _whole(s.get(k)):
            problems.add(kp + (k,), f"is {s.get(k)!r}; allowed: a whole number > 0")
    if not _number(s.get("cfg")):
        problems.add(kp + ("cfg",), f"is {s.get('cfg')!r}; allowed: a number > 0")
    for k in ("dit_file", "sampler", "comfyui", "torch"):
        if s.get(k) is not None and not _text(s.get(k)):
            problems.add(kp + (k,), f"is {s.get(k)!r}; allowed: text or null")
    flags = s.get("flags", [])
    if not isinstance(flags, list) or not all(_text(f) for f in flags):
        problems.add(kp + ("flags",), f"is {flags!r}; allowed: a list of command-line flags")
        flags = []
    if canvas is None or not all(_whole(s.get(k)) for k in ("frames", "steps")) or not _number(s.get("cfg")) \
            or s.get("engine") not in ENGINES or not _text(s.get("dit")):
        return None
    return Setup(s["engine"], s["dit"], _opt_text(s.get("dit_file")), _opt_text(s.get("text_encoder")),
                 _opt_text(s.get("vae")), _opt_text(s.get("lora")), (canvas[0], canvas[1]), s["frames"], s["steps"],
                 float(s["cfg"]), _opt_text(s.get("sampler")), _opt_text(s.get("comfyui")), _opt_text(s.get("torch")),
                 tuple(flags))


def _figures(problems: Problems, kp: tuple, item: Any) -> Figures:
    f = _mapping(problems, kp, item, FIGURE_KEYS)
    for k in ("seconds_per_step", "seconds_per_clip"):
        if f.get(k) is not None and not _number(f.get(k)):
            problems.add(kp + (k,), f"is {f.get(k)!r}; allowed: seconds > 0")
    peak = parse_size(f.get("peak_gpu")) if f.get("peak_gpu") is not None else None
    if f.get("peak_gpu") is not None and not peak:
        problems.add(kp + ("peak_gpu",), f"is {f.get('peak_gpu')!r}; allowed: a size like \"27.2 GB\"")
    if not any(f.get(k) is not None for k in FIGURE_KEYS):
        problems.add(kp, f"needs at least one of {', '.join(FIGURE_KEYS)}")
    num = {k: float(f[k]) if _number(f.get(k)) else None for k in ("seconds_per_step", "seconds_per_clip")}
    return Figures(num["seconds_per_step"], num["seconds_per_clip"], peak)


def _normalised(problems: Problems, kp: tuple, item: Any) -> Normalised | None:
    if item is None:
        return None
    n = _mapping(problems, kp, item, NORMALISED_KEYS)
    ok = _number(n.get("seconds_per_step")) and _whole(n.get("rows")) and _text(n.get("why"))
    if not ok:
        problems.add(kp, "needs seconds_per_step (> 0), rows (a whole number) and why (text)")
        return None
    return Normalised(float(n["seconds_per_step"]), n["rows"], _opt_text(n.get("comfyui_run")), n["why"])


def check(doc: YamlDoc, ids: dict | None = None) -> PublishedRuns:
    """The typed table. `ids` (part -> catalog ids: dit, text_encoder, vae, lora) also checks the setups' ids."""
    problems = Problems(doc)
    data = doc.data if isinstance(doc.data, dict) else {}
    if not isinstance(doc.data, dict):
        problems.add((), "must be a mapping (schema, runs, not_found)")
    _mapping(problems, (), data, ("schema", "runs", "not_found"))
    if data.get("schema") != SCHEMA:
        problems.add(("schema",), f"is {data.get('schema')!r}; allowed: {SCHEMA}")
    items = data.get("runs")
    if not isinstance(items, list) or not items:
        problems.add(("runs",), "must be a non-empty list of runs")
        items = []
    runs, seen = [], set()
    for i, item in enumerate(items):
        kp = ("runs", i)
        r = _mapping(problems, kp, item, RUN_KEYS)
        rid = r.get("id")
        if not _text(rid) or rid in seen:
            problems.add(kp + ("id",), f"must be a unique id, not {rid!r}")
        seen.add(rid)
        if not _text(r.get("source")):
            problems.add(kp + ("source",), "must say where the run was published")
        for k in ("reason", "assumption"):
            if r.get(k) is not None and not _text(r.get(k)):
                problems.add(kp + (k,), f"is {r.get(k)!r}; allowed: a sentence or null")
        machine = _machine(problems, kp + ("machine",), r.get("machine"))
        setup = _setup(problems, kp + ("setup",), r.get("setup"), ids)
        published = _figures(problems, kp + ("published",), r.get("published"))
        normalised = _normalised(problems, kp + ("normalised",), r.get("normalised"))
        if machine and setup and _text(rid) and _text(r.get("source")):
            runs.append(Run(rid, machine, setup, published, normalised, _opt_text(r.get("reason")),
                            _opt_text(r.get("assumption")), r["source"]))
    for i, r in enumerate(runs):
        target = r.normalised.comfyui_run if r.normalised else None
        if target is not None and target not in seen:
            problems.add(("runs", i, "normalised", "comfyui_run"), f"is {target!r}, not a run id of this table")
    missing = []
    for i, item in enumerate(data.get("not_found") or []):
        n = _mapping(problems, ("not_found", i), item, NOT_FOUND_KEYS)
        if not all(_text(n.get(k)) for k in NOT_FOUND_KEYS):
            problems.add(("not_found", i), f"needs {', '.join(NOT_FOUND_KEYS)} (text)")
        else:
            missing.append(NotFound(n["id"], n["claim"], n["cited_as"], n["why"]))
    problems.raise_if_any(FIX)
    return PublishedRuns(tuple(runs), tuple(missing), doc.path)


_parsed: dict = {}


def load(path: str | Path | None = None, ids: dict | None = None) -> PublishedRuns:
    """The checked table (cached by path, size and mtime; `ids` as in check)."""
    p = Path(path) if path is not None else asset_dir("profiles") / "published_runs.yaml"
    st = p.stat() if p.is_file() else None
    key = (str(p), st.st_mtime_ns if st else None, st.st_size if st else None,
           tuple(sorted((k, tuple(v)) for k, v in ids.items())) if ids else None)
    if key not in _parsed:
        _parsed[key] = check(load_yaml(p), ids)
    return _parsed[key]
