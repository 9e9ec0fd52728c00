"""What every guarded h3kit node declares for the queue guard (h3kit_panel/guard.py): two hidden inputs and the check.

The guard itself lives in h3kit_panel; the node classes of the other features
need only these, so they share them from here and no feature package reaches
into another. `VALIDATE_INPUTS` names `h3kit_guard` alone, never **kwargs:
ComfyUI skips its own checks (min/max, a file name in the list) for every
input the function names, or for all of them with **kwargs. Hidden inputs
also reach the node's FUNCTION when it runs, so each guarded node's function
takes both, unused.
"""

from __future__ import annotations

from typing import Any

GUARD_INPUT = "h3kit_guard"
QUEUE_ANYWAY_INPUT = "h3kit_queue_anyway"
HIDDEN = {GUARD_INPUT: "H3KIT_GUARD", QUEUE_ANYWAY_INPUT: "H3KIT_QUEUE_ANYWAY"}


def with_guard(input_types: dict) -> dict:
    """A node's INPUT_TYPES with the guard's hidden inputs added (kept beside any hidden inputs it has)."""
    return {**input_types, "hidden": {**input_types.get("hidden", {}), **HIDDEN}}


def verdict(h3kit_guard: Any = "") -> bool | str:
    """VALIDATE_INPUTS' answer: True for no refusal ("" or absent), else the refusal sentence."""
    if h3kit_guard in (None, "", False):
        return True
    return str(h3kit_guard)


class Guarded:
    """A node class the queue guard can refuse: validation hands back the refusal written into `h3kit_guard`."""

    @classmethod
    def VALIDATE_INPUTS(cls, h3kit_guard=""):
        return verdict(h3kit_guard)
