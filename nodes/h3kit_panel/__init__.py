"""h3kit inside ComfyUI: what a graph costs on this machine, a guard that refuses one that does not fit, the presets.

The server side of the pack's panel (the page itself is `web/`, served by
ComfyUI as this pack's WEB_DIRECTORY). The chain, each link its own module:

  graph.py     a graph document (API prompt or saved workflow) -> what it asks
               for: canvas, frames, steps, cfg, the files it loads, the node
               holding each value, the node that carries the guard (pure)
  estimate.py  the pack's cost model (h3k_cost, the planner's arithmetic) and
               that reading -> figures, the nearest setting that fits, one
               sentence (pure)
  sources.py   the pack's files the panel reads, re-read when they change:
               h3kit_cost.json, h3kit_profile.json, h3kit_calibration.json
  guard.py     ComfyUI's on_prompt handler and the nodes' VALIDATE_INPUTS: an
               oversized graph is refused at validation, before a weight is read
  preset.py    `h3kit apply --preset NAME`, run by the h3kit that installed the
               pack, in a background thread
  routes.py    the HTTP routes over all of it, and `register`, which nodes/__init__.py
               calls at import (a no-op outside ComfyUI)

Standard library only; aiohttp (ComfyUI's) only inside `routes.register`.
"""

from .routes import register

__all__ = ["register"]
