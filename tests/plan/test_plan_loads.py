"""Which files the planner picks by whether ComfyUI loads them, and the profile limits it explains.

The catalog's file.comfyui_loads (stock | with_loader_pack | unknown |
reported_broken) decides the order: files that load first, reported-broken
ones only when nothing else fits, and then with a warning naming the report.
"""

from __future__ import annotations

import copy
import dataclasses
import json
from pathlib import Path

import pytest

from h3kit.data.fingerprint import Fingerprint
from h3kit.data import catalog as catalog_mod
from h3kit.data import config as config_mod
from h3kit.data.catalog import Machine
from h3kit.plan import make_plan as _make_plan

FP_DIR = Path(__file__).parents[1] / "fixtures" / "fingerprints"
FPS = {p.stem: json.loads(p.read_text()) for p in sorted(FP_DIR.glob("*.json"))}
CAT = catalog_mod.load()
PROFILES = catalog_mod.load_profiles(CAT)


def make_plan(fp: dict, **kw) -> dict:
    """The planner's h3kit.plan/1 document over the shipped catalog and profiles, loaded once for the module."""
    return _make_plan(Fingerprint.from_json(fp), CAT, PROFILES, **kw).to_json()


def _plan_doc(*args, **kw) -> dict:
    """The planner's h3kit.plan/1 document over another catalog."""
    return _make_plan(*args, **kw).to_json()


def _config(text: str, tmp_path: Path) -> config_mod.Config:
    path = tmp_path / "config.yaml"
    path.write_text(text)
    return config_mod.load(path)


def _chosen(plan: dict, lora: bool = False) -> list:
    """The planned files (with the preset's LoRA when `lora`: it has a load report but no format evidence)."""
    s = plan["settings"]
    return [CAT.weight(s[k]) for k in ("dit_weights", "text_encoder_weights", "vae_weights", "audio_vae_weights")
            + (("lora",) if lora else ()) if s.get(k)]


@pytest.mark.parametrize("name", sorted(FPS))
def test_every_file_that_is_not_known_to_load_is_warned_about_with_its_source(name):
    plan = make_plan(FPS[name])
    # the preset's LoRA is a planned file too, with its own load report
    assert set(plan["comfyui_loads"]) == {"dit", "text_encoder", "vae", "audio_vae"} | ({"lora"} if plan["settings"]["lora"] else set())
    for w in _chosen(plan, lora=True):
        assert plan["comfyui_loads"][w.part] == w.comfyui_loads
        name_ = w.file.name
        if w.comfyui_loads == "reported_broken":
            warning = next(x for x in plan["warnings"] if name_ in x)
            assert "reported not to load" in warning and w.file.comfyui_loads_source in warning
            assert any(r.startswith("Fallback:") and name_ in r and w.file.comfyui_loads_source in r
                       for r in plan["rationale"])
        elif w.comfyui_loads == "with_loader_pack":
            pack = w.file.loader_pack
            assert any(name_ in r and f"custom node pack {pack}" in r for r in plan["rationale"])
        elif w.comfyui_loads == "stock":
            assert not any(name_ in x for x in plan["warnings"])


@pytest.mark.parametrize("name", sorted(FPS))
def test_a_reported_broken_dit_is_chosen_only_when_no_loadable_runnable_one_fits(name, tmp_path):
    """Force each better-loading DiT the machine can run: none of them may fit, or the fallback was wrong."""
    plan = make_plan(FPS[name])
    dit = CAT.weight(plan["settings"]["dit_weights"])
    if not dit.load_tier or not plan["fits"]:
        return
    machine = Machine.from_fingerprint(Fingerprint.from_json(FPS[name]))
    profile = PROFILES[plan["profile"]]
    for alt in CAT.dit:
        if alt.load_tier < dit.load_tier and alt.format in profile.settings.formats \
                and CAT.runnable(alt.format, machine)[0]:
            forced = make_plan(FPS[name], profile=plan["profile"],
                               config=_config(f"overrides:\n  dit_weights: {alt.id}\n", tmp_path))
            assert not forced["fits"], alt.id


