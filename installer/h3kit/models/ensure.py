"""The models step of `h3kit install`, and the model findings of `h3kit doctor`."""

from __future__ import annotations

from pathlib import Path

from h3kit.core.errors import NotReady
from h3kit.core.session import Session
from h3kit.core.units import human_bytes
from h3kit.data.plan_doc import Plan
from h3kit.comfyui.model_folders import ModelFolders
from h3kit.models.files import (
    SCHEMA,
    as_folders,
    file_state,
    files_for_plan,
    loader_packs,
    manifest_for,
    plan_doc,
    status_doc,
)
from h3kit.models.loader_pack import install_loader_pack
from h3kit.models.store import fetch


def doctor_findings(plan: Plan, comfyui_dir, folders: ModelFolders | None = None) -> list[dict]:
    """Findings for `h3kit doctor`: files present, loader packs installed, known load problems. Never raises."""
    try:
        ctx = Session()
        comfyui_dir = Path(comfyui_dir)
        files = files_for_plan(plan)
        man = manifest_for(ctx, comfyui_dir)
        folders = folders or as_folders(comfyui_dir)
        out = []
        if folders.problem:
            out.append(_finding("model folders", "fail", folders.problem, "Fix the YAML (ComfyUI's "
                                "extra_model_paths.yaml.example shows the form) or move it away, then run 'h3kit doctor'."))
        for f in files:
            st = file_state(f, folders, man)
            check = f"model file {f.name}"
            if st["state"] == "present":
                where = st["path"] if st.get("shared") else f"models/{Path(st['path']).parent.name}"
                out.append(_finding(check, "ok", f"present in {where}", None))
            elif st["state"] == "conflict":
                out.append(_finding(check, "fail", f"{st['path']} has {st['bytes_on_disk']} bytes, not the expected "
                                    "size", "Move that file away and run 'h3kit models fetch'."))
            else:
                out.append(_finding(check, "warn", f"{st['state']} ({human_bytes(f.exact_bytes or f.bytes)})",
                                    "h3kit models fetch"))
            if f.comfyui_compat and f.comfyui_loads == "with_h3kit_loader":
                out.append(_finding(f"loads in ComfyUI: {f.name}", "ok", f"through h3kit's node {f.loader} "
                                    f"(the stock node fails: {f.comfyui_compat})", None))
            elif f.comfyui_compat:
                out.append(_finding(f"loads in ComfyUI: {f.name}", "warn", f.comfyui_compat,
                                    "Prefer another format ('h3kit profile list'), or use a loader pack that supports it."))
        for pack in loader_packs(files, comfyui_dir):
            if pack["installed"]:
                out.append(_finding(f"loader pack {pack['name']}", "ok", "installed in custom_nodes", None))
            else:
                out.append(_finding(f"loader pack {pack['name']}", "fail",
                                    f"{', '.join(pack['needed_by'])} needs {pack['name']} ({pack['git']}), which is "
                                    "not in custom_nodes", "h3kit models fetch --with-loaders"))
        return out
    except Exception as exc:  # noqa: BLE001 - doctor must keep going
        return [_finding("model files", "warn", f"could not check the model files ({exc})", "h3kit models status")]


def _finding(check: str, status: str, message: str, fix: str | None) -> dict:
    return {"check": check, "status": status, "message": message, "fix": fix}


# file.comfyui_loads values that are reported to load in ComfyUI (h3kit's own loader nodes: shown by a test)
TRUSTED = ("stock", "with_loader_pack", "with_h3kit_loader")


def distrusted(plan: Plan, files) -> dict[str, str]:
    """name -> why, for the plan's files that are not reported to load in ComfyUI (or have no confirmed source)."""
    loads = plan.comfyui_loads
    out = {}
    for f in files:
        state = loads.get(f.part, "unknown")
        if f.unverified:
            out[f.name] = f"unverified: {f.unverified}"
        elif state not in TRUSTED:
            out[f.name] = (f"reported not to load in ComfyUI ({f.comfyui_compat})" if state == "reported_broken"
                           else "not yet reported to load in ComfyUI" + (f" ({f.comfyui_compat})" if f.comfyui_compat else ""))
    return out


