"""What an H3 graph asks for: canvas, frames, steps, cfg, the files it loads, and where each value sits.

Pure: a graph document in, a `GraphReading` out. Both of ComfyUI's formats
are read -- the API prompt (`{node_id: {"class_type", "inputs"}}`, what POST
/prompt and the queue guard see) and the saved UI workflow (litegraph's
`{"nodes", "links"}`, what the panel holds before it queues) -- by turning
the UI document into the API shape first, so one reader serves both.

A UI node keeps its widget values by position; `widget_names(class_type)`
names them in ComfyUI's order (None for a value the UI keeps that is no
input: the seed's "control after generate"). In ComfyUI the panel builds it
from the node classes; without one, the table below covers the nodes read
here, in the order h3kit's workflows write them (profiles/comfy_nodes.yaml).

Left out on purpose: subgraphs nested inside subgraphs, values fed by a node
other than a primitive (`PrimitiveInt` ...), and graphs with several H3 runs
(the largest one is read, with a note).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

CANVAS_CLASSES = ("MiniMaxH3ImageToVideo", "MiniMaxH3ReferenceToVideo", "EmptyMiniMaxH3LatentAV")
DIT_LOADERS = ("H3kitStreamedDiTLoader", "H3kitUnetLoaderGGUF", "UNETLoader", "UnetLoaderGGUF",
               "UnetLoaderGGUFAdvanced")
TEXT_ENCODER_LOADERS = ("H3kitStreamedTextEncoderLoader", "H3kitCLIPLoaderGGUF", "CLIPLoader", "CLIPLoaderGGUF")
STEP_CLASSES = ("BasicScheduler", "KSampler", "KSamplerAdvanced")  # then any node with a `steps` input
CFG_CLASSES = ("CFGGuider", "KSampler", "KSamplerAdvanced")
# The h3kit nodes that declare the guard's hidden inputs, in the order the guard prefers them: the DiT loader
# first (nothing heavy is read before it), the decode last. tests/nodes/test_panel_guard.py holds the classes to it.
GUARDED_CLASSES = ("H3kitStreamedDiTLoader", "H3kitUnetLoaderGGUF", "H3kitStreamedTextEncoderLoader",
                   "H3kitCLIPLoaderGGUF", "H3kitMemoryGuard", "H3kitTiledVAEDecode")
WIDGET_TYPES = ("INT", "FLOAT", "STRING", "BOOLEAN", "COMBO")  # a list type is a combo too
UI_ONLY_NODES = ("PrimitiveNode", "Reroute", "Note", "MarkdownNote")  # the frontend's own: never in a prompt
SKIPPED_MODES = (2, 4)  # litegraph's "never" (muted) and bypass: the frontend leaves them out of the prompt
LIMITS = {"width": (16, 16384), "height": (16, 16384), "frames": (1, 10000), "steps": (1, 1000),
          "cfg": (0.0, 100.0)}
WIDGETS = {  # ComfyUI 0.33's widget order for the nodes read here
    "MiniMaxH3ImageToVideo": ["prompt", "width", "height", "length"],
    "MiniMaxH3ReferenceToVideo": ["prompt", "width", "height", "length", "ref_image_size"],
    "EmptyMiniMaxH3LatentAV": ["width", "height", "length"],
    "BasicScheduler": ["scheduler", "steps", "denoise"],
    "KSampler": ["seed", None, "steps", "cfg", "sampler_name", "scheduler", "denoise"],
    "KSamplerAdvanced": ["add_noise", "noise_seed", None, "steps", "cfg", "sampler_name", "scheduler",
                         "start_at_step", "end_at_step", "return_with_leftover_noise"],
    "CFGGuider": ["cfg"],
    "PrimitiveInt": ["value", None], "PrimitiveFloat": ["value"],
    **{c: ["unet_name"] for c in DIT_LOADERS}, **{c: ["clip_name"] for c in TEXT_ENCODER_LOADERS},
}
NO_H3 = ("the graph has no MiniMax H3 video node (MiniMaxH3ImageToVideo, MiniMaxH3ReferenceToVideo or "
         "EmptyMiniMaxH3LatentAV), so h3kit has nothing to estimate")

WidgetNames = Callable[[str], "list[str | None] | None"]


class GraphError(ValueError):
    """The graph cannot be read (not a graph, a node without a class, a value out of range); one sentence."""


@dataclass(frozen=True)
class H3Node:
    id: str
    class_type: str
    title: str

    def to_json(self) -> dict:
        return {"id": self.id, "class_type": self.class_type, "title": self.title}


@dataclass(frozen=True)
class GraphReading:
    """What the graph asks for. `problem` is set (and the workload None) when it holds no H3 video node;
    steps / cfg are None when no node of the graph sets them. Node ids are strings, as in an API prompt."""

    h3_nodes: tuple = ()
    width: int | None = None
    height: int | None = None
    frames: int | None = None
    steps: int | None = None
    cfg: float | None = None
    targets: Mapping[str, str | None] = field(default_factory=dict)  # canvas, frames, steps, cfg -> node id
    # width, height, frames, steps, cfg -> [node id, input name]: where to set each (a primitive's "value")
    inputs: Mapping[str, list | None] = field(default_factory=dict)
    files: Mapping[str, str | None] = field(default_factory=dict)  # dit, text_encoder -> the file the graph loads
    guard_node: str | None = None
    notes: tuple = ()
    problem: str | None = None

    @property
    def has_h3(self) -> bool:
        return self.problem is None


def read_graph(doc: Any, widget_names: WidgetNames | None = None) -> GraphReading:
    """Either format in, the reading out; GraphError with one sentence for a document that is no graph."""
    if not isinstance(doc, Mapping):
        raise GraphError(f"the graph must be a JSON object, not {_json_type(doc)}")
    if isinstance(doc.get("nodes"), list):
        nodes = ui_to_prompt(doc, widget_names)
    else:
        nodes = _checked_prompt(doc)
    return _read(nodes)


# -- the two formats ---------------------------------------------------------------------


def _checked_prompt(doc: Mapping) -> dict:
    """An API prompt with every node checked: a class_type string and an inputs object."""
    out = {}
    for node_id, node in doc.items():
        if not isinstance(node, Mapping) or not isinstance(node.get("class_type"), str):
            raise GraphError(f"node {node_id} of the prompt has no class_type, so this is not a ComfyUI API prompt")
        inputs = node.get("inputs", {})
        if not isinstance(inputs, Mapping):
            raise GraphError(f"the inputs of node {node_id} ({node['class_type']}) are not a JSON object")
        meta = node.get("_meta") if isinstance(node.get("_meta"), Mapping) else {}
        out[str(node_id)] = {"class_type": node["class_type"], "inputs": dict(inputs),
                             "title": str(meta.get("title") or node["class_type"])}
    return out


def ui_to_prompt(doc: Mapping, widget_names: WidgetNames | None = None) -> dict:
    """A saved UI workflow as an API-shaped dict (muted and bypassed nodes left out, as the frontend does),
    with the nodes of its subgraphs under `instance:inner` ids."""
    names = _widget_lookup(widget_names)
    out = _ui_nodes(doc.get("nodes"), doc.get("links"), names, "")
    definitions = doc.get("definitions") if isinstance(doc.get("definitions"), Mapping) else {}
    subgraphs = definitions.get("subgraphs") if isinstance(definitions.get("subgraphs"), list) else []
    for sub in subgraphs:
        if not isinstance(sub, Mapping):
            continue
        instance = next((k for k, n in out.items() if n["class_type"] == sub.get("id")), None)
        if instance is not None:  # a definition no node uses never runs
            out.update(_ui_nodes(sub.get("nodes"), sub.get("links"), names, f"{instance}:"))
    return out


def _ui_nodes(nodes: Any, links: Any, names: Callable, prefix: str) -> dict:
    if not isinstance(nodes, list) or not all(isinstance(n, Mapping) for n in nodes):
        raise GraphError("the workflow's nodes are not a list of objects, so this is not a ComfyUI workflow")
    types = {f"{prefix}{n.get('id')}": n.get("type") for n in nodes}
    sources = _ui_links(links, prefix)
    out = {}
    for node in nodes:
        if not isinstance(node.get("type"), str) or "id" not in node:
            raise GraphError("a node of the workflow has no type or id, so this is not a ComfyUI workflow")
        if node.get("mode") in SKIPPED_MODES:
            continue
        inputs = _ui_widgets(node, names(node["type"]))
        for socket in node.get("inputs") or []:
            source = sources.get(socket.get("link")) if isinstance(socket, Mapping) else None
            # a widget fed by the frontend's own primitive or reroute keeps its value in widgets_values
            if source is not None and not (socket.get("widget") and types.get(source[0]) in UI_ONLY_NODES):
                inputs[str(socket.get("name"))] = list(source)
        out[f"{prefix}{node['id']}"] = {"class_type": node["type"], "inputs": inputs,
                                        "title": str(node.get("title") or node["type"])}
    return out


def _ui_links(links: Any, prefix: str) -> dict:
    """link id -> (source node id, output slot); both of litegraph's link shapes (lists, and objects)."""
    found = {}
    for link in links if isinstance(links, list) else []:
        if isinstance(link, list) and len(link) >= 5:
            link_id, origin, slot = link[0], link[1], link[2]
        elif isinstance(link, Mapping):
            link_id, origin, slot = link.get("id"), link.get("origin_id"), link.get("origin_slot")
        else:
            continue
        if isinstance(origin, int) and origin >= 0 and isinstance(slot, int):  # a subgraph's own input is -10
            found[link_id] = (f"{prefix}{origin}", slot)
    return found


