"""The panel's routes (nodes/h3kit_panel/routes.py, preset.py) as their cores: bytes in, (HTTP status, JSON) out.

No ComfyUI and no aiohttp: the handlers are thin over these functions, and `register` does nothing outside
ComfyUI. The estimate gives the plan's own figures on the installed workflows, a fix that fits for a graph that
does not, and a 400 with one sentence for every body that is not a graph. The preset switch runs a stand-in for
h3kit (a small script that talks as `h3kit apply --json` does) and reports its progress and outcome.
"""

from __future__ import annotations

import json
import sys
import textwrap
import time
from pathlib import Path

import pytest

from h3kit.comfyui import workflows
from h3kit.data import catalog as catalog_mod
from h3kit.fingerprint.schema import load_file
from h3kit.plan import make_plan
from pack_support import pack_module

FINGERPRINTS = Path(__file__).resolve().parents[1] / "fixtures" / "fingerprints"


@pytest.fixture(scope="module")
def installed():
    """A 16 GB CPU-only plan and the API format of every workflow it installs."""
    cat = catalog_mod.load()
    plan = make_plan(load_file(FINGERPRINTS / "cpu-only-16gb.json"), cat, catalog_mod.load_profiles(cat))
    files = workflows.pack_files(plan, cat, plan.profile)
    return plan, {n: json.loads(b) for n, b in files.items() if n.startswith(workflows.API_DIR)}, \
        {n: json.loads(b) for n, b in files.items() if n.startswith(workflows.UI_DIR)}


@pytest.fixture
def routes():
    return pack_module("h3kit_panel.routes")


@pytest.fixture
def pack(tmp_path, installed):
    plan, _, _ = installed
    (tmp_path / "h3kit_cost.json").write_text(json.dumps(dict(plan.cost)), encoding="utf-8")
    _profile(tmp_path, {"preset": "fast", "vae_tile_size": 256})
    return pack_module("h3kit_panel.sources").Pack.at(tmp_path)


def _profile(folder: Path, settings: dict, h3kit: dict | None = None) -> None:
    doc = {"schema": "h3kit.node-profile/1", "profile": "cpu-only", "h3kit_version": "0.9.0", "settings": settings}
    if h3kit is not None:
        doc["h3kit"] = h3kit
    (folder / "h3kit_profile.json").write_text(json.dumps(doc), encoding="utf-8")


def _body(doc) -> bytes:
    return json.dumps(doc).encode("utf-8")


def _near(a, b) -> bool:
    return a is None and b is None or abs(a - b) <= 1e-6 * abs(b)


# -- status and report -----------------------------------------------------------------------


def test_status_of_an_installed_pack(routes, pack, installed, tmp_path):
    plan, _, _ = installed
    jobs = pack_module("h3kit_panel.preset").PresetJobs(pack)
    doc = routes.status_document(pack, jobs)
    cost = dict(plan.cost)
    assert doc["schema"] == "h3kit.panel-status/1" and doc["profile"] == "cpu-only" and doc["h3kit_version"] == "0.9.0"
    assert doc["machine"] == cost["machine"] and doc["machine"].startswith("CPU only")
    assert doc["budget"] == {"gpu_bytes": None, "ram_bytes": cost["budget_ram_bytes"]}
    d = cost["defaults"]
    assert doc["defaults"] == {"canvas": [d["width"], d["height"]], "frames": d["frames"], "steps": d["steps"],
                               "cfg": d["cfg"]}
    assert doc["target_minutes"] == cost["target_minutes"] and doc["queue_guard"] == "refuse"
    assert doc["cost"] == {"available": True, "problem": None} and doc["settings"]["vae_tile_size"] == 256
    assert doc["presets"] == ["auto", "fast", "balanced", "quality"] and doc["preset"] == "fast"
    assert doc["calibration"] is None and doc["preset_job"] is None and doc["profile_problem"] is None
    json.dumps(doc)  # JSON all the way down


