"""`h3kit update`, `h3kit rollback`, `h3kit history`: keep H3 working when ComfyUI changes.

update: one inspection of the ComfyUI as it is (h3kit.comfyui.versions.state), the target commit, then
every check before anything moves, in this order, the first refusal ending the command with nothing
changed (exit 3; `--force` passes the first two):
  1. the target against the catalog's known-bad releases for this machine (card, memory, backend);
  2. every `comfy.*` name and call of the h3kit pack against the target's tree, read from git without
     checking it out (h3kit.comfyui.versions.api_check; the other packs are reported, never refused);
  3. local edits to tracked files, and untracked files the target would overwrite;
  4. pip's dry run of the target's requirements with torch pinned.
Then the move is journaled in the history (`in_flight`), made (checkout, requirements), and proven by the
self-test (h3kit.comfyui.versions.selftest) in the moved ComfyUI: passed, the state is recorded as
working; failed, h3kit goes back to the state before by itself and exits 4 naming why.

rollback: back to a recorded state (default: the last working one): its commit (its branch when that
still points there), its pip set, and the profile the pack had; then the self-test, and the state
recorded. Models, outputs, the user's workflows and other packs are never touched: git does not track
them and pip does not own them.

A crash leaves `in_flight`; `finish_in_flight` settles it at the start of the next update, rollback or
`doctor --fix`: an update that had proven itself is recorded, any other goes back to the state before;
a rollback is run again to its end.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from h3kit.comfyui.versions import history as history_mod
from h3kit.comfyui.versions import move
from h3kit.comfyui.versions import state as state_mod
from h3kit.comfyui.versions.drift import Machine
from h3kit.comfyui.versions.upgrade import python_for, refuse_local_changes, refuse_overwrites
from h3kit.core.errors import BadInput, H3kitError, NotReady, VerificationFailed
from h3kit.core.files import checkpoint
from h3kit.core.session import Outcome, Session
from h3kit.core.tools import PipOptions
from h3kit.data import catalog as catalog_mod
from h3kit.steps.common import exclusive, load_config, locate
from h3kit.steps.version_record import same_state, self_test
from h3kit.steps.options import ComfyTarget

OWN_APPS = {"portable": "the portable build's updater (update\\update_comfyui.bat)", "desktop": "ComfyUI Desktop",
            "stability_matrix": "Stability Matrix"}


@dataclass(frozen=True)
class UpdateOptions:
    comfyui: ComfyTarget = field(default_factory=ComfyTarget)
    to: str = "tested"  # tested | newest | a version (0.33.0) | a git ref
    force: bool = False  # move past the known-bad and comfy.* checks (the self-test still decides)
    fingerprint_file: str | None = None


@dataclass(frozen=True)
class RollbackOptions:
    comfyui: ComfyTarget = field(default_factory=ComfyTarget)
    state: str | None = None  # a history number; None: the newest working state unlike the present one


def machine_of(fingerprint) -> Machine:
    gpu = fingerprint.primary_gpu
    if gpu is None:
        return Machine("cpu")
    return Machine(fingerprint.backend, gpu.memory_total_bytes, gpu.name)


# -- settling a move a crash left -----------------------------------------------------------------------


def finish_in_flight(ctx: Session, install, hist, opts: PipOptions) -> str | None:
    """Settle the move a crash left in the history (module doc); the sentence saying what was done, or None."""
    flight = hist.in_flight
    if not flight:
        return None
    before = state_mod.from_json(flight["before"])
    path = Path(install.path)
    if flight["op"] == "update" and flight.get("step") == "proven":
        hist.record("update", state_mod.take(ctx, install), working=True, evidence=flight.get("evidence") or {},
                    note="recorded after an interrupted update that had passed its self-test")
        hist.end()
        return f"An interrupted update to {flight['to'].get('ref')} had passed its self-test; it is now recorded."
    if flight["op"] == "update":
        ctx.progress(f"An update to {flight['to'].get('ref')} was interrupted ({flight.get('step')}); going back "
                     f"to {before.label}...")
        move.restore(ctx, path, before, opts)
        hist.end()
        return f"An interrupted update was undone: ComfyUI is back at {before.label}."
    target = hist.get(flight["to"]["state_id"])
    ctx.progress(f"A rollback to state #{target.id} was interrupted; finishing it...")
    move.restore(ctx, path, target.state, opts)
    hist.record("rollback", state_mod.take(ctx, install), working=False,
                note=f"finished an interrupted rollback to #{target.id}; not yet self-tested")
    hist.end()
    return f"An interrupted rollback to state #{target.id} was finished."


# -- update ---------------------------------------------------------------------------------------------


def _app_advice(kind: str, before, cat) -> NotReady:
    """The Desktop, portable build and Stability Matrix own their ComfyUI version: which one to pick, and why."""
    versions = cat.comfyui_versions
    pick = versions.newest_tested or "the newest release"
    return NotReady(f"The ComfyUI in {before.path} ({before.label}) is managed by {OWN_APPS[kind]}, which updates "
                    "ComfyUI itself, so h3kit does not move it.",
                    f"Pick ComfyUI {pick} in {OWN_APPS[kind]}: it is the newest release h3kit's real-ComfyUI tests "
                    f"passed ({versions.tested_source or 'catalog comfyui_versions'}); then run 'h3kit doctor'.")


def prechecks(ctx: Session, install, before, target, cat, machine: Machine) -> dict:
    """Checks 1 and 2 of the module doc: {refusals: [sentence], warnings: [sentence], api: {...}}."""
    from h3kit.comfyui.versions import api_check

    refusals, warnings = [], []
    rules = cat.comfyui_versions.update_verdict(target.version, machine.backend, machine.gpu_bytes, machine.gpu_name,
                                                list(before.launch_args))
    for rule in rules:
        sentence = f"ComfyUI {target.version} is known to fail on this machine: {rule.problem} ({rule.source})."
        (refusals if rule.severity == "refuse" else warnings).append(sentence)
    ctx.progress(f"Checking every comfy.* name the node packs use against {target.ref} (read from git)...")
    report = api_check.check_target(Path(install.path), target.ref)
    if report.refusal:
        refusals.append(report.refusal)
    for pack in report.others:
        if pack.verdict == "will_break":
            first = pack.breaks[0]
            warnings.append(f"the node pack {pack.name} will break at {target.ref}: {first.symbol} "
                            f"({first.file} line {first.line}: {first.detail}); h3kit does not refuse for it.")
    return {"refusals": refusals, "warnings": warnings, "api": report.to_json()}


def _already_there(before, target) -> Outcome:
    text = (f"ComfyUI in {before.path} is already at {target.ref} ({before.label}); nothing changed.")
    return Outcome({"schema": "h3kit.update/1", "comfyui": before.path, "changed": False, "from": before.label,
                    "to": {"ref": target.ref, "commit": target.commit, "version": target.version}}, text, 0)


def update(options: UpdateOptions, ctx: Session) -> Outcome:
    from h3kit.steps.common import fingerprinted

    notes: list[str] = []
    config = load_config(ctx)
    install = locate(options.comfyui, ctx, config, need_write=not ctx.dry_run)
    cat = catalog_mod.load()
    opts = PipOptions.from_env()
    with exclusive(ctx, install, "update"):
        hist = history_mod.load(ctx.locations.state_dir, install.path)
        settled = None if ctx.dry_run else finish_in_flight(ctx, install, hist, opts)
        notes += [settled] if settled else []
        before = state_mod.take(ctx, install)
        if before.kind in OWN_APPS and not (before.kind == "portable" and before.git is not None):
            raise _app_advice(before.kind, before, cat)  # the portable build's ComfyUI folder is a clone: moved
        if before.git is None:
            raise NotReady(f"{before.path} is not a git checkout, so h3kit cannot move it to another release.",
                           "Replace it with a git clone of ComfyUI, or let h3kit set one up: "
                           "'h3kit install --new-comfyui DIR'.")
        target = move.target_for(ctx, Path(install.path), options.to, cat, fetch=not ctx.dry_run)
        if target.commit == before.git.commit:
            return _already_there(before, target)
        machine = machine_of(fingerprinted(ctx, options.fingerprint_file, notes).fingerprint)
        checks = prechecks(ctx, install, before, target, cat, machine)
        if checks["refusals"] and not options.force:
            raise NotReady(f"h3kit will not update ComfyUI to {target.ref}: {checks['refusals'][0]} Nothing was "
                           "changed.", "Stay on this release, or pick another with 'h3kit update --to VERSION' "
                           "(--force moves anyway; the self-test then decides and h3kit goes back if it fails).",
                           details={"checks": checks})
        return _move_and_prove(ctx, install, hist, before, target, checks, opts, notes)


def _update_doc(before, target, checks, **more) -> dict:
    return {"schema": "h3kit.update/1", "comfyui": before.path, "from": before.label,
            "to": {"ref": target.ref, "commit": target.commit, "version": target.version},
            "checks": checks, **more}


def _move_and_prove(ctx: Session, install, hist, before, target, checks, opts, notes) -> Outcome:
    path = Path(install.path)
    refuse_local_changes(ctx, path, "move it to another release")
    refuse_overwrites(ctx, path, before.git.commit, target.commit)
    python, info = python_for(ctx, install)
    if ctx.dry_run:
        text = f"Would move ComfyUI in {path} from {before.label} to {target.ref} ({target.version}) (--dry-run)."
        return Outcome(_update_doc(before, target, checks, changed=False, dry_run=True), text, 0, checks["warnings"])
    _preflight(ctx, python, path, target, info, opts)
    last = hist.last()
    if last is None or not same_state(before, last.state):  # so 'h3kit rollback N' can name where it started
        hist.record("update", before, working=False, note=f"as found before the update to {target.ref}")
    hist.begin("update", before, {"ref": target.ref, "commit": target.commit, "version": target.version})
    checkpoint("step", f"update:move {target.ref}")
    ctx.progress(f"Moving ComfyUI in {path} from {before.label} to {target.ref}...")
    try:
        packages = move.move_to(ctx, path, python, info, target, opts)
    except H3kitError as exc:
        _go_back(ctx, install, hist, before, opts)
        raise NotReady(f"Moving ComfyUI to {target.ref} failed: {exc.message} h3kit went back to {before.label}.",
                       exc.fix) from None
    hist.step("moved")
    checkpoint("step", "update:self-test")
    test = self_test(ctx, install, before.launch_args)
    if not test.passed:
        _go_back(ctx, install, hist, before, opts)
        raise VerificationFailed(
            f"ComfyUI {target.version or target.ref} failed h3kit's self-test: {test.reason}. h3kit went back to "
            f"{before.label} by itself.", "Stay on this release; 'h3kit history' lists what was tried.",
            details=_update_doc(before, target, checks, changed=False, selftest=test.to_json()))
    hist.in_flight["evidence"] = {"selftest": test.to_json()}
    hist.step("proven")
    entry = hist.record("update", state_mod.take(ctx, install, info=None), working=True,
                        evidence={"selftest": test.to_json(), "from": before.label, "to": target.ref})
    hist.end()
    text = (f"Updated ComfyUI in {path} from {before.label} to {entry.state.label}; the self-test passed "
            f"({len(test.registered)} h3kit nodes, {len(test.workflows)} workflows, {test.references} comfy.* names) "
            f"and it is recorded as working state #{entry.id}. 'h3kit rollback' goes back.")
    text += "".join(f"\nnote: {n}" for n in notes)
    return Outcome(_update_doc(before, target, checks, changed=True, packages=packages, state=entry.id,
                               selftest=test.to_json()), text, 0, checks["warnings"])


def _preflight(ctx: Session, python: str, path: Path, target, info: dict, opts) -> None:
    from h3kit.comfyui.setup.pip import write_constraints
    from h3kit.comfyui.versions.upgrade import preflight, work_file

    constraints = work_file(ctx, path, "constraints.txt")
    write_constraints(constraints, info)
    preflight(ctx, python, path, target.commit, constraints, opts)


def _go_back(ctx: Session, install, hist, before, opts) -> None:
    hist.step("going back")
    ctx.progress(f"Going back to {before.label}...")
    move.restore(ctx, Path(install.path), before, opts)
    hist.end()
    last = hist.last_working()
    back_working = last is not None and last.state.git and last.state.git.commit == before.git.commit
    hist.record("update", state_mod.take(ctx, install), working=bool(back_working),
                evidence=last.evidence if back_working else {}, note="went back after a failed update")


# -- rollback -------------------------------------------------------------------------------------------


def _chosen(hist, wanted: str | None, now):
    """The state named, else the newest working state that differs from ComfyUI as it is now (going back)."""
    if wanted is not None:
        return hist.get(wanted)
    entry = next((e for e in reversed(hist.states) if e.working and not same_state(now, e.state)), None)
    if entry is None:
        raise BadInput(f"h3kit has no working state of the ComfyUI in {hist.comfyui} on record other than the one "
                       "it is in now, so there is nothing to roll back to.",
                       "Run 'h3kit history' to see what is recorded, and name a state: 'h3kit rollback N'.")
    return entry


def rollback(options: RollbackOptions, ctx: Session) -> Outcome:
    config = load_config(ctx)
    install = locate(options.comfyui, ctx, config, need_write=not ctx.dry_run)
    opts = PipOptions.from_env()
    with exclusive(ctx, install, "rollback"):
        hist = history_mod.load(ctx.locations.state_dir, install.path)
        settled = None if ctx.dry_run else finish_in_flight(ctx, install, hist, opts)
        now = state_mod.take(ctx, install)
        if settled and options.state is None:  # the interrupted move was the rollback asked for
            return Outcome({"schema": "h3kit.rollback/1", "comfyui": now.path, "changed": True, "to": now.label,
                            "notes": [settled]}, f"{settled} ComfyUI in {now.path} is at {now.label}.", 0)
        entry = _chosen(hist, options.state, now)
        if entry.state.git is None or now.git is None:
            raise NotReady(f"State #{entry.id} or the ComfyUI in {now.path} is not a git checkout, so h3kit cannot "
                           "move it back.", "Restore the folder from your own backup.")
        doc = {"schema": "h3kit.rollback/1", "comfyui": now.path, "from": now.label, "to_state": entry.id,
               "to": entry.state.label, "notes": [settled] if settled else []}
        if same_state(now, entry.state):
            text = f"ComfyUI in {now.path} is already as in state #{entry.id} ({entry.state.label}); nothing changed."
            return Outcome({**doc, "changed": False}, text + (f"\nnote: {settled}" if settled else ""), 0)
        path = Path(install.path)
        refuse_local_changes(ctx, path, "move it back")
        refuse_overwrites(ctx, path, now.git.commit, entry.state.git.commit)
        if ctx.dry_run:
            return Outcome({**doc, "changed": False, "dry_run": True},
                           f"Would roll ComfyUI in {path} back from {now.label} to state #{entry.id} "
                           f"({entry.state.label}) (--dry-run).", 0)
        return _roll_back(ctx, install, hist, now, entry, opts, doc)


def _reapply_profile(ctx: Session, install, entry) -> str | None:
    """The profile the pack had in that state, applied again when it differs (h3kit.steps.apply)."""
    from h3kit.steps import apply
    from h3kit.steps.options import ApplyOptions

    wanted, current = entry.state.profile, state_mod.pack_profile(install)
    if not wanted or wanted == current or not install.node_dir.is_dir():
        return None
    apply.run(ApplyOptions(ComfyTarget(str(install.path), str(install.python) if install.python else None),
                           wanted), ctx)
    return f"the profile '{wanted}' of state #{entry.id} was applied again"


def _roll_back(ctx: Session, install, hist, now, entry, opts, doc: dict) -> Outcome:
    hist.begin("rollback", now, {"state_id": entry.id})
    checkpoint("step", f"rollback:move #{entry.id}")
    ctx.progress(f"Rolling ComfyUI back from {now.label} to state #{entry.id} ({entry.state.label})...")
    moved = move.restore(ctx, Path(install.path), entry.state, opts)
    hist.step("moved")
    checkpoint("step", "rollback:self-test")
    profile_note = _reapply_profile(ctx, install, entry)
    test = self_test(ctx, install, entry.state.launch_args)
    evidence = {"selftest": test.to_json(), "from": now.label}
    recorded = hist.record("rollback", state_mod.take(ctx, install), working=test.passed, evidence=evidence,
                           note=f"rolled back to #{entry.id}")
    hist.end()
    doc = {**doc, "changed": True, "state": recorded.id, "selftest": test.to_json(), "moved": moved,
           "notes": doc["notes"] + ([profile_note] if profile_note else [])}
    packages = moved["packages"].get("undone") or []
    text = (f"Rolled ComfyUI in {install.path} back from {now.label} to {entry.state.label} (state #{entry.id}); "
            f"packages: {'; '.join(packages) or 'as they were'}.")
    if not test.passed:
        raise VerificationFailed(f"{text} But the self-test fails there: {test.reason}.",
                                 "Run 'h3kit doctor' and read what it names.", details=doc)
    text += f" The self-test passed; recorded as working state #{recorded.id}."
    text += "".join(f"\nnote: {n}" for n in doc["notes"])
    return Outcome(doc, text, 0)


# -- history --------------------------------------------------------------------------------------------


def history_lines(hist) -> list[str]:
    """One line per state, newest last, the in-flight move (if any) at the end; pure."""
    lines = []
    for e in hist.states:
        mark = "working" if e.working else "       "
        proof = ""
        test = e.evidence.get("selftest") or {}
        if test:
            proof = (f"self-test passed ({len(test.get('registered') or [])} nodes, "
                     f"{len(test.get('workflows') or [])} workflows, {test.get('references_checked', 0)} comfy.* names)"
                     if test.get("passed") else f"self-test failed: {'; '.join(test.get('problems') or [])[:120]}")
        elif e.evidence.get("verify"):
            proof = "pack verified at install"
        lines.append(f"#{e.id:<3} {e.recorded[:16].replace('T', ' ')}  {e.command:<9} {e.state.label:<22} {mark}  "
                     f"{proof}{'  (' + e.note + ')' if e.note else ''}".rstrip())
    if hist.in_flight:
        lines.append(f"in flight: an {hist.in_flight['op']} interrupted at '{hist.in_flight.get('step')}'; the next "
                     "'h3kit update', 'h3kit rollback' or 'h3kit doctor --fix' finishes it.")
    return lines


def history(target: ComfyTarget, ctx: Session) -> Outcome:
    config = load_config(ctx)
    install = locate(target, ctx, config, need_write=False)
    hist = history_mod.load(ctx.locations.state_dir, install.path)
    doc = {"schema": "h3kit.history/1", **hist.to_json()}
    if not hist.states:
        return Outcome(doc, f"No states of the ComfyUI in {install.path} are recorded yet ('h3kit install' or "
                            "'h3kit update' records one).", 0)
    last = hist.last_working()
    tail = (f"'h3kit rollback' returns to #{last.id}; 'h3kit rollback N' to another." if last else
            "No state is marked working yet.")
    return Outcome(doc, "\n".join([f"ComfyUI in {install.path}:"] + history_lines(hist) + [tail]), 0)
