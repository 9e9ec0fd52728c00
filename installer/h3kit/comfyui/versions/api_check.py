"""Every `comfy.*` name and call the node packs use, checked against a git ref of the user's own ComfyUI.

Before ComfyUI moves to another release (update, rollback), h3kit asks whether the packs in custom_nodes
still find there what they use. comfy-import-guard (PyPI, MIT, stdlib only) answers with `ast` alone: it
extracts every `comfy.*` import, attribute chain, `getattr(comfy.x, "y")` and call from a pack's files,
function bodies included (the pack imports ComfyUI lazily inside its functions, and those references are
checked like the rest), resolves each name against ComfyUI's source at the ref, and binds each call
against the parameter list it finds there. `check_target` runs it and returns an `ApiReport`; only a
break in our own pack is a refusal (`ApiReport.refusal`), the other packs are reported.

Assumptions made on purpose:

- ComfyUI's files are read from git at the target (`rev-parse`, `ls-tree`, `show`), never from the
  working tree and never by checking anything out: the checkout, its index and HEAD stay as they are.
  Every git command goes through `_GitReader`, which runs those read commands only and refuses the rest.
- The packs are read from disk, as ComfyUI loads them: custom_nodes is git-ignored in ComfyUI.
- No network and no history walk: comfy-import-guard's `Repo` is made offline and pointed at the user's
  folder (never a clone in its cache), and its history reads (the pickaxe behind a badcall's "which
  commit changed it", unshallowing) are refused, so a badcall comes without that commit.
- One pack that cannot be read, or that the checker trips over, is "skipped" with the reason; only a
  target that is not in the checkout's history (or no checkout at all) raises.

What comfy-import-guard does with guarded code: a reference inside a `try:` whose handler catches
ImportError, ModuleNotFoundError, AttributeError, Exception or BaseException (or a bare `except:`; for a
call, TypeError too) is soft: when it does not resolve it is a warning, never a break. A second call to
the same function in the same file that does bind makes a failing one a "version shim": a warning too.
Lookups by string are not seen at all: `importlib.import_module("comfy.x")`, `getattr(x, name)` with a
name that is not a literal, methods called on instances. The pack's h3kit_streaming/compiler.py finds
`comfy.model_prefetch` through `importlib`, so that module is neither checked nor warned about.

Left out on purpose: single-file packs (custom_nodes/*.py; comfy-import-guard checks folders), folders
named with a leading dot (ComfyUI-Manager's .disabled), and the commit that broke a call (history).
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from h3kit.core import subproc
from h3kit.core.errors import BadInput, NotReady

DEFAULT_TIMEOUT = 120.0
# The only git commands run in the user's checkout: each reads objects and writes nothing.
GIT_READS = ("rev-parse", "ls-tree", "show", "cat-file")
# A ref, tag or sha as git spells them; never `-`-led, so git cannot read it as an option.
_REF = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/~^@{}:+-]{0,199}$")
_VERDICTS = {"SAFE": "safe", "WILL BREAK": "will_break", "WARN": "warn", "SKIPPED": "skipped"}


@dataclass(frozen=True)
class Break:
    """One reference of a pack that fails at the target."""

    symbol: str  # the dotted comfy name, e.g. comfy.utils.calculate_parameters
    file: str  # relative to the pack, with /
    line: int
    kind: str  # missing (a name) | missing_module | badcall (the call no longer binds)
    detail: str  # "not in comfy/utils.py at v0.33.0", "unexpected keyword argument 'x'; ..."


@dataclass(frozen=True)
class PackVerdict:
    name: str
    path: str
    verdict: str  # safe | will_break | warn | skipped
    breaks: tuple[Break, ...] = ()
    warnings: tuple[str, ...] = ()  # guarded misses, unresolvable references, files not parsed, why skipped

    def to_json(self) -> dict:
        return {**asdict(self), "breaks": [asdict(b) for b in self.breaks], "warnings": list(self.warnings)}


@dataclass(frozen=True)
class ApiReport:
    target: str  # as the caller named it
    target_commit: str
    ours: PackVerdict | None  # None: our pack is not in custom_nodes
    others: tuple[PackVerdict, ...] = ()

    @property
    def refusal(self) -> str | None:
        """One sentence naming our pack's first break, or None when it has none (safe, warn or skipped)."""
        if self.ours is None or not self.ours.breaks:
            return None
        b = self.ours.breaks[0]
        where = f"{b.file} line {b.line}"
        if b.kind == "badcall":
            return (f"ComfyUI at {self.target} changed {b.symbol}, so the h3kit pack's call in {where} no "
                    f"longer fits it ({b.detail}).")
        return f"ComfyUI at {self.target} has no {b.symbol}, which the h3kit pack uses in {where}."

    def to_json(self) -> dict:
        return {"target": self.target, "target_commit": self.target_commit, "refusal": self.refusal,
                "ours": self.ours.to_json() if self.ours else None, "others": [p.to_json() for p in self.others]}