def test_status_without_the_packs_files_says_what_to_run(routes, tmp_path):
    pack = pack_module("h3kit_panel.sources").Pack.at(tmp_path)
    doc = routes.status_document(pack, pack_module("h3kit_panel.preset").PresetJobs(pack))
    assert doc["cost"]["available"] is False and "run 'h3kit apply'" in doc["cost"]["problem"]
    assert doc["budget"] is None and doc["defaults"] is None and doc["profile"] is None
    assert "h3kit apply" in doc["profile_problem"]


def test_the_calibration_and_its_report(routes, pack, tmp_path):
    report = tmp_path / "reports" / "latest.html"
    summary = {"created": "2026-12-07T10:00:00+00:00", "lines": ["disk 1.8 GB/s"], "report_html": str(report)}
    (pack.dir / "h3kit_calibration.json").write_text(json.dumps(summary), encoding="utf-8")
    assert routes.report_file(pack)[0] == 404  # named, not there
    status, doc = routes.report_file(pack)
    assert doc["error"].endswith("run 'h3kit calibrate'")
    calibration = routes.status_document(pack, pack_module("h3kit_panel.preset").PresetJobs(pack))["calibration"]
    assert calibration == {"lines": ["disk 1.8 GB/s"], "report_html": None, "created": summary["created"]}
    report.parent.mkdir()
    report.write_text("<html></html>")
    assert routes.report_file(pack) == (200, report)
    summary["report_html"] = str(tmp_path / "h3kit_profile.json")  # only an .html file is served
    (pack.dir / "h3kit_calibration.json").write_text(json.dumps(summary), encoding="utf-8")
    assert routes.report_file(pack)[0] == 404


# -- estimate --------------------------------------------------------------------------------


def test_every_installed_workflow_gets_the_plans_figures(routes, pack, installed):
    plan, api, ui = installed
    e = plan.to_json()["estimates"]
    for name, doc in [*api.items(), *ui.items()]:
        status, out = routes.estimate_response(_body({"prompt" if name in api else "workflow": doc}), pack)
        assert status == 200 and out["schema"] == "h3kit.estimate/1" and out["available"], (name, out)
        assert _near(out["minutes"], e["minutes_per_clip"]), (name, out["minutes"], e["minutes_per_clip"])
        assert out["peak_ram_bytes"] == e["workflow"]["peak_ram_bytes"], name
        assert out["peak_gpu_bytes"] is None and out["budget"]["gpu_bytes"] is None
        # this CPU's plan is itself far past its target: the panel says so, and nothing smaller comes within it
        assert out["fits"] is True and out["slow"] is True and out["fix"] is None, name
        assert out["message"] == (f"{out['canvas'][0]}x{out['canvas'][1]} with {out['frames']} frames fits but takes "
                                  f"about {round(out['minutes'])} min a clip, more than 2 times this plan's 15 min "
                                  "target; nothing smaller on this plan's ladders comes within that"), out["message"]
        assert out["notes"] == [] and out["guard_node"] and out["targets"]["canvas"] and out["h3_nodes"]


def test_a_graph_that_fits_in_time_gets_its_peaks_against_both_budgets(routes, tmp_path):
    cat = catalog_mod.load()
    plan = make_plan(load_file(FINGERPRINTS / "nvidia-rtx4060-8gb-16gb.json"), cat, catalog_mod.load_profiles(cat))
    (tmp_path / "h3kit_cost.json").write_text(json.dumps(dict(plan.cost)), encoding="utf-8")
    pack = pack_module("h3kit_panel.sources").Pack.at(tmp_path)
    api = json.loads(workflows.pack_files(plan, cat, plan.profile)[f"{workflows.API_DIR}/{workflows.NAMES['t2v']}.json"])
    status, out = routes.estimate_response(_body({"prompt": api}), pack)
    unit = 10**9  # decimal GB, as the terminal prints them
    assert status == 200 and out["fits"] is True and out["slow"] is False and out["fix"] is None
    words = pack_module("h3kit_panel.estimate").minutes_words(out["minutes"])
    assert out["message"] == (f"{words} a clip, peaks at {out['peak_ram_bytes'] / unit:.1f} of "
                              f"{out['budget']['ram_bytes'] / unit:.1f} GB RAM and {out['peak_gpu_bytes'] / unit:.1f} of "
                              f"{out['budget']['gpu_bytes'] / unit:.1f} GB GPU")
    assert out["guard_node"] == "1" and api["1"]["class_type"] == "H3kitUnetLoaderGGUF"
    assert out["target_inputs"]["frames"] == [out["targets"]["frames"], "length"]


