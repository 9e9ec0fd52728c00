"""profiles/throughput.yaml: device peak TFLOPS and bandwidth, typed, for the time estimate before calibration.

Every row is checked when the file is read (a bad figure names file:line and
the key); h3kit.plan.timing matches a fingerprint to a row and does the
arithmetic. The file is data with a source per row; no figure lives in code.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from h3kit.core.paths import asset_dir
from h3kit.data.yamlio import Problems, YamlDoc, load_yaml

SCHEMA = "h3kit.throughput/1"
VENDORS = ("nvidia", "amd", "intel", "apple")
BACKENDS = ("cuda", "rocm", "mps", "xpu", "cpu")
RATES = ("fp16", "bf16", "fp32", "bandwidth")
FIX = "Restore profiles/throughput.yaml from h3kit's checkout, or correct the value named."


@dataclass(frozen=True)
class DeviceRow:
    id: str
    vendor: str
    names: tuple  # lower-case substrings of a GPU name
    generation: tuple | None  # (lo, hi) compute capability as tuples, None for open ends; None: matched by name only
    fp16: float  # dense TFLOPS
    bf16: float
    fp32: float
    bandwidth: float  # GB/s (10^9)
    source: str  # the source key, or "assumption: ..."
    int8: float | None = None  # dense 8-bit TOPS for quantized linears (NVIDIA rows), None when not listed


@dataclass(frozen=True)
class CpuModel:
    flops_per_cycle: tuple  # ((flag, fp32 FLOP per cycle per core), ...), widest first
    scalar_flops_per_cycle: float
    clock_ghz: float
    bandwidth: float


@dataclass(frozen=True)
class Throughput:
    devices: tuple
    cpu: CpuModel
    efficiency: dict  # backend -> {"linear", "attention"}
    memory_efficiency: float
    call_overhead_s: dict  # backend -> seconds
    path: Path
    stream_overhead: float = 0.0  # share added to a model call with every block streamed by h3kit's loader
    stream_source: str = ""
    stream_cached_overhead: float = 0.0  # the same when the page cache holds the streamed blocks between steps


def _positive(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0


def _share(v: Any) -> bool:
    return _positive(v) and v <= 1.0


def _cc(text: Any) -> tuple | None:
    return tuple(int(p) for p in str(text).split(".")[:2])


def _row(doc: YamlDoc, problems: Problems, i: int, item: Any, seen: set) -> DeviceRow | None:
    kp = ("devices", i)
    if not isinstance(item, dict):
        problems.add(kp, "must be a mapping with id, vendor, names or generation, fp16, bf16, fp32, bandwidth")
        return None
    rid = item.get("id")
    if not isinstance(rid, str) or rid in seen:
        problems.add(kp + ("id",), f"must be a unique string id, not {rid!r}")
    seen.add(rid)
    if item.get("vendor") not in VENDORS:
        problems.add(kp + ("vendor",), f"is {item.get('vendor')!r}; allowed: {', '.join(VENDORS)}")
    names, gen = item.get("names"), item.get("generation")
    if names is None and gen is None:
        problems.add(kp, "needs names (GPU name substrings) or generation (a compute capability range)")
    if names is not None and (not isinstance(names, list) or not all(isinstance(n, str) and n.strip() for n in names)):
        problems.add(kp + ("names",), f"must be a list of GPU name substrings, not {names!r}")
        names = []
    generation = None
    if gen is not None:
        ok = isinstance(gen, list) and len(gen) == 2 and all(g is None or isinstance(g, str) for g in gen)
        try:
            generation = tuple(_cc(g) if g is not None else None for g in gen) if ok else None
        except ValueError:
            generation = None
        if generation is None:
            problems.add(kp + ("generation",), f"must be [\"MIN\", \"MAX\"] compute capabilities like \"8.9\" "
                                               f"(null for open), not {gen!r}")
    for key in RATES:
        if not _positive(item.get(key)):
            problems.add(kp + (key,), f"is {item.get(key)!r}; allowed: a number > 0 "
                                      f"({'GB/s' if key == 'bandwidth' else 'dense TFLOPS'})")
    if "int8" in item and not _positive(item.get("int8")):
        problems.add(kp + ("int8",), f"is {item.get('int8')!r}; allowed: a number > 0 (dense 8-bit TOPS)")
    source = item.get("source") or (f"assumption: {item['assumption']}" if isinstance(item.get("assumption"), str) else None)
    if not isinstance(source, str):
        problems.add(kp, "needs a source (a key from the file's header) or an assumption (a sentence)")
    if any(not _positive(item.get(k)) for k in RATES) or not isinstance(rid, str):
        return None
    return DeviceRow(rid, str(item.get("vendor")), tuple(n.lower() for n in names or ()), generation,
                     float(item["fp16"]), float(item["bf16"]), float(item["fp32"]), float(item["bandwidth"]),
                     str(source), float(item["int8"]) if _positive(item.get("int8")) else None)


def check(doc: YamlDoc) -> Throughput:
    problems = Problems(doc)
    data = doc.data
    if not isinstance(data, dict):
        problems.add((), "must be a mapping (schema, efficiency, cpu, devices)")
        problems.raise_if_any(FIX)
    if data.get("schema") != SCHEMA:
        problems.add(("schema",), f"is {data.get('schema')!r}; allowed: {SCHEMA}")
    eff = data.get("efficiency") if isinstance(data.get("efficiency"), dict) else {}
    efficiency, overhead = {}, {}
    for backend in BACKENDS:
        e = eff.get(backend)
        if not isinstance(e, dict) or not all(_share(e.get(k)) for k in ("linear", "attention")):
            problems.add(("efficiency", backend), f"is {e!r}; allowed: {{linear: SHARE, attention: SHARE}}, shares in (0, 1]")
        else:
            efficiency[backend] = {"linear": float(e["linear"]), "attention": float(e["attention"])}
        o = (eff.get("call_overhead_s") or {}).get(backend) if isinstance(eff.get("call_overhead_s"), dict) else None
        if not (isinstance(o, (int, float)) and not isinstance(o, bool) and o >= 0):
            problems.add(("efficiency", "call_overhead_s"), f"needs {backend}: seconds >= 0 (has {o!r})")
        else:
            overhead[backend] = float(o)
    if not _share(eff.get("memory")):
        problems.add(("efficiency", "memory"), f"is {eff.get('memory')!r}; allowed: a share in (0, 1]")
    cpu = data.get("cpu") if isinstance(data.get("cpu"), dict) else {}
    per = cpu.get("flops_per_cycle_fp32")
    if not isinstance(per, dict) or not per or not all(_positive(v) for v in per.values()):
        problems.add(("cpu", "flops_per_cycle_fp32"), "must map CPU flags (avx512f, fma, neon, ...) to FLOP per cycle > 0")
        per = {}
    for key in ("scalar_flops_per_cycle", "clock_ghz", "bandwidth_gbs"):
        if not _positive(cpu.get(key)):
            problems.add(("cpu", key), f"is {cpu.get(key)!r}; allowed: a number > 0")
    stream = data.get("streaming") if isinstance(data.get("streaming"), dict) else {}
    over = stream.get("pass_overhead")
    if isinstance(over, bool) or not isinstance(over, (int, float)) or not 0 <= over <= 10:
        problems.add(("streaming", "pass_overhead"), f"is {over!r}; allowed: a share >= 0 (0.84 is +84% per model call)")
        over = 0.0
    cached = stream.get("cached_pass_overhead", over)
    if isinstance(cached, bool) or not isinstance(cached, (int, float)) or not 0 <= cached <= 10:
        problems.add(("streaming", "cached_pass_overhead"), f"is {cached!r}; allowed: a share >= 0 (0.26 is +26%)")
        cached = over
    if not isinstance(stream.get("source"), str):
        problems.add(("streaming", "source"), "must say where the streaming overhead comes from")
    rows, seen = [], set()
    items = data.get("devices")
    if not isinstance(items, list) or not items:
        problems.add(("devices",), "must be a non-empty list of device rows")
        items = []
    for i, item in enumerate(items):
        row = _row(doc, problems, i, item, seen)
        if row is not None:
            rows.append(row)
    problems.raise_if_any(FIX)
    return Throughput(tuple(rows),
                      CpuModel(tuple((str(k).lower(), float(v)) for k, v in per.items()),
                               float(cpu["scalar_flops_per_cycle"]), float(cpu["clock_ghz"]), float(cpu["bandwidth_gbs"])),
                      efficiency, float(eff["memory"]), overhead, doc.path, float(over),
                      str(stream.get("source")) + (f" (assumption: {stream['assumption']})"
                                                   if isinstance(stream.get("assumption"), str) else ""),
                      float(cached))


_parsed: dict = {}


def load(path: str | Path | None = None) -> Throughput:
    """The checked throughput table (cached by path, size and mtime, so an edited file is read again)."""
    p = Path(path) if path is not None else asset_dir("profiles") / "throughput.yaml"
    st = p.stat() if p.is_file() else None
    key = (str(p), st.st_mtime_ns if st else None, st.st_size if st else None)
    if key not in _parsed:
        _parsed[key] = check(load_yaml(p))
    return _parsed[key]
