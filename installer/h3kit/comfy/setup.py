"""Setting up ComfyUI's Python for this hardware: a new ComfyUI, or a torch repair.

Three jobs, all through `python -m pip` of ComfyUI's own interpreter (the
portable build's `python_embeded/python.exe` included; its `pip.exe`
launcher may point at a foreign path, so it is never used):

- `fix_torch` reinstalls torch/torchvision/torchaudio of the build
  `torchsel.choose` names, after writing down what was there (versions and
  the index they came from) in the manifest's extra `torch_before`;
  `undo_torch` puts that back.
- `new_comfyui` makes a ComfyUI h3kit owns: source (git clone of a URL,
  a local git repository, a folder or an archive) -> venv with a supported
  Python -> the chosen torch -> ComfyUI's requirements under a constraints
  file that pins the torch just installed -> a check. Each step is written
  to a state file when done, so a re-run continues where it stopped.
- `purge_plan` / `purge_comfyui` remove a ComfyUI that h3kit created,
  keeping the user's models and outputs unless they are confirmed too.

pip is configurable for offline use and mirrors, in this order: the
arguments of `PipOptions`, then the environment (`H3KIT_PIP_FIND_LINKS`,
a path list; `H3KIT_PIP_NO_INDEX=1`; `H3KIT_PIP_INDEX_URL`, which replaces
every index URL, e.g. a local mirror), then pip's own configuration.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import tarfile
import tempfile
import threading
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from h3kit.comfy import manifest as manifest_mod
from h3kit.core import subproc
from h3kit.plan import torch_build as torchsel
from h3kit.core.errors import BadInput, H3kitError, NotReady, VerificationFailed

ROLE = "comfyui"
STATE_SCHEMA = "h3kit.comfy_setup_state/1"
STEPS = ("source", "venv", "torch", "requirements", "verify")


def setup_table() -> dict:
    return torchsel.builds_table()["comfyui_setup"]


# -- pip ------------------------------------------------------------------------

@dataclass
class PipOptions:
    find_links: list[str] = field(default_factory=list)
    no_index: bool = False
    index_url: str | None = None  # replaces the choice's index (a mirror, or a local one)

    @classmethod
    def from_env(cls, environ=None) -> "PipOptions":
        env = os.environ if environ is None else environ
        links = [p for p in env.get("H3KIT_PIP_FIND_LINKS", "").split(os.pathsep) if p]
        return cls(links, env.get("H3KIT_PIP_NO_INDEX", "") not in ("", "0"), env.get("H3KIT_PIP_INDEX_URL") or None)

    def index_args(self, index_url: str | None) -> list[str]:
        args: list[str] = []
        if self.no_index:
            args.append("--no-index")
        elif self.index_url or index_url:
            args += ["--index-url", self.index_url or index_url]
        for link in self.find_links:
            args += ["--find-links", link]
        return args


def _ticking(ctx, label: str, fn, *args, **kwargs):
    """Run fn while a progress line counts seconds on stderr (pip and git print nothing useful captured)."""
    from tqdm import tqdm

    done = threading.Event()
    bar = tqdm(desc=label, unit="s", total=None, file=sys.stderr, leave=False,
               disable=not sys.stderr.isatty(), bar_format="{desc}: {elapsed}")

    def tick():
        while not done.wait(1.0):
            bar.update(1)

    ticker = threading.Thread(target=tick, daemon=True)
    ticker.start()
    try:
        return fn(*args, **kwargs)
    finally:
        done.set()
        ticker.join()
        bar.close()


def _pip(ctx, python: str, args: list[str], label: str, timeout: float) -> subproc.ToolResult:
    argv = [python, "-m", "pip", *args, "--disable-pip-version-check", "--no-input"]
    ctx.log.debug("pip: %s", argv)
    result = _ticking(ctx, label, subproc.run, argv, timeout=timeout)
    ctx.log.debug("pip exit %s\n%s\n%s", result.returncode, result.stdout[-4000:], result.stderr[-4000:])
    if not result.ok:
        sentence, fix = classify_pip_error(result.stderr + result.stdout, result.status)
        raise NotReady(f"{label} failed: {sentence}", fix, details={"argv": result.argv, "detail": result.detail})
    return result


def classify_pip_error(text: str, status: str = "error") -> tuple[str, str]:
    """One sentence and a fix for a failed pip run, from its output (pure; tested on recorded output)."""
    low = text.lower()
    if status == "timeout":
        return ("pip did not finish in time.", "Check the network connection and run the same command again; "
                "finished steps are kept.")
    if status == "missing":
        return ("the Python interpreter could not be started.", "Check that the Python path exists and runs.")
    if "no space left on device" in low or "errno 28" in low:
        return ("the disk is full.", "Free some space (see 'h3kit doctor') and run the command again.")
    if "proxyerror" in low or "407 proxy" in low or "tunnel connection failed" in low:
        return ("a proxy blocked the download.",
                "Set HTTPS_PROXY to a proxy that allows download.pytorch.org and pypi.org (with credentials if it "
                "needs them), or point H3KIT_PIP_INDEX_URL at a reachable mirror.")
    if ("failed to establish a new connection" in low or "temporary failure in name resolution" in low
            or "name or service not known" in low or "network is unreachable" in low):
        return ("there is no network connection to the package index.",
                "Connect to the internet, or set H3KIT_PIP_FIND_LINKS to a folder of wheels and H3KIT_PIP_NO_INDEX=1.")
    m = re.search(r"could not find a version that satisfies the requirement ([^\s(]+)", low)
    if m:
        return (f"no wheel of {m.group(1)} fits this Python and platform on the index.",
                "Check the index URL and the Python version (see 'h3kit doctor'); offline, put the wheel in "
                "H3KIT_PIP_FIND_LINKS.")
    if "no matching distribution" in low:
        return ("a package was not found on the index.", "Check the index URL or H3KIT_PIP_FIND_LINKS.")
    last = next((ln.strip() for ln in reversed(text.strip().splitlines()) if ln.strip()), "no output")
    return (f"pip reported: {last[:200]}", "Run the command again with -v and read the log for pip's full output.")


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
    """What torch build `python` has, as torchsel.check reads it; {'error': ...} when it cannot tell."""
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
            have = torchsel.describe_installed({"torch_version": version, "torch_build": "rocm"})
        elif raw.get("torch_cuda"):
            have = torchsel.describe_installed({"torch_version": version, "torch_build": "cuda",
                                                "torch_cuda": raw["torch_cuda"]})
        else:
            have = torchsel.build_from_metadata(version, (raw.get("requires") or {}).get("torch", []),
                                                raw.get("system") or "linux")
        info.update(torch_version=version, torch_build=have["backend"], torch_cuda=have["cuda"])
    return info


# -- doctor --fix / --undo -----------------------------------------------------------

def _index_for_version(version: str) -> str | None:
    """Where a recorded torch version came from: its local tag names the PyTorch index; none means PyPI."""
    m = re.search(r"\+(cu\d+|rocm[\d.]+|xpu|cpu)$", version or "")
    return f"{torchsel.builds_table()['index_base'].rstrip('/')}/{m.group(1)}" if m else None


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
        raise NotReady(f"{python} runs as the base Python {info['prefix']}, not the virtual environment {venv} "
                       "it links to; pip would change the wrong Python.",
                       f"Name the venv's own interpreter with --comfyui-python {venv_python(venv)}")


def record_before(python: str, info: dict) -> dict:
    return {"python": python, "recorded": manifest_mod.now_iso(),
            "packages": {name: info["packages"].get(name) for name in torchsel.PACKAGES},
            "index_urls": {name: _index_for_version(v) for name, v in info["packages"].items()
                           if name in torchsel.PACKAGES}}


def install_choice(ctx, python: str, choice: dict, opts: PipOptions, *, force: bool, timeout: float) -> None:
    """pip-install the chosen build. force: replace what is there even at the same version number."""
    reqs = torchsel.requirements(choice, local=True)
    index = opts.index_args(choice.get("index_url"))
    if force:
        # --no-deps first so an identical version with another local tag (+cpu -> +cu130) is replaced
        # without re-downloading every dependency; the second run adds dependencies the new build needs.
        _pip(ctx, python, ["install", "--force-reinstall", "--no-deps", *reqs, *index],
             f"Installing {' '.join(reqs)} ({choice['build']})", timeout)
    label = f"Installing the dependencies of {choice['build']} torch" if force else f"Installing {' '.join(reqs)}"
    _pip(ctx, python, ["install", *reqs, *index], label, timeout)
    # A range (torchaudio>=2.11) cannot name a build label; when a folder of wheels offered another build's,
    # put the matching one in its place.
    tag = choice.get("local_tag")
    wrong = torchsel.companion_mismatches(probe_torch(python)) if tag else []
    if wrong:
        fixed = [f"{item.split()[0]}=={item.split()[1].split('+')[0]}+{tag}" for item in wrong]
        _pip(ctx, python, ["install", "--force-reinstall", "--no-deps", *fixed, *index],
             f"Replacing {', '.join(wrong)} with the {tag} build", timeout)


def fix_torch(ctx, python: str | os.PathLike, fingerprint: dict, manifest, opts: PipOptions | None = None) -> dict:
    """Reinstall the right torch build into `python`, recording what was there in manifest.extra['torch_before']."""
    python = os.fspath(python)
    opts = opts or PipOptions.from_env()
    choice = torchsel.choose(fingerprint)
    if choice["status"] == "refuse":
        raise NotReady(choice["rationale"][-1], choice["fix"])
    before = probe_torch(python)
    if "error" in before:
        raise NotReady(f"h3kit could not run ComfyUI's Python {python} ({before['error']}).",
                       "Check the ComfyUI path with 'h3kit doctor --comfyui PATH'.")
    check_target_env(python, before)
    mismatches = [m for m in torchsel.check(fingerprint, before) if m["status"] == "fail"]
    result = {"python": python, "choice": choice, "before": before.get("packages"), "changed": False}
    if not mismatches:
        return result
    if ctx.dry_run:
        result["would_run"] = torchsel.fix_command(python, choice)
        return result
    # The first record wins: a second --fix must not forget what the user originally had.
    manifest.extra.setdefault("torch_before", record_before(python, before))
    manifest.save()
    install_choice(ctx, python, choice, opts, force=True, timeout=setup_table()["timeouts_s"]["pip"])
    after = probe_torch(python)
    left = [m for m in torchsel.check(fingerprint, after) if m["status"] == "fail"]
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
    if ctx.dry_run:
        return {"python": python, "would_restore": restore, "would_remove": absent}
    # Group by index: one pip run per index the old packages came from.
    by_index: dict[str | None, list[str]] = {}
    for name, version in restore.items():
        by_index.setdefault(before["index_urls"].get(name), []).append(f"{name}=={version}")
    for index, reqs in by_index.items():
        _pip(ctx, python, ["install", "--force-reinstall", "--no-deps", *reqs, *opts.index_args(index)],
             f"Restoring {' '.join(reqs)}", timeout)
    present = probe_torch(python).get("packages", {})
    to_remove = [n for n in absent if n in present]
    if to_remove:
        _pip(ctx, python, ["uninstall", "-y", *to_remove], f"Removing {' '.join(to_remove)}", timeout)
    manifest.extra.pop("torch_before", None)
    manifest.save()
    return {"python": python, "restored": restore, "removed": to_remove}


# -- a new ComfyUI ---------------------------------------------------------------------

def _state_path(ctx, target: Path) -> Path:
    return ctx.locations.state_dir / "comfy_setup" / f"{manifest_mod.slug_for(target)}.json"


def _load_state(path: Path, target: Path, source: str) -> dict:
    if path.is_file():
        try:
            state = json.loads(path.read_text(encoding="utf-8"))
            if state.get("schema") == STATE_SCHEMA and state.get("target") == str(target):
                return state
        except (OSError, ValueError):
            pass
    return {"schema": STATE_SCHEMA, "target": str(target), "source": source, "done": {}}


def _save_state(path: Path, state: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(state, indent=2), encoding="utf-8")
    os.replace(tmp, path)


def venv_python(venv: Path) -> Path:
    return venv / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def source_kind(source: str) -> str:
    """'git-url' | 'git-local' | 'folder' | 'archive' (pure apart from looking at the path)."""
    if re.match(r"^(https?|ssh|git)://|^[\w.-]+@[\w.-]+:", source):
        return "git-url"
    p = Path(source).expanduser()
    if p.is_file() and re.search(r"\.(zip|tar|tar\.gz|tgz|tar\.xz|tar\.bz2)$", p.name, re.I):
        return "archive"
    if p.is_dir():
        if (p / ".git").exists() or ((p / "HEAD").is_file() and (p / "objects").is_dir()):
            return "git-local"
        return "folder"
    raise BadInput(f"The ComfyUI source {source} is neither a URL nor an existing folder, git repository or archive.",
                   "Pass a git URL, a ComfyUI folder, or a .zip/.tar.gz of one with --comfyui-source.")


def classify_git_error(text: str, status: str = "error") -> tuple[str, str]:
    """One sentence and a fix for a failed git clone (pure; tested on recorded git messages)."""
    low = text.lower()
    if status == "missing":
        return ("git is not installed.", "Install git (https://git-scm.com/downloads, or your package manager), "
                "or pass a downloaded ComfyUI .zip with --comfyui-source.")
    if status == "timeout":
        return ("the clone did not finish in time.", "Run the same command again; h3kit starts the clone anew.")
    if "received http code 407" in low or "proxy authentication required" in low or "proxy connect aborted" in low:
        return ("a proxy blocked the connection to the repository.",
                "Set HTTPS_PROXY (with credentials if the proxy needs them) or 'git config --global http.proxy URL', "
                "or pass a downloaded ComfyUI .zip with --comfyui-source.")
    if ("could not resolve host" in low or "failed to connect" in low or "network is unreachable" in low
            or "connection timed out" in low or "could not resolve proxy" in low):
        return ("there is no network connection to the repository.",
                "Connect to the internet, or pass a local ComfyUI folder or .zip with --comfyui-source.")
    if "no space left on device" in low:
        return ("the disk is full.", "Free some space and run the command again.")
    if "not found" in low or "does not appear to be a git repository" in low:
        return ("the repository does not exist at that address.", "Check the URL given with --comfyui-source.")
    last = next((ln.strip() for ln in reversed(text.strip().splitlines()) if ln.strip()), "no output")
    return (f"git reported: {last[:200]}", "Run again with -v and read the log for git's full output.")


def _check_disk(target: Path, need: int) -> None:
    probe = target
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    free = shutil.disk_usage(probe).free
    if free < need:
        raise NotReady(f"{probe} has {free / 1e9:.1f} GB free; a new ComfyUI with this torch build needs about "
                       f"{need / 1e9:.0f} GB.", "Free some space, or choose a folder on another disk.")


def _fetch_source(ctx, source: str, target: Path, timeout: float) -> dict:
    """Put ComfyUI's source into `target` (which must not exist); via a .partial folder so it is all-or-nothing."""
    kind = source_kind(source)
    partial = target.with_name(target.name + ".h3kit-partial")
    if partial.exists():
        shutil.rmtree(partial)  # ours: a previous run stopped while fetching
    if kind in ("git-url", "git-local"):
        git = subproc.which("git")
        if git is None:
            sentence, fix = classify_git_error("", "missing")
            raise NotReady(f"Cannot get ComfyUI from {source}: {sentence}", fix)
        result = _ticking(ctx, f"Cloning ComfyUI from {source}", subproc.run,
                          [git, "clone", "--depth", "1", "--progress", source, str(partial)], timeout=timeout)
        if not result.ok:
            shutil.rmtree(partial, ignore_errors=True)
            sentence, fix = classify_git_error(result.stderr + result.stdout, result.status)
            raise NotReady(f"Cannot clone ComfyUI from {source}: {sentence}", fix, details={"detail": result.detail})
        commit = subproc.run([git, "-C", str(partial), "rev-parse", "HEAD"], timeout=30).stdout.strip() or None
    elif kind == "archive":
        _extract(Path(source), partial)
        commit = None
    else:
        shutil.copytree(Path(source).expanduser(), partial, symlinks=True,
                        ignore=shutil.ignore_patterns("venv", ".venv", "__pycache__"))
        commit = None
    os.replace(partial, target)
    if not (target / "main.py").is_file():
        raise BadInput(f"{source} does not look like ComfyUI (no main.py at its top).",
                       "Pass the ComfyUI repository, folder or archive itself with --comfyui-source.")
    return {"kind": kind, "commit": commit}