def _ui_widgets(node: Mapping, names: list | None) -> dict:
    """widgets_values by name: a dict as it is, a list by ComfyUI's widget order (None entries skipped)."""
    values = node.get("widgets_values")
    if isinstance(values, Mapping):
        return dict(values)
    if not isinstance(values, list) or not names:
        return {}
    return {name: value for name, value in zip(names, values) if name is not None}


def widget_names_of(input_types: Mapping) -> list:
    """A node class's widget order from its INPUT_TYPES(), as the frontend lays out widgets_values: required then
    optional, values only (a socket type or forceInput holds none), an INT seed followed by its "control after
    generate" value (None here)."""
    names: list = []
    for section in ("required", "optional"):
        inputs = input_types.get(section) if isinstance(input_types.get(section), Mapping) else {}
        for name, info in inputs.items():
            kind = info[0] if isinstance(info, (list, tuple)) and info else None
            options = info[1] if isinstance(info, (list, tuple)) and len(info) > 1 else {}
            options = options if isinstance(options, Mapping) else {}
            if not (isinstance(kind, list) or kind in WIDGET_TYPES) or options.get("forceInput"):
                continue
            names.append(name)
            if kind == "INT" and options.get("control_after_generate", name in ("seed", "noise_seed")):
                names.append(None)
    return names


