"""The launcher script beside ComfyUI's own, with only flags that ComfyUI accepts.

Flags differ between ComfyUI versions and forks, so the profile's
`comfyui_args` are filtered against the flags the installed `main.py --help`
lists; the rest are dropped and reported. The help text is cached per
ComfyUI version (and a hash of its argument parser file, since forks keep the
version number) in the h3kit cache. `write_launcher` records the script
before it writes it (h3kit.comfyui.journal) and writes it atomically, with
its mode, so a crash never leaves a launcher that the record does not name.
"""

from __future__ import annotations

import hashlib
import re
import shlex
import sys
from pathlib import Path

from h3kit.comfyui import manifest as mf
from h3kit.comfyui.backups import backup_root
from h3kit.comfyui.journal import Journal
from h3kit.comfyui.inspect import comfyui_version
from h3kit.comfyui.locate import ComfyInstall, run_python
from h3kit.core.errors import BadInput
from h3kit.data import comfy_argv
from h3kit.data.plan_doc import PlanSettings
from h3kit.data.yamlio import ENV_NAME

HELP_TIMEOUT = 120.0
# A long option named in argparse's --help; one cut at a hyphen where the help text wraps ("--base-" at a line's
# end) is no flag, and would make a shortened flag look ambiguous to filter_args.
_FLAG = re.compile(r"(?<![\w-])(--[A-Za-z0-9](?:[A-Za-z0-9_-]*[A-Za-z0-9_])?)(?![\w-])")


def parse_help_flags(text: str) -> set[str]:
    """Every long option an argparse `--help` text names."""
    return set(_FLAG.findall(text))


def filter_args(args: list[str], accepted: set[str]) -> tuple[list[str], list[str]]:
    """Split `args` into (kept, dropped), each flag with its values, read as ComfyUI reads its command line
    (h3kit.data.comfy_argv) with `accepted` (its main.py --help) as its flags: a flag is kept when it is one of
    them or a prefix of only one; an unknown or ambiguous one is dropped with its values. Values before any
    flag are kept, as they were given."""
    found = comfy_argv.options(args, accepted)
    lead = len(args) - sum(len(o.tokens) for o in found)
    kept, dropped = list(args[:lead]), []
    for option in found:
        (kept if option.known else dropped).extend(option.tokens)
    return kept, dropped


def _cache_key(install: ComfyInstall) -> str:
    h = hashlib.sha256()
    for rel in ("main.py", "comfy/cli_args.py"):
        try:
            h.update((install.path / rel).read_bytes())
        except OSError:
            h.update(rel.encode())
    return f"{comfyui_version(install.path) or 'unknown'}-{h.hexdigest()[:12]}"


def accepted_flags(install: ComfyInstall, cache_dir: Path) -> tuple[set[str] | None, str]:
    """(flags, detail). None when main.py --help could not be read (then no flag is written)."""
    if install.main_py is None:
        return None, "this ComfyUI has no main.py here (the Desktop app starts it itself)"
    cache = Path(cache_dir) / "comfyui-help" / f"{_cache_key(install)}.txt"
    try:
        text = cache.read_text(encoding="utf-8")
        return parse_help_flags(text), f"cached {cache.name}"
    except OSError:
        pass
    result = run_python(install, ["main.py", "--help"], HELP_TIMEOUT)
    flags = parse_help_flags(result.stdout)
    if not result.ok or "--help" not in result.stdout or len(flags) < 2:
        return None, f"'main.py --help' failed: {result.detail or result.status}"
    try:
        cache.parent.mkdir(parents=True, exist_ok=True)
        cache.write_text(result.stdout, encoding="utf-8")
    except OSError:
        pass  # a read-only cache only costs a re-run next time
    return flags, "read from main.py --help"


def launcher_name(install: ComfyInstall, windows: bool) -> str:
    return "run_h3kit.bat" if windows or install.layout == "portable" else "run_h3kit.sh"


def _env_pairs(env: dict) -> list[tuple[str, str]]:
    """The variables in name order; a name that is not one would let a value run as a command in the launcher
    (config checks refuse it first, h3kit.data.yamlio.is_env_map; this is the second line)."""
    pairs = sorted((str(k), str(v)) for k, v in env.items())
    for k, v in pairs:
        if not ENV_NAME.match(k) or any(c in v for c in '\r\n\x00"'):
            raise BadInput(f"{k!r}={v!r} cannot be written into a launcher: not a variable name and a one-line value.",
                           "Correct that entry under 'env:' in config.yaml or the profile.")
    return pairs


