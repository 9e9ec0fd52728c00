"""The apps that install ComfyUI and start it themselves: where each keeps its installs, their Python, the
arguments it starts them with, and where a person adds launch flags.

Most people who want H3 already run a ComfyUI that one of these apps made, and h3kit's launcher is never
what starts it there. Each finder is a pure function of (home, system, environ) and the files it reads,
never raises, and returns `AppInstall`s; h3kit.comfyui.locate walks them in its search order. What each
app keeps where (sources: Comfy-Org/docs installation/desktop/{windows,macos}.mdx; Comfy-Org/ComfyUI-
Desktop-2.0-Beta src/main/lib/desktopDetect.ts; LykosAI/StabilityMatrix StabilityMatrix.Core/Models/
Packages/ComfyUI.cs and issue #1733; pinokiocomputer's comfy.git launcher):

- ComfyUI Desktop 2.0: the installs its `installations.json` lists (app data: %APPDATA%/Comfy Desktop,
  ~/Library/Application Support/Comfy Desktop, ~/.local/share/comfyui-desktop-2; records {id, name,
  installPath, launchArgs}), each started as `python -s ComfyUI/main.py <launchArgs>` from
  `<installPath>/ComfyUI/.venv` with `--extra-model-paths-config <app data>/instance-model-paths/<id>.yaml`
  (how it shares `ComfyUI-Shared`); then any other `ComfyUI-Installs/<name>/ComfyUI` (Windows:
  %LOCALAPPDATA%/Comfy-Desktop/ComfyUI-Installs, older %USERPROFILE%/ComfyUI-Installs; macOS and Linux
  ~/ComfyUI-Installs).
- the legacy Desktop: `basePath` in Electron's userData `config.json` (%APPDATA%/ComfyUI,
  ~/Library/Application Support/ComfyUI, ~/.config/ComfyUI), its Python in `<basePath>/.venv`, its code
  inside the app, started with `--base-directory <basePath> --extra-model-paths-config
  <userData>/extra_models_config.yaml` plus the user's `Comfy.Server.LaunchArgs` (<basePath>/user/default/
  comfy.settings.json, flag -> value). Desktop 2.0 writes `.comfyui-desktop-2` into a base folder it
  adopted: such a folder is an abandoned copy and is skipped.
- Stability Matrix: its data folder (a portable one: `Data` beside the program, marked `.sm-portable`;
  else %APPDATA%/StabilityMatrix, ~/Library/Application Support/StabilityMatrix, ~/.config/StabilityMatrix
  and ~/StabilityMatrix on Linux, or the `LibraryPath` its `library.json` names); `settings.json` lists `InstalledPackages` with their
  `LibraryPath` (`Packages/ComfyUI`), `PackageName` and `LaunchArgs`; Python in `<package>/venv`; models
  in `<Data>/Models`, reached by links or by a `stability_matrix:` section of extra_model_paths.yaml.
- Pinokio: `<home>/api/comfy.git/app` (home: PINOKIO_HOME, `home` in ~/.pinokio/config.json, else
  ~/pinokio), Python in `app/env`; its start script runs a bare `python main.py` with no setting for flags.
"""

from __future__ import annotations

import logging
import os
import shlex
from dataclasses import dataclass
from pathlib import Path

from h3kit.core import bounded_read
from h3kit.core.venv import venv_python
from h3kit.core import logs

log = logging.getLogger("h3kit.comfyui.apps")

DESKTOP2 = "ComfyUI Desktop"
DESKTOP_LEGACY = "ComfyUI Desktop (legacy)"
STABILITY_MATRIX = "Stability Matrix"
PINOKIO = "Pinokio"
ADOPTED_MARKER = ".comfyui-desktop-2"

# Where a person adds launch flags in each app, for the install's last lines and doctor's fix.
HOW_TO_ADD = {
    DESKTOP2: "in ComfyUI Desktop: Settings > Server-Config > additional launch arguments (then restart the app)",
    DESKTOP_LEGACY: "in ComfyUI Desktop: Settings > Server-Config > additional launch arguments (then restart the app)",
    STABILITY_MATRIX: "in Stability Matrix: Packages > ComfyUI > the gear menu > Launch Options > Extra launch "
                      "arguments (then relaunch ComfyUI)",
    PINOKIO: "in Pinokio: stop ComfyUI, open the app's folder (pinokio/api/comfy.git), add them to the "
             "'python main.py' line of its start script, and start it again",
}


