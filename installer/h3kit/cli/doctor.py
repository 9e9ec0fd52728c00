"""`h3kit doctor`: check everything and print fixes (apply them with --fix).

This ComfyUI half checks: ComfyUI found and its Python starts; it can run
MiniMax H3 (version, H3's files, what H3's nodes import, PyAV's H.264/AAC
encoders: h3kit.comfyui.h3_support); torch fits the hardware (h3kit.plan.torch_build when present); the pack is present and intact; the
launcher's flags are accepted; whether ComfyUI's dynamic VRAM (comfy-aimdo) is on
with those flags, and whether the plan assumed the same; the native library loads; the profile file
matches the config. h3kit.models adds its findings when present.
"""

from __future__ import annotations

from h3kit.calibrate import format_probe
from h3kit.steps.format_probe import plan_with
from h3kit.cli.context import Context, Outcome
from h3kit.comfyui import doctor, h3_support
from h3kit.comfyui import locate as comfyui_locate
from h3kit.comfyui import manifest as mf
from h3kit.comfyui.setup.torch_source import taken_findings
from h3kit.core.errors import EXIT_NOT_READY, EXIT_VERIFY_FAILED, H3kitError, NotReady
from h3kit.data import catalog
from h3kit.steps.common import (
    current_plan,
    exclusive,
    load_config,
    locate,
    saved_plan,
    torch_findings,
)

HELP = "check everything and print fixes (apply them with --fix)"
MARK = {"ok": "ok  ", "warn": "WARN", "fail": "FAIL"}


def add_arguments(p) -> None:
    p.add_argument("--comfyui", metavar="PATH", help="the ComfyUI folder to check")
    p.add_argument("--comfyui-python", metavar="PATH", help="the Python that runs that ComfyUI")
    p.add_argument("--fix", action="store_true", help="apply the fixes")
    p.add_argument("--undo", action="store_true", help="restore what an earlier --fix replaced")
    p.add_argument("--fingerprint", metavar="FILE", help="check against this saved fingerprint instead of probing the machine")
    p.add_argument("--fresh-probe", action="store_true",
                   help="measure which weight formats run here again instead of using the cached format probe")


def run(args, ctx: Context) -> Outcome:
    if args.undo:
        return _undo(args, ctx)
    findings: list[dict] = []
    notes: list[str] = []
    try:
        config = load_config(ctx)
    except H3kitError as exc:
        config = None
        findings.append(doctor.finding("config.valid", "fail", exc.message, exc.fix))
    fingerprint, plan = (saved_plan(config, None, notes, args.fingerprint) if args.fingerprint
                         else current_plan(ctx, config, None, notes))
    try:
        install = locate(args, ctx, config, need_write=False)
    except H3kitError as exc:
        findings.append(doctor.finding("comfyui.found", "fail", exc.message, exc.fix))
        return _outcome(findings, notes, None)
    findings.append(doctor.finding("comfyui.found", "ok", f"ComfyUI at {install.path} (found by {install.source})."))
    if not args.fix:
        return _check(args, ctx, config, fingerprint, plan, install, findings, notes)
    with exclusive(ctx, install, "doctor --fix"):
        return _check(args, ctx, config, fingerprint, plan, install, findings, notes)


