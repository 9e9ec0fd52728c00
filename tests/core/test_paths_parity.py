"""h3kit's folders are computed by platformdirs in h3kit.core.paths; two stdlib copies must agree with it.

The bootstrap (scripts/bootstrap.py) runs before h3kit's venv exists and the
native bridge runs inside ComfyUI's Python, so neither can import platformdirs.
"""

from __future__ import annotations

import importlib.util

import pytest

from conftest import REPO
from h3kit.bundled.h3k_native import _library as bridge
from h3kit.core.paths import locations

spec = importlib.util.spec_from_file_location("h3kit_bootstrap_parity", REPO / "scripts" / "bootstrap.py")
bootstrap = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bootstrap)

ENVIRONMENTS = [
    {"H3KIT_HOME": "h"},
    {},
    {"XDG_STATE_HOME": "xdg-state", "XDG_CONFIG_HOME": "xdg-config", "XDG_CACHE_HOME": "xdg-cache"},
]


@pytest.mark.parametrize("env", ENVIRONMENTS, ids=["H3KIT_HOME", "defaults", "XDG"])
def test_stdlib_copies_agree_with_platformdirs(env, monkeypatch, tmp_path):
    for key in ("H3KIT_HOME", "XDG_STATE_HOME", "XDG_CONFIG_HOME", "XDG_CACHE_HOME"):
        monkeypatch.delenv(key, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, str(tmp_path / value))
    loc = locations()
    assert bootstrap.state_dir() == loc.state_dir
    assert bootstrap.config_file() == loc.config_file
    assert bridge.cache_dir() == loc.cache_dir