def _as_before_h3kits_loaders(parts=("dit", "text_encoder")) -> catalog_mod.Catalog:
    """The shipped catalog with h3kit's GGUF loader nodes taken away for `parts`: the metadata-less H3 GGUFs are
    reported not to load again (stock ComfyUI-GGUF refuses them), as before tests/real_comfyui/test_gguf_loaders_real_comfyui.py."""
    def back(ws):
        return [dataclasses.replace(w, file=dataclasses.replace(w.file, comfyui_loads="reported_broken"))
                if w.comfyui_loads == "with_h3kit_loader" and w.part in parts else w for w in ws]
    return dataclasses.replace(CAT, dit=back(CAT.dit), text_encoder=back(CAT.text_encoder))


BEFORE = _as_before_h3kits_loaders()
BEFORE_DIT = _as_before_h3kits_loaders(("dit",))


def test_loadable_files_beat_a_higher_quality_file_reported_broken():
    """Without h3kit's loader the 3060 would get the pruned Q8_0 GGUF (quality 97), which stock ComfyUI-GGUF
    rejects; it gets the stock int8_convrot file (96) at the same canvas and frames."""
    plan = _plan_doc(Fingerprint.from_json(FPS["nvidia-rtx3060-12gb-32gb"]), BEFORE, PROFILES)
    assert plan["settings"]["quantization"] == "int8_convrot" and plan["fits"]
    assert set(plan["comfyui_loads"].values()) == {"stock"} and plan["warnings"] == []
    assert plan["settings"]["max_canvas"] == [1024, 576] and plan["settings"]["max_frames"] == 243
    # with h3kit's loader node the Q8_0 file loads too, but ComfyUI's own loader comes first where it fits
    plan = make_plan(FPS["nvidia-rtx3060-12gb-32gb"])
    assert plan["settings"]["dit_weights"] == "h3-dit-pruned-int8_convrot" and plan["comfyui_loads"]["dit"] == "stock"
    # where no stock file fits (8 GB, a driver too old for int8_convrot), h3kit's loader runs the GGUF
    plan = make_plan(FPS["nvidia-rtx4060-8gb-16gb"])
    assert plan["settings"]["dit_weights"] == "h3-dit-pruned-q4_k_m" and plan["comfyui_loads"]["dit"] == "with_h3kit_loader"
    line = next(r for r in plan["rationale"] if "H3kitUnetLoaderGGUF" in r)
    assert "tests/real_comfyui/test_gguf_loaders_real_comfyui.py" in line and "Unknown model architecture" in line


def test_a_loader_pack_file_is_preferred_to_a_broken_one_and_named(tmp_path):
    # Without h3kit's streamer (which would run the stock bf16 file on this card) the Arc holds a GGUF.
    plan = _plan_doc(Fingerprint.from_json(FPS["intel-arcb580-12gb-32gb"]), BEFORE_DIT, PROFILES,
                      config=_config("overrides:\n  stream_dit: off\n", tmp_path))
    assert plan["settings"]["dit_weights"] == "h3-dit-full-q4_k_m"
    assert plan["comfyui_loads"]["dit"] == "with_loader_pack"
    line = next(r for r in plan["rationale"] if "custom node pack" in r)
    assert "ComfyUI-GGUF" in line and "github.com/city96/ComfyUI-GGUF" in line and "--with-loaders" in line


def test_a_broken_file_is_never_planned_by_itself_the_plan_says_what_would_work(tmp_path):
    """Before h3kit's loader the 4060 got the pruned Q4_K_M GGUF that stock ComfyUI-GGUF refuses; now a plan never
    picks a file reported not to load: nothing that loads fits (with ComfyUI's dynamic VRAM kept, stream_dit: off),
    and the plan says so in one sentence."""
    plan = _plan_doc(Fingerprint.from_json(FPS["nvidia-rtx4060-8gb-16gb"]), BEFORE, PROFILES,
                     config=_config("overrides:\n  stream_dit: off\n", tmp_path))
    assert not plan["fits"] and plan["comfyui_loads"]["dit"] != "reported_broken"
    assert plan["blocked"].startswith("Nothing that loads in ComfyUI fits this machine")
    assert "it would work with more RAM (at least" in plan["blocked"]
    # with h3kit's loader node the same file loads and fits
    plan = make_plan(FPS["nvidia-rtx4060-8gb-16gb"])
    assert plan["fits"] and plan["blocked"] is None and plan["comfyui_loads"]["dit"] == "with_h3kit_loader"


