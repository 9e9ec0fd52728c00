"""The format probe: which weight formats run on this machine's device, measured once per ComfyUI setup.

`format_evidence(session, install)` returns the cached `FormatProbe`
(h3kit.data.format_evidence) for this ComfyUI, or runs the calibration
runner's `format-probe` job in ComfyUI's own Python (about 30 s on a 2-core
CPU; the runner stops measuring after a minute, and a Python that hangs is
stopped after four) and caches what it wrote. The cache is one file per
ComfyUI folder under `<cache>/format_probe/`, reused while the ComfyUI
version, the torch build, the machine's devices (from the fingerprint) and
whether a GGUF loader pack is installed stay the same; `fresh=True` measures
again. Install and calibrate run it before the plan is made (the planner's
evidence: measured here > reported > unknown) and before any download;
doctor prints its table.

It never raises for an environment problem: a probe that cannot run (no
torch in that Python, ComfyUI does not import, a timeout, a full disk)
returns None, and the finding it adds says why. A cache file that is not a
probe document (damaged, hand-edited, any JSON of another shape) counts as
no probe, with one warning in the log naming it; the next probe overwrites it.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
import threading
from pathlib import Path

from h3kit import bundled
from h3kit.calibrate.runner_client import _follow
from h3kit.comfyui.locate import inspect
from h3kit.core.errors import H3kitError
from h3kit.core.files import atomic_write
from h3kit.core.oserrors import no_space, translate
from h3kit.core.session import Session
from h3kit.core.subproc import run as run_process
from h3kit.data.fingerprint import Fingerprint
from h3kit.data.format_evidence import PARTS, BadProbe, FormatProbe, load, parse, read

RUNNER = bundled.CALIBRATION_RUNNER
FOLDER = "format_probe"
BUDGET_S = 60  # the runner skips the formats left when its own clock passes this
# ComfyUI's import on a cold disk plus the budget, with room; past it the probe is no evidence. Not the
# budget itself: the budget starts after the import (a minute and more on a spinning disk), and killing a
# probe that was merely slow throws away the one measurement the planner trusts most and makes the next
# command pay for it again. So the progress line promises this figure, the real upper bound, not the budget.
TIMEOUT_S = 240
FORMAT_ORDER = ("bf16", "fp8_scaled", "int8_convrot", "nvfp4", "nvfp4_awq", "w4a8",
                "q8_0", "q6_k", "q5_0", "q4_k", "q3_k", "q2_k")
PART_NAMES = {"dit": "DiT", "text_encoder": "text encoder"}


def machine_devices(fingerprint: Fingerprint | None) -> str | None:
    """The fingerprint's devices as the cache compares them ("cpu", or the GPUs' names); None without one."""
    if fingerprint is None:
        return None
    gpus = sorted(f"{g.vendor or ''} {g.name or ''}".strip() for g in fingerprint.gpus)
    return ", ".join(gpus) or "cpu"


def has_gguf_pack(comfyui: Path) -> bool:
    """Whether a GGUF loader pack (ComfyUI-GGUF or a fork: a custom node folder with its ops and dequant) is there."""
    nodes = Path(comfyui) / "custom_nodes"
    try:
        return any(d.is_dir() and "gguf" in d.name.lower() and (d / "dequant.py").is_file() for d in nodes.iterdir())
    except OSError:
        return False


def cache_file(cache_dir: Path, comfyui: Path) -> Path:
    """Where this ComfyUI's probe is kept (one file per ComfyUI folder)."""
    digest = hashlib.sha256(str(Path(comfyui).resolve()).encode("utf-8")).hexdigest()[:16]
    return Path(cache_dir) / FOLDER / f"{digest}.json"


def cached(cache_dir: Path, comfyui: Path) -> FormatProbe | None:
    """The probe install or doctor last measured for this ComfyUI folder, read as it is (no re-check, no run):
    for commands that must plan as install did without starting ComfyUI's Python (models). None when there
    is none or the file is no probe (then one warning in the log names it)."""
    return read(cache_file(cache_dir, comfyui))


def still_valid(doc: dict, *, comfyui_version: str | None, torch: str | None, devices: str | None,
                gguf_pack: bool) -> str | None:
    """None when a cached probe document still describes this setup, else what changed (a phrase)."""
    if not isinstance(doc, dict):
        return "the cached probe is not a probe document"
    key = doc.get("key") if isinstance(doc.get("key"), dict) else {}
    if comfyui_version and key.get("comfyui_version") != comfyui_version:
        return f"ComfyUI {key.get('comfyui_version')} -> {comfyui_version}"
    if torch and key.get("torch") != torch:
        return f"torch {key.get('torch')} -> {torch}"
    if devices and doc.get("machine_devices") not in (None, devices):
        return f"devices {doc.get('machine_devices')} -> {devices}"
    if bool(doc.get("gguf_pack")) != gguf_pack:
        return "a GGUF loader pack was " + ("installed" if gguf_pack else "removed")
    return None


