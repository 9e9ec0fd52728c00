"""Which weight formats run where: the catalog's per-backend reports and the format probe's measurements.

Every format in the catalog says, per backend, whether ComfyUI's ops are
reported to run it (`formats.<f>.runs_on.<backend>: {status, source}`), and
the catalog's `placement:` rules say where ComfyUI puts a part's weights when
that is not the machine's backend (on a Mac it keeps quantized text encoders on
the CPU: their evidence is the CPU's). `evidence()` answers for one format and
part in a fixed order -- measured on this device (the h3kit.format_probe/1
document, data/format_evidence.py) > reported (the catalog) > unknown -- and
returns which of them decided, so a plan's rationale can name it.

A report may change with the ComfyUI (and torch) release: `runs_on.<backend>.since`
lists later reports, each {comfyui_min, torch_min (optional), status, source}.
`reported()` takes the last listed one the target meets; the base {status,
source} holds for older releases and whenever the version is not known (the
conservative side: a plan made before the ComfyUI is found, or for the one
h3kit installs). An entry with torch_min holds only where the torch version
is known to be that new. The probe's measurement still beats every report.

The probe measures GGUF quantization types (q4_k, q6_k), the catalog lists
files' mixes (q4_k_m); `formats.<f>.probe_as` names the types a mix is made of,
and the mix counts as measured only when every one of them was measured.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from h3kit.data.comfy_versions import version_of
from h3kit.data.yamlio import Problems

RUN_STATUSES = ("runs", "fails", "unknown")
RUNS_ON_BACKENDS = ("cuda", "mps", "rocm", "xpu", "cpu")  # each format says all five; directml may be added
# The planner prefers files known to run (0) over files with no report either way (1); `fails` is never planned.
EVIDENCE_TIERS = {"runs": 0, "unknown": 1}
PLACEMENT_KEYS = ("part", "backend", "formats", "evidence_from", "source")
SINCE_KEYS = ("comfyui_min", "torch_min", "status", "source")
PARTS = ("dit", "text_encoder", "vae", "audio_vae", "lora")


@dataclass(frozen=True)
class Requirements:
    """A format's `requires:` rules (format_support.requirements checks a machine against them)."""

    backends: tuple | None = None  # planned only on these unless the format probe measured it running
    not_backends: tuple = ()
    min_compute_capability: str | None = None
    compute_capability_major: tuple = ()  # allowed major versions (Blackwell: 10 and 12)
    min_cuda_driver: str | None = None  # a cu130 torch needs a driver reporting CUDA 13.0
    loader_pack: str | None = None


@dataclass(frozen=True)
class Format:
    """One weight format: its planner rank, its rules, and per backend whether ComfyUI is reported to run it."""

    name: str
    quality: int  # higher is better; a ranking, not a measured score
    requires: Requirements
    runs_on: dict  # backend -> (status, source): the base report (older or unknown ComfyUI)
    probe_as: tuple = ()  # the GGUF types a file mix is made of (empty: the format's own name)
    bits_per_weight: float | None = None  # GGUF types: ggml's block size per weight
    compute: str | None = None  # int8 | fp8 | fp4: CUDA multiplies the DiT's linears in low precision
    note: str = ""
    since: dict = field(default_factory=dict)  # backend -> ((comfyui_min, torch_min, status, source), ...)

    def reported(self, backend: str, comfyui: str | None = None, torch: str | None = None) -> tuple[str, str] | None:
        """(status, source) reported for `backend` with this ComfyUI and torch version: the last `since` entry they
        meet, else the base report; None when the catalog says nothing for the backend."""
        out, later = self.runs_on.get(backend), self.since.get(backend, ())
        have_c, have_t = version_of(comfyui), version_of(torch)
        if out and later:  # the base report holds until a `since` entry applies: say for which releases
            first = later[0][0]
            when = (f"the ComfyUI version is not known, so the report for releases before {first} holds"
                    if have_c is None else f"ComfyUI {comfyui} predates {first}" if have_c < version_of(first)
                    else f"no later report applies to ComfyUI {comfyui} with torch {torch or 'unknown'}")
            out = (out[0], f"{when}: {out[1]}")
        for need_c, need_t, status, source in later:
            if have_c is None or have_c < version_of(need_c):
                continue
            if need_t is not None and (have_t is None or have_t < version_of(need_t)):
                continue
            out = (status, f"ComfyUI {comfyui} is {need_c} or newer"
                           + (f" with torch {torch} >= {need_t}" if need_t else "") + f": {source}")
        return out


