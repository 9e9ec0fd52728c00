"""Find a ComfyUI and its Python, and run that Python (h3kit.comfyui.inspect reads what it holds).

Search order for the ComfyUI folder (`find`), followed in this order:

1. `--comfyui PATH` (the `explicit` argument);
2. the environment variable `COMFYUI_PATH`;
3. `comfyui_path` in h3kit's config;
   (1-3 are the user's word: a bad path there is an error, never skipped;
   the app that made such a folder is still learnt, `app_of`, so its launch
   arguments are the ones the search would give)
4. comfy-cli's saved workspace: `recent_workspace`, then `default_workspace`
   in its `config.ini`;
5. the current directory and its parents, recognised by ComfyUI's markers;
6. the installs of the apps that make ComfyUI (h3kit.comfyui.apps, in its
   order): every install ComfyUI Desktop 2.0 keeps in `ComfyUI-Installs`, the
   legacy Desktop's base folder (`basePath` in its `config.json`, unless Desktop
   2.0 marked it adopted), every ComfyUI package in Stability Matrix's
   `settings.json` (portable or not), Pinokio's `api/comfy.git/app`;
7. the usual folders: `~/ComfyUI`, `~/Documents/ComfyUI`, `~/comfy/ComfyUI`,
   the Windows portable `ComfyUI_windows_portable/ComfyUI` (in home, Desktop,
   Downloads, C:\\ and D:\\).

Steps 4 and 5 return the first hit. Steps 6 and 7 collect every hit: one is
taken, several are listed with where each came from and its ComfyUI version,
and the user picks (with --yes: the most recently used, and we say so). None:
NotReady naming --comfyui.

Its Python, in this order: `--comfyui-python`; the one the app that made it
uses (its venv: Stability Matrix's `venv`, Pinokio's `app/env`, the Desktop's
`.venv`); the portable build's `python_embeded`; a `.venv` or `venv` inside
the ComfyUI folder; `comfyui_python` in the config; else ask (non-interactive:
none, and the caller says how to name it). The config is h3kit.data.config's
`Config`, read by the caller; nothing here reads config.yaml.
"""

from __future__ import annotations

import configparser
import logging
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

from h3kit.comfyui import apps as apps_mod
from h3kit.comfyui.inspect import (
    INSPECT_SCRIPT,
    INSPECT_TIMEOUT,
    comfyui_version,
    parse_inspect_output,
)
from h3kit.core import bounded_read, subproc
from h3kit.core.errors import BadInput, NotReady
from h3kit.core.venv import venv_python
from h3kit.core import logs

log = logging.getLogger("h3kit.comfyui.locate")
NODE_DIR_NAME = "ComfyUI-h3kit"
MARKERS = ("main.py", "comfy", "nodes.py", "comfy_extras", "custom_nodes")

@dataclass
class ComfyInstall:
    path: Path  # the folder holding custom_nodes/
    source: str  # which search step found it
    layout: str = "plain"  # plain | portable | desktop
    python: Path | None = None
    python_source: str = ""
    notes: list[str] = field(default_factory=list)
    app: str | None = None  # the app that starts this ComfyUI itself (h3kit.comfyui.apps), None: a folder h3kit launches
    launch_args: tuple[str, ...] = ()  # the arguments that app starts it with, as far as its files say
    code_dir: Path | None = None  # where main.py is, when not in `path` (the legacy Desktop keeps it in the app)

    @property
    def custom_nodes(self) -> Path:
        return self.path / "custom_nodes"

    @property
    def node_dir(self) -> Path:
        return self.custom_nodes / NODE_DIR_NAME

    @property
    def main_py(self) -> Path | None:
        p = self.path / "main.py"
        return p if p.is_file() else None

    @property
    def launcher_dir(self) -> Path | None:
        """Where ComfyUI's own launchers live (the portable build keeps its .bat files one level up)."""
        if self.layout == "portable":
            return self.path.parent
        if self.layout == "desktop":
            return None  # the Desktop app starts ComfyUI itself
        return self.path

    def to_json(self) -> dict:
        return {"path": str(self.path), "source": self.source, "layout": self.layout,
                "python": str(self.python) if self.python else None, "python_source": self.python_source}


# -- recognising a ComfyUI folder ----------------------------------------------


def looks_like_comfyui(path: Path) -> bool:
    """A ComfyUI checkout: main.py plus comfy/ plus one more marker."""
    try:
        if not (path / "main.py").is_file() or not (path / "comfy").is_dir():
            return False
        return sum((path / m).exists() for m in MARKERS) >= 3
    except OSError:
        return False


def looks_like_desktop_base(path: Path) -> bool:
    """The Desktop app's base folder: custom_nodes/ and models/ but its code lives in the app."""
    try:
        return (path / "custom_nodes").is_dir() and (path / "models").is_dir() and not (path / "main.py").exists()
    except OSError:
        return False