def finding(status: str, message: str, fix: str | None = None) -> dict:
    return {"check": "formats.probe", "status": status, "message": message, "fix": fix}


def format_evidence(ctx: Session, install, *, fingerprint: Fingerprint | None = None, info: dict | None = None,
                    fresh: bool = False, run: bool = True, findings: list | None = None) -> FormatProbe | None:
    """The probe for `install` (a ComfyInstall): cached, else measured now (unless `run` is False or a dry run).

    `info` is h3kit.comfyui.locate.inspect(install) when the caller has it (the cache compares its
    ComfyUI and torch versions); `fingerprint` is this machine's, when known (its devices key the cache).
    One finding (check `formats.probe`: where the probe came from, or why there is none) goes to `findings`."""
    said = findings if findings is not None else []
    if install is None or getattr(install, "python", None) is None:
        said.append(finding("warn", "No format probe: no ComfyUI with a Python is known.",
                            "Pass --comfyui PATH (or set comfyui_path in the config)."))
        return None
    if info is None:
        try:
            info = inspect(install)
        except H3kitError as exc:
            said.append(finding("warn", f"No format probe: {exc.message}", exc.fix))
            return None
    path = cache_file(ctx.locations.cache_dir, install.path)
    devices = machine_devices(fingerprint)
    # a fresh probe reads nothing: whatever the file holds, the run below replaces it
    cached_doc, probe = (None, None) if fresh else _read_cache(ctx, path)
    changed = "asked for a fresh probe" if fresh else (
        still_valid(cached_doc, comfyui_version=info.get("comfyui_version"), torch=info.get("torch"),
                    devices=devices, gguf_pack=has_gguf_pack(install.path)) if probe is not None
        else f"the cached probe {path} is not one h3kit wrote" if path.exists() else "no probe yet")
    if changed is None:
        said.append(dict(finding("ok", f"Format probe from the cache ({path})."), check="formats.cache"))
        return probe
    if not run or ctx.dry_run:
        said.append(finding("warn", f"No current format probe for this ComfyUI ({changed}); nothing was measured now.",
                            "Run 'h3kit doctor' or 'h3kit calibrate' to measure it (about a minute)."))
        return None
    ctx.progress(f"Probing which weight formats run on this device in ComfyUI's Python ({changed}; "
                 f"about {BUDGET_S} s of measuring, at most {TIMEOUT_S // 60} min in all)...")
    return _measure_and_cache(ctx, install, path, devices, said)


def _measure_and_cache(ctx: Session, install, path: Path, devices, said: list) -> FormatProbe | None:
    """Run the probe in ComfyUI's Python and cache what it found in `path`; None (and a finding why) when it did
    not run or wrote nothing usable."""
    doc, why, fix = _run(ctx, install, path.parent)
    if doc is None:
        said.append(finding("warn", f"The format probe did not run: {why}.",
                            fix or "The planner falls back to reported evidence; check ComfyUI's Python with "
                                   "'h3kit doctor'."))
        return None
    doc["machine_devices"] = devices
    doc["comfyui_path"] = str(install.path)
    try:
        probe = parse(doc, path)
        atomic_write(path, json.dumps(doc, indent=2, default=str))
    except ValueError as exc:
        said.append(finding("warn", f"The format probe wrote no usable document ({exc}).",
                            "Run 'h3kit doctor -v' and report the log."))
        return None
    except OSError as exc:
        full = translate(exc, str(path.parent))
        said.append(finding("warn", f"The format probe ran but its cache could not be written: {_sentence(full.message)}"
                            if full else f"The format probe ran but its cache could not be written ({exc}).",
                            full.fix if full else f"Check that {path.parent} is writable."))
    said.append(dict(finding("ok", f"Format probe measured now ({probe.seconds or 0:.0f} s), cached in {path}."),
                     check="formats.cache"))
    return probe


def _read_cache(ctx: Session, path: Path) -> tuple[dict | None, FormatProbe | None]:
    """The cache file as (document, probe), both None when it is missing or no probe (one warning in the
    log names the file: read once here, so a bad file is said once)."""
    probe = read(path, ctx.log)
    return (_read_json(path), probe) if probe is not None else (None, None)


def _read_json(path: Path) -> dict | None:
    try:
        doc = load(path)
    except (OSError, BadProbe):
        return None
    return doc if isinstance(doc, dict) else None


def _sentence(message: str) -> str:
    """A sentence of its own made the tail of another ("No space ..." -> "no space ...")."""
    return message[:1].lower() + message[1:]


def _full_disk(text: str, work: Path) -> tuple[str, str] | None:
    """(why, fix) when the runner's output says a write failed for space (errno 28, or 122 for a quota):
    the disk of the file it names, else of the probe's work folder (its TMPDIR and result are there, in
    h3kit's home), so the sentence names the home as full instead of blaming ComfyUI's Python."""
    m = re.search(r"(?:no space left on device|disk quota exceeded)(?:: '([^'\n]+)')?", text, re.IGNORECASE)
    if m is None:
        return None
    named = Path(m.group(1)) if m.group(1) else None
    err = no_space(named if named is not None and work not in named.parents else work)
    return _sentence(err.message).rstrip("."), err.fix


