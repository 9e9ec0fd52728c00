"""The machine's fingerprint (`h3kit.fingerprint/1`): OS, CPU, memory, disks, GPUs, compilers.

    from h3kit.fingerprint import collect
    doc = collect(timeout=5, extra_disk_paths=["~/ComfyUI", "~/ComfyUI/models"])
    fingerprint = this_machine()  # the same, parsed: h3kit.data.fingerprint.Fingerprint

One back end per platform (`_linux`, `_darwin`, `_windows`) is bound at import;
each lists its probes (small functions that run one tool or read one file) and
turns their values into the document. Parsers are pure functions in
`parsers`. Probes run in parallel, each within the per-probe timeout, so the
whole fingerprint takes about as long as the slowest one; none raises, and each
leaves a `{name, status, seconds, detail}` record in `probes`.

Per-probe timeout: the `timeout` argument, else env H3KIT_PROBE_TIMEOUT, else 5 s.
"""

from __future__ import annotations

import os
import platform
import sys
import time
from pathlib import Path
from typing import Iterable

from h3kit import __version__
from h3kit.core.units import gib
from h3kit.data.fingerprint import SCHEMA, Fingerprint
from h3kit.fingerprint import _common
from h3kit.fingerprint._probe import Probe, run_all

if sys.platform.startswith("linux"):
    from h3kit.fingerprint import _linux as _backend
elif sys.platform == "darwin":
    from h3kit.fingerprint import _darwin as _backend
elif sys.platform == "win32":
    from h3kit.fingerprint import _windows as _backend
else:  # BSDs and others: the Linux back end's probes fail softly there
    from h3kit.fingerprint import _linux as _backend

DEFAULT_TIMEOUT = 5.0
TIMEOUT_ENV = "H3KIT_PROBE_TIMEOUT"

__all__ = ["collect", "this_machine", "Fingerprint", "resolve_timeout", "render_text", "SCHEMA", "DEFAULT_TIMEOUT",
           "TIMEOUT_ENV"]


def resolve_timeout(timeout: float | None = None) -> tuple[float, str]:
    """(seconds, where they came from): the argument, else H3KIT_PROBE_TIMEOUT, else 5 s.
    An unreadable or non-positive environment value is ignored (the source says so)."""
    if timeout is not None and timeout > 0:
        return float(timeout), "argument"
    raw = os.environ.get(TIMEOUT_ENV, "").strip()
    if raw:
        try:
            value = float(raw)
            if value > 0:
                return value, TIMEOUT_ENV
        except ValueError:
            pass
        return DEFAULT_TIMEOUT, f"default ({TIMEOUT_ENV}={raw!r} ignored: not a positive number)"
    return DEFAULT_TIMEOUT, "default"


def collect(timeout: float | None = None, extra_disk_paths: Iterable[str | os.PathLike] = ()) -> dict:
    """Probe this machine; return an `h3kit.fingerprint/1` document. Never raises."""
    return collect_with(_backend, timeout, extra_disk_paths)


def this_machine(timeout: float | None = None, extra_disk_paths: Iterable[str | os.PathLike] = ()) -> Fingerprint:
    """This machine's fingerprint as the typed value the planner and the other layers take. Never raises."""
    return Fingerprint.from_json(collect(timeout, extra_disk_paths))


def collect_with(backend, timeout: float | None = None, extra_disk_paths: Iterable[str | os.PathLike] = ()) -> dict:
    """`collect` through a given back end module; tests run every back end on every
    machine this way, to check that foreign probes fail softly into a valid document."""
    started = time.monotonic()
    seconds, source = resolve_timeout(timeout)
    disk_paths = _unique([str(Path.home())] + [str(Path(p).expanduser()) for p in extra_disk_paths or ()])
    try:
        probes: list[Probe] = [Probe("memory", _common.memory), *backend.probes(disk_paths)]
    except Exception as exc:  # a bug in probe set-up must still leave a document
        probes = [Probe("memory", _common.memory)]
        setup_error = {"name": "setup", "status": "error", "seconds": 0.0, "detail": f"{type(exc).__name__}: {exc}"}
    else:
        setup_error = None
    values, records = run_all(probes, seconds)
    if setup_error:
        records.append(setup_error)
    try:
        described = backend.describe(values)
    except Exception as exc:
        described = {}
        records.append({"name": "describe", "status": "error", "seconds": 0.0, "detail": f"{type(exc).__name__}: {exc}"})
    gpus = sorted(described.get("gpus") or [], key=lambda g: -g["memory_total_bytes"])
    return {
        "schema": SCHEMA,
        "os": described.get("os") or {"system": backend.SYSTEM, "release": platform.release(), "wsl": False},
        "arch": described.get("arch") or _python_arch(),
        "rosetta": bool(described.get("rosetta", False)),
        "python_arch": _python_arch(),
        "cpu": described.get("cpu") or _fallback_cpu(),
        "memory": values.get("memory") or {"total_bytes": 0, "available_bytes": 0, "swap_total_bytes": 0},
        "disks": _common.disks(values, disk_paths),
        "gpus": gpus,
        "compilers": _common.compilers(values),
        "probes": records,
        "notes": list(described.get("notes") or []),
        "probe_timeout_seconds": seconds,
        "probe_timeout_source": source,
        "seconds": round(time.monotonic() - started, 3),
        "h3kit_version": __version__,
    }