def parse_formats(section: dict) -> dict:
    """name -> Format, from a `formats:` section check_catalog, speed.check and check() have passed."""
    out = {}
    for name, spec in section.items():
        req = spec.get("requires") or {}
        requires = Requirements(tuple(req["backends"]) if "backends" in req else None, tuple(req.get("not_backends") or ()),
                                req.get("min_compute_capability"), tuple(req.get("compute_capability_major") or ()),
                                req.get("min_cuda_driver"), req.get("loader_pack"))
        runs_on = {b: (r["status"], str(r["source"])) for b, r in (spec.get("runs_on") or {}).items()}
        since = {b: tuple((e["comfyui_min"], e.get("torch_min"), e["status"], str(e["source"])) for e in r["since"])
                 for b, r in (spec.get("runs_on") or {}).items() if r.get("since")}
        out[name] = Format(name, int(spec["quality"]), requires, runs_on, tuple(spec.get("probe_as") or ()),
                           spec.get("bits_per_weight"), spec.get("compute"), str(spec.get("note") or ""), since)
    return out


@dataclass(frozen=True)
class Evidence:
    """Does `format` run for one part here, and what says so."""

    format: str
    part: str
    status: str  # runs | fails | unknown
    kind: str  # measured | reported | unknown
    source: str  # the probe's FormatProbe.source, or the catalog report's source
    backend: str  # where the part's weights run (after placement)
    detail: str = ""  # the probe's error line, when it failed there

    @property
    def tier(self) -> int:
        return EVIDENCE_TIERS.get(self.status, len(EVIDENCE_TIERS))

    def phrase(self) -> str:
        """'runs on cuda (reported: SOURCE)', 'fails on mps (measured: SOURCE: ERROR)', 'unknown on cpu (...)'."""
        verb = {"runs": "runs", "fails": "fails", "unknown": "is not known to run"}[self.status]
        detail = f": {self.detail}" if self.detail else ""
        kind = "no report either way" if self.kind == "unknown" else self.kind
        return f"{self.format} {verb} on {self.backend} ({kind}: {self.source}{detail})"


def placed_on(placement: tuple, part: str, fmt: str, backend: str) -> tuple[str, str]:
    """(the backend whose evidence counts for `part` in `fmt`, the placement rule's source or ""), by the
    catalog's Placement rules."""
    for rule in placement:
        if rule.part == part and rule.backend == backend and fmt in rule.formats:
            return rule.evidence_from, rule.source
    return backend, ""


def _measured(probe, backend: str, part: str, fmt: str, spec: Format | None):
    """(runs?, error line) from the probe for `fmt` on `part`, or None when it did not measure every type of it."""
    if probe is None or getattr(probe, "backend", None) != backend or part not in ("dit", "text_encoder"):
        return None
    names = list((spec.probe_as if spec else ()) or [fmt])
    results = [probe.result(part, n) for n in names]
    failed = [(n, r) for n, r in zip(names, results) if r is not None and r.status == "fails"]
    if failed:
        name, res = failed[0]
        return False, (f"{name}: {res.error}" if name != fmt and res.error else res.error or "")
    if all(r is not None for r in results):
        return True, ""
    return None


