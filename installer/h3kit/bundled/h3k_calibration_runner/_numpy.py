"""numpy, imported on first use: the runner also runs where there is none (h3kit's own venv)."""

from __future__ import annotations


# numpy is optional (without it the scaled DiT runs its native+python path, at a smaller shape) and is
# imported only when a measurement runs: h3kit's own process imports this module for its page-cache helpers.
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