def _widget_lookup(widget_names: WidgetNames | None) -> Callable:
    def names(class_type: str):
        found = None
        if widget_names is not None:
            try:
                found = widget_names(class_type)
            except Exception:  # a node class that cannot describe itself: the table, else no widgets
                found = None
        return found if found is not None else WIDGETS.get(class_type)
    return names


# -- the reading -------------------------------------------------------------------------


def _read(nodes: dict) -> GraphReading:
    h3 = tuple(H3Node(i, n["class_type"], n["title"]) for i, n in _ordered(nodes)
               if "MiniMaxH3" in n["class_type"] or n["class_type"].startswith("H3kit"))
    canvases = [i for i, n in _ordered(nodes) if n["class_type"] in CANVAS_CLASSES]
    if not canvases:
        return GraphReading(h3_nodes=h3, problem=NO_H3)
    notes = []
    runs = {i: _canvas(nodes, i) for i in canvases}
    canvas_id = max(canvases, key=lambda i: (runs[i]["width"] * runs[i]["height"] * runs[i]["frames"]))
    if len(canvases) > 1:
        notes.append(f"the graph has {len(canvases)} H3 video nodes; the figures are for the largest, node "
                     f"{canvas_id}")
    run = runs[canvas_id]
    near = _component(nodes, canvas_id)
    steps, steps_at = _steps(nodes, near)
    cfg, cfg_at = _cfg(nodes, near)
    at = {**run["at"], "steps": steps_at, "cfg": cfg_at}
    files = {"dit": _file(nodes, near, DIT_LOADERS, "unet_name"),
             "text_encoder": _file(nodes, near, TEXT_ENCODER_LOADERS, "clip_name")}
    return GraphReading(
        h3_nodes=h3, width=run["width"], height=run["height"], frames=run["frames"], steps=steps, cfg=cfg,
        targets={"canvas": at["width"][0], **{k: at[k] and at[k][0] for k in ("frames", "steps", "cfg")}},
        inputs=at, files=files, guard_node=_guard_node(nodes, near), notes=tuple(notes))


def _canvas(nodes: dict, node_id: str) -> dict:
    run, at = {}, {}
    for key, name in (("width", "width"), ("height", "height"), ("frames", "length")):
        run[key], at[key] = _value(nodes, node_id, name, key)
    return {**run, "at": at}