def _run(ctx: Session, install, cache: Path) -> tuple[dict | None, str, str | None]:
    """Run the runner's format-probe job; (document, "", None) or (None, why, the fix when it is not
    ComfyUI's Python's)."""
    work = None
    try:
        cache.mkdir(parents=True, exist_ok=True)
        work = tempfile.TemporaryDirectory(prefix="probe-", dir=cache)
        (Path(work.name) / "progress.jsonl").write_text("", encoding="utf-8")
    except OSError as exc:
        if work is not None:
            work.cleanup()
        full = translate(exc, str(cache))
        if full is not None:
            return None, _sentence(full.message).rstrip("."), full.fix
        return None, f"its work folder could not be made in {cache} ({exc})", None
    with work as folder:
        out, progress = Path(folder) / "probe.json", Path(folder) / "progress.jsonl"
        argv = [str(install.python), str(RUNNER), "format-probe", "--comfyui", str(install.path), "--out", str(out),
                "--progress", str(progress), "--budget", str(BUDGET_S)]
        env = {**os.environ, "TMPDIR": folder, "TEMP": folder, "TMP": folder}
        holder: dict = {}
        worker = threading.Thread(target=lambda: holder.update(result=run_process(argv, timeout=TIMEOUT_S, env=env)),
                                  daemon=True)
        worker.start()
        _follow(ctx, progress, worker)
        res = holder.get("result")
        doc = _read_json(out)
        if doc is None:
            full = _full_disk((res.stderr + res.stdout) if res is not None else "", cache)
            if full is not None:
                return None, *full
            detail = res.detail if res is not None else "no result"
            tail = (res.stderr if res is not None else "").strip().splitlines()[-1:] or [""]
            return None, f"{detail}{'; ' + tail[0][:300] if tail[0] else ''}", None
        if doc.get("status") == "skipped":
            return None, doc.get("reason") or "the runner skipped it", None
        return doc, "", None


def _cell(res) -> str:
    if res.status == "runs":
        return f"runs   {res.seconds or 0:5.2f} s" + ("*" if res.dequantized else "")
    if res.status == "fails":
        return f"FAILS  {res.seconds or 0:5.2f} s"
    return "skipped"


def table_lines(probe: FormatProbe) -> list[str]:
    """The probe as a table: one row per format, a column per part (runs / FAILS and seconds / skipped),
    then each failure's and skip's one line, the device and dtype per part, and the cache's key."""
    formats = [f for f in FORMAT_ORDER if any(f in probe.parts.get(p, {}) for p in PARTS)]
    formats += sorted({f for p in PARTS for f in probe.parts.get(p, {})} - set(formats))
    header = f"  {'format':<13}" + "".join(f"{PART_NAMES.get(p, p):<18}" for p in PARTS)
    lines = [f"Format probe: ComfyUI {probe.comfyui_version}, torch {probe.torch}, {probe.device} "
             f"(backend {probe.backend}); {probe.seconds or 0:.1f} s in all", header]
    notes = []
    for fmt in formats:
        cells = []
        for part in PARTS:
            res = probe.parts.get(part, {}).get(fmt)
            cells.append(f"{_cell(res) if res else '-':<18}")
            if res is not None and res.status != "runs" and res.error:
                notes.append(f"  {fmt} ({PART_NAMES.get(part, part)}): {res.error}")
        lines.append(f"  {fmt:<13}" + "".join(cells))
    for part in PARTS:
        ran = next((r for r in probe.parts.get(part, {}).values() if r.device), None)
        if ran is not None:
            lines.append(f"  {PART_NAMES.get(part, part)} runs on {ran.device} in {ran.dtype}")
    if any(r.dequantized for p in PARTS for r in probe.parts.get(p, {}).values()):
        lines.append("  * ComfyUI dequantizes these weights and runs a plain matmul here (no quantized kernel)")
    lines += notes
    key = f"ComfyUI {probe.comfyui_version} | torch {probe.torch} | {probe.device}"
    lines.append(f"  cache key: {key}" + (f" ({probe.path})" if probe.path else ""))
    return lines


def result_finding(probe: FormatProbe) -> dict:
    """Doctor's finding for a probe's table: ok with the counts, warn when a format fails here."""
    fails = sorted({f for p in PARTS for f, r in probe.parts.get(p, {}).items() if r.status == "fails"})
    runs = sum(1 for p in PARTS for r in probe.parts.get(p, {}).values() if r.status == "runs")
    total = sum(len(probe.parts.get(p, {})) for p in PARTS)
    where = f"on {probe.device} (ComfyUI {probe.comfyui_version}, torch {probe.torch})"
    if fails:
        return finding("warn", f"{runs} of {total} format/part pairs run {where}; these fail here: "
                               f"{', '.join(fails)} (the planner does not plan them).",
                       "Nothing to do unless a plan needs one of them; the table says why each fails.")
    return finding("ok", f"{runs} of {total} format/part pairs run {where}.")
