"""The node pack's modules imported as the pack's submodules (they import their siblings relatively)."""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path

NODES = Path(__file__).resolve().parents[2] / "nodes"  # the pack as deployed, its packages included
PACKAGE = "h3kit_pack"


def pack_module(name: str):
    """nodes/<name>.py, imported as h3kit_pack.<name> (the pack's __init__ imports only the standard library);
    nodes/' packages (h3k_native, h3k_safetensors, ...) are its subpackages, as in a deployed pack."""
    if PACKAGE not in sys.modules:
        spec = importlib.util.spec_from_file_location(PACKAGE, NODES / "__init__.py",
                                                      submodule_search_locations=[str(NODES)])
        pack = importlib.util.module_from_spec(spec)
        sys.modules[PACKAGE] = pack
        spec.loader.exec_module(pack)
    return importlib.import_module(f"{PACKAGE}.{name}")
