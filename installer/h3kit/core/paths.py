"""Where h3kit keeps its files, and where its bundled assets are.

Search order for h3kit's own folders (written down here, followed in code):

1. `H3KIT_HOME` when set: everything under it -- `config.yaml`, `state/`,
   `cache/`, `reports/` (tests and scripts always set it).
2. Otherwise platformdirs' user config / state / cache folders for "h3kit";
   reports live under the state folder.

Assets (`profiles`, `payload`, `nodes`) are looked up:

1. inside the installed package (`h3kit/_assets/<name>`, put there by the wheel);
2. in the source checkout this module was imported from (`<checkout>/<name>`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import platformdirs

APP = "h3kit"
ASSET_NAMES = ("profiles", "payload", "nodes")


@dataclass(frozen=True)
class Locations:
    config_dir: Path
    state_dir: Path
    cache_dir: Path
    reports_dir: Path
    source: str  # "H3KIT_HOME" or "platformdirs": says where the answer came from

    @property
    def config_file(self) -> Path:
        return self.config_dir / "config.yaml"

    @property
    def log_dir(self) -> Path:
        return self.state_dir / "logs"

    @property
    def log_file(self) -> Path:
        return self.log_dir / "h3kit.log"

    @property
    def venv_dir(self) -> Path:
        """The private venv the bootstrap creates (never inside ComfyUI)."""
        return self.state_dir / "venv"

    def to_json(self) -> dict:
        return {
            "config_file": str(self.config_file),
            "state_dir": str(self.state_dir),
            "cache_dir": str(self.cache_dir),
            "reports_dir": str(self.reports_dir),
            "log_file": str(self.log_file),
            "source": self.source,
        }


def locations(environ: dict | None = None) -> Locations:
    env = os.environ if environ is None else environ
    home = env.get("H3KIT_HOME")
    if home:
        root = Path(home).expanduser().absolute()
        state = root / "state"
        return Locations(root, state, root / "cache", root / "reports", "H3KIT_HOME")
    state = Path(platformdirs.user_state_dir(APP, appauthor=False))
    return Locations(
        Path(platformdirs.user_config_dir(APP, appauthor=False)),
        state,
        Path(platformdirs.user_cache_dir(APP, appauthor=False)),
        state / "reports",
        "platformdirs",
    )


def new_comfyui_dir(loc: Locations) -> Path:
    """Where h3kit sets up a ComfyUI when the user has none: next to h3kit's own data, never a system folder.

    H3KIT_HOME/ComfyUI when set; else the per-user data folder (Linux
    ~/.local/share/h3kit/ComfyUI, macOS ~/Library/Application Support/h3kit/ComfyUI,
    Windows %LOCALAPPDATA%\\h3kit\\ComfyUI).
    """
    if loc.source == "H3KIT_HOME":
        return loc.config_dir / "ComfyUI"
    return Path(platformdirs.user_data_dir(APP, appauthor=False)) / "ComfyUI"


def asset_dir(name: str) -> Path:
    """The folder of a bundled asset: `profiles`, `payload` or `nodes`."""
    if name not in ASSET_NAMES:
        raise ValueError(f"unknown asset {name!r}; expected one of {ASSET_NAMES}")
    here = Path(__file__).resolve().parent.parent  # the h3kit package folder
    for candidate in (here / "_assets" / name, here.parent.parent / name):
        if candidate.is_dir():
            return candidate
    from h3kit.core.errors import NotReady

    raise NotReady(
        f"h3kit's bundled '{name}' folder is missing from {here}.",
        "Reinstall h3kit from the project's wheel or checkout (./install.sh).",
    )
