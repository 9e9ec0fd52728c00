"""`h3kit doctor`: check everything and print fixes (apply them with --fix; --undo puts back what --fix changed).

The checks and fixes are the step h3kit.steps.doctor; this module turns the
arguments into its options and the findings into lines for a person.
"""

from __future__ import annotations

from h3kit.calibrate.format_probe import table_lines
from h3kit.cli.context import Context, Outcome, add_comfyui_target, add_fresh_probe, comfyui_target
from h3kit.steps import doctor
from h3kit.steps.options import DoctorOptions

HELP = "check everything and print fixes (apply them with --fix)"
MARK = {"ok": "ok  ", "warn": "WARN", "fail": "FAIL"}


def add_arguments(p) -> None:
    add_comfyui_target(p, "the ComfyUI folder to check")
    p.add_argument("--fix", action="store_true", help="apply the fixes")
    p.add_argument("--undo", action="store_true", help="restore what an earlier --fix replaced")
    p.add_argument("--fingerprint", metavar="FILE", help="check against this saved fingerprint instead of probing the machine")
    add_fresh_probe(p)


def run(args, ctx: Context) -> Outcome:
    if args.undo:
        return render_undo(doctor.undo(comfyui_target(args), ctx), ctx.dry_run)
    return render(doctor.run(DoctorOptions(comfyui=comfyui_target(args), fix=args.fix,
                                           fingerprint_file=args.fingerprint, fresh_probe=args.fresh_probe), ctx))


def render(report: doctor.DoctorReport) -> Outcome:
    findings = report.findings
    failed = len(report.failed)
    warned = sum(f["status"] == "warn" for f in findings)
    lines = [f"[{MARK[f['status']]}] {f['check']}: {f['message']}" + (f"\n        fix: {f['fix']}" if f.get("fix") and f["status"] != "ok" else "")
             for f in findings]
    lines += table_lines(report.probe) if report.probe is not None else []
    lines.append(f"{failed} failed, {warned} warnings, {len(findings) - failed - warned} ok.")
    lines += [f"note: {n}" for n in report.notes]  # what --fix did or, with --dry-run, would do
    return Outcome(report.to_json(), "\n".join(lines), report.exit_code)


def render_undo(report: doctor.UndoReport, dry_run: bool) -> Outcome:
    verb = "Would restore" if dry_run else "Restored"
    lines = []
    for result in report.undone:
        if result["action"] == "torch" and "unchanged" in result:
            same = ", ".join(f"{n} {v}" for n, v in result["unchanged"].items()) or "no torch"
            lines.append(f"Nothing to undo for torch in {result['python']}: it still has {same}, as before the "
                         "earlier --fix (which changed nothing); pip was not run"
                         + (". (--dry-run)" if dry_run else ", and that --fix is no longer on record."))
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
    return Outcome(report.to_json(), "\n".join(lines))