def _extract(archive: Path, dest: Path) -> None:
    tmp = Path(tempfile.mkdtemp(prefix=".h3kit-unpack-", dir=dest.parent))
    try:
        if archive.suffix.lower() == ".zip":
            with zipfile.ZipFile(archive) as z:
                z.extractall(tmp)
        else:
            with tarfile.open(archive) as t:
                t.extractall(tmp, filter="data") if hasattr(tarfile, "data_filter") else t.extractall(tmp)
        entries = [e for e in tmp.iterdir() if not e.name.startswith(".")]
        top = entries[0] if len(entries) == 1 and entries[0].is_dir() else tmp  # GitHub zips have one top folder
        os.replace(top, dest)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _python_ok(version: str, spec: str) -> bool:
    from packaging.specifiers import SpecifierSet

    return version in SpecifierSet(spec)


def find_base_python(spec: str | None = None, preference=None) -> tuple[str, str]:
    """A Python for ComfyUI's venv, in this order: $H3KIT_COMFY_PYTHON; this Python; python3.X on PATH
    (X from the preference list); the Windows launcher 'py -3.X'. Returns (path, version)."""
    table = setup_table()
    spec = spec or table["python"]
    candidates: list[list[str]] = []
    if os.environ.get("H3KIT_COMFY_PYTHON"):
        candidates.append([os.environ["H3KIT_COMFY_PYTHON"]])
    candidates.append([sys.executable])
    for ver in preference or table["python_preference"]:
        exe = subproc.which(f"python{ver}")
        if exe:
            candidates.append([exe])
    py = subproc.which("py")
    if py:
        candidates += [[py, f"-{ver}"] for ver in (preference or table["python_preference"])]
    tried = []
    for argv in candidates:
        r = subproc.run([*argv, "-c", "import sys, platform; print(sys.executable); print(platform.python_version())"],
                        timeout=30)
        lines = r.stdout.split() if r.ok else []
        if len(lines) >= 2:
            tried.append(f"{lines[0]} ({lines[1]})")
            if _python_ok(lines[1], spec):
                return lines[0], lines[1]
    raise NotReady(f"No Python {spec} was found for ComfyUI (tried: {', '.join(tried) or 'none'}).",
                   "Install Python 3.12 or 3.13 from python.org (or your package manager) and run again, "
                   "or set H3KIT_COMFY_PYTHON to its path.")