def render_sh(install: ComfyInstall, python: Path, args: list[str], env: dict, profile: str) -> str:
    lines = [
        "#!/bin/sh",
        f"# Written by h3kit for profile '{profile}'. 'h3kit apply' rewrites it; 'h3kit uninstall' removes it.",
        "# Start ComfyUI with the profile's flags; extra arguments are passed on.",
    ]
    lines += [f"export {k}={shlex.quote(v)}" for k, v in _env_pairs(env)]
    lines.append(f"cd {shlex.quote(str(install.path))} || exit 1")
    cmd = " ".join(shlex.quote(str(x)) for x in [python, "main.py", *args])
    lines.append(f'exec {cmd} "$@"')
    return "\n".join(lines) + "\n"


def _bat_quote(text: str) -> str:
    return '"' + text.replace('"', '""') + '"'


_BAT_PLAIN = re.compile(r"^[A-Za-z0-9_=.,:/\\+-]+$")


def _bat_arg(text: str) -> str:
    """One argument for cmd.exe: plain ones as they are, the rest quoted with % doubled (& | < > ^ stay inert)."""
    return text if _BAT_PLAIN.match(text) else _bat_quote(text.replace("%", "%%"))


def render_bat(install: ComfyInstall, python: Path, args: list[str], env: dict, profile: str) -> str:
    if install.layout == "portable":
        # Relative to the .bat, like the portable build's own launchers, so the folder can move.
        py = "%~dp0python_embeded\\python.exe"
        cd = f'cd /d "%~dp0{install.path.name}"'
        py = f'"{py}"'
    else:
        py = _bat_quote(str(python))
        cd = f"cd /d {_bat_quote(str(install.path))}"
    lines = [
        "@echo off",
        f"rem Written by h3kit for profile '{profile}'. 'h3kit apply' rewrites it; 'h3kit uninstall' removes it.",
        "chcp 65001 >nul",  # paths with non-ASCII characters
        "setlocal",
    ]
    # Inside set "K=V" only % still expands (doubled, it is a plain %); a " is refused by _env_pairs.
    lines += [f'set "{k}={v.replace("%", "%%")}"' for k, v in _env_pairs(env)]
    lines.append(cd)
    lines.append(" ".join([py, "main.py", *(_bat_arg(str(a)) for a in args), "%*"]))
    lines.append("endlocal")
    return "\r\n".join(lines) + "\r\n"


def render(install: ComfyInstall, python: Path, args: list[str], env: dict, profile: str, windows: bool) -> str:
    if launcher_name(install, windows).endswith(".bat"):
        return render_bat(install, python, args, env, profile)
    return render_sh(install, python, args, env, profile)


def write_launcher(install: ComfyInstall, record: mf.Manifest, settings: PlanSettings, profile: str,
                   state_dir: Path, cache_dir: Path, windows: bool | None = None) -> dict:
    """Write (or rewrite) run_h3kit.sh/.bat; {path, args, dropped, detail, backup} (path None when skipped).

    One the user edited is moved to a backup first (`backup`, recorded as theirs); a file of that name that
    h3kit's record does not name is left alone and no launcher is written.
    """
    windows = sys.platform == "win32" if windows is None else windows
    where = install.launcher_dir
    wanted = [str(a) for a in settings.comfyui_args]
    env = {str(k): str(v) for k, v in settings.env.items()}
    if where is None or install.python is None:
        why = "the Desktop app starts ComfyUI itself" if where is None else "ComfyUI's Python is unknown"
        return {"path": None, "args": [], "dropped": wanted, "detail": f"no launcher written: {why}"}
    flags, detail = accepted_flags(install, cache_dir)
    kept, dropped = filter_args(wanted, flags or set())
    path = where / launcher_name(install, windows)
    entry = record.find(path)
    backup = None
    if path.exists() or path.is_symlink():
        if entry is None:
            return {"path": None, "args": kept, "dropped": dropped,
                    "detail": f"{path} exists and was not written by h3kit: left alone, no launcher written"}
        if not record.still_ours(entry):
            backup = str(Journal(record).back_up(path, where, backup_root(state_dir, install.path)))
    text = render(install, install.python, kept, env, profile, windows)
    Journal(record).write(path, text.encode("utf-8"), "launcher", mode=0o755 if path.suffix == ".sh" else None)
    return {"path": str(path), "args": kept, "dropped": dropped, "detail": detail, "backup": backup}