class _GitStopped(Exception):
    """A git read that did not happen (time ran out, git vanished, a command that is not a read)."""


class _GitReader:
    """What comfy-import-guard's `Repo._git` becomes: read commands only, in `comfy_dir`, before a deadline.

    It runs git by absolute path, never prompting, with optional locks off, through `subproc.run` (a
    timeout kills git's whole group). A command that did not run raises: answering "not found" instead
    would make a name look missing."""

    def __init__(self, comfy_dir: Path, git: str, deadline: float):
        self.comfy_dir = comfy_dir
        self.git = git
        self.deadline = deadline
        self.env = {**os.environ, "GIT_TERMINAL_PROMPT": "0", "GIT_OPTIONAL_LOCKS": "0"}

    def __call__(self, args, check=True, cwd=None, timeout=None):  # noqa: ARG002 - Repo._git's signature
        args = [str(a) for a in args]
        if not args or args[0] not in GIT_READS:
            raise _GitStopped(f"h3kit reads the checkout only; git {args[0] if args else ''} was not run")
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise _GitStopped("the time for the check ran out")
        result = subproc.run([self.git, *args], timeout=left, env=self.env, cwd=self.comfy_dir)
        if result.status in ("timeout", "missing"):
            raise _GitStopped(f"git {args[0]} did not answer: {result.detail}")
        if check and not result.ok:
            raise _GitStopped(f"git {args[0]} failed: {result.detail}")
        return subprocess.CompletedProcess(result.argv, result.returncode, result.stdout, result.stderr)

    def no_history(self, *args, **kwargs):
        """Stands in for `Repo._ensure_deep` (unshallow, fetch): the check never walks or fetches history."""
        raise _GitStopped("the check reads the target only, not ComfyUI's history")


def _repo(comfy_dir: Path, reader: _GitReader):
    """comfy-import-guard's Repo over the user's checkout: offline, its git calls through `reader`."""
    from comfy_import_guard.repo import Repo

    repo = Repo(cache_dir=comfy_dir, offline=True, quiet=True)
    repo.path = comfy_dir  # the user's own checkout, not <cache>/ComfyUI
    repo._git = reader
    repo._ensure_deep = reader.no_history
    repo.update = lambda: None
    return repo


def _resolve_target(comfy_dir: Path, target: str, reader: _GitReader) -> str:
    """The commit `target` names in the checkout's history; BadInput when there is none."""
    fix = (f"Name a release tag such as v0.33.0 (`git -C {comfy_dir} tag` lists them), a branch or a commit; "
           f"if the release is newer than the checkout, run `git -C {comfy_dir} fetch --tags` first.")
    if not _REF.match(target):
        raise BadInput(f"{target!r} is not a git tag, branch or commit name.", fix)
    probe = reader(["rev-parse", "--show-toplevel"], check=False)
    if "dubious ownership" in probe.stderr:  # git's safe.directory check: the folder is another user's
        raise BadInput(f"git will not read {comfy_dir} because another user owns it.",
                       f"Run `git config --global --add safe.directory {comfy_dir}` if you trust that folder, "
                       "then run the command again.")
    if probe.returncode != 0 or not _same_folder(probe.stdout.strip(), comfy_dir):  # not a parent's repository
        raise BadInput(f"{comfy_dir} is not a git checkout of ComfyUI, so h3kit cannot read another release "
                       "of it without changing the folder.",
                       "Point h3kit at a ComfyUI that is a git clone (the folder holding .git); the portable "
                       "and desktop builds are not checked this way.",
                       details={"git": probe.stderr.strip()[:300]})
    probe = reader(["rev-parse", "--verify", "--quiet", f"{target}^{{commit}}"], check=False)
    if probe.returncode != 0 or not probe.stdout.strip():
        raise BadInput(f"The ComfyUI checkout at {comfy_dir} has no {target!r}: no tag, branch or commit by "
                       "that name in its git history.", fix)
    return probe.stdout.strip()


def _same_folder(a: str, b: Path) -> bool:
    try:
        return bool(a) and Path(a).resolve() == b.resolve()
    except OSError:
        return False


def check_target(comfy_dir: Path, target: str, our_pack: str = "ComfyUI-h3kit",
                 timeout: float = DEFAULT_TIMEOUT) -> ApiReport:
    """Every pack folder of comfy_dir/custom_nodes checked against ComfyUI's files at `target`, ours first.

    Reads git only (the module docstring): nothing is checked out, fetched or written. `timeout` bounds the
    whole check; packs not reached in time are "skipped". BadInput when `comfy_dir` is not a git checkout
    or `target` is not in its history; NotReady when git is not installed or does not answer."""
    comfy_dir = Path(comfy_dir).expanduser().resolve()
    if not comfy_dir.is_dir():
        raise BadInput(f"{comfy_dir} is not a folder.", "Point h3kit at the ComfyUI folder (it holds main.py).")
    git = subproc.which("git")
    if git is None:
        raise NotReady("git is not installed, and h3kit reads other ComfyUI releases through it.",
                       "Install git (https://git-scm.com/downloads) and run the command again.")
    reader = _GitReader(comfy_dir, git, time.monotonic() + timeout)
    repo = _repo(comfy_dir, reader)
    try:
        commit = _resolve_target(comfy_dir, target, reader)
    except _GitStopped as exc:
        raise NotReady(f"git could not read the ComfyUI checkout at {comfy_dir}: {exc}.",
                       "Run the command again; if git keeps hanging, check that folder with `git status`.") from exc
    verdicts = _check_packs(repo, commit, target, comfy_dir / "custom_nodes", our_pack)
    ours = next((v for v in verdicts if v.name == our_pack), None)
    return ApiReport(target, commit, ours, tuple(v for v in verdicts if v.name != our_pack))


