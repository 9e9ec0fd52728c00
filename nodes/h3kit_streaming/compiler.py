"""ComfyUI 0.35+'s model compiler and h3kit's weight swaps inside the model's forward.

From 0.35 ComfyUI records the allocations made inside H3's forward (the "malloc graph" of comfy-aimdo,
begun and ended in comfy/ldm/minimax/model.py) to replay them on later steps. h3kit's streamed loader
reads, converts and frees block weights in forward pre-hooks, inside that recording; custom code that
allocates or swaps weights there has crashed (`comfy_aimdo/malloc_graph.py pop`,
xmarre/ComfyUI-Spectrum-MiniMax-H3 #99). ComfyUI's own Fun ControlNet runs its extra work under
`comfy.model_prefetch.pause_malloc_graph()` (Comfy-Org/ComfyUI #16148), and so does h3kit, found by
feature detection, in this order:

1. `comfy.model_prefetch.pause_malloc_graph` exists: every read and release runs inside it ("paused");
2. the compiler exists (`args.disable_comfy_compiler`, 0.35.0) but no pause does (builds between the
   compiler and #16148): the compiler is switched off for this process, once, when an h3kit streamed
   loader builds its model, with a log line saying so ("disabled");
3. neither (0.30-0.34): nothing to do ("absent").

Standard library only at import time; ComfyUI's modules are looked up when asked.
"""

from __future__ import annotations

import contextlib
import importlib
import logging

LOG = logging.getLogger("h3kit")


def pause_function():
    """ComfyUI's `pause_malloc_graph`, or None where this ComfyUI has none."""
    try:
        prefetch = importlib.import_module("comfy.model_prefetch")
    except Exception:  # noqa: BLE001 - 0.30-0.34 have no such module; any failure means: no pause
        return None
    pause = getattr(prefetch, "pause_malloc_graph", None)
    return pause if callable(pause) else None


def _cli_args():
    try:
        return importlib.import_module("comfy.cli_args").args
    except Exception:  # noqa: BLE001
        return None


def prepare() -> tuple[object, str]:
    """(a function returning the context to run in-forward work under, state) for one streamed model:
    the module docstring's order. Called when the loader builds its model."""
    pause = pause_function()
    if pause is not None:
        return (lambda: pause()), "paused"
    args = _cli_args()
    if args is not None and hasattr(args, "disable_comfy_compiler"):
        if not args.disable_comfy_compiler:
            args.disable_comfy_compiler = True
            LOG.warning("h3kit: this ComfyUI has the model compiler but no pause_malloc_graph; the compiler is "
                        "turned off for this process (as --disable-comfy-compiler would) so that h3kit's streamed "
                        "blocks can be read inside the forward. Update ComfyUI to keep it on.")
        return contextlib.nullcontext, "disabled"
    return contextlib.nullcontext, "absent"