def test_a_broken_file_the_user_forces_is_kept_and_warned_as_theirs(tmp_path):
    plan = _plan_doc(Fingerprint.from_json(FPS["nvidia-rtx4090-24gb-64gb"]), BEFORE, PROFILES,
                      config=_config("overrides:\n  quantization: q2_k\n", tmp_path))
    assert plan["settings"]["dit_weights"] == "h3-dit-pruned-q2_k"
    warning = next(w for w in plan["warnings"] if "Q2_K.gguf" in w)
    assert "you set it" in warning and "config.yaml:2" in warning
    assert not any(r.startswith("Fallback: DiT") for r in plan["rationale"])
    assert "Q2_K.gguf is reported not to load" in plan["blocked"] and "--allow-unverified" in plan["blocked"]


def test_where_no_text_encoder_loads_the_plan_does_not_fit_and_says_so():
    """An AMD card runs no CUDA-only text encoder; without h3kit's GGUF text-encoder loader nothing loads."""
    plan = _plan_doc(Fingerprint.from_json(FPS["amd-rx7900xtx-24gb-64gb"]), BEFORE, PROFILES)
    assert not plan["fits"] and plan["blocked"].startswith("Nothing that loads in ComfyUI runs here for the text encoder")
    assert make_plan(FPS["amd-rx7900xtx-24gb-64gb"])["fits"]


def test_among_loadable_files_quality_decides():
    """A machine with room for everything still gets bf16 over the stock int8/fp8 files."""
    plan = make_plan(FPS["nvidia-rtx6000ada-48gb-128gb"])
    assert plan["settings"]["quantization"] == "bf16" and set(plan["comfyui_loads"].values()) == {"stock"}


def _card(name: str, gib: float) -> dict:
    fp = copy.deepcopy(FPS[name])
    fp["gpus"][0]["memory_total_bytes"] = int(gib * 2**30)
    return fp


def test_16gb_cards_stop_at_209_frames_and_say_why(tmp_path):
    cfg = _config("overrides:\n  max_canvas: [864, 480]\n", tmp_path)
    plan = make_plan(_card("nvidia-rtx4090-24gb-64gb", 16), config=cfg)
    assert plan["profile"] == "nvidia-16gb" and plan["fits"]
    assert plan["settings"]["max_frames"] == 209  # 5 + 17*12, between the ladder's 124 and 243
    why = next(r for r in plan["rationale"] if r.startswith("max_frames 209"))
    assert "VAE decode" in why and "FACTS.md" in why
    # a 24 GB card with the same canvas is not capped
    assert make_plan(FPS["nvidia-rtx4090-24gb-64gb"], config=cfg)["settings"]["max_frames"] == 243


def test_the_user_can_lift_the_209_cap(tmp_path):
    cfg = _config("overrides:\n  max_canvas: [864, 480]\n  max_frames: 243\n", tmp_path)
    plan = make_plan(_card("nvidia-rtx4090-24gb-64gb", 16), config=cfg)
    assert plan["settings"]["max_frames"] == 243
    assert not any(r.startswith("max_frames 209") for r in plan["rationale"])


