"""Can this ComfyUI run H3? Its tree (version, H3's own files) and its Python (what H3's nodes import).

The catalog's `comfyui_h3:` section lists what to look for, so a new ComfyUI
release needs a data change, not a code change. `H3_SCRIPT` runs inside
ComfyUI's interpreter (stdlib only, never raises, one `H3KIT-H3` JSON line):
it imports each module H3 needs and asks PyAV for the MP4 encoders. The rest
are pure functions of the tree and of that JSON, so they are tested without
ComfyUI.

The version alone is not enough (a fork may carry H3 early or drop it) and a
`minimax` string is misleading (0.8.0 has MiniMax's hosted-API nodes, which
are not H3), so the tree must have H3's own files too.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from packaging.version import InvalidVersion, Version

from h3kit.comfyui.inspect import comfyui_version, marked_json
from h3kit.data.catalog_sections import ComfyH3

H3_TIMEOUT = 120.0  # importing torchaudio and av after torch, on a cold disk

# Runs inside ComfyUI's interpreter: argv[1] is the JSON list of module names to import.
H3_SCRIPT = r"""
import importlib, json, sys
out = {"modules": {}, "encoders": {}}
for name in json.loads(sys.argv[1]):
    try:
        mod = importlib.import_module(name)
        out["modules"][name] = {"ok": True, "version": str(getattr(mod, "__version__", "") or "") or None}
    except Exception as exc:
        out["modules"][name] = {"ok": False, "error": "%s: %s" % (type(exc).__name__, exc)}
try:
    import av
    for codec in json.loads(sys.argv[2]):
        try:
            av.codec.Codec(codec, "w")
            out["encoders"][codec] = True
        except Exception:
            out["encoders"][codec] = False
except Exception as exc:
    out["av_error"] = "%s: %s" % (type(exc).__name__, exc)
print("H3KIT-H3 " + json.dumps(out))
"""


@dataclass
class H3Support:
    """What h3kit found; `ready` when nothing is missing."""

    version: str | None
    min_version: str
    missing_files: list[str] = field(default_factory=list)
    missing_modules: list[dict] = field(default_factory=list)  # {"import", "package", "why", "error"}
    missing_encoders: list[str] = field(default_factory=list)
    python_checked: bool = False

    @property
    def tree_ready(self) -> bool:
        return not self.missing_files and version_at_least(self.version, self.min_version)

    @property
    def ready(self) -> bool:
        return self.tree_ready and not self.missing_modules and not self.missing_encoders

    def to_json(self) -> dict:
        return {"version": self.version, "min_version": self.min_version, "ready": self.ready,
                "tree_ready": self.tree_ready, "missing_files": self.missing_files,
                "missing_modules": self.missing_modules, "missing_encoders": self.missing_encoders,
                "python_checked": self.python_checked}


def version_at_least(version: str | None, minimum: str) -> bool:
    try:
        return version is not None and Version(version) >= Version(minimum)
    except InvalidVersion:
        return False


def requirements(catalog) -> tuple[str, ComfyH3]:
    """(minimum ComfyUI version, what the tree and its Python need: the catalog's comfyui_h3)."""
    return catalog.model.comfyui_min_version, catalog.comfyui_h3


def check_tree(comfyui_dir: Path, catalog) -> H3Support:
    minimum, need = requirements(catalog)
    missing = [rel for rel in need.files if not (Path(comfyui_dir) / rel).is_file()]
    return H3Support(comfyui_version(Path(comfyui_dir)), minimum, missing)


def script_args(catalog) -> list[str]:
    _, need = requirements(catalog)
    modules = [m.import_name for m in need.modules]
    return ["-c", H3_SCRIPT, json.dumps(modules), json.dumps(list(need.encoders))]


def add_python_report(support: H3Support, text: str, catalog) -> H3Support:
    """Fold the H3_SCRIPT output into `support` (an unreadable report marks every module unchecked-missing)."""
    _, need = requirements(catalog)
    report = marked_json(text, "H3KIT-H3")
    if report is None:
        support.missing_modules = [dict(m.to_json(), error="ComfyUI's Python gave no readable answer") for m in need.modules]
        return support
    support.python_checked = True
    for m in need.modules:
        got = (report.get("modules") or {}).get(m.import_name) or {"ok": False, "error": "not checked"}
        if not got.get("ok"):
            support.missing_modules.append(dict(m.to_json(), error=got.get("error")))
        elif m.min_version and got.get("version") and not version_at_least(got["version"], m.min_version):
            support.missing_modules.append(dict(m.to_json(), error=f"version {got['version']} is older than {m.min_version}"))
    encoders = report.get("encoders") or {}
    if report.get("av_error") is None:
        support.missing_encoders = [c for c in need.encoders if not encoders.get(c)]
    return support


def check(install, catalog, run_python) -> H3Support:
    """Tree first; the Python only when the tree has H3 (a ComfyUI without H3 needs updating first anyway)."""
    support = check_tree(install.path, catalog)
    if support.tree_ready and install.python is not None:
        result = run_python(install, script_args(catalog), H3_TIMEOUT)
        add_python_report(support, result.stdout, catalog)
    return support


# -- what a person reads ----------------------------------------------------------------------


def problem(support: H3Support) -> str | None:
    """One sentence naming what stops H3, or None when it can run."""
    if not support.tree_ready:
        have = f"ComfyUI {support.version}" if support.version else "This ComfyUI (version unknown)"
        files = f" (missing {', '.join(support.missing_files)})" if support.missing_files else ""
        return f"{have} cannot run MiniMax H3: H3 support arrived in ComfyUI {support.min_version}{files}."
    parts = [f"{m['package']} ({m.get('error') or 'missing'})" for m in support.missing_modules]
    if support.missing_encoders:
        parts.append("PyAV without the " + " and ".join(support.missing_encoders) + " encoder")
    if parts:
        return f"ComfyUI {support.version} has H3, but its Python lacks what H3 needs: {'; '.join(parts)}."
    return None


def fix(support: H3Support, install, catalog) -> str:
    """The exact action for this layout."""
    _, need = requirements(catalog)
    layout = getattr(install, "layout", "plain")
    python = f'"{install.python}"' if install.python else "ComfyUI's Python"
    if not support.tree_ready:
        if layout in ("portable", "desktop"):
            return need.update.get(layout, "update ComfyUI, then run h3kit doctor again")
        if is_git_checkout(install.path):
            return (f"run 'h3kit doctor --fix' to move this git checkout to ComfyUI {support.min_version} or newer "
                    "(your branches are kept; 'h3kit doctor --undo' goes back)")
        return (f"replace it with ComfyUI {support.min_version} or newer, or let h3kit set one up: "
                "'h3kit install --new-comfyui DIR'")
    packages = [m["package"] for m in support.missing_modules]
    if support.missing_encoders and not any(p.startswith("av") for p in packages):
        packages.append("av>=16")
    return f"{python} -m pip install " + " ".join(f'"{p}"' for p in packages)


def is_git_checkout(path) -> bool:
    """A git work tree h3kit may move between release tags (a .git folder, or a .git file of a worktree)."""
    return (Path(path) / ".git").exists()


def finding(support: H3Support, install, catalog) -> dict:
    """The doctor finding `comfyui.h3`."""
    why = problem(support)
    if why is None:
        checked = "" if support.python_checked else " (its Python was not checked)"
        return {"check": "comfyui.h3", "status": "ok",
                "message": f"ComfyUI {support.version} has MiniMax H3 support and what its nodes need{checked}.",
                "fix": None}
    return {"check": "comfyui.h3", "status": "fail", "message": why, "fix": fix(support, install, catalog)}