def detect_layout(path: Path) -> str:
    if (path.parent / "python_embeded").is_dir():
        return "portable"
    if looks_like_desktop_base(path):
        return "desktop"
    return "plain"


def check_dir(path: Path, *, need_write: bool) -> None:
    """Raise BadInput with one sentence when `path` cannot be the ComfyUI we work on."""
    fix_where = "Pass the folder that holds ComfyUI's main.py and custom_nodes/ with --comfyui PATH."
    if not path.exists():
        raise BadInput(f"The ComfyUI folder {path} does not exist.", fix_where)
    if not path.is_dir():
        raise BadInput(f"{path} is a file, not a ComfyUI folder.", fix_where)
    if not os.access(path, os.R_OK | os.X_OK):
        raise BadInput(f"The ComfyUI folder {path} is not readable by this user.",
                       "Fix its permissions or run h3kit as the user that owns ComfyUI.")
    if not looks_like_comfyui(path) and not looks_like_desktop_base(path):
        raise BadInput(f"{path} does not look like ComfyUI (no main.py and comfy/ folder).", fix_where)
    cn = path / "custom_nodes"
    if not cn.is_dir():
        raise BadInput(f"The ComfyUI at {path} has no custom_nodes folder.",
                       f"Create it (mkdir \"{cn}\") or point --comfyui at a complete ComfyUI.")
    if need_write and not os.access(cn, os.W_OK | os.X_OK):
        raise BadInput(f"{cn} is read-only for this user, so the node pack cannot be installed there.",
                       "Fix its permissions or run h3kit as the user that owns ComfyUI.")


# -- the search order ------------------------------------------------------------


def comfy_cli_config_file(home: Path, system: str) -> Path:
    """Where comfy-cli keeps config.ini (comfy_cli/constants.py DEFAULT_CONFIG)."""
    if system == "windows":
        return home / "AppData" / "Local" / "comfy-cli" / "config.ini"
    if system == "darwin":
        return home / "Library" / "Application Support" / "comfy-cli" / "config.ini"
    return home / ".config" / "comfy-cli" / "config.ini"


def parse_comfy_cli_config(text: str) -> list[str]:
    """Workspaces saved by comfy-cli, most recent first (keys recent_workspace, default_workspace)."""
    cp = configparser.ConfigParser(interpolation=None)
    try:
        cp.read_string(text)
    except configparser.Error:
        return []
    found = []
    for key in ("recent_workspace", "default_workspace"):
        value = cp.defaults().get(key) or next((cp[s].get(key) for s in cp.sections() if cp[s].get(key)), None)
        if value and value not in found:
            found.append(value)
    return found


def comfy_cli_workspaces(home: Path, system: str) -> list[str]:
    """`parse_comfy_cli_config` of comfy-cli's config.ini, read bounded (h3kit.core.bounded_read): a file that
    cannot be read (a pipe, not UTF-8, too large) is [] and the log says "skipped <file>: <why>"."""
    path = comfy_cli_config_file(home, system)
    try:
        text = bounded_read.read_text(path, bounded_read.TEXT_CAP)
    except bounded_read.UnreadableFile as exc:
        if not exc.absent:
            logs.skipped(exc.skipped)
        return []
    return [ws for ws in parse_comfy_cli_config(text) if "\0" not in ws]  # a NUL is no path: os calls raise on it


def usual_folders(home: Path, system: str, environ: dict) -> list[Path]:
    portable_parents = [home, home / "Desktop", home / "Downloads", home / "Documents"]
    if system == "windows":
        portable_parents += [Path("C:/"), Path("D:/")]
    folders = [home / "ComfyUI", home / "Documents" / "ComfyUI", home / "comfy" / "ComfyUI"]
    folders += [p / "ComfyUI_windows_portable" / "ComfyUI" for p in portable_parents]
    return folders


def searched_places(home: Path | None = None, system: str | None = None, environ: dict | None = None) -> list[str]:
    """What `search` looked at, for a person: the order of the module docstring, in words."""
    env = os.environ if environ is None else environ
    home = Path(home) if home is not None else Path.home()
    system = system or {"win32": "windows", "darwin": "darwin"}.get(sys.platform, "linux")
    return ["--comfyui, COMFYUI_PATH and comfyui_path in config.yaml (none set)",
            f"comfy-cli's workspace ({comfy_cli_config_file(home, system)})",
            "the current folder and its parents",
            *[f"{apps_mod.DESKTOP2}: {p}" for p in apps_mod.desktop2_roots(home, system, env)],
            f"{apps_mod.DESKTOP_LEGACY}: {apps_mod.desktop_user_data(home, system, env) / 'config.json'}",
            *[f"{apps_mod.STABILITY_MATRIX}: {p}" for p in apps_mod.stability_matrix_data_dirs(home, system, env)],
            *[f"{apps_mod.PINOKIO}: {p / 'api' / 'comfy.git' / 'app'}" for p in apps_mod.pinokio_homes(home, env)],
            *[str(p) for p in usual_folders(home, system, env)]]