def test_an_oversized_graph_gets_a_fix_that_fits(routes, pack, installed):
    _, api, _ = installed
    prompt = json.loads(json.dumps(api[f"{workflows.API_DIR}/{workflows.NAMES['t2v']}.json"]))
    status, first = routes.estimate_response(_body({"prompt": prompt}), pack)
    canvas = prompt[first["targets"]["canvas"]]["inputs"]
    canvas.update(width=1920, height=1080, length=241)
    status, out = routes.estimate_response(_body({"prompt": prompt}), pack)
    assert status == 200 and out["fits"] is False and out["short"] and out["fix"]["fits"] is True
    short = out["short"][0]
    assert out["message"].startswith(f"1920x1080 with 241 frames needs {short['need_bytes'] / 10**9:.1f} GB RAM at "
                                     f"its {short['phase']} peak, the budget is ")
    assert "fits (" in out["message"] and ". " not in out["message"]
    canvas.update(width=out["fix"]["canvas"][0], height=out["fix"]["canvas"][1], length=out["fix"]["frames"])
    prompt[out["targets"]["steps"]]["inputs"]["steps"] = out["fix"]["steps"]
    again = routes.estimate_response(_body({"prompt": prompt}), pack)[1]
    assert again["fits"] is True and _near(again["minutes"], out["fix"]["minutes"])


def test_a_slow_graph_gets_a_warning_and_a_quicker_setting(routes, pack, installed):
    _, api, _ = installed
    prompt = json.loads(json.dumps(api[f"{workflows.API_DIR}/{workflows.NAMES['t2v']}.json"]))
    first = routes.estimate_response(_body({"prompt": prompt}), pack)[1]
    prompt[first["targets"]["steps"]]["inputs"]["steps"] = 1000
    out = routes.estimate_response(_body({"prompt": prompt}), pack)[1]
    assert out["fits"] is True and out["slow"] is True
    assert "a clip, more than 2 times this plan's" in out["message"] and "min target; " in out["message"]
    assert out["fix"] is None or out["fix"]["minutes"] < out["minutes"]


def test_a_graph_loading_other_files_is_priced_with_the_plans_and_says_so(routes, pack, installed):
    _, api, _ = installed
    prompt = json.loads(json.dumps(api[f"{workflows.API_DIR}/{workflows.NAMES['t2v']}.json"]))
    loader = next(n for n in prompt.values() if "unet_name" in n["inputs"])
    loader["inputs"]["unet_name"] = "someone_elses_dit.safetensors"
    out = routes.estimate_response(_body({"prompt": prompt}), pack)[1]
    assert out["notes"] == [f"the graph loads someone_elses_dit.safetensors as its DiT and the plan "
                            f"{dict(installed[0].cost)['files']['dit']}: the figures are for the plan's files"]


def test_without_a_cost_file_the_estimate_says_why(routes, pack, installed):
    _, api, _ = installed
    (pack.dir / "h3kit_cost.json").unlink()
    status, out = routes.estimate_response(_body({"prompt": next(iter(api.values()))}), pack)
    assert status == 200 and out["available"] is False and "run 'h3kit apply'" in out["message"]
    assert out["canvas"] and out["guard_node"]


