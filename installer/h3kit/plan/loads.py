"""Whether the plan's files load and run here, in words: the evidence per part, and the sentence that stops an install.

The search (plan/search.py) already keeps formats that fail here out and
prefers files known to load and run; this module reads the chosen Candidate
and says which evidence decided each part (h3kit's format probe on this
machine, a report with its source, or nothing either way), and -- when nothing
that loads fits, or the plan holds a file not known to load because the user
named it -- the one plain sentence `install` stops on before downloading, with
what would make it work. It also compares the plan with a setup users reported
working on this class of machine (the catalog's `reported_setups`).
"""

from __future__ import annotations

from h3kit.core.units import gb
from h3kit.data.catalog import Catalog, Weight
from h3kit.data.catalog_sections import ReportedSetup
from h3kit.plan.budget import Choice, memory_estimate
from h3kit.plan.search import Candidate

PARTS = (("dit", "DiT"), ("te", "text encoder"), ("vae", "video VAE"), ("audio_vae", "audio VAE"))


def _files(c: Candidate):
    for attr, label in PARTS:
        yield label, getattr(c.choice, attr)


def _evidence(cat: Catalog, c: Candidate, w: Weight):
    return cat.evidence(w.format, c.machine, w.part, c.probe)


def evidence_doc(cat: Catalog, c: Candidate) -> dict:
    """part -> {format, status (runs | fails | unknown), kind (measured | reported | unknown), source, backend}."""
    out = {}
    for _, w in _files(c):
        ev = _evidence(cat, c, w)
        out[w.part] = {"format": w.format, "status": ev.status, "kind": ev.kind, "source": ev.source,
                       "backend": ev.backend}
    return out


def evidence_rationale(cat: Catalog, c: Candidate) -> list[str]:
    """One sentence: which evidence says each chosen format runs here (measured > reported > unknown)."""
    parts = [f"{label} {_evidence(cat, c, w).phrase()}" for label, w in _files(c)]
    probe = "" if c.probe is not None else " No format probe was passed to this plan, so the catalog's reports decide."
    return ["Evidence that the formats run here (measured by the format probe > reported > unknown): "
            + "; ".join(parts) + "." + probe]


def _doubtful(cat: Catalog, c: Candidate, lora: Weight | None) -> list[str]:
    """The chosen files not known to load or run here, each with why."""
    out = []
    for label, w in list(_files(c)) + ([("LoRA", lora)] if lora is not None else []):
        name = w.file.name or w.id
        ev = _evidence(cat, c, w)
        if ev.status == "fails":
            out.append(f"the {label} {name}: {ev.phrase()}")
        elif w.file.unverified:
            out.append(f"the {label} {name}: {w.file.unverified}")
        elif w.load_tier:
            state = "is reported not to load" if w.comfyui_loads == "reported_broken" else "is not known to load"
            out.append(f"the {label} {name} {state} in ComfyUI ({w.load_report})")
    return out


def _what_would_work(c: Candidate) -> str:
    """'more RAM (at least 24.0 GB in all) and a GPU with 12.0 GB': from the shortfalls, biggest per resource."""
    b, worst = c.budget, {}
    for what, need, have, _ in c.est.short:
        worst[what] = max(worst.get(what, 0), need - have)
    fixes = []
    for what, short in worst.items():
        if b.unified:
            fixes.append(f"more unified memory (at least {gb(b.ram_total + max(worst.values()))} in all)")
            break
        if what == "RAM":
            fixes.append(f"more RAM (at least {gb(b.ram_total + short)} in all)")
        elif what == "GPU":
            fixes.append(f"a GPU with at least {gb((b.gpu_total or 0) + short)} of memory")
        else:
            fixes.append(f"{gb(short)} more free {what.lower()}")
    return " and ".join(fixes) or "a larger machine"


def shortfall_fix(c: Candidate) -> str | None:
    """What to do about a plan that does not fit, per resource short and the phase it is short in; None when it
    fits. Decided here once: install's closing hint and 'h3kit plan' say this, never a fix for another resource."""
    if c.est.fits or not c.est.short:
        return None
    b, worst = c.budget, {}
    for what, need, have, phase in c.est.short:
        what = "unified" if b.unified and what != "disk" else what  # one memory on a Mac: one fix, the worst
        if what not in worst or need - have > worst[what][0] - worst[what][1]:
            worst[what] = (need, have, phase)
    fixes = []
    for what, (need, have, phase) in worst.items():
        short = need - have
        if what == "disk":
            where = f"the disk that holds {b.disk_path}" if b.disk_path else "the disk of ComfyUI's models folder"
            fixes.append(f"free {gb(short)} on {where} (the model files need {gb(need)}, {gb(have)} is free), or "
                         "put ComfyUI's models folder on a disk with that room (extra_model_paths.yaml)")
        elif b.unified:
            fixes.append(f"use a Mac with at least {gb(b.ram_total + short)} of unified memory (the {phase} phase "
                         f"needs {gb(need)}, the budget is {gb(have)})")
        elif what == "RAM":
            fixes.append(f"add RAM, at least {gb(b.ram_total + short)} in all (the {phase} phase needs {gb(need)} "
                         f"of RAM, the budget is {gb(have)})")
        else:
            fixes.append(f"use a GPU with at least {gb((b.gpu_total or 0) + short)} of memory (the {phase} phase "
                         f"needs {gb(need)} on the card, the budget is {gb(have)})")
    memory = any(what != "disk" for what in worst)
    said = "; and ".join(fixes)
    return (said[0].upper() + said[1:] + (", or override settings in config.yaml at your own risk and run "
            "'h3kit apply'" if memory else "") + ".")