def _pack_folders(custom_nodes: Path, our_pack: str) -> list[tuple[str, str]]:
    """(name, path) of every pack folder, ours first; none when custom_nodes is missing or unreadable."""
    from comfy_import_guard.report import list_packs

    try:
        packs = list_packs(str(custom_nodes)) if custom_nodes.is_dir() else []
    except OSError:
        return []
    return sorted(packs, key=lambda p: (p[0] != our_pack, p[0].lower()))


def _check_packs(repo, commit: str, target: str, custom_nodes: Path, our_pack: str) -> list[PackVerdict]:
    """One verdict per pack; a pack that cannot be checked is "skipped" with the reason, never an error."""
    from comfy_import_guard.resolve import Resolver
    from comfy_import_guard.signature import SignatureResolver

    resolver = Resolver(repo, commit)  # the commit, not the name: a branch moving mid-check changes nothing
    sig = SignatureResolver(resolver)
    out = []
    for name, path in _pack_folders(custom_nodes, our_pack):
        try:
            os.listdir(path)
            out.append(_verdict(resolver, sig, name, path, target))
        except _GitStopped as exc:
            out.append(PackVerdict(name, path, "skipped", warnings=(f"not checked: {exc}",)))
        except Exception as exc:  # noqa: BLE001 - one pack the checker trips over must not stop the others
            out.append(PackVerdict(name, path, "skipped",
                                   warnings=(f"could not be checked: {type(exc).__name__}: {exc}",)))
    return out


def _verdict(resolver, sig, name: str, path: str, target: str) -> PackVerdict:
    """comfy-import-guard's check of one pack (no ledger, so no history), as a PackVerdict."""
    from comfy_import_guard.report import check_pack

    done = check_pack(resolver, name, path, ledger=None, sig=sig, blame_cache={})
    breaks = tuple(_break(resolver, row, target) for row in done["breaking"])
    warnings = [_warning(resolver, row, target) for key in ("soft", "unresolvable", "signature_drift")
                for row in done[key]]
    warnings += [f"{u['file']}: not parsed ({u['error']})" for u in done["unparseable"]]
    if done["verdict"] == "SKIPPED" and done["note"]:
        warnings.insert(0, done["note"])
    return PackVerdict(name, path, _VERDICTS.get(done["verdict"], "warn"), breaks, tuple(warnings))


def _break(resolver, row: dict, target: str) -> Break:
    if row["status"] == "SIGNATURE":
        detail = f"{row['detail']}; at {target} it takes {row.get('upstream_params', '(?)')}"
        return Break(row["dotted"], row["file"], row["line"], "badcall", detail)
    kind = "missing_module" if row["status"] == "MODULE_MISSING" else "missing"
    return Break(row["dotted"], row["file"], row["line"], kind, _where_missing(resolver, row, target))


def _where_missing(resolver, row: dict, target: str) -> str:
    """'not in comfy/utils.py at v0.33.0' for a name; 'no module comfy.x at v0.33.0' for a module."""
    if row["status"] == "MODULE_MISSING":
        return f"no module {row['module']} at {target}"
    _, source = resolver.module_source(row["module"])
    where = source or row["module"].replace(".", "/") + "/"
    extra = f" ({row['detail']})" if row.get("detail") else ""
    return f"not in {where} at {target}{extra}"


def _warning(resolver, row: dict, target: str) -> str:
    """One line for a reference that is not a break: guarded, a version shim, unresolvable, or a patch."""
    at = f"{row['file']} line {row['line']}: {row['dotted']}"
    if row["status"] in ("MISSING", "MODULE_MISSING"):
        return f"{at} is guarded by try/except and {_where_missing(resolver, row, target)}"
    if row["status"] == "SIGNATURE_SHIM":
        return f"{at}: one call does not bind at {target} ({row['detail']})"
    if row["status"] == "SIGNATURE":
        return f"{at}: the call does not bind at {target} ({row['detail']}), but it is guarded by try/except"
    if row["status"] == "SIGNATURE_DRIFT":
        return f"{at} is replaced by a function that {row['detail']}"
    return f"{at} cannot be checked ({row['detail'] or row['status'].lower()})"