def last_used(path: Path) -> float:
    """When this ComfyUI was last used: the newest mtime of the folders a run touches."""
    times = []
    for name in ("user", "output", "custom_nodes", "temp", "."):
        try:
            times.append((path / name).stat().st_mtime)
        except OSError:
            pass
    return max(times, default=0.0)


@dataclass
class SearchResult:
    chosen: Path | None
    source: str
    candidates: list[Path] = field(default_factory=list)
    apps: dict = field(default_factory=dict)  # path -> apps.AppInstall, for candidates an app made
    sources: dict = field(default_factory=dict)  # path -> where it was found, in words


def search(explicit: str | None, config_path: str | None, *, environ: dict | None = None,
           cwd: Path | None = None, home: Path | None = None, system: str | None = None) -> SearchResult:
    """Walk the search order (module docstring). Pure apart from reading the file system."""
    env = os.environ if environ is None else environ
    home = Path(home) if home is not None else Path.home()
    system = system or {"win32": "windows", "darwin": "darwin"}.get(sys.platform, "linux")
    for value, source in ((explicit, "--comfyui"), (env.get("COMFYUI_PATH"), "COMFYUI_PATH"),
                          (config_path, "config comfyui_path")):
        if value:
            return SearchResult(Path(value).expanduser().absolute(), source)
    for ws in comfy_cli_workspaces(home, system):
        p = Path(ws).expanduser()
        if looks_like_comfyui(p):
            return SearchResult(p.absolute(), "comfy-cli workspace")
    here = Path(cwd) if cwd is not None else Path.cwd()
    for p in (here, *here.parents):
        if looks_like_comfyui(p):
            return SearchResult(p.absolute(), "current directory")
    found: list[Path] = []
    made_by: dict = {}
    sources: dict = {}
    for app in apps_mod.all_installs(home, system, env):
        p = app.path.absolute()
        if (looks_like_comfyui(p) or looks_like_desktop_base(p)) and p not in found:
            found.append(p)
            made_by[p], sources[p] = app, f"{app.app}{f' ({app.name})' if app.name else ''}, from {app.where_found}"
    for p in usual_folders(home, system, env):
        adopted = (p / apps_mod.ADOPTED_MARKER).exists()  # an abandoned copy Desktop 2.0 took over
        if (looks_like_comfyui(p) or looks_like_desktop_base(p)) and p.absolute() not in found and not adopted:
            found.append(p.absolute())
            sources[p.absolute()] = "usual folder"
    if len(found) == 1:
        return SearchResult(found[0], sources[found[0]], found, made_by, sources)
    found.sort(key=last_used, reverse=True)
    return SearchResult(None, "usual folders", found, made_by, sources)


def find(explicit: str | None, config, ctx, *, need_write: bool = True, python: str | None = None,
         **search_kwargs) -> ComfyInstall:
    """The ComfyUI to work on, or NotReady naming --comfyui (BadInput for a bad given path)."""
    config_path = getattr(config, "comfyui_path", None) if config is not None else None
    result = search(explicit, config_path, **search_kwargs)
    chosen = result.chosen
    if chosen is None and result.candidates:
        chosen = _choose(result.candidates, ctx, result.sources)
    if chosen is None:
        raise NotReady("No ComfyUI was found on this machine.",
                       "Name it with --comfyui PATH (or set COMFYUI_PATH), or let h3kit set one up with --new-comfyui DIR.")
    check_dir(chosen, need_write=need_write)
    install = ComfyInstall(chosen, result.sources.get(chosen, result.source), detect_layout(chosen))
    app = result.apps.get(chosen) or app_of(chosen, search_kwargs)
    take_app(install, app)
    if result.chosen is None:
        install.notes.append(f"found {len(result.candidates)} ComfyUI folders; using {chosen}")
    py, py_source = find_python(install, config, explicit_python=python, app=app)
    if py is None and ctx is not None and ctx.interactive:
        answer = ctx.ask(f"Which Python runs the ComfyUI in {chosen}? (path to python): ").strip()
        if answer:
            py, py_source = Path(answer).expanduser().absolute(), "asked"
    install.python, install.python_source = py, py_source
    return install


