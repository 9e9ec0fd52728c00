"""A ComfyUI node graph, written once and saved in both of ComfyUI's formats.

ComfyUI reads two formats: the API format (`POST /prompt`: node id ->
class_type and inputs, a link being `[node_id, output_slot]`) and the UI format
(the litegraph document the frontend opens: nodes with positions, sockets,
`widgets_values` in the node's own widget order, and a separate link table).
h3kit builds a `Graph` and writes both from it, and `ui_to_api` reads a UI
document back, so the file a user opens and the graph calibration runs are
provably the same.

The widget order comes from `profiles/comfy_nodes.yaml` (ComfyUI's
`/object_info`), not from guesswork: litegraph matches widget values by
position, so one value out of order silently sets the wrong input.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from h3kit.core.errors import BadInput

UI_VERSION = 0.4
COLUMN_WIDTH = 380
ROW_HEIGHT = 160
SEED_CONTROL = "fixed"  # litegraph's "control after generate": keep the seed the workflow names


@dataclass(frozen=True)
class Out:
    """An output socket: node `node`, output number `slot`."""

    node: int
    slot: int


@dataclass
class Node:
    id: int
    type: str
    inputs: dict
    title: str | None = None

    def out(self, slot: int = 0) -> Out:
        return Out(self.id, slot)


@dataclass
class Graph:
    specs: dict  # node type -> {"inputs": [...], "outputs": [...]}, from comfy_nodes.yaml
    nodes: list[Node] = field(default_factory=list)

    def add(self, type_: str, title: str | None = None, **inputs) -> Node:
        spec = self.spec(type_)
        known = {i["name"] for i in spec["inputs"]}
        # Python keywords cannot hold a dot: `format__codec` stands for `format.codec`.
        inputs = {k.replace("__", "."): v for k, v in inputs.items()}
        unknown = sorted(set(inputs) - known)
        if unknown:
            raise ValueError(f"{type_} has no input {', '.join(unknown)}")
        node = Node(len(self.nodes) + 1, type_, inputs, title)
        self.nodes.append(node)
        return node

    def spec(self, type_: str) -> dict:
        try:
            return self.specs[type_]
        except KeyError:
            raise ValueError(f"no signature for node {type_} in comfy_nodes.yaml") from None

    def node(self, node_id: int) -> Node:
        return self.nodes[node_id - 1]

    # -- API format ---------------------------------------------------------------------

    def to_api(self) -> dict:
        doc = {}
        for n in self.nodes:
            inputs = {k: ([str(v.node), v.slot] if isinstance(v, Out) else v) for k, v in n.inputs.items()}
            doc[str(n.id)] = {"class_type": n.type, "inputs": with_api_aliases(inputs, self.spec(n.type)),
                              "_meta": {"title": n.title or n.type}}
        return doc

    # -- UI (litegraph) format ------------------------------------------------------------

    def to_ui(self, extra: dict | None = None) -> dict:
        links, by_target = [], {}
        for n in self.nodes:
            for i, (name, value) in enumerate(self._sockets(n)):
                if isinstance(value, Out):
                    link_id = len(links) + 1
                    out_type = self.spec(self.node(value.node).type)["outputs"][value.slot]["type"]
                    links.append([link_id, value.node, value.slot, n.id, i, out_type])
                    by_target[(n.id, name)] = link_id
        depth = self._depths()
        rows: dict[int, int] = {}
        ui_nodes = []
        for order, n in enumerate(sorted(self.nodes, key=lambda n: (depth[n.id], n.id))):
            spec = self.spec(n.type)
            column = depth[n.id]
            row = rows.get(column, 0)
            rows[column] = row + 1
            inputs = [{"name": name, "type": self._socket_type(spec, name), "link": by_target.get((n.id, name))}
                      for name, _ in self._sockets(n, all_sockets=True)]
            outputs = [{"name": o["name"], "type": o["type"],
                        "links": [link[0] for link in links if link[1] == n.id and link[2] == slot] or None}
                       for slot, o in enumerate(spec["outputs"])]
            node = {"id": n.id, "type": n.type, "pos": [column * COLUMN_WIDTH, row * ROW_HEIGHT],
                    "size": [340, 100], "flags": {}, "order": order, "mode": 0, "inputs": inputs,
                    "outputs": outputs, "properties": {"Node name for S&R": n.type},
                    "widgets_values": self._widget_values(n, spec)}
            if n.title:
                node["title"] = n.title
            ui_nodes.append(node)
        return {"last_node_id": len(self.nodes), "last_link_id": len(links), "nodes": ui_nodes, "links": links,
                "groups": [], "config": {}, "extra": dict(extra or {}), "version": UI_VERSION}

    def _sockets(self, n: Node, all_sockets: bool = False):
        for i in self.spec(n.type)["inputs"]:
            if i["kind"] == "socket" and (all_sockets or i["name"] in n.inputs):
                yield i["name"], n.inputs.get(i["name"])

    @staticmethod
    def _socket_type(spec: dict, name: str) -> str:
        return next(i["type"] for i in spec["inputs"] if i["name"] == name)

    @staticmethod
    def _widget_values(n: Node, spec: dict) -> list:
        values = []
        for i in spec["inputs"]:
            if i["kind"] != "widget":
                continue
            if i["name"] not in n.inputs:
                raise ValueError(f"{n.type} #{n.id}: the UI format needs a value for every widget; {i['name']} has none")
            values.append(n.inputs[i["name"]])
            if i.get("control_after_generate"):
                values.append(SEED_CONTROL)
            values.extend(i.get("ui_extra", []))
        return values

    def _depths(self) -> dict[int, int]:
        """Column of each node: one past the deepest node feeding it (inputs are always added first)."""
        depth = {}
        for n in self.nodes:
            feeds = [depth[v.node] for v in n.inputs.values() if isinstance(v, Out)]
            depth[n.id] = 1 + max(feeds) if feeds else 0
        return depth


def with_api_aliases(inputs: dict, spec: dict) -> dict:
    """`inputs` plus each value again under the other names ComfyUI releases gave that input (a spec's `api_also`):
    SaveVideo's codec is `format.codec` from 0.33.0+40 on and `codec` in 0.30.0-0.33.0, and each release ignores
    the name it does not declare (0.33.0+40 declares `codec` too, hidden, and prefers `format.codec`)."""
    out = dict(inputs)
    for i in spec.get("inputs", []):
        for alias in i.get("api_also", []):
            if i["name"] in out and alias not in out:
                out[alias] = out[i["name"]]
    return out


def ui_to_api(ui: dict, specs: dict) -> dict:
    """The API graph a UI document stands for: widget values by the signature's order, links by the link table."""
    try:
        links = {link[0]: link for link in ui["links"]}
        out = {}
        for node in ui["nodes"]:
            spec = specs.get(node["type"])
            if spec is None:
                raise BadInput(f"the workflow uses node {node['type']}, which h3kit has no signature for.",
                               "Regenerate the workflow with 'h3kit apply'.")
            inputs = {}
            for socket in node.get("inputs", []):
                if socket.get("link") is not None:
                    link = links[socket["link"]]
                    inputs[socket["name"]] = [str(link[1]), link[2]]
            values = list(node.get("widgets_values", []))
            for i in spec["inputs"]:
                if i["kind"] != "widget":
                    continue
                if not values:
                    break
                inputs[i["name"]] = values.pop(0)
                if i.get("control_after_generate") and values:
                    values.pop(0)
                del values[:len(i.get("ui_extra", []))]
            out[str(node["id"])] = {"class_type": node["type"], "inputs": with_api_aliases(inputs, spec),
                                    "_meta": {"title": node.get("title") or node["type"]}}
        return dict(sorted(out.items(), key=lambda kv: int(kv[0])))
    except (KeyError, TypeError, IndexError) as exc:
        raise BadInput(f"the workflow file is not a ComfyUI UI-format workflow ({type(exc).__name__}: {exc}).",
                       "Regenerate it with 'h3kit apply'.") from None