def _write_constraints(path: Path, info: dict) -> list[str]:
    """Pin every torch package now installed, so ComfyUI's requirements cannot replace them."""
    pins = [f"{name}=={version}" for name, version in sorted(info.get("packages", {}).items())]
    path.write_text("# Written by h3kit: keeps the torch build chosen for this hardware.\n" + "\n".join(pins) + "\n",
                    encoding="utf-8")
    return pins


def new_comfyui(ctx, target_dir, source: str | None, fingerprint: dict, *, opts: PipOptions | None = None) -> Path:
    """Set up a new ComfyUI in target_dir for this hardware; returns its path. Resumable (see module doc)."""
    table = setup_table()
    timeouts = table["timeouts_s"]
    opts = opts or PipOptions.from_env()
    target = Path(target_dir).expanduser().absolute()
    source = source or table["source_url"]
    choice = torchsel.choose(fingerprint)
    if choice["status"] == "refuse":
        raise NotReady(choice["rationale"][-1], choice["fix"])
    state_file = _state_path(ctx, target)
    state = _load_state(state_file, target, source)
    done = state["done"]
    if target.exists() and "source" not in done and any(target.iterdir()):
        raise BadInput(f"{target} already exists and is not empty; h3kit sets up a new ComfyUI only in a new "
                       "or empty folder.", "Choose another folder, or use an existing ComfyUI with --comfyui PATH.")
    if target.exists() and "source" not in done:
        target.rmdir()  # empty; the clone creates it again
    man = manifest_mod.load_or_new(ctx.locations.state_dir, target)
    if ctx.dry_run:
        return target
    steps_total = len(STEPS)

    def step(n: int, name: str, text: str) -> bool:
        if name in done:
            ctx.progress(f"[{n}/{steps_total}] {text}: already done, skipped.")
            return False
        ctx.progress(f"[{n}/{steps_total}] {text}...")
        return True

    def finish(name: str, **details) -> None:
        done[name] = {"at": manifest_mod.now_iso(), **details}
        _save_state(state_file, state)

    if step(1, "source", f"Getting ComfyUI from {source}"):
        _check_disk(target, int(table["min_free_bytes"].get(choice["backend"], table["min_free_bytes"]["cpu"])))
        fetched = _fetch_source(ctx, source, target, timeouts["clone"])
        man.record_dir(target, role=ROLE)
        man.extra["comfyui_setup"] = {"created_by": "h3kit", "dir": str(target), "source": source, **fetched,
                                      "shipped": _user_area_files(target)}
        man.save()
        finish("source", **fetched)
    venv = target / "venv"
    if step(2, "venv", f"Creating ComfyUI's Python environment in {venv}"):
        base, version = find_base_python()
        if venv.exists():
            shutil.rmtree(venv)  # half-made by an interrupted run (the step is not marked done)
        r = _ticking(ctx, "Creating the venv", subproc.run, [base, "-m", "venv", str(venv)], timeout=timeouts["venv"])
        if not r.ok:
            raise NotReady(f"Python {base} could not create a venv ({r.detail}).",
                           "On Debian/Ubuntu install the venv module ('sudo apt install python3-venv'), then run again.")
        man.record_dir(venv, role=ROLE)
        man.extra["comfyui_setup"].update(venv=str(venv), base_python=base, python_version=version)
        man.save()
        finish("venv", base_python=base, python_version=version)
    python = str(venv_python(venv))
    if step(3, "torch", f"Installing PyTorch {choice['build']} ({', '.join(torchsel.requirements(choice))})"):
        for line in choice["rationale"]:
            ctx.progress(f"    {line}")
        install_choice(ctx, python, choice, opts, force=False, timeout=timeouts["pip"])
        finish("torch", build=choice["build"], requirements=torchsel.requirements(choice, local=True))
    constraints = target / "h3kit-torch-constraints.txt"
    if step(4, "requirements", "Installing ComfyUI's requirements (torch pinned)"):
        pins = _write_constraints(constraints, probe_torch(python))
        man.record_file(constraints, role=ROLE)
        man.save()
        reqs = target / "requirements.txt"
        if reqs.is_file():
            _pip(ctx, python, ["install", "-r", str(reqs), "-c", str(constraints), *opts.index_args(None)],
                 "Installing ComfyUI's requirements", timeouts["pip"])
        finish("requirements", pins=pins)
    if step(5, "verify", "Checking the new environment"):
        info = probe_torch(python, import_torch=True, timeout=timeouts["verify"])
        problems = [m for m in torchsel.check(fingerprint, info) if m["status"] == "fail"]
        if info.get("import_error") or problems:
            raise VerificationFailed(
                f"The new ComfyUI's torch does not work: {info.get('import_error') or problems[0]['message']}",
                "Run 'h3kit doctor --comfyui " + str(target) + " --fix', or remove the folder and run again.")
        man.extra["comfyui_setup"].update(torch=info.get("packages"), python=python)
        man.save()
        finish("verify", torch=info.get("packages"))
    return target