def _check(args, ctx: Context, config, fingerprint, plan, install, findings: list[dict], notes: list[str]) -> Outcome:
    info = None
    try:
        info = comfyui_locate.inspect(install)
        findings.append(doctor.finding("comfyui.python", "ok",
                                       f"Python {info.get('python_version')} at {install.python} starts."))
        findings += torch_findings(fingerprint, info)
    except NotReady as exc:
        findings.append(doctor.finding("comfyui.python", "fail", exc.message, exc.fix))
    findings.append(h3_support.finding(h3_support.check(install, catalog.load(), comfyui_locate.run_python), install,
                                       catalog.load()))
    probe = None
    if info is not None:
        probe = format_probe.format_evidence(ctx, install, fingerprint=None if args.fingerprint else fingerprint,
                                             info=info, fresh=getattr(args, "fresh_probe", False), findings=findings)
        if probe is not None:
            findings.append(format_probe.result_finding(probe))
            plan = plan_with(probe, args, config, fingerprint, plan, notes)
    record = _record(ctx, install, findings)
    findings += taken_findings(record)
    findings += doctor.pack_findings(install, record)
    if install.python is not None:
        findings += doctor.launcher_findings(install, record, ctx.locations.cache_dir)
        findings += doctor.dynamic_vram_findings(install, info, record, plan)
        findings += doctor.native_findings(install)
    findings += doctor.profile_findings(install, plan) if install.node_dir.is_dir() else []
    if plan is not None:
        from h3kit.models import doctor_findings as model_findings

        findings += model_findings(plan, install.path)
    if args.fix and not ctx.dry_run:
        _fix_torch(ctx, install, fingerprint, findings, notes)
    if args.fix:  # before apply, which then follows the new ComfyUI; a refusal stops here, findings attached
        try:
            _fix_comfyui(ctx, install, findings, notes)
        except H3kitError as exc:
            exc.details = {**exc.details, **_outcome(findings, notes, install).doc}
            raise
    if args.fix and not ctx.dry_run:
        _fix(args, ctx, findings, notes)
    return _outcome(findings, notes, install, probe)


def _record(ctx, install, findings) -> mf.Manifest | None:
    try:
        return mf.load_for(ctx.locations.state_dir, install.path)
    except H3kitError as exc:
        findings.append(doctor.finding("record.readable", "fail", exc.message, exc.fix))
        return None


def _fix(args, ctx, findings, notes) -> None:
    """The fixes h3kit can make itself: a stale profile or launcher is re-applied."""
    if any(f["check"] == "pack.present" and f["status"] != "ok" for f in findings):
        return  # nothing to re-apply before 'h3kit install', or while the pack is disabled (that finding names it)
    stale = [f for f in findings if f["check"] in ("profile.current", "launcher.flags") and f["status"] != "ok"]
    if stale:
        from h3kit.cli import apply

        outcome = apply.run(args, ctx)
        notes.append(outcome.text)
        for f in stale:
            f["status"], f["message"] = "ok", f"fixed by h3kit apply: {f['message']}"


def _fix_torch(ctx, install, fingerprint, findings, notes) -> None:
    """A torch build that does not fit the hardware: reinstall the right one (h3kit.comfyui.setup)."""
    wrong = [f for f in findings if f["check"] == "torch.build" and f["status"] == "fail" and f.get("kind") != "machine"]
    if not wrong or install.python is None or fingerprint is None:
        return
    from h3kit.comfyui import setup as comfy_setup

    result = comfy_setup.fix_torch(ctx, install.python, fingerprint, mf.load_or_new(ctx.locations.state_dir, install.path))
    if result["changed"]:
        notes.append(f"torch reinstalled: {result['before']} -> {result['after']}; 'h3kit doctor --undo' restores the old one")
        for f in wrong:
            f["status"], f["message"] = "ok", f"fixed: {f['message']}"


def _fix_comfyui(ctx, install, findings, notes) -> None:
    """A ComfyUI without H3: a git checkout moves to the newest release with it (h3kit.comfyui.setup.upgrade),
    after a yes; other layouts get their update action. --dry-run says what would happen."""
    from h3kit.comfyui import h3_support
    from h3kit.comfyui import setup as comfy_setup
    from h3kit.data import catalog

    cat = catalog.load()
    h3 = next((f for f in findings if f["check"] == "comfyui.h3"), None)
    if (h3 is not None and h3["status"] != "fail") or not comfy_setup.below_h3(install, cat):
        return
    if h3 is None:  # the check did not run: say what --fix found
        h3 = h3_support.finding(h3_support.check_tree(install.path, cat), install, cat)
        findings.append(h3)
    if comfy_setup.kind_of(install) != "git":
        try:
            comfy_setup.upgrade_to_h3(ctx, install, cat)
        except NotReady as exc:
            h3["fix"] = exc.fix
            notes.append(f"ComfyUI was not updated: {exc.message} Fix: {exc.fix}")
        return
    if not ctx.dry_run and not ctx.confirm(f"Move the ComfyUI checkout in {install.path} to the newest release "
                                           "with MiniMax H3 ('h3kit doctor --undo' goes back)?", default=False):
        notes.append("ComfyUI was not moved (not confirmed); 'h3kit doctor --fix --yes' moves it")
        return
    result = comfy_setup.upgrade_to_h3(ctx, install, cat)
    notes += result["notes"]
    if ctx.dry_run:
        notes.append(f"--dry-run: would move ComfyUI in {install.path} from {result['version']} to "
                     f"{result['would_checkout']} ({result['would_version']}) with "
                     f"{', '.join(f'{n} {v}' for n, v in (result.get('would_pin') or {}).items()) or 'torch'} "
                     "pinned; nothing changed")
        return
    to = result["to"]
    notes.append(f"ComfyUI moved from {result['version']} to {to['tag']} ({to['version']}); packages: "
                 f"{'; '.join(result['packages']) or 'unchanged'}; 'h3kit doctor --undo' goes back")
    after = h3_support.finding(h3_support.check(install, cat, comfyui_locate.run_python), install, cat)
    h3.update(after, message=f"fixed: {after['message']}" if after["status"] == "ok" else after["message"])
    for f in findings:  # another version accepts other flags: let apply (next) write the launcher again
        if f["check"] == "launcher.flags" and f["status"] == "ok":
            f.update(status="warn", message=f"ComfyUI moved to {to['version']}: {f['message']}")


