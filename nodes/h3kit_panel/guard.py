"""The queue guard: a graph that does not fit this machine is refused when it is queued, before any weight is read.

ComfyUI gives a pack no way to reject a prompt from an on_prompt handler
(0.33 server.py `trigger_on_prompt` only logs a handler's exception and
carries on), but it does let a node class refuse its own inputs: validation
calls the class's `VALIDATE_INPUTS` with the inputs it names, and an answer
other than True is a `custom_validation_failed` error on that node -- POST
/prompt answers HTTP 400 and nothing runs. So the h3kit nodes declare two
hidden inputs (h3kit_common/guard_inputs.py: the frontend never shows or
sends them), the on_prompt handler writes the refusal into `h3kit_guard` of
one h3kit node of an oversized graph, and that node's `VALIDATE_INPUTS`
(`Guarded`) hands it back as the error.

The panel's "Queue anyway" sets `h3kit_queue_anyway` on the node, and the
profile's `queue_guard: warn` turns the refusal into one line in ComfyUI's log.
"""

from __future__ import annotations

import logging
from typing import Any, Mapping

from ..h3kit_common.guard_inputs import GUARD_INPUT, QUEUE_ANYWAY_INPUT
from .estimate import estimate_for
from .graph import GraphError, read_graph
from .sources import PACK, Pack

HOW_TO_QUEUE_ANYWAY = ("to run it anyway, press \"Queue anyway\" in the h3kit panel, or set queue_guard: warn "
                       "in h3kit's config.yaml and run 'h3kit apply'")
LOG = logging.getLogger("h3kit")


def on_prompt(json_data: Any, pack: Pack | None = None) -> Any:
    """ComfyUI's on_prompt handler: json_data back (marked when refused); never raises, never replaces it."""
    try:
        prompt = json_data.get("prompt") if isinstance(json_data, Mapping) else None
        if isinstance(prompt, dict):
            refuse(prompt, pack or PACK)
    except Exception as exc:  # a guard that breaks must not stop ComfyUI from queueing
        LOG.warning("h3kit: the queue guard could not read this prompt (%s: %s); it was queued unchecked",
                    type(exc).__name__, exc)
    return json_data


def refuse(prompt: dict, pack: Pack) -> str | None:
    """Write the refusal into the guard node of `prompt` when it does not fit; the sentence, or None if let through.

    Let through: no H3 video node, no cost model, a graph the reader refuses (ComfyUI's own validation
    answers it), a graph that fits, "Queue anyway" on any node, `queue_guard: warn` (logged), no h3kit node.
    A refusal that came with the prompt (a page that copied one, a client that made one up) is dropped first:
    only this handler's verdict reaches validation."""
    for node in prompt.values():
        if isinstance(node, dict) and isinstance(node.get("inputs"), dict):
            node["inputs"].pop(GUARD_INPUT, None)
    try:
        graph = read_graph(prompt)
    except GraphError:
        return None
    model = pack.cost.current()
    if not graph.has_h3 or model is None:
        return None
    doc = estimate_for(model, graph)
    if doc["fits"] or _queue_anyway(prompt):
        return None
    sentence = f"h3kit: {doc['message']}; {HOW_TO_QUEUE_ANYWAY}"
    if pack.queue_guard() == "warn":
        LOG.warning("h3kit: %s (queue_guard: warn, so it was queued)", doc["message"])
        return None
    if graph.guard_node is None:  # a graph of ComfyUI's nodes only: nothing can carry the refusal
        LOG.warning("h3kit: %s (no h3kit node in the graph can refuse it, so it was queued)", doc["message"])
        return None
    prompt[graph.guard_node]["inputs"][GUARD_INPUT] = sentence
    return sentence


def _queue_anyway(prompt: dict) -> bool:
    """The panel marks the guard node; any node marked counts, so a page that picked another still works."""
    return any(isinstance(n, Mapping) and isinstance(n.get("inputs"), Mapping)
               and n["inputs"].get(QUEUE_ANYWAY_INPUT) is True for n in prompt.values())

