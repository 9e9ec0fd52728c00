"""What several commands do first: read the config, fingerprint, find the ComfyUI (the plan: h3kit.steps.planning).

Workflow steps sit between the CLI and the domain packages: they call the
domain in the documented order and report through the `Session`, and never
parse arguments or print themselves.
"""

from __future__ import annotations

from contextlib import contextmanager, nullcontext
from dataclasses import dataclass

from h3kit.comfyui import locate as comfyui_locate
from h3kit.comfyui import locks
from h3kit.comfyui import manifest as mf
from h3kit.core import lock
from h3kit.comfyui.inspect import torch_fit_findings
from h3kit.core.session import Session
from h3kit.data.fingerprint import Fingerprint
from h3kit.steps.options import ComfyTarget
from h3kit.data.plan_doc import Plan


def load_config(ctx: Session):
    from h3kit.data import config

    return config.load(ctx.locations)


def check_profile(config, profile: str | None) -> None:
    """BadInput at once for a profile no plan can use (--profile, else config.yaml's), before a command that plans
    late (install plans once its ComfyUI is found) sets anything up."""
    from h3kit.core.errors import BadInput
    from h3kit.data import catalog

    wanted = profile or (config.profile if config is not None else "auto")
    names = catalog.load_profiles(catalog.load())
    if wanted != "auto" and wanted not in names:
        raise BadInput(f"There is no profile named {wanted!r}.",
                       f"Choose one of: auto, {', '.join(names)} (see 'h3kit profile list').")


def machine_fingerprint(path: str | None) -> Fingerprint:
    """The saved fingerprint FILE (--fingerprint FILE), else this machine's, probed now."""
    from h3kit.fingerprint import this_machine
    from h3kit.fingerprint.schema import load_file

    return load_file(path) if path else this_machine()


@dataclass(frozen=True)
class Fingerprinted:
    """A command's one fingerprint, and whether it was read from a saved file (--fingerprint FILE): then it is
    another machine's, and this machine's format probe is no evidence for its plan (h3kit.steps.planning)."""

    fingerprint: Fingerprint
    saved: bool = False

    @classmethod
    def read(cls, path: str | None) -> "Fingerprinted":
        """The saved fingerprint FILE, else this machine's, probed now (without a word: `fingerprinted` says it)."""
        return cls(machine_fingerprint(path), bool(path))


def fingerprinted(ctx: Session, path: str | None, notes: list[str]) -> Fingerprinted:
    """A command's one fingerprint: the saved FILE (said in `notes`), else this machine's, probed now."""
    if path:
        notes.append(f"using the saved fingerprint {path}, not this machine's")
    else:
        ctx.progress("Fingerprinting this machine...")
    return Fingerprinted.read(path)


def generated_files(plan: Plan | None) -> dict[str, bytes]:
    """The files deploy and apply make from the plan: the H3 workflows, in both formats."""
    if not plan:
        return {}
    from h3kit.comfyui import workflows
    from h3kit.data import catalog

    return workflows.pack_files(plan, catalog.load(), plan.profile)


def model_folders(install: comfyui_locate.ComfyInstall, ctx: Session | None = None):
    """The ComfyUI's own model folders (h3kit.comfyui.model_folders), for every folder the catalog's files use."""
    from h3kit.comfyui import model_folders as folders_mod
    from h3kit.data import catalog

    cat = catalog.load()
    wanted = sorted({w.file.folder for part in (cat.dit, cat.text_encoder, cat.vae, cat.audio_vae, cat.lora)
                     for w in part if w.file.folder})
    folders = folders_mod.resolve(install, wanted, comfyui_locate.run_python)
    if ctx is not None:
        ctx.log.info("model folders of %s: %s", install.path, folders.detail)
    return folders


def locate(target: ComfyTarget, ctx: Session, config, *, need_write: bool) -> comfyui_locate.ComfyInstall:
    install = comfyui_locate.find(target.path, config, ctx, need_write=need_write, python=target.python)
    for note in install.notes:
        ctx.progress(note)
    return install


@contextmanager
def exclusive(ctx: Session, install: comfyui_locate.ComfyInstall, command: str):
    """Hold this ComfyUI's lock and the h3kit home's for the with-block (h3kit.core.lock); a dry run takes none.

    Another h3kit holding either: NotReady (exit 3), "another h3kit is installing into this ComfyUI (pid N)".
    """
    if ctx.dry_run:
        with nullcontext():
            yield
        return
    state = ctx.locations.state_dir
    info = {"command": command, "comfyui": str(install.path)}
    fix = "Wait for the other h3kit to finish (or close its window), then run this command again."
    with lock.held(locks.lock_path(state, install.path), "Another h3kit is installing into this ComfyUI",
                   f"{fix} (ComfyUI: {install.path})", info):
        with lock.held(locks.home_lock_path(state), f"Another h3kit is changing h3kit's own files in "
                       f"{ctx.locations.config_dir}", fix, info):
            yield


@contextmanager
def exclusive_home(ctx: Session, command: str):
    """Hold only the h3kit home's lock (before a ComfyUI is known: a new one set up, the build with no ComfyUI)."""
    if ctx.dry_run:
        yield
        return
    fix = "Wait for the other h3kit to finish (or close its window), then run this command again."
    with lock.held(locks.home_lock_path(ctx.locations.state_dir), f"Another h3kit is changing h3kit's own files in "
                   f"{ctx.locations.config_dir}", fix, {"command": command}):
        yield


def remember_comfyui(ctx: Session, config, install: comfyui_locate.ComfyInstall, notes: list[str]) -> None:
    """After a successful install: save the ComfyUI as `comfyui_path` in config.yaml (comments kept), so apply,
    uninstall, doctor and the scripts/ shims find it without --comfyui. A comfyui_path the user set to another
    ComfyUI that still exists is left as it is, and noted."""
    from pathlib import Path

    from h3kit.core.errors import H3kitError
    from h3kit.data import config as config_mod

    named = getattr(config, "comfyui_path", None) if config is not None else None
    where = ctx.locations.config_file
    if named:
        other = Path(named).expanduser()
        if mf.canonical(other) == mf.canonical(install.path):
            return
        if comfyui_locate.looks_like_comfyui(other) or comfyui_locate.looks_like_desktop_base(other):
            notes.append(f"{where} names another ComfyUI ({other}) in comfyui_path, left as it is: commands "
                         f'without --comfyui use that one (pass --comfyui "{install.path}" for this one)')
            return
    try:
        config_mod.set_value(ctx.locations, "comfyui_path", str(install.path))
    except (OSError, H3kitError) as exc:
        notes.append(f"could not save comfyui_path in {where} ({getattr(exc, 'message', exc)}); "
                     f'name this ComfyUI with --comfyui "{install.path}" next time')
        return
    notes.append(f"saved comfyui_path in {where}, so apply, doctor and uninstall find this ComfyUI without --comfyui")


def torch_findings(fingerprint: Fingerprint | None, info: dict) -> list[dict]:
    """Torch build against the hardware (h3kit.plan.torch_build); the basic checks without a fingerprint."""
    if fingerprint is None:
        return torch_fit_findings(fingerprint, info)
    from h3kit.plan.torch_build import doctor_findings

    return doctor_findings(fingerprint, info)


def loud(findings: list[dict]) -> list[str]:
    return [f"{f['message']} Fix: {f['fix']}" if f.get("fix") else f["message"]
            for f in findings if f["status"] in ("warn", "fail")]


