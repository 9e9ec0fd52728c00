"""`h3kit fingerprint`: probe the machine (GPUs, driver, RAM, disk, CPU, OS) and print the fingerprint."""

from __future__ import annotations

from h3kit.cli.context import Context, Outcome
from h3kit.core.errors import BadInput, H3kitError
from h3kit.data import config
from h3kit.fingerprint import collect, render_text

HELP = "probe the machine (GPUs, driver, RAM, disk, CPU, OS) and print the fingerprint"


def add_arguments(p) -> None:
    p.add_argument("--timeout", type=float, default=None, metavar="SECONDS",
                   help="per-probe timeout (default 5 s, or env H3KIT_PROBE_TIMEOUT)")


def _comfyui_folders() -> list[str]:
    """The configured ComfyUI folder and its models folder, so their disks are measured too."""
    try:
        path = config.load().comfyui_path
    except H3kitError:  # a broken config is reported by the commands that use it; probing goes on
        return []
    return [path, f"{path}/models"] if path else []


def run(args, ctx: Context) -> Outcome:
    if args.timeout is not None and not args.timeout > 0:
        raise BadInput(f"--timeout must be a positive number of seconds, not {args.timeout:g}.",
                       "Pass for example --timeout 5.")
    if not ctx.json:
        ctx.progress("Probing this machine...")
    doc = collect(timeout=args.timeout, extra_disk_paths=_comfyui_folders())
    problems = [p for p in doc["probes"] if p["status"] in ("error", "timeout")]
    warnings = [f"probe {p['name']} {p['status']}: {p['detail']}" for p in problems]
    return Outcome(doc=doc, text=render_text(doc), warnings=warnings if not ctx.json else [])