def blocked_sentence(cat: Catalog, c: Candidate, lora: Weight | None = None) -> str | None:
    """None when every planned file loads and the plan fits; else the one sentence install stops on."""
    ch = c.choice
    if c.unloadable:
        which = " or ".join(c.unloadable)
        return (f"Nothing that loads in ComfyUI runs here for the {which}: every {which} file is reported not to load "
                f"or fails on {c.machine.backend} (see 'h3kit plan'); it would work on an NVIDIA GPU with CUDA, or "
                "once one of those files is reported loading.")
    if not c.est.fits:
        short = max(c.est.short, key=lambda s: s[1] - s[2]) if c.est.short else None
        need = (f": {short[0]} is short by {gb(short[1] - short[2])} in the {short[3]} phase ({gb(short[1])} "
                f"needed, {gb(short[2])} in the budget)" if short else "")
        return (f"Nothing that loads in ComfyUI fits this machine: even DiT {ch.dit.variant} {ch.dit.format}, text "
                f"encoder {ch.te.format} and video VAE {ch.vae.format} at {ch.canvas[0]}x{ch.canvas[1]}x{ch.frames} do not "
                f"fit{need}; it would work with {_what_would_work(c)}.")
    doubtful = _doubtful(cat, c, lora)
    if doubtful:
        return ("The plan holds files not known to load here, so h3kit does not download them: "
                + "; ".join(doubtful) + ". Remove the setting that names them from config.yaml, or download them "
                "anyway with --allow-unverified.")
    return None


def _setup_matches(setup: ReportedSetup, c: Candidate) -> bool:
    backend, (lo, hi) = setup.backend, setup.gpu_memory
    card = c.budget.gpu_total
    if (backend and backend != c.machine.backend) or card is None:
        return False
    return (lo is None or card >= lo) and (hi is None or card <= hi)


def _setup_shortfall(cat: Catalog, c: Candidate, setup: ReportedSetup) -> str:
    """What h3kit's memory model says the reported setup needs here at the profile's smallest canvas."""
    files = setup.files
    parts = [cat.weight(files.get(k, "")) or default for k, default in
             (("dit", c.choice.dit), ("text_encoder", c.choice.te), ("vae", c.choice.vae))]
    canvas = tuple(c.settings.min_canvas or cat.canvas_ladder[-1])
    est = memory_estimate(cat, c.budget, c.settings, Choice(*parts, c.choice.audio_vae, canvas, c.settings.min_frames))
    if not est.short:
        return "h3kit's memory model fits it only at a smaller canvas than this plan's"
    what, need, have, phase = max(est.short, key=lambda s: s[1] - s[2])
    return (f"h3kit's memory model gives that setup {gb(need)} of {what} in the {phase} phase even at "
            f"{canvas[0]}x{canvas[1]}x{c.settings.min_frames}, against a budget of {gb(have)} (stream_from "
            f"{c.settings.stream_from}: ComfyUI keeps the off-card DiT blocks there); set dit_weights, "
            "text_encoder_weights and vae_weights in config.yaml to try the reported setup anyway")


def reported_setup_rationale(cat: Catalog, c: Candidate) -> list[str]:
    """For a machine in the class of a setup users reported working: is this plan that setup, or why not."""
    out = []
    chosen = {"dit": c.choice.dit, "text_encoder": c.choice.te, "vae": c.choice.vae}
    for setup in cat.reported_setups:
        if not _setup_matches(setup, c):
            continue
        diffs = []
        for part, wid in setup.files.items():
            want, have = cat.weight(wid), chosen.get(part)
            if want is None or have is None or want.id == have.id:
                continue
            ok, why = cat.runnable(want.format, c.machine, part, c.probe)
            label = dict(dit="DiT", text_encoder="text encoder", vae="video VAE")[part]
            if not ok:
                reason = why
            elif have.quality > want.quality:
                reason = f"{have.format} fits and ranks higher (quality {have.quality} against {want.quality})"
            else:
                reason = f"{want.format} does not fit with the rest of this plan"
            diffs.append(f"{label} {have.format} instead of {want.format}: {reason}")
        if any("does not fit" in d for d in diffs):
            diffs.append(_setup_shortfall(cat, c, setup))
        head = f"Users report a working setup for this class of machine ({setup.source})"
        out.append(f"{head}; this plan is that setup." if not diffs else f"{head}; this plan differs: "
                   + "; ".join(diffs) + ".")
    return out
