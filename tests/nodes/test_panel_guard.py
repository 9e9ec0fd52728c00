"""The queue guard (nodes/h3kit_panel/guard.py) and the hidden inputs the h3kit nodes carry for it.

ComfyUI 0.33 lets no on_prompt handler reject a prompt; the guard writes its sentence into a hidden input of one
h3kit node and that class's VALIDATE_INPUTS returns it, which POST /prompt answers with HTTP 400. Checked here
without ComfyUI: the classes declare what ComfyUI matches on (execution.py `validate_inputs`: the argument names
of VALIDATE_INPUTS, no **kwargs), the handler marks exactly one node of an oversized graph and leaves every other
prompt alone, and it never raises. tests/real_comfyui/test_panel_routes_real_comfyui.py runs it in ComfyUI.
"""

from __future__ import annotations

import copy
import inspect
import json
import logging
import sys
from pathlib import Path

import pytest

from h3kit.comfyui import workflows
from h3kit.data import catalog as catalog_mod
from h3kit.fingerprint.schema import load_file
from h3kit.plan import make_plan
from pack_support import pack_module

FINGERPRINTS = Path(__file__).resolve().parents[1] / "fixtures" / "fingerprints"
OVERSIZED = {"width": 1920, "height": 1080, "length": 241}


@pytest.fixture(scope="module")
def installed():
    """The plan of an 8 GB card (a GGUF DiT) and its installed text-to-video workflow (API format)."""
    cat = catalog_mod.load()
    plan = make_plan(load_file(FINGERPRINTS / "nvidia-rtx4060-8gb-16gb.json"), cat, catalog_mod.load_profiles(cat))
    files = workflows.pack_files(plan, cat, plan.profile)
    return plan, json.loads(files[f"{workflows.API_DIR}/{workflows.NAMES['t2v']}.json"])


@pytest.fixture
def guard():
    return pack_module("h3kit_panel.guard")


@pytest.fixture
def pack(tmp_path, installed):
    """A pack folder holding the plan's cost model and a profile (queue_guard unset: refuse)."""
    plan, _ = installed
    (tmp_path / "h3kit_cost.json").write_text(json.dumps(dict(plan.cost)), encoding="utf-8")
    _profile(tmp_path, {})
    return pack_module("h3kit_panel.sources").Pack.at(tmp_path)


def _profile(folder: Path, settings: dict) -> None:
    doc = {"schema": "h3kit.node-profile/1", "profile": "nvidia-8gb", "settings": settings}
    (folder / "h3kit_profile.json").write_text(json.dumps(doc), encoding="utf-8")


def _oversized(api: dict) -> dict:
    prompt = copy.deepcopy(api)
    next(n for n in prompt.values() if n["class_type"] == "MiniMaxH3ImageToVideo")["inputs"].update(OVERSIZED)
    return prompt


def _marked(prompt: dict) -> dict:
    return {i: n["inputs"]["h3kit_guard"] for i, n in prompt.items() if "h3kit_guard" in n["inputs"]}


@pytest.fixture
def node_classes(monkeypatch):
    """Every node class of the pack, with ComfyUI's folder_paths answering empty lists (INPUT_TYPES asks it)."""
    stub = type(sys)("folder_paths")
    stub.get_filename_list = lambda kind: []
    stub.get_folder_paths = lambda kind: []
    monkeypatch.setitem(sys.modules, "folder_paths", stub)
    classes = {}
    for module in ("h3kit_decode.node", "h3kit_streaming.dit_node", "h3kit_streaming.te_node", "h3kit_gguf.node",
                   "h3kit_calibration.node"):
        classes.update(pack_module(module).NODE_CLASS_MAPPINGS)
    return classes


def test_the_guarded_classes_declare_the_hidden_inputs_and_validate_only_the_guard(node_classes, guard):
    graph = pack_module("h3kit_panel.graph")
    carrying = {name for name, cls in node_classes.items() if "hidden" in cls.INPUT_TYPES()}
    assert carrying == set(graph.GUARDED_CLASSES)
    for name in graph.GUARDED_CLASSES:
        cls = node_classes[name]
        assert cls.INPUT_TYPES()["hidden"] == {"h3kit_guard": "H3KIT_GUARD", "h3kit_queue_anyway": "H3KIT_QUEUE_ANYWAY"}
        # ComfyUI skips its own checks (min/max, a name in the file list) for every input VALIDATE_INPUTS names,
        # and for all of them with **kwargs: the guard's input alone, so the loaders' lists are still checked
        spec = inspect.getfullargspec(cls.VALIDATE_INPUTS)
        assert spec.args == ["cls", "h3kit_guard"] and spec.varkw is None, name
        assert cls.VALIDATE_INPUTS() is True and cls.VALIDATE_INPUTS(h3kit_guard="") is True
        assert cls.VALIDATE_INPUTS(h3kit_guard="h3kit: too big") == "h3kit: too big"
        # ComfyUI hands hidden inputs to the node's function too
        function = inspect.signature(getattr(cls, cls.FUNCTION))
        assert {"h3kit_guard", "h3kit_queue_anyway"} <= set(function.parameters), name


def _comfyui_validation(cls, inputs: dict) -> list[str]:
    """ComfyUI 0.33 execution.py validate_inputs' custom check, as it is: the inputs present that VALIDATE_INPUTS
    names (or all with **kwargs) are passed, and each of them gets an error with the answer."""
    spec = inspect.getfullargspec(cls.VALIDATE_INPUTS)
    passed = {k: v for k, v in inputs.items() if k in spec.args or spec.varkw}
    answer = cls.VALIDATE_INPUTS(**passed)
    return [] if answer is True else [f"{x} - {answer}" for x in passed]


