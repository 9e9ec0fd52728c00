"""numpy, imported on first use: the runner also runs where there is none (h3kit's own venv).

Modules read it as `_numpy.np` at call time (None until `need_numpy()` found
it), so importing the runner never imports numpy: h3kit's own process
imports the package for its page-cache helpers.
"""

from __future__ import annotations

np = None


def need_numpy() -> bool:
    """Import numpy into this module on first use; False when this Python has none."""
    global np
    if np is None:
        try:
            import numpy
        except ImportError:
            return False
        np = numpy
    return True