def app_of(path: Path, search_kwargs: dict) -> "apps_mod.AppInstall | None":
    """The app that made the ComfyUI at `path` (given by --comfyui or COMFYUI_PATH too), or None: first the
    installs the search walks (step 6), matched as one folder however `path` is spelt (a link, `..`), so a
    path given by hand gets the very launch arguments the search would; then the folder's own place
    (apps.app_at: an app's install the finders do not reach from this home)."""
    home = Path(search_kwargs.get("home") or Path.home())
    system = search_kwargs.get("system") or {"win32": "windows", "darwin": "darwin"}.get(sys.platform, "linux")
    env = os.environ if search_kwargs.get("environ") is None else search_kwargs["environ"]
    for app in apps_mod.all_installs(home, system, env):
        if apps_mod.same_folder(app.path, path):
            return app
    return apps_mod.app_at(Path(path).absolute())


def take_app(install: ComfyInstall, app: "apps_mod.AppInstall | None") -> None:
    """Record on `install` that `app` made it: the arguments it starts ComfyUI with and where its code is."""
    if app is not None:
        install.app, install.launch_args, install.code_dir = app.app, app.launch_args, app.code_dir
        install.notes.append(f"this ComfyUI was made by {app.app}, which starts it itself")


def describe(path: Path, source: str) -> str:
    """A found ComfyUI for a person: the folder, where it came from and its version."""
    version = comfyui_version(path)
    return f"{path}  ({source}; ComfyUI {version or 'version unknown'})"


def _choose(candidates: list[Path], ctx, sources: dict | None = None) -> Path:
    sources = sources or {}
    listing = "\n".join(f"  {i + 1}. {describe(p, sources.get(p, 'usual folder'))}" for i, p in enumerate(candidates))
    if ctx is None or not ctx.interactive:
        if ctx is not None and ctx.yes:
            ctx.progress(f"Several ComfyUI folders found:\n{listing}\n"
                         f"--yes: taking the most recently used, {candidates[0]} (choose with --comfyui PATH).")
            return candidates[0]
        raise BadInput(f"Several ComfyUI folders were found and none was chosen:\n{listing}",
                       "Choose one with --comfyui PATH, or pass --yes to take the most recently used.")
    ctx.progress(f"Several ComfyUI folders found:\n{listing}")
    while True:
        answer = ctx.ask(f"Install into which one? [1-{len(candidates)}, default 1]: ", "1").strip() or "1"
        if answer.isdigit() and 1 <= int(answer) <= len(candidates):
            return candidates[int(answer) - 1]


# -- its Python --------------------------------------------------------------------


def find_python(install: ComfyInstall, config=None, *, explicit_python: str | None = None,
                app: "apps_mod.AppInstall | None" = None) -> tuple[Path | None, str]:
    """ComfyUI's interpreter and where it came from (search order in the module docstring)."""
    if explicit_python:
        return Path(explicit_python).expanduser().absolute(), "--comfyui-python"
    if app is not None and app.python is not None:
        return app.python, f"{app.app}'s Python"
    embedded = install.path.parent / "python_embeded"
    for name in ("python.exe", "python"):
        if (embedded / name).exists():
            return embedded / name, "portable python_embeded"
    for name in (".venv", "venv"):
        py = venv_python(install.path / name)
        if py is not None:
            return py, f"{name} inside ComfyUI"
    named = getattr(config, "comfyui_python", None) if config is not None else None
    if named:
        return Path(named).expanduser().absolute(), "config comfyui_python"
    return None, ""


def require_python(install: ComfyInstall) -> Path:
    if install.python is None:
        raise NotReady(f"h3kit could not tell which Python runs the ComfyUI in {install.path}.",
                       "Name it with --comfyui-python PATH (or comfyui_python in the config).")
    return install.python


def comfy_env(install: ComfyInstall) -> dict:
    """Environment for running ComfyUI's Python: ours minus anything that would leak h3kit's venv into it."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    env["PYTHONIOENCODING"] = "utf-8"
    env["PYTHONDONTWRITEBYTECODE"] = "1"  # keep __pycache__ out of ComfyUI's tree
    return env


def run_python(install: ComfyInstall, argv: list[str], timeout: float) -> subproc.ToolResult:
    return subproc.run([str(require_python(install)), *argv], timeout=timeout, cwd=install.path, env=comfy_env(install))


def inspect(install: ComfyInstall, timeout: float = INSPECT_TIMEOUT) -> dict:
    """Python, ComfyUI and torch versions of `install` (h3kit.comfyui.inspect); NotReady when its Python does not start."""
    result = run_python(install, ["-c", INSPECT_SCRIPT], timeout)
    info = parse_inspect_output(result.stdout)
    if info is None:
        why = {"timeout": f"it gave no answer within {timeout:g} s", "missing": result.detail}.get(
            result.status, result.detail or "it printed nothing h3kit could read")
        raise NotReady(f"ComfyUI's Python {install.python} does not start ({why}).",
                       "Check that ComfyUI itself starts, or name the right interpreter with --comfyui-python PATH.")
    info["comfyui_version"] = comfyui_version(install.path)
    info["comfyui_path"] = str(install.path)
    return info
