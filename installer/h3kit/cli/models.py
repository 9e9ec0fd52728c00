"""`h3kit models`: the weight files the plan needs: plan | status | fetch | verify | remove (h3kit.steps.models)."""

from __future__ import annotations

from pathlib import Path

from h3kit.cli.context import Context, Outcome
from h3kit.core.units import human_bytes
from h3kit.steps import models
from h3kit.steps.options import ModelsOptions

HELP = "the weight files the plan needs: plan | status | fetch | verify | remove"


def add_arguments(p) -> None:
    p.add_argument("action", choices=["plan", "status", "fetch", "verify", "remove"], help="what to do")
    p.add_argument("--fingerprint", metavar="FILE", help="plan for a saved fingerprint JSON instead of this machine")
    p.add_argument("--profile", metavar="NAME", help="use this profile instead of the configured one")
    p.add_argument("--comfyui", metavar="PATH", help="the ComfyUI folder whose models folder to use")
    p.add_argument("--from", dest="from_dir", metavar="DIR", help="take files from a local folder instead of downloading")
    p.add_argument("--with-loaders", action="store_true", help="also install custom node packs the chosen weights need")


def run(args, ctx: Context) -> Outcome:
    options = ModelsOptions(action=args.action, comfyui=args.comfyui, profile=args.profile,
                            fingerprint_file=args.fingerprint, from_dir=Path(args.from_dir) if args.from_dir else None,
                            with_loaders=args.with_loaders)
    return render(args.action, models.run(options, ctx), ctx.dry_run)


def _where(f: dict, comfy: Path | None) -> str:
    """The folder a file is (or goes) in: models/<folder> inside this ComfyUI, else the full path (a shared one)."""
    if not f.get("path"):
        return f"models/{f.get('folder') or '?'}"
    parent = Path(f["path"]).parent
    if comfy is not None:
        try:
            return str(parent.relative_to(Path(comfy)))
        except ValueError:
            pass
    return str(parent)


def _render_files(doc: dict, comfy: Path | None = None) -> str:
    lines = []
    for f in doc["files"]:
        state = f.get("state") or f.get("method") or ""
        size = human_bytes(f.get("exact_bytes") or f.get("bytes") or f.get("bytes_on_disk"))
        pack = (f.get("loader") or {}).get("pack") if isinstance(f.get("loader"), dict) else None
        loader = f" via {pack['name']}" if pack else ""
        lead = f"{state:9} " if state else ""
        lines.append(f"  {lead}{f['name']}  ({size}, {_where(f, comfy)}{loader})")
    return "\n".join(lines)


def render(action: str, answer: models.ModelsAnswer, dry_run: bool) -> Outcome:
    doc, comfy = answer.doc, answer.comfyui
    if action == "remove":
        text = [f"{'would remove' if dry_run else 'removed'} {len(doc['removed'])} model file(s) h3kit downloaded "
                f"into {comfy}"]
        text += [f"  {p}" for p in doc["removed"]]
        text += [f"  left alone: {k['path']} ({k['why']})" for k in doc["kept"]]
        return Outcome(doc, "\n".join(text))
    if action == "plan":
        text = f"profile {doc['profile']}: {len(doc['files'])} files, {human_bytes(doc['total_bytes'])}\n" + _render_files(doc)
        return Outcome(doc, text, 0, doc["warnings"])
    if action == "status":
        folders = doc.get("model_folders") or {}
        text = (f"{comfy}: {human_bytes(doc['total_bytes'])} needed, {human_bytes(doc['missing_bytes'])} "
                f"still to fetch (folders: {folders.get('detail', 'ComfyUI built-in')})\n" + _render_files(doc, comfy))
        return Outcome(doc, text, 0, [folders["problem"]] if folders.get("problem") else [])
    if action == "verify":
        lines = [f"  {'ok' if r.get('ok') else r['state']:9} {r['name']} ({r.get('checked_against', '')})"
                 for r in doc["files"]]
        return Outcome(doc, "verified against the catalog hash, else the hash recorded at download:\n" + "\n".join(lines))
    if dry_run:
        return Outcome(doc, f"would fetch {human_bytes(doc['missing_bytes'])}, each file into the folder shown\n"
                       + _render_files(doc, comfy))
    text = (f"{human_bytes(doc['downloaded_bytes'])} written; all {len(doc['files'])} files in place for "
            f"{comfy}\n" + _render_files(doc, comfy))
    return Outcome(doc, text)