def test_a_users_workflow_defaults_win_and_are_checked_against_the_memory_limits(tmp_path):
    cfg = _config("overrides:\n  canvas: [1344, 768]\n  frames: 362\n  steps: 8\n", tmp_path)
    plan = make_plan(FPS["nvidia-rtx4060-8gb-16gb"], config=cfg)
    s = plan["settings"]
    assert (s["canvas"], s["frames"], s["steps"]) == ([1344, 768], 362, 8)
    assert s["max_canvas"] != [1344, 768] and plan["settings_source"]["canvas"].startswith("override")
    assert any("beyond the largest canvas that fits" in w for w in plan["warnings"])
    assert any("beyond the most frames that fit" in w for w in plan["warnings"])
    assert any("8 steps, as override" in r for r in plan["rationale"])


# -- every reference machine: only files that load, in formats that run there -----------------------------

GOLDEN = {p.stem: json.loads(p.read_text()) for p in sorted((Path(__file__).parents[1] / "fixtures" / "plans").glob("*.json"))}


@pytest.mark.parametrize("name", sorted(FPS))
def test_no_reference_plan_holds_a_file_reported_not_to_load_or_a_format_failing_on_its_backend(name):
    assert set(GOLDEN) == set(FPS)
    for plan in (make_plan(FPS[name]), GOLDEN[name]):
        machine = Machine.from_fingerprint(Fingerprint.from_json(FPS[name]))
        for w in _chosen(plan):
            assert w.comfyui_loads != "reported_broken", (name, w.id)
            ev = CAT.evidence(w.format, machine, w.part)
            assert ev.status != "fails", (name, w.id, ev.phrase())
            assert plan["evidence"][w.part] == {"format": w.format, "status": ev.status, "kind": ev.kind,
                                                "source": ev.source, "backend": ev.backend}
        line = next(r for r in plan["rationale"] if r.startswith("Evidence that the formats run here"))
        assert "No format probe was passed" in line
        assert (plan["blocked"] is None) == plan["fits"], name  # no reference plan picks a doubtful file by itself


def test_a_mac_text_encoder_is_judged_by_the_cpu_it_runs_on():
    """ComfyUI keeps quantized text encoders on the CPU on a Mac (PR #13070): the placement rule is catalog data."""
    mac = Machine.from_fingerprint(Fingerprint.from_json(FPS["apple-m2max-64gb"]))
    te = CAT.evidence("q4_k_m", mac, "text_encoder")
    assert te.backend == "cpu" and "PR #13070" in te.source
    assert CAT.evidence("q4_k_m", mac, "dit").backend == "mps"
    for fmt in ("int8_convrot", "fp8_scaled", "nvfp4", "nvfp4_awq", "int8"):
        ok, why = CAT.runnable(fmt, mac, "vae" if fmt == "int8" else "dit")
        assert not ok and "fails on mps (reported: " in why, fmt
    assert "comfy-kitchen #92" in CAT.runnable("int8_convrot", mac)[1]
    assert "ComfyUI #8988" in CAT.runnable("nvfp4_awq", mac)[1]


def _probe(backend: str, parts: dict):
    from h3kit.data import format_evidence

    return format_evidence.parse({"schema": format_evidence.SCHEMA, "backend": backend,
                                  "key": {"comfyui_version": "0.33.0", "torch": "2.14.1+cpu", "device": backend},
                                  "parts": {p: {f: {"status": s, "error": None if s == "runs" else "RuntimeError: no"}
                                                for f, s in fs.items()} for p, fs in parts.items()}})


def test_a_format_that_fails_the_probe_is_never_planned_and_the_rationale_names_the_probe():
    fp = FPS["apple-m2pro-32gb"]
    assert make_plan(fp)["settings"]["quantization"] == "bf16"
    probe = _probe("mps", {"dit": {"bf16": "fails"}})
    plan = make_plan(fp, evidence=probe)
    assert plan["settings"]["quantization"] != "bf16"
    assert any("bf16 fails on mps (measured: h3kit's format probe on this machine (ComfyUI 0.33.0" in r
               and "RuntimeError: no" in r for r in plan["rationale"] if r.startswith("Left out:"))
    assert plan["evidence"]["dit"]["kind"] in ("unknown", "reported")


