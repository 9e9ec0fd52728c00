"""The end of an install that set up ComfyUI and the pack but not all the model files: the disk was short, or
a host did not answer. Everything else ran (verified, recorded, calibrated when asked), so the person is told
what is in place, what is still missing and where each file goes, the one command that finishes the job
once the space is there or the host answers (`h3kit models fetch`, which fetches exactly the files of the plan
the pack holds), and how to start ComfyUI after it. Exit 3 (CONTRACTS.md: environment not ready, the fix
named), with the install document and this summary (`finish`) as its details.
"""

from __future__ import annotations

from pathlib import Path

from h3kit.core.errors import H3kitError, NotReady
from h3kit.core.units import human_bytes
from h3kit.data.plan_doc import Plan
from h3kit.models import status_doc
from h3kit.steps.next_steps import shell_quoted
from h3kit.steps.options import InstallOptions


def is_shortfall(error: H3kitError) -> bool:
    """Whether the models step stopped for want of room (download.check_free_space) or of a host that answers
    (store.missing_files_error): what a person can fix outside h3kit and then finish with one command."""
    return isinstance(error, NotReady) and ("short_bytes" in error.details or "missing" in error.details)


def finish_command(options: InstallOptions, comfyui_dir: Path) -> str:
    """`h3kit models fetch` for this ComfyUI with the install's own choices (fingerprint, profile, loader packs),
    so it plans the same files the pack was set up for."""
    words = ["h3kit", "models", "fetch", "--comfyui", shell_quoted(str(comfyui_dir))]
    if options.fingerprint_file:
        words += ["--fingerprint", shell_quoted(str(options.fingerprint_file))]
    if options.profile:
        words += ["--profile", options.profile]
    if options.with_loaders:
        words.append("--with-loaders")
    return " ".join(words)


def _first_step(error: NotReady) -> str:
    """What to do before the command: free the space on that disk, or reach the host (or a mirror)."""
    if "short_bytes" in error.details:
        where = error.details.get("folder") or "the disk the models go to"
        return (f"free {human_bytes(error.details['short_bytes'])} at {where} (or put ComfyUI's models on a bigger disk "
                "through extra_model_paths.yaml, or pick a smaller profile: 'h3kit profile list')")
    hosts = ", ".join(sorted(error.details.get("hosts") or {})) or "the download host"
    return (f"once {hosts} answers (or with models.mirror in config.yaml set to a mirror that does; with the files "
            "copied from another machine into a folder DIR, add --from DIR)")


def summary(options: InstallOptions, ctx, install, result, plan: Plan | None, folders, error: NotReady) -> NotReady:
    """The install's last word when `error` (is_shortfall) stopped its models step; `result` holds the rest."""
    missing = []
    if plan is not None:
        rows = status_doc(ctx, plan, install.path, folders=folders)["files"]
        missing = [{"name": r["name"], "path": r["path"], "bytes": r.get("exact_bytes") or r["bytes"]}
                   for r in rows if r["state"] != "present"]
    total = sum(m["bytes"] for m in missing)
    command = finish_command(options, install.path)
    comfy = result.comfyui
    in_place = [f"ComfyUI {comfy.version or ''} at {install.path}".replace("  ", " ") if comfy else
                f"ComfyUI at {install.path}",
                f"the h3kit node pack in {install.node_dir}{' (verified)' if result.verified else ''}"]
    if result.report:
        in_place.append(f"the calibration report at {result.report}")
    lines = [f"already in place: {'; '.join(in_place)}.",
             f"still missing: {len(missing)} model file(s), {human_bytes(total)}, each to go where ComfyUI reads it:",
             *[f"  {m['path']}  ({human_bytes(m['bytes'])})" for m in missing],
             f"to finish: {_first_step(error)}, then run: {command}",
             *(f"after that: {line}" for line in (result.next_steps or [])[:2])]
    finish = {"command": command, "missing": missing, "missing_bytes": total, "reason": error.message}
    return NotReady(f"h3kit set up ComfyUI and its node pack, but not the model files: {error.message}",
                    "\n".join(lines), details={**result.to_json(), **error.details, "finish": finish})