def evidence(formats: dict, placement: tuple, fmt: str, part: str, backend: str, probe=None,
             comfyui: str | None = None, torch: str | None = None) -> Evidence:
    """The evidence for `fmt` on `part` on a machine whose backend is `backend`, running ComfyUI `comfyui` on
    torch `torch` (None: not known): measured > reported (for that release, Format.reported) > unknown."""
    spec = formats.get(fmt)
    measured = _measured(probe, backend, part, fmt, spec)
    where, placed_by = placed_on(placement, part, fmt, backend)
    if measured is not None:
        runs, error = measured
        return Evidence(fmt, part, "runs" if runs else "fails", "measured", probe.source, where, "" if runs else error)
    status, source = (spec.reported(where, comfyui, torch) if spec else None) or ("unknown", "")
    source = source or "the catalog lists no report for this backend"
    if placed_by:
        source = f"{source}; {part.replace('_', ' ')} weights run on {where} there: {placed_by}"
    return Evidence(fmt, part, status, "unknown" if status == "unknown" else "reported", source, where)


def version(text) -> tuple | None:
    """'8.9' -> (8, 9); '13.0' -> (13, 0); anything else -> None."""
    if not isinstance(text, str):
        return None
    try:
        return tuple(int(p) for p in text.split(".")[:2])
    except ValueError:
        return None


def requirements(fmt: str, spec: Format, machine) -> tuple[bool, str]:
    """The format's `requires` rules against `machine` (a catalog.Machine): (met?, why not)."""
    req = spec.requires
    if req.backends is not None and machine.backend not in req.backends:
        return False, f"{fmt} needs a {'/'.join(req.backends)} GPU, this machine runs {machine.backend}"
    if machine.backend in req.not_backends:
        return False, f"{fmt} is not planned on {machine.backend} ({spec.note or 'known to fail there'})"
    if req.min_compute_capability is not None:
        need = version(str(req.min_compute_capability))
        if machine.compute_capability is None or machine.compute_capability < need:
            have = ".".join(map(str, machine.compute_capability)) if machine.compute_capability else "unknown"
            return False, f"{fmt} needs compute capability >= {req.min_compute_capability} (this GPU: {have})"
    majors = req.compute_capability_major
    if majors and (machine.compute_capability is None or machine.compute_capability[0] not in majors):
        listed = " or ".join(f"{m}.x" for m in majors)
        return False, f"{fmt} runs only on GPUs with compute capability {listed} ({spec.note})"
    if req.min_cuda_driver is not None:
        need = version(str(req.min_cuda_driver))
        if machine.cuda_driver is None or machine.cuda_driver < need:
            have = ".".join(map(str, machine.cuda_driver)) if machine.cuda_driver else "unknown"
            return False, (f"{fmt} needs a PyTorch cu130 build, which needs a driver reporting CUDA >= "
                           f"{req.min_cuda_driver} (this driver: {have})")
    return True, ""


def _check_since(since, kp: tuple, problems: Problems) -> None:
    """runs_on.<backend>.since: a list of {comfyui_min, torch_min (optional), status, source}, oldest first."""
    if since is None:
        return
    if not isinstance(since, list) or not since:
        problems.add(kp, "must be a list of {comfyui_min, torch_min, status, source}, oldest release first")
        return
    last = None
    for i, entry in enumerate(since):
        ekp = kp + (i,)
        if not isinstance(entry, dict):
            problems.add(ekp, "must be a mapping {comfyui_min, torch_min, status, source}")
            continue
        for key in entry:
            if key not in SINCE_KEYS:
                problems.add(ekp + (key,), f"is not a key here; allowed: {', '.join(SINCE_KEYS)}")
        need = version_of(entry.get("comfyui_min"))
        if need is None:
            problems.add(ekp + ("comfyui_min",), f"is {entry.get('comfyui_min')!r}; allowed: a ComfyUI release such as \"0.37.0\"")
        elif last is not None and need < last:
            problems.add(ekp + ("comfyui_min",), "is older than the entry before it; list the entries oldest first")
        last = need or last
        if "torch_min" in entry and version_of(entry["torch_min"]) is None:
            problems.add(ekp + ("torch_min",), f"is {entry['torch_min']!r}; allowed: a torch release such as \"2.15\"")
        if entry.get("status") not in RUN_STATUSES:
            problems.add(ekp + ("status",), f"is {entry.get('status')!r}; allowed: {', '.join(RUN_STATUSES)}")
        if not isinstance(entry.get("source"), str) or not entry["source"].strip():
            problems.add(ekp + ("source",), "must say where this was reported, and why from this release")


