"""calibrate --with-model: the ComfyUI client, the H3 workflow, and why it did not run.

The client test starts the real ComfyUI in H3KIT_COMFYUI_DIR (opt-in) and
runs a tiny workflow that needs no download: an empty latent decoded by a
randomly initialised TAESD-shaped VAE the test writes itself.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import psutil
import pytest
from h3kit.data.fingerprint import Fingerprint
from h3kit import calibrate
from h3kit.calibrate import with_model as real_model
from h3kit.cli.context import Context
from h3kit.comfyui import client as comfy_api
from h3kit.comfyui import workflows
from h3kit.core.units import human_bytes
from h3kit.data import catalog as catalog_mod
from h3kit.data.plan_doc import Plan

COMFY = os.environ.get("H3KIT_COMFYUI_DIR")
FIXTURES = Path(__file__).parents[1] / "fixtures" / "comfyui"


# -- the H3 workflow, structurally ---------------------------------------------------------

PLAN = Plan.from_json(json.loads((Path(__file__).parents[1] / "fixtures" / "plans" / "nvidia-rtx3060-12gb-32gb.json")
                                 .read_text()))


def test_the_measured_graph_is_the_workflow_the_user_opens_cut_to_two_steps(tmp_path):
    cat = catalog_mod.load()
    install = SimpleNamespace(path=tmp_path, node_dir=tmp_path / "custom_nodes" / "ComfyUI-h3kit")
    generated, source = real_model.workflow_for(install, PLAN, cat)
    assert source == "generated from the plan"
    shipped = json.loads(workflows.pack_files(PLAN, cat, PLAN.profile)[f"{workflows.API_DIR}/h3kit_text_to_video.json"])
    assert generated == shipped
    installed = install.node_dir / workflows.API_DIR / "h3kit_text_to_video.json"
    installed.parent.mkdir(parents=True)
    edited = json.loads(json.dumps(shipped))
    next(n for n in edited.values() if n["class_type"] == "MiniMaxH3ImageToVideo")["inputs"]["width"] = 96
    installed.write_text(json.dumps(edited), encoding="utf-8")
    got, source = real_model.workflow_for(install, PLAN, cat)
    assert source == str(installed) and got == edited  # the pack's own file wins
    cut, had = real_model.measured_copy(got)
    assert had == PLAN.settings.steps
    assert next(n for n in cut.values() if n["class_type"] == "BasicScheduler")["inputs"]["steps"] == 2
    assert real_model.canvas_of(cut) == [96, *PLAN.settings.canvas[1:], PLAN.settings.frames]


def test_preflight_names_missing_nodes_and_unknown_choices():
    wf, _ = real_model.workflow_for(SimpleNamespace(path=Path("/nowhere"), node_dir=None), PLAN, catalog_mod.load())
    info = {n["class_type"]: {"input": {"required": {}}} for n in wf.values()}
    assert real_model.preflight(wf, info, "0.31.0") is None
    del info["MiniMaxH3ImageToVideo"]
    reason = real_model.preflight(wf, info, "0.31.0")
    assert "has no node MiniMaxH3ImageToVideo" in reason and "0.31.0" in reason
    info["MiniMaxH3ImageToVideo"] = {"input": {"required": {}}}
    clip = next(n for n in wf.values() if n["class_type"] == "CLIPLoader")["inputs"]
    info["CLIPLoader"] = {"input": {"required": {"clip_name": [[clip["clip_name"]]], "type": [["wan", "ltxv"]]}}}
    assert "CLIPLoader.type = 'minimax'" in real_model.preflight(wf, info, "0.31.0")


# -- "not run" reasons, no server --------------------------------------------------------

def test_not_run_reasons_without_a_server(tmp_path):
    cat = catalog_mod.load()
    install = SimpleNamespace(path=tmp_path, node_dir=None)
    assert "pass --with-model" in calibrate.run_with_model(False, install, cat, plan=PLAN)["reason"]
    assert "needs a ComfyUI" in calibrate.run_with_model(True, None, cat, plan=PLAN)["reason"]
    out = calibrate.run_with_model(True, install, cat, plan=PLAN)
    dit = cat.weight(PLAN.settings.dit_weights).file.name
    assert out["status"] == "not run" and dit in out["reason"]
    wf, _ = real_model.workflow_for(install, PLAN, cat)
    for folder, name in real_model.needed_files(wf):  # all present: the next step would start ComfyUI
        (tmp_path / "models" / folder).mkdir(parents=True, exist_ok=True)
        (tmp_path / "models" / folder / name).write_bytes(b"x")
    assert real_model.missing_files(wf, tmp_path / "models") == []
    assert {f for f, _ in real_model.needed_files(wf)} == {"diffusion_models", "text_encoders", "vae"}


def test_launch_args_follow_the_launcher_and_add_cpu():
    accepted = {"--lowvram", "--cpu", "--reserve-vram", "--listen"}
    kept, dropped = comfy_api.launch_args(["--lowvram", "--reserve-vram", "1.5", "--no-such", "x", "--listen", "0.0.0.0"],
                                          accepted, has_gpu=False)
    assert kept == ["--lowvram", "--reserve-vram", "1.5", "--cpu"]  # --listen is ours: loopback only
    assert dropped == ["--no-such", "x"]
    assert comfy_api.launch_args(["--lowvram"], accepted, has_gpu=True)[0] == ["--lowvram"]


def test_history_and_device_memory_parsers():
    ok = {"status": {"status_str": "success", "completed": True, "messages": []}}
    assert comfy_api.history_outcome(ok) == (True, "the workflow ran")
    failed = {"status": {"status_str": "error", "completed": False, "messages": [
        ["execution_start", {}], ["execution_error", {"node_type": "VAEDecode", "exception_message": "out of memory\nmore"}]]}}
    ran, text = comfy_api.history_outcome(failed)
    assert not ran and "VAEDecode" in text and "out of memory" in text and "more" not in text
    stats = {"devices": [{"name": "cpu", "type": "cpu", "vram_total": 10, "vram_free": 5}]}
    assert comfy_api.device_memory(stats) is None
    stats["devices"].append({"name": "cuda:0 RTX", "type": "cuda", "vram_total": 24, "vram_free": 20})
    assert comfy_api.device_memory(stats) == {"name": "cuda:0 RTX", "total_bytes": 24, "free_bytes": 20}


def test_report_shows_real_model_figures(tmp_path):
    from h3kit.calibrate import report

    real = {"status": "measured", "reason": "ran x at 256x256, 22 frames, 1 step in 12.0 s", "seconds": 12.0,
            "startup_seconds": 9.5, "peak_rss_bytes": 3 << 30, "files": {"dit": "x"}, "canvas": [256, 256, 22],
            "steps": 1, "comfyui_args": ["--cpu"],
            "device": {"name": "cuda:0", "used_before_bytes": 1 << 30, "peak_used_bytes": 9 << 30,
                       "used_after_bytes": 2 << 30}}
    rows = dict(report.real_model_rows(real))
    assert rows["workflow seconds (wall)"] == report.fmt(12.0)
    assert rows["peak RSS of ComfyUI"] == human_bytes(3 << 30)
    assert human_bytes(9 << 30) in rows["device memory before / peak / after"]
    assert report.real_model_rows({"status": "not run", "reason": "not run: x"}) == []


# -- the client against a real ComfyUI ----------------------------------------------------------

TINY = {
    "1": {"class_type": "EmptyLatentImage", "inputs": {"width": 64, "height": 64, "batch_size": 1}},
    "2": {"class_type": "VAELoader", "inputs": {"vae_name": "h3kit_test_taesd.safetensors"}},
    "3": {"class_type": "VAEDecode", "inputs": {"samples": ["1", 0], "vae": ["2", 0]}},
    "4": {"class_type": "PreviewImage", "inputs": {"images": ["3", 0]}},
}


@pytest.mark.comfyui
@pytest.mark.slow
@pytest.mark.skipif(not COMFY, reason="set H3KIT_COMFYUI_DIR to a real ComfyUI checkout to run")
def test_client_runs_a_workflow_on_a_real_comfyui(tmp_path):
    comfy = Path(COMFY).resolve()
    python = next((p for p in (comfy / "venv/bin/python", comfy / ".venv/bin/python") if p.exists()), None)
    assert python, f"no venv in {comfy}"
    models = tmp_path / "models"
    (models / "vae").mkdir(parents=True)
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    made = subprocess.run([str(python), str(FIXTURES / "make_test_vae.py"), str(models / "vae" / "h3kit_test_taesd.safetensors")],
                          cwd=comfy, capture_output=True, text=True, timeout=300, env=env)
    assert made.returncode == 0, made.stderr[-2000:]
    extra = tmp_path / "extra_model_paths.yaml"
    extra.write_text(f"h3kit_test:\n    base_path: {models}\n    vae: vae/\n", encoding="utf-8")
    args, _ = comfy_api.launch_args(["--extra-model-paths-config", str(extra)], {"--extra-model-paths-config", "--cpu"},
                                    has_gpu=False)
    server = comfy_api.ComfyServer(comfy, python, args, tmp_path / "work", env=env)
    with server:
        startup = server.start()
        info = server.object_info()
        assert comfy_api.missing_nodes(TINY, info) == []
        assert comfy_api.combo_problems(TINY, info) == []
        wrong = json.loads(json.dumps(TINY))
        wrong["2"]["inputs"]["vae_name"] = "no_such_vae.safetensors"
        assert comfy_api.combo_problems(wrong, info)
        with pytest.raises(comfy_api.ComfyError, match="HTTP 400"):
            server.queue(wrong)  # ComfyUI's own validation, as one sentence
        measured = comfy_api.run_workflow(server, TINY, timeout=300)
        pid = server.proc.pid
    print("startup", round(startup, 2), "s; workflow", json.dumps(measured))
    assert measured["ran"], measured["message"]
    assert measured["seconds"] > 0 and measured["peak_rss_bytes"] > 50 << 20  # torch alone is more than that
    assert measured["outputs"] == ["4"]
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    assert not (tmp_path / "work" / "output").exists() or not any((tmp_path / "work" / "output").iterdir())
    assert any((tmp_path / "work" / "temp").rglob("*.png"))  # the preview landed in our temp folder, not ComfyUI's


@pytest.mark.comfyui
@pytest.mark.slow
@pytest.mark.skipif(not COMFY, reason="set H3KIT_COMFYUI_DIR to a real ComfyUI checkout to run")
def test_with_model_on_a_comfyui_without_h3_nodes_says_so(monkeypatch):
    """Past the weights check (stood in: nothing is written into the shared ComfyUI), the real server's
    /object_info decides: a ComfyUI without H3 nodes (0.8.0 here) gets 'not run' naming the node."""
    from h3kit.comfyui.locate import find

    comfy = Path(COMFY).resolve()
    cat = catalog_mod.load()
    plan = dataclasses.replace(PLAN, settings=dataclasses.replace(PLAN.settings, comfyui_args=()))
    monkeypatch.setattr(real_model, "missing_files", lambda *a: [])
    ctx = Context(yes=True)
    install = find(str(comfy), None, ctx, need_write=False)
    out = calibrate.run_with_model(True, install, cat, plan=plan, fingerprint=Fingerprint(), ctx=ctx)
    print(json.dumps(out))
    assert out["status"] == "not run"
    # A ComfyUI with H3 nodes passes that check and stops at the absent files instead.
    assert "has no node MiniMaxH3ImageToVideo (H3 support arrived in ComfyUI" in out["reason"] or \
        "the h3kit node pack is not installed here" in out["reason"] or \
        "is not one of this ComfyUI's choices" in out["reason"]
    assert "--cpu" in out["comfyui_args"]


# -- the server always stops (no ComfyUI needed: a stand-in main.py that never answers) ---------------

def _silent_main(tmp_path, ignore_term: bool) -> Path:
    folder = tmp_path / "fake-comfyui"
    folder.mkdir()
    body = "import signal, time\n"
    if ignore_term:
        body += "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    body += "print('started', flush=True)\ntime.sleep(120)\n"
    (folder / "main.py").write_text(body, encoding="utf-8")
    return folder


@pytest.mark.skipif(os.name != "posix", reason="process groups and SIGTERM")
def test_a_server_that_never_answers_is_stopped_with_one_sentence(tmp_path):
    server = comfy_api.ComfyServer(_silent_main(tmp_path, False), sys.executable, [], tmp_path / "work")
    with pytest.raises(comfy_api.ComfyError, match=r"did not answer on http://127\.0\.0\.1:\d+ within 1 s"):
        with server:
            server.start(timeout=1)
    assert server.proc.poll() is not None


@pytest.mark.skipif(os.name != "posix", reason="process groups and SIGTERM")
def test_a_server_ignoring_terminate_is_killed_and_ctrl_c_stops_it(tmp_path):
    server = comfy_api.ComfyServer(_silent_main(tmp_path, True), sys.executable, [], tmp_path / "work")
    server.stop = lambda timeout=0.5, _stop=server.stop: _stop(timeout)  # keep the test short
    with pytest.raises(KeyboardInterrupt):
        with server:
            with pytest.raises(comfy_api.ComfyError):
                server.start(timeout=1)
            assert server.proc.poll() is None  # still running after the failed start, until the with ends
            raise KeyboardInterrupt
    assert server.proc.returncode == -9  # SIGTERM ignored: killed


# -- seconds per step and the comparison with the estimate -------------------------------------------

def test_with_steps_changes_steps_and_seed_only():
    wf, _ = real_model.workflow_for(SimpleNamespace(path=Path("/nowhere"), node_dir=None), PLAN, catalog_mod.load())
    one = real_model.with_steps(wf, 1, 101)
    assert any(n["class_type"] == "BasicScheduler" and n["inputs"]["steps"] == 1 for n in one.values())
    assert any(n["class_type"] == "RandomNoise" and n["inputs"]["noise_seed"] == 101 for n in one.values())
    changed = [k for k in wf if wf[k] != one[k]]
    assert {one[k]["class_type"] for k in changed} <= {"BasicScheduler", "RandomNoise", "KSampler"}
    ks = {"1": {"class_type": "KSampler", "inputs": {"steps": 20, "seed": 0}}}
    assert real_model.with_steps(ks, 2, 7)["1"]["inputs"] == {"steps": 2, "seed": 7}


def test_step_seconds_is_the_difference_of_two_warm_runs():
    seen = []

    def run_one(graph):
        steps = next(n["inputs"]["steps"] for n in graph.values() if "steps" in n["inputs"])
        seen.append(steps)
        return {"ran": True, "seconds": 4.0 + 2.5 * steps}

    ks = {"1": {"class_type": "KSampler", "inputs": {"steps": 20, "seed": 0}}}
    out = real_model.step_seconds(run_one, ks)
    assert seen == [1, 2] and out["status"] == "measured" and out["seconds_per_step"] == pytest.approx(2.5)
    failed = real_model.step_seconds(lambda g: {"ran": False, "message": "out of memory"}, ks)
    assert failed["status"] == "error" and "out of memory" in failed["reason"]


def test_execution_seconds_reads_comfyuis_timestamps():
    entry = {"status": {"completed": True, "messages": [["execution_start", {"timestamp": 1000}],
                                                        ["execution_cached", {"nodes": []}],
                                                        ["execution_success", {"timestamp": 3500}]]}}
    assert real_model.execution_seconds(entry) == 2.5
    assert real_model.execution_seconds({"status": {"messages": []}}) is None


def test_compare_puts_measured_beside_estimated_in_percent():
    real = {"status": "measured", "peak_rss_bytes": 10 * 2**30, "steps_timing": {"seconds_per_step": 4.0},
            "canvas": [256, 256, 22]}
    est = {"kind": "measured", "canvas": [256, 256, 22], "time": {"seconds_per_step": 5.0},
           "memory": {"peak_rss_bytes": 9 * 2**30, "peak_gpu_bytes": None}}
    c = real_model.compare(real, est)
    assert c["seconds_per_step"] == {"measured": 4.0, "estimated": 5.0, "difference_pct": 25.0}
    assert c["peak_rss_bytes"]["difference_pct"] == -10.0 and c["estimate_kind"] == "measured"
    assert real_model.compare({"status": "measured"}, est)["seconds_per_step"]["difference_pct"] is None


def test_the_samplers_progress_bar_gives_seconds_per_step():
    log = ("  0%|          | 0/2 [00:00<?, ?it/s] 50%|#####     | 1/2 [00:05<00:05,  5.32s/it]"
           "100%|##########| 2/2 [00:12<00:00,  6.22s/it]100%|##########| 2/2 [00:12<00:00,  6.08s/it]\n"
           "Prompt executed in 30.15 seconds\n  0%|          | 0/1 [00:00<?, ?it/s]"
           "100%|##########| 1/1 [00:00<00:00,  4.00it/s]\n"
           "  0%|          | 0/10 [00:00<?, ?it/s] 10%|#         | 1/10 [00:01<00:09,  1.00s/it]\n")  # unfinished
    assert real_model.sampler_rates(log) == [(2, 6.08), (1, 0.25)]
    assert real_model.sampler_seconds_per_step(log, 2) == 6.08
    assert real_model.sampler_seconds_per_step(log, 3) is None
    ks = {"1": {"class_type": "KSampler", "inputs": {"steps": 20, "seed": 0}}}
    three = log + "  0%| | 0/2 [00:00<?, ?it/s]100%| | 2/2 [00:12<00:00,  6.50s/it]\n"
    out = real_model.step_seconds(lambda g: {"ran": True, "seconds": 9.0}, ks, lambda: three)
    assert out["seconds_per_step"] == 0.25 and "fastest" in out["how"]  # other work only ever slows a bar
    assert out["sampler_seconds_per_step"] == [6.08, 0.25, 6.5]