@dataclass(frozen=True)
class AppInstall:
    """One ComfyUI an app made: the folder with custom_nodes/, its Python, how the app starts it."""

    app: str
    path: Path
    python: Path | None
    where_found: str  # the file or folder that named it
    launch_args: tuple[str, ...] = ()
    code_dir: Path | None = None  # where main.py is, when not in `path`
    name: str = ""  # the app's own name for it


def _read_json(path: Path) -> object:
    """An app's settings file, read bounded (h3kit.core.bounded_read); one that cannot be read is None, and the
    log says "skipped <file>: <why>" unless the file is simply absent."""
    try:
        return bounded_read.read_json(path)
    except bounded_read.UnreadableFile as exc:
        if not exc.absent:
            logs.skipped(exc.skipped)
        return None


def _first_python(*folders: Path) -> Path | None:
    for folder in folders:
        for name in (".venv", "venv", "env"):
            py = venv_python(folder / name)
            if py is not None:
                return py
        for exe in ("python_embeded/python.exe", "python/python.exe", "python/bin/python3"):
            if (folder / exe).exists():
                return folder / exe
    return None


def _is_dir(path: Path) -> bool:
    try:
        return path.is_dir()
    except OSError:
        return False


# -- ComfyUI Desktop 2.0 ---------------------------------------------------------------------------------

def desktop2_roots(home: Path, system: str, environ: dict) -> list[Path]:
    """The `ComfyUI-Installs` folders Desktop 2.0 uses, in the order looked at."""
    if system == "windows":
        local = Path(environ.get("LOCALAPPDATA") or home / "AppData" / "Local")
        return [local / "Comfy-Desktop" / "ComfyUI-Installs", home / "ComfyUI-Installs"]
    if system == "darwin":
        return [home / "ComfyUI-Installs", home / "Library" / "Application Support" / "Comfy-Desktop" / "ComfyUI-Installs"]
    data = Path(environ.get("XDG_DATA_HOME") or home / ".local" / "share")
    return [data / "Comfy-Desktop" / "ComfyUI-Installs", home / "ComfyUI-Installs"]


def desktop2_data_dirs(home: Path, system: str, environ: dict) -> list[Path]:
    """Desktop 2.0's app-data folders (installations.json, instance-model-paths/), newest name first."""
    names = ("Comfy Desktop", "ComfyUI Desktop 2.0", "ComfyUI Launcher")
    if system == "windows":
        base = Path(environ.get("APPDATA") or home / "AppData" / "Roaming")
    elif system == "darwin":
        base = home / "Library" / "Application Support"
    else:
        base = Path(environ.get("XDG_DATA_HOME") or home / ".local" / "share")
        return [base / "comfyui-desktop-2", base / "comfyui-launcher"]
    return [base / n for n in names]


def parse_installations(doc: object, data_dir: Path) -> list[tuple[str, Path, tuple[str, ...], str]]:
    """(name, install folder, launch arguments, id) from Desktop 2.0's installations.json (an array of
    {id, name, installPath, launchArgs}); its per-install models YAML is passed as the app passes it."""
    out = []
    for item in doc if isinstance(doc, list) else []:
        if not isinstance(item, dict) or not isinstance(item.get("installPath"), str):
            continue
        try:
            args = tuple(shlex.split(item.get("launchArgs") or "")) if isinstance(item.get("launchArgs"), str) else ()
        except ValueError:
            args = ()
        ident = str(item.get("id") or "")
        yaml_file = data_dir / "instance-model-paths" / f"{ident}.yaml"
        if ident and yaml_file.is_file():
            args += ("--extra-model-paths-config", str(yaml_file))
        out.append((str(item.get("name") or ident), Path(item["installPath"]), args, ident))
    return out


def desktop2(home: Path, system: str, environ: dict) -> list[AppInstall]:
    found = []
    for data_dir in desktop2_data_dirs(home, system, environ):
        for name, folder, args, _ident in parse_installations(_read_json(data_dir / "installations.json"), data_dir):
            comfy = folder / "ComfyUI" if _is_dir(folder / "ComfyUI") else folder
            if _is_dir(comfy / "custom_nodes"):
                found.append(AppInstall(DESKTOP2, comfy, _first_python(comfy, folder),
                                        str(data_dir / "installations.json"), args, name=name))
    listed = {a.path for a in found}
    for root in desktop2_roots(home, system, environ):
        if not _is_dir(root):
            continue
        for install in sorted(p for p in root.iterdir() if _is_dir(p / "ComfyUI")):
            if install / "ComfyUI" not in listed:
                found.append(_desktop2_unlisted(install))
    return found