def check(data: dict, problems: Problems) -> None:
    """A problem for every runs_on / probe_as / placement entry that is not as the module docstring says."""
    formats = data.get("formats") or {}
    for name, spec in formats.items():
        if isinstance(spec, dict):
            _check_format(name, spec, problems)
    ids = {w.get("id") for part in PARTS for w in (data.get(part) or []) if isinstance(w, dict)}
    for i, setup in enumerate(data.get("reported_setups") or ()):
        files = setup.get("files") if isinstance(setup, dict) else None
        if not isinstance(files, dict) or not isinstance(setup.get("source"), str):
            problems.add(("reported_setups", i), "must be a mapping with machine, files {part: weight id} and source")
            continue
        for part, wid in files.items():
            if wid not in ids:
                problems.add(("reported_setups", i, "files", part), f"is {wid!r}, which no weight entry has as its id")
    for i, rule in enumerate(data.get("placement") or ()):
        _check_placement(("placement", i), rule, formats, problems)


def _check_format(name: str, spec: dict, problems: Problems) -> None:
    kp = ("formats", name, "runs_on")
    runs_on = spec.get("runs_on")
    if not isinstance(runs_on, dict):
        problems.add(kp, f"must map each backend ({', '.join(RUNS_ON_BACKENDS)}) to {{status, source}}")
        return
    for backend in RUNS_ON_BACKENDS:
        if backend not in runs_on:
            problems.add(kp, f"is missing '{backend}'; write {{status: unknown, source: \"no report\"}} when nobody "
                             "has reported either way")
    for backend, report in runs_on.items():
        bkp = kp + (backend,)
        if backend not in RUNS_ON_BACKENDS + ("directml",):
            problems.add(bkp, f"is not a backend; allowed: {', '.join(RUNS_ON_BACKENDS + ('directml',))}")
        elif not isinstance(report, dict) or report.get("status") not in RUN_STATUSES:
            status = report.get("status") if isinstance(report, dict) else report
            problems.add(bkp + ("status",), f"is {status!r}; allowed: {', '.join(RUN_STATUSES)}")
        elif not isinstance(report.get("source"), str) or not report["source"].strip():
            problems.add(bkp + ("source",), "must say where this was reported or measured (an issue, a PR, "
                                            "or the format probe with its ComfyUI, torch, device and date)")
        else:
            _check_since(report.get("since"), bkp + ("since",), problems)
    probe_as = spec.get("probe_as")
    if probe_as is not None and not (isinstance(probe_as, list) and probe_as
                                     and all(isinstance(p, str) for p in probe_as)):
        problems.add(("formats", name, "probe_as"), "must be a list of the format probe's type names (q4_k, q6_k)")
    bits = spec.get("bits_per_weight")
    if bits is not None and (isinstance(bits, bool) or not isinstance(bits, (int, float)) or not 0 < bits <= 32):
        problems.add(("formats", name, "bits_per_weight"), f"is {bits!r}; allowed: bits per weight, e.g. 4.5")


def _check_placement(kp: tuple, rule, formats: dict, problems: Problems) -> None:
    if not isinstance(rule, dict):
        problems.add(kp, f"must be a mapping with {', '.join(PLACEMENT_KEYS)}")
        return
    for key in rule:
        if key not in PLACEMENT_KEYS:
            problems.add(kp + (key,), f"is not a placement key; allowed: {', '.join(PLACEMENT_KEYS)}")
    if rule.get("part") not in PARTS:
        problems.add(kp + ("part",), f"is {rule.get('part')!r}; allowed: {', '.join(PARTS)}")
    for key in ("backend", "evidence_from"):
        if rule.get(key) not in RUNS_ON_BACKENDS:
            problems.add(kp + (key,), f"is {rule.get(key)!r}; allowed: {', '.join(RUNS_ON_BACKENDS)}")
    fmts = rule.get("formats")
    if not isinstance(fmts, list) or not all(f in formats for f in fmts):
        problems.add(kp + ("formats",), "must list formats named under 'formats'")
    if not isinstance(rule.get("source"), str):
        problems.add(kp + ("source",), "must name where this placement is documented")