def test_an_oversized_graph_marks_its_dit_loader_with_one_sentence(guard, pack, installed, node_classes):
    _, api = installed
    prompt = _oversized(api)
    data = {"prompt": prompt, "client_id": "c"}
    assert guard.on_prompt(data, pack) is data  # ComfyUI goes on with what the handler returns
    (node_id, sentence), = _marked(prompt).items()
    assert prompt[node_id]["class_type"] == "H3kitUnetLoaderGGUF"  # the DiT loader: nothing is read before it
    assert sentence.startswith("h3kit: 1920x1080 with 241 frames needs ") and ". " not in sentence
    assert "GB" in sentence and "fits (" in sentence and sentence.endswith("run 'h3kit apply'")
    assert '"Queue anyway"' in sentence and "queue_guard: warn" in sentence
    errors = _comfyui_validation(node_classes[prompt[node_id]["class_type"]], prompt[node_id]["inputs"])
    assert errors == [f"h3kit_guard - {sentence}"]


def test_a_graph_that_fits_queue_anyway_and_warn_go_through(guard, pack, installed, caplog):
    _, api = installed
    for prompt in (copy.deepcopy(api), _oversized(api)):
        if prompt != api:
            next(n for n in prompt.values() if n["class_type"].startswith("H3kit"))["inputs"]["h3kit_queue_anyway"] = True
        before = copy.deepcopy(prompt)
        guard.on_prompt({"prompt": prompt}, pack)
        assert prompt == before
    _profile(pack.dir, {"queue_guard": "warn"})
    prompt = _oversized(api)
    with caplog.at_level(logging.WARNING, logger="h3kit"):
        guard.on_prompt({"prompt": prompt}, pack)
    assert _marked(prompt) == {} and len(caplog.records) == 1
    assert "queue_guard: warn, so it was queued" in caplog.records[0].getMessage()


def test_a_refusal_that_came_with_the_prompt_is_dropped(guard, pack, installed):
    _, api = installed
    prompt = copy.deepcopy(api)
    prompt["1"]["inputs"]["h3kit_guard"] = "h3kit: an old refusal"
    guard.on_prompt({"prompt": prompt}, pack)
    assert prompt == api  # it fits: nothing is refused
    prompt = _oversized(api)
    prompt["6"]["inputs"]["h3kit_guard"] = "h3kit: an old refusal"
    guard.on_prompt({"prompt": prompt}, pack)
    assert list(_marked(prompt)) == ["1"]


def test_without_a_cost_file_or_an_h3_node_nothing_is_marked(guard, pack, installed, tmp_path):
    _, api = installed
    (pack.dir / "h3kit_cost.json").unlink()
    prompt = _oversized(api)
    guard.on_prompt({"prompt": prompt}, pack)
    assert _marked(prompt) == {} and pack.cost.problem and "h3kit apply" in pack.cost.problem
    no_h3 = {k: v for k, v in api.items() if not v["class_type"].startswith("MiniMaxH3")}
    assert guard.refuse(copy.deepcopy(no_h3), pack) is None


def test_a_graph_of_comfyuis_nodes_only_is_queued_with_a_warning(guard, pack, installed, caplog):
    _, api = installed
    prompt = _oversized(api)
    for node in prompt.values():
        if node["class_type"].startswith("H3kit"):
            node["class_type"] = {"H3kitUnetLoaderGGUF": "UNETLoader"}.get(node["class_type"], "VAEDecode")
    with caplog.at_level(logging.WARNING, logger="h3kit"):
        assert guard.refuse(prompt, pack) is None
    assert _marked(prompt) == {} and "no h3kit node in the graph can refuse it" in caplog.text


@pytest.mark.parametrize("data", [None, [], "x", {"prompt": []}, {"prompt": {"1": "UNETLoader"}}, {"no": "prompt"},
                                  {"prompt": {"5": {"class_type": "MiniMaxH3ImageToVideo",
                                                    "inputs": {"width": 10**9, "height": 480, "length": 56}}}}])
def test_what_is_no_prompt_is_handed_back_untouched(guard, pack, data):
    before = copy.deepcopy(data)
    assert guard.on_prompt(data, pack) is data and data == before


def test_the_handler_never_raises(guard, pack, installed, caplog):
    _, api = installed

    class Broken:
        def current(self):
            raise RuntimeError("disk on fire")

    pack.cost = Broken()
    prompt = _oversized(api)
    with caplog.at_level(logging.WARNING, logger="h3kit"):
        assert guard.on_prompt({"prompt": prompt}, pack)["prompt"] is prompt
    assert _marked(prompt) == {} and len(caplog.records) == 1 and "disk on fire" in caplog.text


def test_the_cost_file_is_read_again_when_it_changes(pack, installed):
    import os

    model = pack.cost.current()
    assert model is pack.cost.current()  # unchanged: not read again
    path = pack.dir / "h3kit_cost.json"
    doc = json.loads(path.read_text())
    doc["budget_ram_bytes"] = doc["budget_ram_bytes"] * 2
    path.write_text(json.dumps(doc))
    os.utime(path, ns=(1, 10**18))
    assert pack.cost.current().budget_ram_bytes == 2 * model.budget_ram_bytes
    path.write_text("{broken")
    assert pack.cost.current() is None and "not JSON" in pack.cost.problem