def _bad_bodies(api: dict) -> list:
    t2v = api[f"{workflows.API_DIR}/{workflows.NAMES['t2v']}.json"]
    no_h3 = {k: v for k, v in t2v.items() if not v["class_type"].startswith(("MiniMaxH3", "H3kit"))}
    absurd = json.loads(json.dumps(t2v))
    next(n for n in absurd.values() if "width" in n["inputs"])["inputs"]["width"] = 10**9
    return [(b"{not json", "not_json"), (b"\xff\xfe", "not_json"), (b"[]", "not_object"), (b"{}", "no_graph"),
            (_body({"prompt": "x"}), "bad_graph"), (_body({"prompt": {"1": {}}}), "bad_graph"),
            (_body({"prompt": no_h3}), "no_h3_node"), (_body({"prompt": absurd}), "bad_graph"),
            (_body({"workflow": {"nodes": "x"}}), "bad_graph"),
            (b'{"prompt": "' + b"x" * (10 * 2**20) + b'"}', "too_large")]


def test_every_bad_body_gets_400_and_one_sentence(routes, pack, installed):
    for body, code in _bad_bodies(installed[1]):
        status, doc = routes.estimate_response(body, pack)
        assert status == 400 and doc["code"] == code, (body[:40], doc)
        assert isinstance(doc["error"], str) and ". " not in doc["error"] and "Traceback" not in doc["error"], doc
    assert routes.too_large(11 * 2**20)[1]["error"] == "the request is 11.0 MB; h3kit's estimate takes at most 4 MB"
    assert routes.too_large(None)[1]["error"] == "the request is over 4 MB; h3kit's estimate takes at most 4 MB"


# -- outside ComfyUI -------------------------------------------------------------------------


def test_register_does_nothing_outside_comfyui(routes):
    assert routes.register() is False  # no `server` module: the tests, h3kit's own import of the pack
    fake = type(sys)("server")
    fake.PromptServer = type("PromptServer", (), {"instance": None})
    assert routes.register(fake) is False
    fake.PromptServer.instance = type("Instance", (), {"routes": [type("R", (), {"path": "/h3kit/status"})()],
                                                       "add_on_prompt_handler": lambda self, f: None})()
    assert routes.register(fake) is False  # registered already: aiohttp would refuse the routes a second time


def test_widget_names_come_from_comfyuis_node_classes(routes, monkeypatch):
    nodes = type(sys)("nodes")
    nodes.NODE_CLASS_MAPPINGS = {"KSampler": type("KSampler", (), {"INPUT_TYPES": classmethod(lambda cls: {
        "required": {"model": ("MODEL",), "seed": ("INT", {}), "steps": ("INT", {}), "cfg": ("FLOAT", {})}})})}
    monkeypatch.setitem(sys.modules, "nodes", nodes)
    assert routes.comfy_widget_names("KSampler") == ["seed", None, "steps", "cfg"]
    assert routes.comfy_widget_names("NotLoaded") is None


# -- the preset switch -----------------------------------------------------------------------

FAKE_H3KIT = '''
    import json, os, sys, time
    args = sys.argv[1:]
    with open(os.environ["FAKE_RECORD"], "w") as f:
        json.dump({"args": args, "home": os.environ.get("H3KIT_HOME")}, f)
    for i in range(60):
        print(f"step {i}", file=sys.stderr, flush=True)
    if os.environ.get("FAKE_WAIT"):
        while not os.path.exists(os.environ["FAKE_WAIT"]):
            time.sleep(0.02)
    if args[args.index("--preset") + 1] == "quality":
        print(json.dumps({"error": "There is no room for the quality preset.", "fix": "Choose fast.",
                          "exit_code": 2}, indent=2))
        sys.exit(2)
    print("a stray line first")
    print(json.dumps({"schema": "h3kit.apply/1", "profile": "cpu-only", "restart_needed": True,
                      "restart_why": "The launch flags changed: restart ComfyUI."}, indent=2))
'''


@pytest.fixture
def fake_h3kit(tmp_path, pack):
    script = tmp_path / "fake_h3kit.py"
    script.write_text(textwrap.dedent(FAKE_H3KIT), encoding="utf-8")
    record = tmp_path / "record.json"
    _profile(pack.dir, {"preset": "balanced"}, {"command": [sys.executable, str(script)],
                                                "env": {"H3KIT_HOME": str(tmp_path / "home"),
                                                        "FAKE_RECORD": str(record)},
                                                "comfyui": str(tmp_path / "Comfy UI")})
    return pack_module("h3kit_panel.preset").PresetJobs(pack), record


