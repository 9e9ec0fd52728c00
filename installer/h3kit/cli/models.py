"""`h3kit models`: the weight files the plan needs: plan | status | fetch | verify | remove."""

from __future__ import annotations

from pathlib import Path

from h3kit import models
from h3kit.cli.context import Context, Outcome
from h3kit.comfyui.locate import find
from h3kit.core.errors import BadInput, NotReady
from h3kit.core.units import human_bytes

HELP = "the weight files the plan needs: plan | status | fetch | verify | remove"


def add_arguments(p) -> None:
    p.add_argument("action", choices=["plan", "status", "fetch", "verify", "remove"], help="what to do")
    p.add_argument("--fingerprint", metavar="FILE", help="plan for a saved fingerprint JSON instead of this machine")
    p.add_argument("--profile", metavar="NAME", help="use this profile instead of the configured one")
    p.add_argument("--comfyui", metavar="PATH", help="the ComfyUI folder whose models folder to use")
    p.add_argument("--from", dest="from_dir", metavar="DIR", help="take files from a local folder instead of downloading")
    p.add_argument("--with-loaders", action="store_true", help="also install custom node packs the chosen weights need")


def _config(ctx: Context):
    from h3kit.data import config as config_mod

    return config_mod.load(ctx.locations)


def _plan(args, ctx: Context, cfg, comfy: Path | None = None) -> dict:
    """The plan install made: this machine's, with the format probe cached for `comfy` as its evidence."""
    from h3kit.calibrate.format_probe import cached
    from h3kit.cli.plan import machine_fingerprint
    from h3kit.data import catalog as catalog_mod
    from h3kit.plan import make_plan

    cat = catalog_mod.load()
    evidence = cached(ctx.locations.cache_dir, comfy) if comfy is not None and not args.fingerprint else None
    return make_plan(machine_fingerprint(args.fingerprint), cat, catalog_mod.load_profiles(cat), profile=args.profile,
                     config=cfg, evidence=evidence)


def _comfyui_dir(args, ctx: Context, cfg, *, required: bool) -> Path | None:
    """--comfyui PATH, else the usual search (config, usual folders); None when not required and not found."""
    if args.comfyui:
        p = Path(args.comfyui).expanduser()
        if not p.is_dir():
            raise BadInput(f"--comfyui {args.comfyui} is not a folder.", "Pass the ComfyUI folder (the one holding main.py).")
        if not (p / "main.py").is_file() and not (p / "models").is_dir():
            raise BadInput(f"{p} does not look like ComfyUI (no main.py, no models folder).",
                           "Pass the ComfyUI folder itself (the one holding main.py).")
        return p.absolute()
    try:
        return Path(find(None, cfg, ctx, need_write=required).path)
    except (NotReady, BadInput):
        if required:
            raise
        return None


def _render_files(doc: dict) -> str:
    lines = []
    for f in doc["files"]:
        state = f.get("state") or f.get("method") or ""
        size = human_bytes(f.get("exact_bytes") or f.get("bytes"))
        pack = (f.get("loader") or {}).get("pack") if isinstance(f.get("loader"), dict) else None
        loader = f" via {pack['name']}" if pack else ""
        folder = f.get("folder") or Path(f.get("path", "")).parent.name
        lead = f"{state:9} " if state else ""
        lines.append(f"  {lead}{f['name']}  ({size}, models/{folder}{loader})")
    return "\n".join(lines)


def run(args, ctx: Context) -> Outcome:
    cfg = _config(ctx)
    action = args.action
    if action == "remove":
        comfy = _comfyui_dir(args, ctx, cfg, required=True)
        plan = None
        if args.fingerprint:
            plan = _plan(args, ctx, cfg)
        doc = models.remove(ctx, comfy, plan=plan)
        verb = "would remove" if ctx.dry_run else "removed"
        text = [f"{verb} {len(doc['removed'])} model file(s) h3kit downloaded into {comfy}"]
        text += [f"  {p}" for p in doc["removed"]]
        text += [f"  left alone: {k['path']} ({k['why']})" for k in doc["kept"]]
        return Outcome(doc, "\n".join(text))

    if action == "plan":
        comfy = _comfyui_dir(args, ctx, cfg, required=False)
        plan = _plan(args, ctx, cfg, comfy)
        doc = models.plan_doc(plan, comfyui_dir=comfy)
        text = f"profile {doc['profile']}: {len(doc['files'])} files, {human_bytes(doc['total_bytes'])}\n" + _render_files(doc)
        return Outcome(doc, text, 0, doc["warnings"])

    comfy = _comfyui_dir(args, ctx, cfg, required=True)
    plan = _plan(args, ctx, cfg, comfy)
    if action == "status":
        doc = models.status_doc(ctx, plan, comfy)
        text = (f"{comfy}: {human_bytes(doc['total_bytes'])} needed, {human_bytes(doc['missing_bytes'])} "
                f"still to fetch\n" + _render_files(doc))
        return Outcome(doc, text)
    if action == "verify":
        doc = models.verify(ctx, plan, comfy)
        lines = [f"  {'ok' if r.get('ok') else r['state']:9} {r['name']} ({r.get('checked_against', '')})"
                 for r in doc["files"]]
        return Outcome(doc, "verified against the catalog hash, else the hash recorded at download:\n" + "\n".join(lines))

    # fetch
    doc: dict = {}
    if args.with_loaders:
        files = models.files_for_plan(plan)
        packs = {f.loader_pack.name: f.loader_pack for f in files if f.loader_pack}
        doc["loader_packs"] = [models.install_loader_pack(ctx, p, comfy) for p in packs.values()]
    if ctx.dry_run:
        status = models.status_doc(ctx, plan, comfy)
        doc.update(status, action="fetch", dry_run=True)
        return Outcome(doc, f"would fetch {human_bytes(status['missing_bytes'])} into {comfy / 'models'}\n"
                       + _render_files(status))
    doc.update(models.fetch(ctx, plan, comfy, from_dir=Path(args.from_dir) if args.from_dir else None))
    text = (f"{human_bytes(doc['downloaded_bytes'])} written; all {len(doc['files'])} files verified in "
            f"{comfy / 'models'}\n" + _render_files(doc))
    return Outcome(doc, text)
