"""`doctor --fix` / `--undo`: replace a torch build that does not fit the hardware, and put the old one back.

`fix_torch` reinstalls torch/torchvision/torchaudio of the build
`torch_build.choose` names, after writing down what was there (versions and
the index they came from) in the manifest's extra `torch_before`; the first
record wins, so a second --fix never forgets what the user had. `undo_torch`
puts that back, one pip run per index the old packages came from.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from h3kit.comfyui import manifest as manifest_mod
from h3kit.comfyui.setup.pip import install_choice, probe_torch, setup_table
from h3kit.comfyui.setup.torch_source import reachable_choice
from h3kit.core.errors import BadInput, NotReady, VerificationFailed
from h3kit.core.tools import PipOptions, run_pip
from h3kit.core.venv import venv_python
from h3kit.data.fingerprint import Fingerprint
from h3kit.plan import torch_build


def _index_for_version(version: str) -> str | None:
    """Where a recorded torch version came from: its local tag names the PyTorch index; none means PyPI."""
    m = re.search(r"\+(cu\d+|rocm[\d.]+|xpu|cpu)$", version or "")
    return f"{torch_build.builds_table()['index_base'].rstrip('/')}/{m.group(1)}" if m else None


def linked_venv(python: str | os.PathLike) -> Path | None:
    """The virtual environment `python` belongs to, following links one hop at a time (None: not a venv's)."""
    p = Path(python).absolute()
    for _hop in range(16):
        cfg = p.parent.parent / "pyvenv.cfg"
        if cfg.is_file():
            return cfg.parent
        if not p.is_symlink():
            return None
        target = Path(os.readlink(p))
        p = target if target.is_absolute() else p.parent / target
    return None


def check_target_env(python: str, info: dict) -> None:
    """Refuse to pip-install when `python` links to a venv's interpreter but runs outside that venv.

    Python looks for pyvenv.cfg beside the path it was started as, so a link to
    venv/bin/python placed elsewhere starts the base interpreter, and pip would
    change the base Python that other programs share.
    """
    venv = linked_venv(python)
    if venv is not None and info.get("prefix") and Path(info["prefix"]).resolve() != venv.resolve():
        own = venv_python(venv) or venv / "bin" / "python"
        raise NotReady(f"{python} runs as the base Python {info['prefix']}, not the virtual environment {venv} "
                       "it links to; pip would change the wrong Python.",
                       f"Name the venv's own interpreter with --comfyui-python {own}")


def record_before(python: str, info: dict) -> dict:
    return {"python": python, "recorded": manifest_mod.now_iso(),
            "packages": {name: info["packages"].get(name) for name in torch_build.PACKAGES},
            "index_urls": {name: _index_for_version(v) for name, v in info["packages"].items()
                           if name in torch_build.PACKAGES}}


def fix_torch(ctx, python: str | os.PathLike, fingerprint: Fingerprint, manifest,
              opts: PipOptions | None = None) -> dict:
    """Reinstall the right torch build into `python`, recording what was there in manifest.extra['torch_before']."""
    python = os.fspath(python)
    opts = opts or PipOptions.from_env()
    choice = torch_build.choose(fingerprint)
    if choice["status"] == "refuse":
        raise NotReady(choice["rationale"][-1], choice["fix"])
    before = probe_torch(python)
    if "error" in before:
        raise NotReady(f"h3kit could not run ComfyUI's Python {python} ({before['error']}).",
                       "Check the ComfyUI path with 'h3kit doctor --comfyui PATH'.")
    check_target_env(python, before)
    mismatches = [m for m in torch_build.check(fingerprint, before) if m["status"] == "fail"]
    result = {"python": python, "choice": choice, "before": before.get("packages"), "changed": False}
    if not mismatches:
        return result
    if ctx.dry_run:
        result["would_run"] = torch_build.fix_command(python, choice)
        return result
    manifest.extra.setdefault("torch_before", record_before(python, before))
    manifest.save()
    timeout = setup_table()["timeouts_s"]["pip"]
    choice, taken = reachable_choice(ctx, python, choice, fingerprint, opts, timeout=timeout)
    install_choice(ctx, python, choice, opts, force=True, timeout=timeout)
    if taken:
        result["taken"] = taken
    after = probe_torch(python)
    left = [m for m in torch_build.check(fingerprint, after) if m["status"] == "fail"]
    result.update(after=after.get("packages"), changed=True)
    if left:
        raise VerificationFailed(f"torch was reinstalled but still does not fit: {left[0]['message']}",
                                 "Run 'h3kit doctor -v' and read the log; 'h3kit doctor --undo' restores the old torch.")
    return result


def undo_torch(ctx, manifest, opts: PipOptions | None = None) -> dict:
    """Put back the torch packages recorded by fix_torch (uninstall those that were absent)."""
    opts = opts or PipOptions.from_env()
    before = manifest.extra.get("torch_before")
    if not before:
        raise BadInput("There is no earlier torch to restore: 'h3kit doctor --fix' has not replaced torch here.",
                       "Nothing to undo.")
    python = before["python"]
    restore = {n: v for n, v in before["packages"].items() if v}
    absent = [n for n, v in before["packages"].items() if not v]
    timeout = setup_table()["timeouts_s"]["pip"]
    now = probe_torch(python).get("packages")
    if now is not None and all(now.get(n) == v for n, v in before["packages"].items()):
        # A --fix that failed before pip changed anything (or was undone by hand): reinstalling would only cost
        # minutes and say "Restored" for nothing.
        if not ctx.dry_run:
            manifest.extra.pop("torch_before", None)
            manifest.save()
        return {"python": python, "restored": {}, "removed": [], "unchanged": restore}
    if ctx.dry_run:
        return {"python": python, "would_restore": restore, "would_remove": absent}
    by_index: dict[str | None, list[str]] = {}
    for name, version in restore.items():
        by_index.setdefault(before["index_urls"].get(name), []).append(f"{name}=={version}")
    for index, reqs in by_index.items():
        run_pip(ctx, python, ["install", "--force-reinstall", "--no-deps", *reqs], f"Restoring {' '.join(reqs)}",
                timeout=timeout, opts=opts, index_url=index)
    present = probe_torch(python).get("packages", {})
    to_remove = [n for n in absent if n in present]
    if to_remove:
        run_pip(ctx, python, ["uninstall", "-y", *to_remove], f"Removing {' '.join(to_remove)}", timeout=timeout,
                opts=opts)
    manifest.extra.pop("torch_before", None)
    manifest.save()
    return {"python": python, "restored": restore, "removed": to_remove}
