"""`h3kit install`: the whole chain: fingerprint, plan, build, deploy into ComfyUI, calibrate.

Steps, in order: fingerprint -> plan -> build -> find ComfyUI -> deploy and
verify -> models -> calibrate. No ComfyUI found: everything that does not
need one still runs (the report says what this machine can do), then exit 3
naming --comfyui. The chain itself is `h3kit.steps.install`.
"""

from __future__ import annotations

from pathlib import Path

from h3kit.cli.context import Context, Outcome, add_comfyui_target, comfyui_target
from h3kit.steps import install
from h3kit.steps.options import InstallOptions

HELP = "the whole chain: fingerprint, plan, build, deploy into ComfyUI, calibrate"


def add_arguments(p) -> None:
    add_comfyui_target(p, "the ComfyUI folder to install into", " (found automatically when possible)")
    p.add_argument("--profile", metavar="NAME", help="use this profile instead of auto")
    p.add_argument("--skip-calibrate", action="store_true", help="do not run the calibration at the end")
    p.add_argument("--no-models", action="store_true", help="do not download model weights")
    p.add_argument("--with-loaders", action="store_true", help="also install custom node packs the chosen weights need")
    p.add_argument("--no-new-comfyui", action="store_true",
                   help="when no ComfyUI is found, do not offer to set one up (exit 3 naming --comfyui)")
    p.add_argument("--allow-unverified", action="store_true",
                   help="also download files not reported to load in ComfyUI (asked about one by one otherwise)")
    p.add_argument("--new-comfyui", metavar="DIR",
                   help="set up a new ComfyUI in DIR first (a release with MiniMax H3: the newest release tag of a git "
                        "source; an older source is refused)")
    p.add_argument("--comfyui-source", metavar="SRC", help="git URL, archive or folder to take ComfyUI from (with --new-comfyui)")
    p.add_argument("--fingerprint", metavar="FILE", help="use this saved fingerprint instead of probing the machine")


def options(args) -> InstallOptions:
    return InstallOptions(
        comfyui=comfyui_target(args),
        profile=args.profile,
        fingerprint_file=args.fingerprint,
        skip_calibrate=args.skip_calibrate,
        skip_models=args.no_models,
        with_loaders=args.with_loaders,
        allow_unverified=args.allow_unverified,
        offer_new_comfyui=not args.no_new_comfyui,
        new_comfyui=Path(args.new_comfyui) if args.new_comfyui else None,
        comfyui_source=args.comfyui_source,
    )


def run(args, ctx: Context) -> Outcome:
    return install.run(options(args), ctx)