def ensure_models(ctx, plan: Plan, comfyui_dir, *, skip: bool, with_loaders: bool, config=None,
                  allow_unverified: bool = False, folders: ModelFolders | None = None) -> dict:
    """The install step: state the total, ask (or --yes / --no-models), fetch, install loader packs on request.

    Only files reported to load in ComfyUI are fetched without a question; a
    file reported broken or unverified is asked about one by one, and under
    --yes it is skipped and the step ends with NotReady naming it and the
    alternatives (`allow_unverified` fetches it anyway). A loader pack that a
    fetched file needs is installed with it.
    `config` is the user's h3kit.data.config.Config (the mirror, comfyui_python); without one, the session's.
    `folders` are the ComfyUI's own model folders (h3kit.comfyui.model_folders): a file it already sees is
    not downloaded again; without them, the bare folder's built-in ones.
    """
    comfyui_dir = Path(comfyui_dir)
    folders = folders or as_folders(comfyui_dir)
    if skip:
        return _skipped(ctx, plan, comfyui_dir)
    doc = status_doc(ctx, plan, comfyui_dir, folders=folders)
    missing = [r for r in doc["files"] if r["state"] != "present"]
    total, todo = doc["total_bytes"], doc["missing_bytes"]
    base = {"schema": SCHEMA, "action": "ensure", "comfyui": str(comfyui_dir), "total_bytes": total,
            "missing_bytes": todo, "files": doc["files"], "fetched": None, "loader_packs": doc["loader_packs"]}
    shared = sum(1 for r in doc["files"] if r["state"] == "present" and r.get("shared"))
    ctx.progress(f"The plan needs {len(doc['files'])} model files, {human_bytes(total)} in total; "
                 f"{human_bytes(todo)} still to download."
                 + (f" {shared} already in a folder this ComfyUI reads ({folders.detail})." if shared else ""))
    packs_needed = [p for p in doc["loader_packs"] if not p["installed"]]
    if not missing and not (with_loaders and packs_needed):
        return dict(base, skipped=False, reason="all present")
    if ctx.dry_run:
        return dict(base, skipped=True, reason="dry run")
    files = files_for_plan(plan)
    held = _held_back(ctx, {} if allow_unverified else distrusted(plan, files), missing)
    held_names = {h["name"] for h in held}
    wanted = [r for r in missing if r["name"] not in held_names]
    if held:
        wanted_names = {r["name"] for r in wanted}
        todo = sum((f.exact_bytes or f.bytes) for f in files if f.name in wanted_names)
    targets = ", ".join(dict.fromkeys(str(Path(r["path"]).parent) for r in wanted))
    if wanted and not ctx.confirm(f"Download {human_bytes(todo)} of model files into {targets} now?"):
        ctx.progress("Not downloading now; run 'h3kit models fetch' when you are ready.")
        return dict(base, skipped=True, reason="declined")
    # A file that loads only with its loader pack gets the pack too, or it would not load.
    pack_failures: list[NotReady] = []
    if with_loaders or any(f.loader_pack for f in files if f.name in {r["name"] for r in wanted}):
        base["loader_packs"], pack_failures = _install_packs(ctx, files, packs_needed, comfyui_dir, config)
    cut_off = None
    if wanted:
        try:
            base["fetched"] = fetch(ctx, plan, comfyui_dir, config=config, skip_names=held_names, folders=folders)
        except NotReady as exc:
            if "missing" not in exc.details:  # not "hosts unreachable": nothing more to say
                raise
            cut_off = exc
    failed = _one_error(base, pack_failures, cut_off, held)
    if failed is not None:
        raise failed
    return dict(base, skipped=False, reason=None)


def _skipped(ctx, plan: Plan, comfyui_dir: Path) -> dict:
    """--no-models: the step's answer, with the plan's total when it can be had."""
    try:
        total = plan_doc(plan)["total_bytes"]
    except Exception:  # noqa: BLE001 - skipping must never fail the install
        total = None
    ctx.progress(f"Skipping the model files (--no-models); the plan needs {human_bytes(total)}: "
                 "run 'h3kit models fetch' later.")
    return {"schema": SCHEMA, "action": "ensure", "comfyui": str(comfyui_dir), "total_bytes": total,
            "skipped": True, "reason": "--no-models"}


def _held_back(ctx, doubtful: dict[str, str], missing: list[dict]) -> list[dict]:
    """The missing files not known to load that the user did not choose to download anyway (all, under --yes)."""
    held = []
    for r in missing:
        why = doubtful.get(r["name"])
        if why and not (ctx.interactive and ctx.confirm(f"{r['name']} is {why}. Download it anyway?", default=False)):
            held.append({"name": r["name"], "why": why, "path": r.get("path")})
    return held


def _install_packs(ctx, files, packs_needed: list[dict], comfyui_dir: Path, config) -> tuple[list[dict], list[NotReady]]:
    """Each loader pack still needed, installed: (their reports, the ones that could not be had)."""
    cat_packs = {f.loader_pack.name: f.loader_pack for f in files if f.loader_pack}
    installed, failures = [], []
    for p in packs_needed:
        try:
            installed.append(install_loader_pack(ctx, cat_packs[p["name"]], comfyui_dir, config=config))
        except NotReady as exc:  # GitHub unreachable: the weights may still come, and both are named at the end
            ctx.progress(f"{exc.message} The model files are fetched anyway.")
            failures.append(exc)
    return installed, failures


def _one_error(base: dict, pack_failures: list[NotReady], cut_off: NotReady | None, held: list[dict]) -> NotReady | None:
    """One error at the end, files last: what a loader pack lacks, what no host could send, what was held back."""
    parts = [(e.message, e.fix or "") for e in pack_failures]
    details = dict(base)
    if cut_off is not None:
        parts.append((cut_off.message, cut_off.fix or ""))
        details.update(cut_off.details)
    if held:
        held_fix = ("Pick files that load: a smaller canvas or another format ('h3kit profile list'; set it in "
                    "config.yaml and run 'h3kit apply'), or download them anyway with --allow-unverified.")
        if cut_off is not None:
            paths = "".join(f"\n  {h['path']}" for h in held if h.get("path"))
            held_fix = f"the files not downloaded would go to:{paths}\n  {held_fix}"
        parts.append(("Not downloaded: " + "; ".join(f"{h['name']} ({h['why']})" for h in held) + ".", held_fix))
        details["held"] = held
    if not parts:
        return None
    return NotReady(" ".join(m for m, _ in parts), "\n".join(f for _, f in parts if f), details=details)