# -- uninstall --purge of a ComfyUI h3kit created ------------------------------------------

def created_comfyui(manifest) -> Path | None:
    """The ComfyUI folder this manifest says h3kit created (None when h3kit only installed into one)."""
    setup = manifest.extra.get("comfyui_setup") or {}
    if setup.get("created_by") != "h3kit":
        return None
    entries = [e for e in manifest.by_role(ROLE) if e.kind == "dir" and e.path == setup.get("dir")]
    return Path(entries[0].path) if entries else None


def _size(path: Path) -> int:
    total = 0
    for root, _dirs, files in os.walk(path):
        for f in files:
            try:
                total += os.lstat(os.path.join(root, f)).st_size
            except OSError:
                pass
    return total


def _user_area_files(target: Path) -> list[str]:
    """Files under the user-data folders (models/, output/, ...), relative, '/'-separated."""
    found = []
    for name in setup_table()["user_data"]:
        area = target / name
        if area.is_dir():
            found += [f.relative_to(target).as_posix() for f in area.rglob("*") if f.is_file()]
    return sorted(found)


def purge_plan(manifest) -> dict | None:
    """What `uninstall --purge` would remove of a ComfyUI h3kit created, and which user folders it keeps.

    A user-data folder is kept when it holds a file that neither came with
    ComfyUI's source nor is one h3kit wrote there itself (models h3kit
    downloaded count as the user's: they are large and slow to fetch again).
    """
    target = created_comfyui(manifest)
    if target is None or not target.is_dir():
        return None
    shipped = set(manifest.extra["comfyui_setup"].get("shipped") or [])
    ours = {Path(e.path).absolute() for e in manifest.entries if e.role != "model"}
    keep = []
    for name in setup_table()["user_data"]:
        area = target / name
        if not area.is_dir():
            continue
        users = [f for f in area.rglob("*") if f.is_file() and f.relative_to(target).as_posix() not in shipped
                 and f.absolute() not in ours]
        if users:
            keep.append({"path": str(area), "files": len(users), "bytes": sum(f.stat().st_size for f in users)})
    return {"comfyui": str(target), "bytes": _size(target), "user_data": keep}


