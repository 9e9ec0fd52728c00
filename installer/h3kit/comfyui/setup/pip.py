"""ComfyUI's Python and its pip: what torch it holds, and installing a torch build, then requirements pinned to it.

Every pip run goes through `h3kit.core.tools.run_pip`, so the offline and
mirror options (`PipOptions`, `H3KIT_PIP_*`) hold for all of them. The table
`comfyui_setup` in the torch builds file gives the timeouts, the Python
versions a new ComfyUI may use, its user-data folders and the disk it needs.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from h3kit.core import subproc
from h3kit.core.files import atomic_write
from h3kit.core.tools import PipOptions, run_pip
from h3kit.plan import torch_build

CONSTRAINTS_FILE = "h3kit-torch-constraints.txt"


def setup_table() -> dict:
    return torch_build.builds_table()["comfyui_setup"]


# -- what torch is in an interpreter -----------------------------------------------

_PROBE = r"""
import json, sys, platform
import importlib.metadata as md
out = {"python": sys.executable, "python_version": platform.python_version(), "prefix": sys.prefix,
       "base_prefix": getattr(sys, "base_prefix", sys.prefix),
       "system": platform.system().lower(), "packages": {}, "requires": {}}
for name in ("torch", "torchvision", "torchaudio", "torch-directml"):
    try:
        dist = md.distribution(name)
    except md.PackageNotFoundError:
        continue
    out["packages"][name] = dist.version
    out["requires"][name] = list(dist.requires or [])
if "--import" in sys.argv and "torch" in out["packages"]:
    try:
        import torch
        out["torch_cuda"] = torch.version.cuda
        out["torch_hip"] = getattr(torch.version, "hip", None)
        out["cuda_available"] = bool(torch.cuda.is_available())
    except Exception as exc:
        out["import_error"] = f"{type(exc).__name__}: {exc}"
print(json.dumps(out))
"""


def probe_torch(python: str | os.PathLike, *, import_torch: bool = False, timeout: float = 120) -> dict:
    """What torch build `python` has, as torch_build.check reads it; {'error': ...} when it cannot tell."""
    argv = [os.fspath(python), "-c", _PROBE] + (["--import"] if import_torch else [])
    result = subproc.run(argv, timeout=timeout)
    if not result.ok:
        return {"python": os.fspath(python), "error": result.detail or result.status}
    try:
        raw = json.loads(result.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {"python": os.fspath(python), "error": "the probe printed no JSON"}
    return torch_info_from_probe(raw)


def torch_info_from_probe(raw: dict) -> dict:
    """Pure: the probe's raw JSON -> {python, python_version, torch_version, torch_build, torch_cuda, packages}."""
    info = {"python": raw.get("python"), "python_version": raw.get("python_version"),
            "prefix": raw.get("prefix"), "base_prefix": raw.get("base_prefix"),
            "packages": dict(raw.get("packages") or {})}
    version = info["packages"].get("torch")
    if version:
        if raw.get("torch_hip"):
            have = torch_build.describe_installed({"torch_version": version, "torch_build": "rocm"})
        elif raw.get("torch_cuda"):
            have = torch_build.describe_installed({"torch_version": version, "torch_build": "cuda",
                                                "torch_cuda": raw["torch_cuda"]})
        else:
            have = torch_build.build_from_metadata(version, (raw.get("requires") or {}).get("torch", []),
                                                raw.get("system") or "linux")
        info.update(torch_version=version, torch_build=have["backend"], torch_cuda=have["cuda"])
    return info


# -- installing ----------------------------------------------------------------------

def install_choice(ctx, python: str, choice: dict, opts: PipOptions, *, force: bool, timeout: float) -> None:
    """pip-install the chosen build. force: replace what is there even at the same version number."""
    reqs = torch_build.requirements(choice, local=True)
    index = choice.get("index_url")
    if force:
        # --no-deps first so an identical version with another local tag (+cpu -> +cu130) is replaced
        # without re-downloading every dependency; the second run adds dependencies the new build needs.
        run_pip(ctx, python, ["install", "--force-reinstall", "--no-deps", *reqs],
                f"Installing {' '.join(reqs)} ({choice['build']})", timeout=timeout, opts=opts, index_url=index)
    label = f"Installing the dependencies of {choice['build']} torch" if force else f"Installing {' '.join(reqs)}"
    run_pip(ctx, python, ["install", *reqs], label, timeout=timeout, opts=opts, index_url=index)
    if choice.get("local_tag"):
        match_companions(ctx, python, choice["local_tag"], opts, index_url=index, timeout=timeout)


def match_companions(ctx, python: str, tag: str, opts: PipOptions, *, index_url: str | None, timeout: float,
                     only: tuple[str, ...] | None = None) -> list[str]:
    """torchvision/torchaudio of another build than torch's `tag`: put the `tag` build of the same version in place.

    A range (torchaudio>=2.11) cannot name a build label, so a folder of wheels or
    an index holding several builds may hand over another build's. `only`: the
    packages just installed (others are left as they are). Returns what it replaced.
    """
    wrong = [w for w in torch_build.companion_mismatches(probe_torch(python)) if only is None or w.split()[0] in only]
    if wrong:
        fixed = [f"{item.split()[0]}=={item.split()[1].split('+')[0]}+{tag}" for item in wrong]
        run_pip(ctx, python, ["install", "--force-reinstall", "--no-deps", *fixed],
                f"Replacing {', '.join(wrong)} with the {tag} build", timeout=timeout, opts=opts, index_url=index_url)
    return wrong


def constraints_text(info: dict) -> tuple[str, list[str]]:
    """The constraints file that pins every torch package now installed (so ComfyUI's requirements cannot
    replace them), and the pins."""
    pins = [f"{name}=={version}" for name, version in sorted(info.get("packages", {}).items())]
    return "# Written by h3kit: keeps the torch build chosen for this hardware.\n" + "\n".join(pins) + "\n", pins


def write_constraints(path: Path, info: dict) -> list[str]:
    text, pins = constraints_text(info)
    atomic_write(path, text)
    return pins


def install_requirements(ctx, python: str, requirements: Path, constraints: Path, opts: PipOptions, *,
                         timeout: float, label: str = "Installing ComfyUI's requirements") -> None:
    """`pip install -r requirements -c constraints`: the torch pinned in `constraints` stays."""
    run_pip(ctx, python, ["install", "-r", str(requirements), "-c", str(constraints)], label, timeout=timeout,
            opts=opts)