def _undo(args, ctx) -> Outcome:
    """Undo what earlier --fix runs changed, newest first: a moved ComfyUI checkout, a replaced torch."""
    from h3kit.comfyui import setup as comfy_setup

    install = locate(args, ctx, load_config(ctx), need_write=False)
    with exclusive(ctx, install, "doctor --undo"):  # undo moves folders and reinstalls torch: one h3kit at a time
        done = comfy_setup.undo_recorded(ctx, install, mf.load_or_new(ctx.locations.state_dir, install.path))
    torch = next((d for d in done if d["action"] == "torch"), None)
    doc = {"schema": "h3kit.doctor/1", "comfyui": str(install.path), "undo": torch or done[0], "undone": done}
    verb = "Would restore" if ctx.dry_run else "Restored"
    lines = []
    for result in done:
        if result["action"] == "torch" and "unchanged" in result:
            same = ", ".join(f"{n} {v}" for n, v in result["unchanged"].items()) or "no torch"
            lines.append(f"Nothing to undo for torch in {result['python']}: it still has {same}, as before the "
                         "earlier --fix (which changed nothing); pip was not run"
                         + (". (--dry-run)" if ctx.dry_run else ", and that --fix is no longer on record."))
            continue
        if result["action"] == "torch":
            restored = result.get("restored", result.get("would_restore", {}))
            lines.append(f"{verb} {', '.join(f'{n} {v}' for n, v in restored.items())} in {result['python']}.")
            continue
        packages = result["packages"].get("undone", result["packages"].get("would_undo", []))
        lines.append(f"{verb} the ComfyUI checkout in {result['comfyui']}: "
                     f"{result.get('checked_out') or result.get('would_checkout')}"
                     f"; packages: {'; '.join(packages) or 'as they were'}.")
        lines += [f"  note: {n}" for n in result.get("notes", [])]
    return Outcome(doc, "\n".join(lines))


def _outcome(findings, notes, install, probe=None) -> Outcome:
    failed = [f for f in findings if f["status"] == "fail"]
    warned = [f for f in findings if f["status"] == "warn"]
    doc = {"schema": "h3kit.doctor/1", "comfyui": str(install.path) if install else None, "findings": findings,
           "notes": notes, "ok": not failed}
    if probe is not None:
        doc["format_probe"] = probe.to_json()
    lines = [f"[{MARK[f['status']]}] {f['check']}: {f['message']}" + (f"\n        fix: {f['fix']}" if f.get("fix") and f["status"] != "ok" else "")
             for f in findings]
    lines += format_probe.table_lines(probe) if probe is not None else []
    lines.append(f"{len(failed)} failed, {len(warned)} warnings, {len(findings) - len(failed) - len(warned)} ok.")
    lines += [f"note: {n}" for n in notes]  # what --fix did or, with --dry-run, would do
    code = 0
    if failed:
        code = EXIT_NOT_READY if install is None else EXIT_VERIFY_FAILED
    return Outcome(doc, "\n".join(lines), code)