def test_a_preset_switch_runs_h3kit_apply_and_reports_its_outcome(routes, fake_h3kit, tmp_path):
    jobs, record = fake_h3kit
    status, first = routes.preset_start(_body({"preset": "fast"}), jobs)
    assert status == 202 and first["state"] == "running" and first["preset"] == "fast"
    jobs.wait(60)
    status, job = routes.preset_state(jobs)
    assert status == 200 and job["state"] == "done" and job["exit_code"] == 0 and job["restart_needed"] is True
    assert job["message"] == "The fast preset is applied (profile cpu-only). The launch flags changed: restart ComfyUI."
    assert job["lines"] == [f"step {i}" for i in range(10, 60)]  # the last 50
    ran = json.loads(record.read_text())
    assert ran["args"] == ["apply", "--preset", "fast", "--comfyui", str(tmp_path / "Comfy UI"), "--yes", "--json"]
    assert ran["home"] == str(tmp_path / "home")


def test_a_failed_switch_says_h3kits_error_and_fix(routes, fake_h3kit):
    jobs, _ = fake_h3kit
    assert routes.preset_start(_body({"preset": "quality"}), jobs)[0] == 202
    jobs.wait(60)
    job = jobs.state()
    assert job["state"] == "failed" and job["exit_code"] == 2 and job["restart_needed"] is None
    assert job["message"] == "There is no room for the quality preset. Choose fast."


def test_one_switch_at_a_time(routes, fake_h3kit, tmp_path, monkeypatch):
    jobs, _ = fake_h3kit
    gate = tmp_path / "go"
    monkeypatch.setenv("FAKE_WAIT", str(gate))
    assert routes.preset_start(_body({"preset": "fast"}), jobs)[0] == 202
    status, doc = routes.preset_start(_body({"preset": "balanced"}), jobs)
    assert status == 409 and doc["error"] == "h3kit is already switching to the fast preset; wait for it to finish"
    gate.write_text("")
    jobs.wait(60)
    assert jobs.state()["state"] == "done"


def test_a_switch_past_its_time_is_stopped(fake_h3kit, tmp_path, monkeypatch):
    jobs, _ = fake_h3kit
    monkeypatch.setenv("FAKE_WAIT", str(tmp_path / "never"))
    jobs.timeout_s = 0.5
    jobs.start("fast")
    started = time.monotonic()
    jobs.wait(60)
    assert time.monotonic() - started < 30
    job = jobs.state()
    assert job["state"] == "failed" and job["message"] == "h3kit apply ran past 0.5 s and was stopped"


@pytest.mark.parametrize("body, status, words", [
    (_body({"preset": "turbo"}), 400, "there is no preset named 'turbo'; choose one of: auto, fast, balanced, quality"),
    (_body({}), 400, "there is no preset named 'None'"),
    (b"nope", 400, "the request is not JSON"),
    (None, 400, "the request is over 64 KB"),
    (_body({"preset": "fast"}), 409, "this pack's profile does not say where h3kit is; run 'h3kit apply' once from a "
                                     "terminal"),
])
def test_a_switch_that_cannot_start_says_why(routes, pack, body, status, words):
    jobs = pack_module("h3kit_panel.preset").PresetJobs(pack)  # the profile records no h3kit command
    got, doc = routes.preset_start(body, jobs)
    assert got == status and doc["error"].startswith(words) and jobs.state() is None


def test_a_command_that_cannot_start_fails_the_job(tmp_path, pack):
    preset = pack_module("h3kit_panel.preset")
    _profile(pack.dir, {}, {"command": [str(tmp_path / "no-such-python"), "-m", "h3kit"], "env": {}})
    jobs = preset.PresetJobs(pack)
    jobs.start("auto")
    jobs.wait(60)
    job = jobs.state()
    assert job["state"] == "failed" and job["message"].startswith("h3kit could not be started (")
    assert preset._final_json('{"a": 1}\nnoise') is None and preset._final_json('x\n{"a": 1}\n') == {"a": 1}