def purge_comfyui(ctx, manifest, *, remove_user_data: bool = False) -> dict:
    """Remove the ComfyUI h3kit created; folders with the user's files move aside unless remove_user_data."""
    plan = purge_plan(manifest)
    if plan is None:
        return {"removed": None, "kept": []}
    target = Path(plan["comfyui"])
    kept = []
    if ctx.dry_run:
        return {"would_remove": str(target), "would_keep": [] if remove_user_data else plan["user_data"]}
    if plan["user_data"] and not remove_user_data:
        keep_root = target.with_name(target.name + "-kept-by-h3kit")
        keep_root.mkdir(exist_ok=True)
        for item in plan["user_data"]:
            src = Path(item["path"])
            dest = keep_root / src.name
            os.replace(src, dest)
            kept.append(str(dest))
    shutil.rmtree(target)
    for e in [e for e in manifest.entries if e.path == str(target) or e.path.startswith(str(target) + os.sep)]:
        manifest.forget(e.path)
    manifest.extra.pop("comfyui_setup", None)
    state = ctx.locations.state_dir / "comfy_setup" / f"{manifest_mod.slug_for(target)}.json"
    if state.exists():
        state.unlink()
    return {"removed": str(target), "kept": kept}


# -- hooks for `h3kit uninstall` --------------------------------------------------------------

