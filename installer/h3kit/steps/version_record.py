"""Recording a ComfyUI's state in its history, and the self-test that marks one working.

install runs the self-test in the ComfyUI it verified and records the state (`record_after_install`);
apply and calibrate change only the pack's profile and launcher, so their state inherits the last working
one's mark when ComfyUI's commit and pip set are the same (`record_inherited`); update and rollback
(h3kit.steps.versions) self-test the ComfyUI they moved.
"""

from __future__ import annotations

from h3kit.comfyui.versions import history as history_mod
from h3kit.comfyui.versions import selftest
from h3kit.comfyui.versions import state as state_mod
from h3kit.core.errors import H3kitError
from h3kit.core.session import Session


def same_state(now, then) -> bool:
    from h3kit.comfyui.versions import freeze

    return (now.git is not None and then.git is not None and now.git.commit == then.git.commit
            and not freeze.changes(freeze.parse(list(then.pip)), freeze.parse(list(now.pip))))



# -- recording -----------------------------------------------------------------------------------------


def record_state(ctx: Session, install, command: str, *, working: bool, evidence: dict | None = None,
                 state=None, note: str = ""):
    """Record `install` as it is now (or the `state` already taken) in its history; a failure to write the
    history is said, never fatal to the command that records it."""
    try:
        hist = history_mod.load(ctx.locations.state_dir, install.path)
        taken = state if state is not None else state_mod.take(ctx, install)
        return hist.record(command, taken, working=working, evidence=evidence, note=note)
    except (H3kitError, OSError) as exc:
        ctx.log.warning("could not record the ComfyUI state: %s", exc)
        return None


def record_after_calibrate(ctx: Session, doc: dict):
    """`h3kit calibrate` records the state of the ComfyUI it ran in, with its H3 measurement as evidence (the
    calibration runs H3's blocks through ComfyUI's own code); nothing for a dry run or without a ComfyUI."""
    from h3kit.comfyui import locate as comfyui_locate
    from h3kit.steps.common import load_config

    path = (doc.get("comfyui") or {}).get("comfyui_path")
    if ctx.dry_run or not path:
        return None
    try:
        install = comfyui_locate.find(path, load_config(ctx), ctx, need_write=False)
    except H3kitError as exc:
        ctx.log.warning("could not record the ComfyUI state: %s", exc.message)
        return None
    h3 = doc.get("h3_model") or {}
    files = doc.get("report_files") or {}
    return record_inherited(ctx, install, "calibrate", extra={"calibration": {
        "h3_model": h3.get("status"), "report": files.get("json"), "created": doc.get("created")}})


def record_inherited(ctx: Session, install, command: str, extra: dict | None = None):
    """apply and calibrate change the pack's profile and launcher, not ComfyUI: their state is working when
    ComfyUI's commit and pip set are those of the last working state (its evidence carried, by number)."""
    try:
        hist = history_mod.load(ctx.locations.state_dir, install.path)
        now = state_mod.take(ctx, install)
    except (H3kitError, OSError) as exc:
        ctx.log.warning("could not record the ComfyUI state: %s", exc)
        return None
    last = hist.last_working()
    same = last is not None and same_state(now, last.state)
    evidence = {"inherited_from": last.id, "selftest": last.evidence.get("selftest")} if same else {}
    evidence.update(extra or {})
    return record_state(ctx, install, command, working=same, evidence=evidence, state=now)


def record_after_install(ctx: Session, install, found) -> str:
    """install's state (`found`: its one inspection, refreshed after the deploy): the self-test run in the ComfyUI
    it verified with the launcher's flags, then the state recorded; the note for people."""
    test = self_test(ctx, install, found.launch_args)
    entry = record_state(ctx, install, "install", working=test.passed, evidence={"selftest": test.to_json()},
                         state=found)
    if entry is None:
        return "the installed state could not be recorded (see the log)"
    if test.passed:
        return f"recorded as working state #{entry.id} ('h3kit history'; 'h3kit rollback' returns to it)"
    return f"recorded as state #{entry.id}, not marked working: the self-test failed ({test.reason})"


def self_test(ctx: Session, install, launch_args) -> selftest.SelfTest:
    ctx.progress("Self-test: is H3 whole in this ComfyUI?")
    return selftest.run(ctx, install, launch_args)
