"""The panel's graph reader (nodes/h3kit_panel/graph.py): both of ComfyUI's formats, the nodes that hold each value.

The installed workflows (h3kit.comfyui.workflows, both formats) must read as the plan that wrote them; a user's
own H3 graph (ComfyUI's KSampler, the empty AV latent, primitives, subgraphs) is read too; anything that is not a
graph, or asks for an absurd size, is refused with one sentence.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from h3kit.comfyui import workflows
from h3kit.data import catalog as catalog_mod
from h3kit.fingerprint.schema import load_file
from h3kit.plan import make_plan
from pack_support import pack_module

FINGERPRINTS = Path(__file__).resolve().parents[1] / "fixtures" / "fingerprints"
CAT = catalog_mod.load()
PROFILES = catalog_mod.load_profiles(CAT)
# a streamed DiT, a GGUF DiT, ComfyUI's own loaders
MACHINES = ["cpu-only-16gb", "nvidia-rtx4060-8gb-16gb", "nvidia-rtx4090-24gb-64gb"]


@pytest.fixture(scope="module")
def graph():
    return pack_module("h3kit_panel.graph")


def _installed(machine: str) -> tuple:
    plan = make_plan(load_file(FINGERPRINTS / f"{machine}.json"), CAT, PROFILES)
    files = workflows.pack_files(plan, CAT, plan.profile)
    return plan, {name: json.loads(data) for name, data in files.items() if name != "h3kit_cost.json"}


@pytest.mark.parametrize("machine", MACHINES)
def test_every_installed_workflow_reads_as_the_plan_that_wrote_it(graph, machine):
    plan, docs = _installed(machine)
    cost = dict(plan.cost)
    d = cost["defaults"]
    for name, doc in docs.items():
        r = graph.read_graph(doc)
        assert r.has_h3 and r.problem is None, name
        assert (r.width, r.height, r.frames, r.steps, r.cfg) == (d["width"], d["height"], d["frames"], d["steps"],
                                                                   d["cfg"]), name
        assert r.files == {"dit": cost["files"]["dit"], "text_encoder": cost["files"]["text_encoder"]}, name
        api = docs[name.replace(workflows.UI_DIR, workflows.API_DIR)]
        at = r.targets
        assert api[at["canvas"]]["inputs"]["width"] == r.width and api[at["frames"]]["inputs"]["length"] == r.frames
        assert api[at["steps"]]["inputs"]["steps"] == r.steps and at["cfg"] is None  # BasicGuider: cfg 1.0
        guard = api[r.guard_node]["class_type"]
        assert guard == next(c for c in graph.GUARDED_CLASSES if any(n["class_type"] == c for n in api.values()))
        assert {n.class_type for n in r.h3_nodes} >= {"MiniMaxH3SigmaShift", "H3kitTiledVAEDecode"}


def test_both_formats_of_a_workflow_read_the_same(graph):
    _, docs = _installed("nvidia-rtx4060-8gb-16gb")
    for name in (n for n in docs if n.startswith(workflows.UI_DIR)):
        ui, api = docs[name], docs[name.replace(workflows.UI_DIR, workflows.API_DIR)]
        assert graph.read_graph(ui) == graph.read_graph(api), name


def _api(**nodes) -> dict:
    return {k.lstrip("n"): {"class_type": v[0], "inputs": v[1]} for k, v in nodes.items()}


def test_comfyuis_own_template_with_ksampler_and_cfg(graph):
    prompt = _api(n1=("UNETLoader", {"unet_name": "h3/dit.safetensors", "weight_dtype": "default"}),
                  n2=("CLIPLoader", {"clip_name": "te.safetensors", "type": "minimax"}),
                  n3=("VAELoader", {"vae_name": "vae.safetensors"}),
                  n4=("MiniMaxH3ImageToVideo", {"clip": ["2", 0], "vae": ["3", 0], "prompt": "a cat", "width": 1344,
                                                "height": 768, "length": 124}),
                  n5=("KSampler", {"model": ["1", 0], "positive": ["4", 0], "negative": ["4", 0],
                                   "latent_image": ["4", 1], "seed": 1, "steps": 30, "cfg": 4.5,
                                   "sampler_name": "euler", "scheduler": "simple", "denoise": 1.0}),
                  n6=("VAEDecode", {"samples": ["5", 0], "vae": ["3", 0]}))
    r = graph.read_graph(prompt)
    assert (r.width, r.height, r.frames, r.steps, r.cfg) == (1344, 768, 124, 30, 4.5)
    assert r.targets == {"canvas": "4", "frames": "4", "steps": "5", "cfg": "5"}
    assert r.inputs == {"width": ["4", "width"], "height": ["4", "height"], "frames": ["4", "length"],
                        "steps": ["5", "steps"], "cfg": ["5", "cfg"]}
    assert r.files == {"dit": "h3/dit.safetensors", "text_encoder": "te.safetensors"} and r.guard_node is None
    assert [n.id for n in r.h3_nodes] == ["4"]


def test_a_ui_workflow_maps_widgets_by_comfyuis_order_with_the_seed_control(graph):
    ui = {"nodes": [
        {"id": 7, "type": "EmptyMiniMaxH3LatentAV", "widgets_values": [768, 448, 73], "inputs": []},
        {"id": 8, "type": "KSamplerAdvanced", "inputs": [{"name": "latent_image", "link": 1}],
         "widgets_values": ["enable", 42, "randomize", 12, 1.0, "euler", "simple", 0, 10000, "disable"]},
        {"id": 9, "type": "H3kitStreamedDiTLoader", "widgets_values": ["dit.gguf", "default", 0, 0, 1, "use"]},
        {"id": 10, "type": "KSampler", "mode": 4, "widgets_values": [1, "fixed", 999, 7.0, "euler", "simple", 1]},
        {"id": 11, "type": "Note", "widgets_values": ["any text"]}],
        "links": [{"id": 1, "origin_id": 7, "origin_slot": 0, "target_id": 8, "target_slot": 0, "type": "LATENT"}]}
    r = graph.read_graph(ui)
    assert (r.width, r.height, r.frames, r.steps, r.cfg) == (768, 448, 73, 12, 1.0)  # the bypassed KSampler unread
    assert r.targets["steps"] == "8" and r.guard_node == "9" and r.files["dit"] == "dit.gguf"


def test_widget_names_follow_input_types(graph):
    ksampler = {"required": {"model": ("MODEL",), "seed": ("INT", {"default": 0}), "steps": ("INT", {}),
                             "cfg": ("FLOAT", {}), "sampler_name": (["euler", "dpm"],), "note": ("STRING", {}),
                             "forced": ("INT", {"forceInput": True})},
                "optional": {"denoise": ("FLOAT", {}), "noise": ("INT", {"control_after_generate": True})},
                "hidden": {"h3kit_guard": "H3KIT_GUARD"}}
    assert graph.widget_names_of(ksampler) == ["seed", None, "steps", "cfg", "sampler_name", "note", "denoise",
                                               "noise", None]
    ui = {"nodes": [{"id": 1, "type": "MyH3", "widgets_values": ["p", 640, 352, 39]},
                    {"id": 2, "type": "MiniMaxH3ImageToVideo", "widgets_values": ["p", 512, 288, 22]}], "links": []}

    def names(class_type):  # one class this ComfyUI describes, one it cannot (the reader's table then)
        if class_type == "MiniMaxH3ImageToVideo":
            raise RuntimeError("INPUT_TYPES failed")
        return None

    r = graph.read_graph(ui, names)
    assert (r.width, r.height, r.frames) == (512, 288, 22)


def test_a_primitive_feeds_a_value_and_holds_it(graph):
    prompt = _api(n3=("PrimitiveInt", {"value": 640}),
                  n4=("EmptyMiniMaxH3LatentAV", {"width": ["3", 0], "height": 352, "length": 39}))
    r = graph.read_graph(prompt)
    assert r.width == 640 and r.steps is None and r.cfg is None
    assert r.targets["canvas"] == "3" and r.inputs["width"] == ["3", "value"] and r.inputs["height"] == ["4", "height"]
    prompt["3"] = {"class_type": "MathExpression", "inputs": {"expression": "a*2"}}
    with pytest.raises(graph.GraphError, match="width of node 4 .* comes from node 3 \\(MathExpression\\)"):
        graph.read_graph(prompt)


def test_a_ui_widget_fed_by_the_frontends_primitive_keeps_its_value(graph):
    ui = {"nodes": [{"id": 1, "type": "PrimitiveNode", "widgets_values": [704, "fixed"], "outputs": []},
                    {"id": 2, "type": "EmptyMiniMaxH3LatentAV", "widgets_values": [704, 384, 56],
                     "inputs": [{"name": "width", "link": 5, "widget": {"name": "width"}}]}],
          "links": [[5, 1, 0, 2, 0, "INT"]]}
    assert graph.read_graph(ui).width == 704


def test_the_nodes_inside_a_subgraph_are_read(graph):
    inner = {"id": "aaaa-bbbb", "nodes": [
        {"id": 3, "type": "MiniMaxH3ImageToVideo", "widgets_values": ["p", 1024, 576, 107]},
        {"id": 4, "type": "BasicScheduler", "widgets_values": ["simple", 8, 1.0],
         "inputs": [{"name": "model", "link": 1}]}],
        "links": [{"id": 1, "origin_id": -10, "origin_slot": 0, "target_id": 4, "target_slot": 0}]}
    ui = {"nodes": [{"id": 12, "type": "aaaa-bbbb"}], "links": [], "definitions": {"subgraphs": [inner]}}
    r = graph.read_graph(ui)
    assert (r.width, r.frames, r.targets["canvas"]) == (1024, 107, "12:3")
    assert r.steps is None  # the scheduler is linked to the canvas only from outside the subgraph


def test_several_h3_runs_read_the_largest_with_a_note(graph):
    prompt = _api(n1=("EmptyMiniMaxH3LatentAV", {"width": 512, "height": 288, "length": 22}),
                  n2=("EmptyMiniMaxH3LatentAV", {"width": 1344, "height": 768, "length": 121}))
    r = graph.read_graph(prompt)
    assert r.targets["canvas"] == "2" and "2 H3 video nodes" in r.notes[0]


@pytest.mark.parametrize("doc", [{}, {"1": {"class_type": "VAELoader", "inputs": {"vae_name": "x"}}},
                                 {"nodes": [], "links": []}])
def test_a_graph_without_an_h3_node_says_so(graph, doc):
    r = graph.read_graph(doc)
    assert not r.has_h3 and r.problem == graph.NO_H3 and r.width is None and r.guard_node is None


def _canvas(**inputs) -> dict:
    return {"5": {"class_type": "MiniMaxH3ImageToVideo",
                  "inputs": {"prompt": "p", "width": 864, "height": 480, "length": 56, **inputs}}}


@pytest.mark.parametrize("doc, words", [
    ([], "must be a JSON object, not a list"),
    ("prompt", "must be a JSON object, not a string"),
    ({"1": {"inputs": {}}}, "node 1 of the prompt has no class_type"),
    ({"1": "UNETLoader"}, "node 1 of the prompt has no class_type"),
    ({"1": {"class_type": "UNETLoader", "inputs": [1]}}, "inputs of node 1 (UNETLoader) are not a JSON object"),
    ({"nodes": [{"id": 1}], "links": []}, "has no type or id"),
    ({"nodes": ["x"], "links": []}, "not a list of objects"),
    (_canvas(width=20000), "width of node 5 (MiniMaxH3ImageToVideo) is 20000, outside 16..16384"),
    (_canvas(height=8), "height of node 5 (MiniMaxH3ImageToVideo) is 8, outside 16..16384"),
    (_canvas(length=0), "length of node 5 (MiniMaxH3ImageToVideo) is 0, outside 1..10000"),
    (_canvas(length=10001), "outside 1..10000"),
    (_canvas(width="864"), "is '864', which is not a number"),
    (_canvas(width=True), "is true, which is not a number"),
    (_canvas(width=math.inf), "is inf, which is not a number"),
    (_canvas(width=None), "has no width"),
    ({**_canvas(), "6": {"class_type": "BasicScheduler", "inputs": {"steps": 0, "model": ["5", 0]}}},
     "steps of node 6 (BasicScheduler) is 0, outside 1..1000"),
    ({**_canvas(), "6": {"class_type": "KSampler", "inputs": {"steps": 1001, "cfg": 1.0, "model": ["5", 0]}}},
     "outside 1..1000"),
    ({**_canvas(), "6": {"class_type": "CFGGuider", "inputs": {"cfg": "high", "model": ["5", 0]}}},
     "cfg of node 6 (CFGGuider) is 'high', which is not a number"),
])
def test_what_is_no_graph_or_asks_the_absurd_is_refused_in_one_sentence(graph, doc, words):
    with pytest.raises(graph.GraphError) as caught:
        graph.read_graph(doc)
    assert words in str(caught.value) and ". " not in str(caught.value)