def test_a_measured_run_beats_a_report_and_a_gguf_mix_counts_only_when_all_its_types_ran():
    mac = Machine.from_fingerprint(Fingerprint.from_json(FPS["apple-m2max-64gb"]))
    both = _probe("mps", {"text_encoder": {"q4_k": "runs", "q6_k": "runs"}})
    ev = CAT.evidence("q4_k_m", mac, "text_encoder", both)
    assert (ev.status, ev.kind) == ("runs", "measured") and ev.source == both.source
    half = _probe("mps", {"text_encoder": {"q4_k": "runs"}})  # half a mix measured: the catalog's report decides
    ev = CAT.evidence("q4_k_m", mac, "text_encoder", half)
    assert (ev.kind, ev.status, ev.backend) == ("reported", "runs", "cpu") and "h3kit format probe" in ev.source
    other = _probe("cuda", {"text_encoder": {"q4_k": "fails", "q6_k": "fails"}})  # another machine's probe
    assert CAT.evidence("q4_k_m", mac, "text_encoder", other).kind == "reported"
    # the stock text encoders measured failing here: the measured GGUF is planned
    both = _probe("mps", {"text_encoder": {"q4_k": "runs", "q6_k": "runs", "int8_convrot": "fails",
                                           "nvfp4": "fails", "nvfp4_awq": "fails"}})
    plan = make_plan(FPS["apple-m2max-64gb"], evidence=both)
    assert plan["evidence"]["text_encoder"]["kind"] == "measured"
    line = next(r for r in plan["rationale"] if r.startswith("Evidence that the formats run here"))
    assert "text encoder q4_k_m runs on cpu (measured: h3kit's format probe" in line


def test_the_reported_8gb_setup_is_named_with_why_this_plan_differs():
    """FACTS.md: an 8 GB RTX 5060 laptop + 15 GB RAM ran pruned int8 DiT + nvfp4 text encoder + int8 VAE."""
    plan = make_plan(FPS["nvidia-rtx4060-8gb-16gb"])
    assert "--disable-pinned-memory" in plan["settings"]["comfyui_args"]
    line = next(r for r in plan["rationale"] if r.startswith("Users report a working setup"))
    assert "5060" in line and "int8_convrot needs a PyTorch cu130 build" in line and "(this driver: 12.7)" in line
    assert "video VAE fp16 instead of int8: fp16 fits and ranks higher" in line
    cu130 = copy.deepcopy(FPS["nvidia-rtx4060-8gb-16gb"])
    cu130["gpus"][0].update(cuda_driver_version="13.0", driver_version="580.65")
    plan = make_plan(cu130)
    line = next(r for r in plan["rationale"] if r.startswith("Users report a working setup"))
    assert "h3kit's memory model gives that setup" in line and "RAM" in line
    assert plan["settings"]["text_encoder_weights"] == "h3-te-qwen3vl32b-nvfp4_awq" and plan["fits"]
    assert not any(r.startswith("Users report") for r in make_plan(FPS["nvidia-rtx4090-24gb-64gb"])["rationale"])


def test_plan_cli_takes_a_saved_format_probe_and_refuses_a_bad_one(run_cli, tmp_path):
    probe = _probe("mps", {"dit": {"bf16": "fails"}})
    path = tmp_path / "probe.json"
    path.write_text(json.dumps(probe.to_json()))
    fp = str(FP_DIR / "apple-m2pro-32gb.json")
    code, out, err = run_cli("plan", "--fingerprint", fp, "--format-probe", str(path), "--json")
    assert code == 0, err
    plan = json.loads(out)
    assert plan["settings"]["quantization"] != "bf16"
    assert any("measured: h3kit's format probe on this machine" in r for r in plan["rationale"])
    path.write_text('{"schema": "h3kit.something/1"}')
    code, out, err = run_cli("plan", "--fingerprint", fp, "--format-probe", str(path))
    assert code == 2 and "h3kit.format_probe/1" in err and "Traceback" not in err
    code, out, err = run_cli("plan", "--fingerprint", str(FP_DIR / "cpu-only-8gb.json"))
    assert code == 0 and "NOT READY Nothing that loads in ComfyUI fits this machine" in out