def _desktop2_unlisted(install: Path) -> AppInstall:
    """`<root>/ComfyUI-Installs/<name>/ComfyUI`, started with the shared folder's models config beside the root
    (`<root>/ComfyUI-Shared/extra_models_config.yaml`) when there is one."""
    root, comfy = install.parent, install / "ComfyUI"
    shared_config = root.parent / "ComfyUI-Shared" / "extra_models_config.yaml"
    args = ("--extra-model-paths-config", str(shared_config)) if shared_config.is_file() else ()
    return AppInstall(DESKTOP2, comfy, _first_python(comfy, install), str(root), args, name=install.name)


# -- the legacy Desktop ---------------------------------------------------------------------------------

def desktop_user_data(home: Path, system: str, environ: dict) -> Path:
    """Electron's userData folder of the legacy Desktop (holds config.json and extra_models_config.yaml)."""
    if system == "windows":
        return Path(environ.get("APPDATA") or home / "AppData" / "Roaming") / "ComfyUI"
    if system == "darwin":
        return home / "Library" / "Application Support" / "ComfyUI"
    return Path(environ.get("XDG_CONFIG_HOME") or home / ".config") / "ComfyUI"


def desktop_code_dirs(home: Path, system: str, environ: dict) -> list[Path]:
    """Where the legacy Desktop keeps ComfyUI's code (inside the app)."""
    if system == "windows":
        local = Path(environ.get("LOCALAPPDATA") or home / "AppData" / "Local")
        return [local / "Programs" / "@comfyorgcomfyui-electron" / "resources" / "ComfyUI",
                local / "Programs" / "ComfyUI" / "resources" / "ComfyUI"]
    if system == "darwin":
        return [Path("/Applications/ComfyUI.app/Contents/Resources/ComfyUI"),
                home / "Applications" / "ComfyUI.app" / "Contents" / "Resources" / "ComfyUI"]
    return [Path("/opt/ComfyUI/resources/ComfyUI")]


def desktop_legacy(home: Path, system: str, environ: dict) -> list[AppInstall]:
    user_data = desktop_user_data(home, system, environ)
    data = _read_json(user_data / "config.json")
    base = data.get("basePath") if isinstance(data, dict) else None
    if not isinstance(base, str) or not base:
        return []
    base_path = Path(base)
    if (base_path / ADOPTED_MARKER).exists() or not _is_dir(base_path / "custom_nodes"):
        return []  # Desktop 2.0 adopted it: its installs are found there
    extra = user_data / "extra_models_config.yaml"
    args = ("--base-directory", str(base_path)) + (("--extra-model-paths-config", str(extra)) if extra.is_file() else ())
    settings = _read_json(base_path / "user" / "default" / "comfy.settings.json")
    launch = settings.get("Comfy.Server.LaunchArgs") if isinstance(settings, dict) else None
    for flag, value in (launch.items() if isinstance(launch, dict) else ()):
        args += (f"--{flag}",) + ((str(value),) if value not in ("", None) else ())
    code = next((c for c in desktop_code_dirs(home, system, environ) if (c / "main.py").is_file()), None)
    return [AppInstall(DESKTOP_LEGACY, base_path, _first_python(base_path), str(user_data / "config.json"), args,
                       code_dir=code)]


# -- Stability Matrix -------------------------------------------------------------------------------------

def stability_matrix_data_dirs(home: Path, system: str, environ: dict) -> list[Path]:
    """Stability Matrix's data folders: a portable one beside the usual places it is unpacked, then the
    per-user one, then whatever `library.json` there names."""
    portable = [p / "StabilityMatrix" / "Data" for p in (home, home / "Desktop", home / "Downloads", home / "Documents")]
    portable += [home / "Data"] if system != "windows" else [Path("C:/StabilityMatrix/Data"), Path("D:/StabilityMatrix/Data")]
    if system == "windows":
        user = Path(environ.get("APPDATA") or home / "AppData" / "Roaming") / "StabilityMatrix"
    elif system == "darwin":
        user = home / "Library" / "Application Support" / "StabilityMatrix"
    else:
        user = Path(environ.get("XDG_CONFIG_HOME") or home / ".config") / "StabilityMatrix"
    dirs = [p for p in portable if (p / ".sm-portable").exists()] + [user]
    if system == "linux":
        dirs.append(home / "StabilityMatrix")  # the default data folder on Linux
    library = _read_json(user / "library.json")
    if isinstance(library, dict) and isinstance(library.get("LibraryPath"), str):
        dirs.append(Path(library["LibraryPath"]))
    return list(dict.fromkeys(dirs))