def restore_on_uninstall(ctx, record) -> list[str]:
    """Uninstall puts back the torch an earlier 'doctor --fix' replaced; a failure is a note, not a stop."""
    if not record.extra.get("torch_before") or created_comfyui(record) is not None:
        return []
    try:
        result = undo_torch(ctx, record)
    except H3kitError as exc:
        return [f"the torch that 'doctor --fix' replaced was not restored: {exc.message} {exc.fix or ''}".strip()]
    restored = result.get("restored", result.get("would_restore", {}))
    verb = "would restore" if ctx.dry_run else "restored"
    return [f"{verb} {', '.join(f'{n} {v}' for n, v in restored.items())} (replaced by 'doctor --fix')"]


def purge_on_uninstall(ctx, record) -> dict | None:
    """`uninstall --purge`: show what of a ComfyUI h3kit created would go, ask, remove.

    The user's models and outputs are removed only on an explicit interactive
    yes to a second question; --yes alone moves them beside the folder.
    """
    plan = purge_plan(record)
    if plan is None:
        return None
    lines = [f"h3kit created the ComfyUI in {plan['comfyui']} ({plan['bytes'] / 1e9:.2f} GB); --purge removes it."]
    lines += [f"  kept unless you say otherwise: {u['path']} ({u['files']} files, {u['bytes'] / 1e9:.2f} GB)"
              for u in plan["user_data"]]
    ctx.progress("\n".join(lines))
    if not ctx.dry_run and not ctx.confirm(f"Remove the ComfyUI in {plan['comfyui']}?", default=False):
        return {"comfyui": plan["comfyui"], "removed": None, "cancelled": True}
    remove_user_data = bool(plan["user_data"]) and not ctx.dry_run and ctx.interactive and ctx.confirm(
        "Also delete your models and outputs listed above?", default=False)
    result = purge_comfyui(ctx, record, remove_user_data=remove_user_data)
    if not ctx.dry_run:
        if record.entries:
            record.save()
        elif record.path is not None and Path(record.path).exists():
            os.unlink(record.path)
    return {"comfyui": plan["comfyui"], "plan": plan, **result}


def offer_new_comfyui(ctx, fingerprint: dict | None, source: str | None = None) -> Path | None:
    """No ComfyUI was found: in a terminal, offer to set one up (default ~/ComfyUI). None when declined or not asked."""
    if not ctx.interactive or fingerprint is None or ctx.dry_run:
        return None
    default = Path.home() / "ComfyUI"
    if not ctx.confirm(f"No ComfyUI was found. Set up a new one for this machine in {default}?", default=False):
        return None
    return new_comfyui(ctx, default, source, fingerprint)
