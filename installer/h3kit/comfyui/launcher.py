"""The launcher script beside ComfyUI's own, with only flags that ComfyUI accepts.

Flags differ between ComfyUI versions and forks, so the profile's
`comfyui_args` are filtered against the flags the installed `main.py --help`
lists; the rest are dropped and reported. The help text is cached per
ComfyUI version (and a hash of its argument parser file, since forks keep the
version number) in the h3kit cache.
"""

from __future__ import annotations

import hashlib
import re
import shlex
from pathlib import Path

from h3kit.comfyui.inspect import comfyui_version
from h3kit.comfyui.locate import ComfyInstall, run_python

HELP_TIMEOUT = 120.0
_FLAG = re.compile(r"(?<![\w-])(--[A-Za-z0-9][A-Za-z0-9_-]*)")


def parse_help_flags(text: str) -> set[str]:
    """Every long option an argparse `--help` text names."""
    return set(_FLAG.findall(text))


def filter_args(args: list[str], accepted: set[str]) -> tuple[list[str], list[str]]:
    """Split `args` into (kept, dropped); a dropped flag takes its values with it."""
    kept: list[str] = []
    dropped: list[str] = []
    current = kept
    for token in args:
        if token.startswith("--"):
            current = kept if token.split("=", 1)[0] in accepted else dropped
        current.append(token)
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


def render_sh(install: ComfyInstall, python: Path, args: list[str], env: dict, profile: str) -> str:
    lines = [
        "#!/bin/sh",
        f"# Written by h3kit for profile '{profile}'. 'h3kit apply' rewrites it; 'h3kit uninstall' removes it.",
        "# Start ComfyUI with the profile's flags; extra arguments are passed on.",
    ]
    lines += [f"export {k}={shlex.quote(str(v))}" for k, v in sorted(env.items())]
    lines.append(f"cd {shlex.quote(str(install.path))} || exit 1")
    cmd = " ".join(shlex.quote(str(x)) for x in [python, "main.py", *args])
    lines.append(f'exec {cmd} "$@"')
    return "\n".join(lines) + "\n"


def _bat_quote(text: str) -> str:
    return '"' + text.replace('"', '""') + '"'


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
    lines += [f'set "{k}={v}"' for k, v in sorted(env.items())]
    lines.append(cd)
    lines.append(" ".join([py, "main.py", *args, "%*"]))
    lines.append("endlocal")
    return "\r\n".join(lines) + "\r\n"


def render(install: ComfyInstall, python: Path, args: list[str], env: dict, profile: str, windows: bool) -> str:
    if launcher_name(install, windows).endswith(".bat"):
        return render_bat(install, python, args, env, profile)
    return render_sh(install, python, args, env, profile)