def _python_arch() -> str:
    machine = platform.machine().lower()
    return "arm64" if machine in ("arm64", "aarch64") else "x86_64"


def _fallback_cpu() -> dict:
    try:
        import psutil

        physical, logical = psutil.cpu_count(logical=False), psutil.cpu_count(logical=True)
    except Exception:
        physical, logical = None, os.cpu_count()
    return {"model": platform.processor() or "unknown", "physical_cores": physical, "logical_cores": logical, "flags": []}


def _unique(items: list[str]) -> list[str]:
    seen, out = set(), []
    for item in items:
        if item not in seen:
            seen.add(item)
            out.append(item)
    return out


def render_text(doc: dict) -> str:
    """The short table a person reads without --json."""
    os_ = doc["os"]
    system = {"linux": "Linux", "darwin": "macOS", "windows": "Windows"}.get(os_["system"], os_["system"])
    rows = [
        ("OS", f"{system} {os_['release']}" + (" (WSL)" if os_.get("wsl") else "") + f", {doc['arch']}"
         + (" (Python under Rosetta: no MPS)" if doc.get("rosetta") else "")),
        ("CPU", f"{doc['cpu']['model']}, {doc['cpu']['physical_cores'] or '?'} cores / "
                f"{doc['cpu']['logical_cores'] or '?'} threads"),
        ("SIMD", " ".join(doc["cpu"]["flags"]) or "-"),
        ("Memory", f"{gib(doc['memory']['total_bytes'])} total, {gib(doc['memory']['available_bytes'])} available, "
                   f"{gib(doc['memory']['swap_total_bytes'])} swap"),
    ]
    if not doc["gpus"]:
        rows.append(("GPU", "none found (CPU only)"))
    for i, g in enumerate(doc["gpus"]):
        bits = [f"{g['name']} ({g['vendor']})", gib(g["memory_total_bytes"])]
        if g.get("unified_memory"):
            bits[1] = f"{gib(g['memory_total_bytes'])} usable of {gib(g.get('unified_memory_total_bytes'))} unified"
        if g.get("driver_version"):
            bits.append(f"driver {g['driver_version']}")
        if g.get("cuda_driver_version"):
            bits.append(f"CUDA {g['cuda_driver_version']}")
        if g.get("compute_capability"):
            bits.append(f"sm {g['compute_capability']}")
        bits.append(f"backend {g['backend'] or 'none'}")
        rows.append((f"GPU {i}", ", ".join(bits)))
    for d in doc["disks"]:
        rows.append(("Disk", f"{d['path']}: {gib(d['free_bytes'])} free of {gib(d['total_bytes'])} ({d['kind']})"))
    rows.append(("Compilers", ", ".join(f"{c['name']} {c['version']}" for c in doc["compilers"]) or "none found"))
    width = max(len(k) for k, _ in rows)
    lines = [f"{k.ljust(width)}  {v}" for k, v in rows]
    problems = [p for p in doc["probes"] if p["status"] in ("error", "timeout")]
    ok = sum(p["status"] == "ok" for p in doc["probes"])
    lines.append(f"{'Probes'.ljust(width)}  {ok} ok, {len(doc['probes']) - ok - len(problems)} not present, "
                 f"{len(problems)} failed, {doc['seconds']:.1f} s")
    for p in problems:
        lines.append(f"{''.ljust(width)}  {p['name']}: {p['status']} ({p['detail']})")
    for note in doc.get("notes") or []:
        lines.append(f"{'Note'.ljust(width)}  {note}")
    return "\n".join(lines)