def parse_sm_launch_args(items: object) -> tuple[str, ...]:
    """Stability Matrix's `LaunchArgs` ([{Name, Type, OptionValue}]) as a command line."""
    out: list[str] = []
    for item in items if isinstance(items, list) else []:
        if not isinstance(item, dict) or not isinstance(item.get("Name"), str):
            continue
        value = item.get("OptionValue")
        if item["Name"] == "" and isinstance(value, str):  # the "extra launch arguments" box, as typed
            try:
                out += shlex.split(value)
            except ValueError:
                pass
            continue
        if value is None or value is False or value == "":
            continue
        out.append(item["Name"])
        if value is not True:
            out.append(str(value))
    return tuple(out)


def stability_matrix(home: Path, system: str, environ: dict) -> list[AppInstall]:
    return [app for data_dir in stability_matrix_data_dirs(home, system, environ) for app in _sm_packages(data_dir)]


def _sm_packages(data_dir: Path) -> list[AppInstall]:
    """The ComfyUI packages `<data_dir>/settings.json` lists, with their launch arguments."""
    found = []
    settings = _read_json(data_dir / "settings.json")
    packages = settings.get("InstalledPackages") if isinstance(settings, dict) else None
    for pkg in packages if isinstance(packages, list) else []:
        if not isinstance(pkg, dict) or pkg.get("PackageName") != "ComfyUI":
            continue
        rel = str(pkg.get("LibraryPath") or f"Packages/{pkg.get('DisplayName') or 'ComfyUI'}").replace("\\", "/")
        comfy = data_dir / rel
        if _is_dir(comfy):
            found.append(AppInstall(STABILITY_MATRIX, comfy, venv_python(comfy / "venv"),
                                    str(data_dir / "settings.json"), parse_sm_launch_args(pkg.get("LaunchArgs")),
                                    name=str(pkg.get("DisplayName") or "ComfyUI")))
    return found


# -- Pinokio ----------------------------------------------------------------------------------------------

def pinokio_homes(home: Path, environ: dict) -> list[Path]:
    homes = [home / "pinokio"]
    config = _read_json(home / ".pinokio" / "config.json")
    if isinstance(config, dict) and isinstance(config.get("home"), str):
        homes.insert(0, Path(config["home"]))
    if environ.get("PINOKIO_HOME"):
        homes.insert(0, Path(environ["PINOKIO_HOME"]))
    return list(dict.fromkeys(homes))


def pinokio(home: Path, system: str, environ: dict) -> list[AppInstall]:
    return [app for root in pinokio_homes(home, environ) for app in _pinokio_in(root)]


def _pinokio_in(root: Path) -> list[AppInstall]:
    app = root / "api" / "comfy.git" / "app"
    if _is_dir(app / "custom_nodes"):
        return [AppInstall(PINOKIO, app, venv_python(app / "env"), str(root / "api" / "comfy.git"))]
    return []


FINDERS = (desktop2, desktop_legacy, stability_matrix, pinokio)


def app_at(path: Path) -> AppInstall | None:
    """The app that made the ComfyUI at `path`, told by where the folder sits, for a path given by --comfyui
    that none of the finders lists (an install on another drive, another user's app data): Desktop 2.0's
    `ComfyUI-Installs/<name>/ComfyUI`, Stability Matrix's `<Data>/Packages/<name>` listed in `<Data>/settings.json`,
    Pinokio's `<home>/api/comfy.git/app`. Same AppInstall, so the same launch arguments, as the search gives."""
    path = Path(path)
    if not _is_dir(path / "custom_nodes") or len(path.parts) < 4:
        return None
    if path.name == "ComfyUI" and path.parent.parent.name == "ComfyUI-Installs":
        return _desktop2_unlisted(path.parent)
    if path.parent.name == "Packages":
        return next((a for a in _sm_packages(path.parent.parent) if same_folder(a.path, path)), None)
    if path.name == "app" and path.parent.name == "comfy.git" and path.parent.parent.name == "api":
        return next(iter(_pinokio_in(path.parents[2])), None)
    return None


def same_folder(a: Path, b: Path) -> bool:
    """Whether two spellings name one folder (a link, `..`, a trailing slash); by their text when one is gone."""
    try:
        return os.path.samefile(a, b)
    except (OSError, ValueError):
        return os.path.abspath(a) == os.path.abspath(b)


def all_installs(home: Path, system: str, environ: dict) -> list[AppInstall]:
    """Every ComfyUI these apps made, in FINDERS' order (Desktop 2.0, legacy Desktop, Stability Matrix, Pinokio)."""
    out: list[AppInstall] = []
    for finder in FINDERS:
        try:
            out += finder(home, system, environ)
        except OSError:
            continue
    return out
