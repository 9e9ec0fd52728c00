"""The package set of ComfyUI's Python: read it (`pip freeze --all`), compare two, and put an earlier one back.

`doctor --fix` records the set before it changes ComfyUI (h3kit.comfyui.versions.upgrade);
`doctor --undo` and `uninstall` call `restore` with that record. Restoring is
three pip runs at most, all through `h3kit.core.tools.run_pip`: the recorded
lines of packages that changed or went missing, installed `--no-deps` (so
pip brings nothing else along; a torch-family line with a build label such
as `+cu130` is installed from that build's PyTorch index), then an uninstall
of the packages that were not there before, then a fresh freeze that must
equal the record. Editable installs (`-e ...`) are listed but never touched:
their source is a folder pip did not make.
"""

from __future__ import annotations

import re

from packaging.utils import canonicalize_name

from h3kit.comfyui.setup.pip import setup_table
from h3kit.comfyui.setup.torch_repair import _index_for_version
from h3kit.core.errors import VerificationFailed
from h3kit.core.tools import PipOptions, run_pip
from h3kit.plan import torch_build

_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(==|@)\s*(.+?)\s*$")


def parse(lines) -> dict[str, str]:
    """{canonical name: freeze line} from `pip freeze` output (text or lines); comments and editables skipped."""
    if isinstance(lines, str):
        lines = lines.splitlines()
    out: dict[str, str] = {}
    for line in lines:
        m = _NAME.match(line)
        if m and not line.lstrip().startswith(("-", "#")):
            out[canonicalize_name(m.group(1))] = line.strip()
    return out


def editables(lines) -> list[str]:
    if isinstance(lines, str):
        lines = lines.splitlines()
    return [ln.strip() for ln in lines if ln.lstrip().startswith("-e")]


def diff(before: dict[str, str], now: dict[str, str]) -> dict[str, list[str]]:
    """What happened since `before`: names added, changed (another version or source) and missing; pure."""
    return {"added": sorted(n for n in now if n not in before),
            "changed": sorted(n for n in before if n in now and now[n] != before[n]),
            "missing": sorted(n for n in before if n not in now)}


def changes(before: dict[str, str], now: dict[str, str]) -> list[str]:
    """What happened since `before`, as short phrases for people: 'added x==1', 'y==1 -> y==2', 'removed z==3'."""
    d = diff(before, now)
    out = [f"added {now[n]}" for n in d["added"]]
    out += [f"{before[n]} -> {now[n]}" for n in d["changed"]]
    out += [f"removed {before[n]}" for n in d["missing"]]
    return out


def freeze(ctx, python: str, opts: PipOptions | None = None) -> list[str]:
    """`pip freeze --all` of `python`, one line per package (pip, setuptools and wheel included)."""
    result = run_pip(ctx, python, ["freeze", "--all"], "Listing the installed packages", timeout=300, opts=opts)
    return [ln.strip() for ln in result.stdout.splitlines() if ln.strip()]


def _index(name: str, line: str) -> str | None:
    """The PyTorch index a torch-family line came from (its build label names it); None: the usual index."""
    if name not in torch_build.PACKAGES or "==" not in line:
        return None
    return _index_for_version(line.split("==", 1)[1])


def plan(recorded: list[str], current: list[str]) -> dict:
    """What `restore` would run: lines to install (by index) and names to uninstall; pure."""
    before, now = parse(recorded), parse(current)
    d = diff(before, now)
    by_index: dict[str | None, list[str]] = {}
    for name in d["changed"] + d["missing"]:
        by_index.setdefault(_index(name, before[name]), []).append(before[name])
    return {"install": by_index, "remove": [now[n].split("==")[0].split(" @ ")[0] for n in d["added"]],
            "changes": changes(now, before), "editable": editables(recorded)}


def restore(ctx, python: str, recorded: list[str], opts: PipOptions | None = None) -> dict:
    """Put the package set `recorded` back into `python`; VerificationFailed when the result differs."""
    opts = opts or PipOptions.from_env()
    todo = plan(recorded, freeze(ctx, python, opts))
    result = {"python": python, "undone": todo["changes"], "installed": [], "removed": []}
    if ctx.dry_run:
        return {"python": python, "would_undo": todo["changes"],
                "would_install": [ln for lines in todo["install"].values() for ln in lines],
                "would_remove": todo["remove"]}
    timeout = setup_table()["timeouts_s"]["pip"]
    for index, lines in todo["install"].items():
        run_pip(ctx, python, ["install", "--no-deps", *lines], f"Restoring {len(lines)} earlier package versions",
                timeout=timeout, opts=opts, index_url=index)
        result["installed"] += lines
    if todo["remove"]:
        run_pip(ctx, python, ["uninstall", "-y", *todo["remove"]],
                f"Removing {', '.join(todo['remove'])} (added by the upgrade)", timeout=timeout, opts=opts)
        result["removed"] = todo["remove"]
    left = changes(parse(recorded), parse(freeze(ctx, python, opts)))
    if left:
        raise VerificationFailed(f"The earlier packages of {python} were not all restored: {'; '.join(left[:5])}.",
                                 "Run 'h3kit doctor --undo -v' again and read the log for pip's output.",
                                 details=result)
    return result