def _steps(nodes: dict, near: set) -> tuple:
    """The most steps any sampler near the H3 node asks for (the known samplers' first, then any `steps`)."""
    found = [i for i in near if nodes[i]["class_type"] in STEP_CLASSES and "steps" in nodes[i]["inputs"]] or \
        [i for i in near if "steps" in nodes[i]["inputs"] and nodes[i]["class_type"] not in CANVAS_CLASSES]
    if not found:
        return None, None
    values = sorted((_value(nodes, i, "steps", "steps") for i in sorted(found, key=_id_key)),
                    key=lambda v: -v[0])
    return values[0]


def _cfg(nodes: dict, near: set) -> tuple:
    """cfg off 1.0 wherever a guider or sampler near the H3 node sets it (two model calls a step), else 1.0."""
    found = [_value(nodes, i, "cfg", "cfg") for i in sorted(near, key=_id_key)
             if nodes[i]["class_type"] in CFG_CLASSES and "cfg" in nodes[i]["inputs"]]
    off = [v for v in found if abs(v[0] - 1.0) > 1e-9]
    if off or found:
        return (off or found)[0]
    if any(nodes[i]["class_type"] == "BasicGuider" for i in near):
        return 1.0, None
    return None, None


def _file(nodes: dict, near: set, classes: tuple, name: str) -> str | None:
    """The file a loader near the H3 node reads, else any such loader's (a graph half wired still loads it)."""
    for pool in (sorted(near, key=_id_key), sorted(nodes, key=_id_key)):
        for i in pool:
            value = nodes[i]["inputs"].get(name)
            if nodes[i]["class_type"] in classes and isinstance(value, str):
                return value
    return None


def _guard_node(nodes: dict, near: set) -> str | None:
    """The h3kit node that carries the guard: by GUARDED_CLASSES' preference, near the H3 node first."""
    for pool in (near, set(nodes)):
        for cls in GUARDED_CLASSES:
            ids = sorted((i for i in pool if nodes[i]["class_type"] == cls), key=_id_key)
            if ids:
                return ids[0]
    return None


def _value(nodes: dict, node_id: str, name: str, key: str) -> tuple:
    """(the checked number, [the node that holds it, its input]); a primitive feeding the input is followed."""
    node, holder = nodes[node_id], [node_id, name]
    value = node["inputs"].get(name)
    if _is_link(value):
        source = nodes.get(str(value[0]))
        if source is None or _is_link(source["inputs"].get("value")) or "value" not in source["inputs"]:
            what = f"node {value[0]} ({source['class_type']})" if source else f"node {value[0]}, which is missing"
            raise GraphError(f"the {name} of node {node_id} ({node['class_type']}) comes from {what}, which h3kit "
                             "cannot read")
        holder, value = [str(value[0]), "value"], source["inputs"]["value"]
    if value is None:
        raise GraphError(f"node {node_id} ({node['class_type']}) has no {name}")
    return _checked(value, key, f"the {name} of node {node_id} ({node['class_type']})"), holder


def _checked(value: Any, key: str, what: str) -> int | float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise GraphError(f"{what} is {_shown(value)}, which is not a number")
    low, high = LIMITS[key]
    number = float(value) if key == "cfg" else int(value)
    if not low <= number <= high:
        raise GraphError(f"{what} is {_shown(value)}, outside {low}..{high}")
    return number


def _component(nodes: dict, start: str) -> set:
    """Every node linked to `start`, either way, through any chain of links."""
    near: dict[str, set] = {i: set() for i in nodes}
    for i, node in nodes.items():
        for value in node["inputs"].values():
            if _is_link(value) and str(value[0]) in near:
                near[i].add(str(value[0]))
                near[str(value[0])].add(i)
    seen, todo = {start}, [start]
    while todo:
        for other in near[todo.pop()] - seen:
            seen.add(other)
            todo.append(other)
    return seen


def _is_link(value: Any) -> bool:
    return isinstance(value, list) and len(value) == 2 and isinstance(value[0], (str, int)) \
        and not isinstance(value[0], bool) and isinstance(value[1], int)


def _ordered(nodes: dict):
    return sorted(nodes.items(), key=lambda kv: _id_key(kv[0]))


def _id_key(node_id: str) -> tuple:
    """Numeric ids in number order ("2" before "10", "12:5" after "12"), anything else after them."""
    parts = str(node_id).split(":")
    return (0, [int(p) for p in parts], "") if all(p.isdigit() for p in parts) else (1, [], str(node_id))


def _shown(value: Any) -> str:
    text = "true" if value is True else "false" if value is False else repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _json_type(value: Any) -> str:
    names = {list: "a list", str: "a string", bool: "a boolean", type(None): "null", int: "a number",
             float: "a number"}
    return names.get(type(value), type(value).__name__)
