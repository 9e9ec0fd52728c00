"""What the catalog knows about ComfyUI releases in December 2026 (h3kit.data.comfy_versions, issue #43).

Exclusive upper bounds (`below_version`: every 0.35.x), rules for laptop cards only (read from the GPU's
name; an unknown name never gets a laptop rule), known-bad releases an update refuses or only warns about
(`severity`), files that need a newer ComfyUI (`needs`), and the newest release the catalog knows of.
Every entry names its source as FACTS.md gives it; a wrong value is one sentence naming the key.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from h3kit.data import catalog as catalog_mod
from h3kit.data.comfy_versions import FileNeed, gpu_kind_of, parse_comfy_versions
from h3kit.data.yamlio import Problems

CAT = catalog_mod.load()
V = CAT.comfyui_versions
FPS = Path(__file__).parents[1] / "fixtures" / "fingerprints"
GiB = 2**30
LAPTOP = "NVIDIA GeForce RTX 5080 Laptop GPU"
DESKTOP = "NVIDIA GeForce RTX 4060 Ti"


def _sources(rules) -> set[str]:
    return {r.source for r in rules}


# --- the entries ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("version, crashes", [
    ("0.34.2", False), ("0.35.0", True), ("0.35.1", True), ("0.35.2", True), ("0.35.9", True), ("0.36.0", False)])
def test_0_35_x_crashes_cards_of_16_gb_or_less_unless_the_headroom_flag(version, crashes):
    said = V.update_verdict(version, "cuda", 16 * GiB, DESKTOP, [])
    assert any("#16150" in r.source for r in said) is crashes
    assert not any("#16150" in r.source for r in V.update_verdict(version, "cuda", 16 * GiB, DESKTOP,
                                                                   ["--vram-headroom", "1"]))
    assert not any("#16150" in r.source for r in V.update_verdict(version, "cuda", 24 * GiB, DESKTOP, []))
    if crashes:
        rule = next(r for r in said if "#16150" in r.source)
        assert rule.severity == "refuse" and "--vram-headroom 1" in rule.fix and "--disable-comfy-compiler" in rule.fix


def test_the_headroom_flag_has_no_upper_bound_while_16150_is_open():
    (rule,) = [r for r in V.flags if r.args[0] == "--vram-headroom"]
    assert (rule.min_version, rule.max_version, rule.below_version) == ("0.35.0", None, None)
    assert V.flags_for("0.35.9", "cuda", 8 * GiB) == [rule] == V.flags_for("0.47.1", "cuda", 8 * GiB)


@pytest.mark.parametrize("version, oom", [
    ("0.34.2", False), ("0.34.3", True), ("0.35.1", True), ("0.36.0", False)])
def test_the_text_encoder_oom_holds_for_16_gb_laptop_cards_only(version, oom):
    def hit(name, gpu=16 * GiB, backend="cuda"):
        return any("#16138" in r.source for r in V.update_verdict(version, backend, gpu, name, ["--vram-headroom"]))
    assert hit(LAPTOP) is oom
    assert not hit(DESKTOP)                 # a desktop 16 GB card loads it
    assert not hit(None)                    # a card of unknown kind gets no laptop rule
    assert not hit(LAPTOP, gpu=24 * GiB)    # a 24 GB laptop card is not the one reported
    if oom:
        rule = next(r for r in V.update_verdict(version, "cuda", 16 * GiB, LAPTOP, []) if "#16138" in r.source)
        assert "h3kit update --to 0.34.2" in rule.fix and "HostBuffer.read_file_slice" in rule.problem


def test_the_plan_side_without_a_gpu_name_never_gets_the_laptop_rule():
    # known_problems keeps its old call: no name, so no laptop rule.
    assert not any("#16138" in r.source for r in V.known_problems("0.34.3", "cuda", 16 * GiB, []))
    assert any("#16138" in r.source for r in V.known_problems("0.34.3", "cuda", 16 * GiB, [], gpu_name=LAPTOP))


@pytest.mark.parametrize("version, refused", [("0.45.0", False), ("0.45.9", False), ("0.46.0", True),
                                              ("0.47.1", True)])
def test_directml_is_refused_from_0_46_0(version, refused):
    said = V.update_verdict(version, "directml", 8 * GiB, "AMD Radeon RX 6600", [])
    assert bool(said) is refused and all(r.severity == "refuse" and "#17711" in r.source for r in said)
    if refused:
        assert "0.45" in said[0].fix
    assert not any("#17711" in r.source for r in V.update_verdict(version, "cuda", 8 * GiB, DESKTOP, []))


@pytest.mark.parametrize("backend", ["cuda", "rocm", "xpu", "mps"])
def test_the_vae_offload_bug_before_0_39_is_a_warning_on_every_gpu(backend):
    for version, said in (("0.29.0", False), ("0.30.0", True), ("0.38.1", True), ("0.39.0", False)):
        rules = [r for r in V.update_verdict(version, backend, 64 * GiB, None, []) if "#16698" in r.source]
        assert bool(rules) is said, version
        assert all(r.severity == "warn" for r in rules)
    assert not any("#16698" in r.source for r in V.update_verdict("0.33.0", "cpu", None, None, []))


def test_needs_name_the_files_a_release_is_too_old_for():
    names = ["minimax_h3_HyperFlow_flash_fp8.safetensors", "h3_lynnreal_light_vae.safetensors",
             "minimax_h3_fl2va_bf16.safetensors"]
    got = V.needs_for("0.38.1", names)
    assert [(n.what, name) for n, name in got] == [("HyperFlow H3 Flash files", names[0]),
                                                  ("the LynnReal light VAE", names[1])]
    assert [name for _, name in V.needs_for("0.39.0", names)] == [names[0]]
    assert V.needs_for("0.43.0", names) == [] == V.needs_for("0.47.1", names)
    assert V.needs_for(None, names) == [] == V.needs_for("latest", names)
    by = {n.match: n for n in V.needs}
    assert (by["hyperflow"].min_version, by["hyperflow"].source) == ("0.43.0", "FACTS.md December 2026")
    assert (by["lynnreal"].min_version, by["lynnreal"].source) == ("0.39.0", "Comfy-Org/ComfyUI #16657")


def test_a_file_need_matches_a_piece_of_the_name_in_any_case():
    need = FileNeed("x", "HyperFlow", "0.43.0", "s")
    assert need.applies("H3_hyperflow_Flash.gguf") and need.applies("HYPERFLOW.safetensors")
    assert not need.applies("hyper_flow.safetensors") and not need.applies("")


def test_the_newest_release_is_0_47_1_and_newest_tested_is_untouched():
    assert (V.newest_release, V.newest_release_date) == ("0.47.1", "2026-12-02")
    assert "FACTS.md" in V.newest_release_source
    assert V.newest_tested == "0.33.0"


def test_every_known_bad_entry_names_its_comfyui_issue():
    assert {"#16150", "#16138", "#17711", "#16698"} <= {w for s in _sources(V.known_bad) for w in s.split()}
    assert all("Comfy-Org/ComfyUI #" in r.source for r in V.known_bad)
    assert {r.severity for r in V.known_bad} == {"refuse", "warn"}


# --- reading GPU names ------------------------------------------------------------------------------------

@pytest.mark.parametrize("name, kind", [
    (LAPTOP, "laptop"), ("NVIDIA GeForce RTX 4090 Laptop GPU", "laptop"),
    ("NVIDIA GeForce GTX 1070 with Max-Q Design", "laptop"), ("NVIDIA RTX A5000 Laptop GPU", "laptop"),
    (DESKTOP, "desktop"), ("", None), (None, None)])
def test_the_card_kind_comes_from_its_name(name, kind):
    assert gpu_kind_of(name) == kind


def test_every_recorded_fingerprint_reads_as_desktop_or_unknown():
    # The recorded machines are desktops and Macs: an NVIDIA name without "Laptop" is a desktop card; Apple,
    # AMD and Intel names do not say, so no laptop (or desktop) rule holds for them.
    for path in sorted(FPS.glob("*.json")):
        for gpu in json.loads(path.read_text(encoding="utf-8")).get("gpus") or []:
            kind = gpu_kind_of(gpu.get("name"))
            assert kind == ("desktop" if gpu.get("vendor") == "nvidia" else None), (path.name, gpu.get("name"))


# --- wrong values: one sentence each ----------------------------------------------------------------------

class _Doc:
    def where(self, keypath) -> str:
        return "catalog"


BAD = {"backends": ["cuda"], "why": "w", "source": "s", "problem": "p", "fix": "f"}


@pytest.mark.parametrize("section, key", [
    ({"known_bad": [{**BAD, "below_version": 36}]}, "below_version"),
    ({"known_bad": [{**BAD, "min_version": "0.36.0", "below_version": "0.35.0"}]}, "below_version"),
    ({"known_bad": [{**BAD, "gpu_kind": "notebook"}]}, "gpu_kind"),
    ({"known_bad": [{**BAD, "severity": "block"}]}, "severity"),
    ({"flags": [{"args": ["--x"], "backends": ["cuda"], "why": "w", "source": "s", "severity": "warn"}]}, "severity"),
    ({"known_bad": [{**BAD, "below_verison": "0.36.0"}]}, "below_verison"),
    ({"needs": [{"what": "w", "match": "m", "min_version": "soon", "source": "s"}]}, "min_version"),
    ({"needs": [{"what": "w", "min_version": "0.43.0", "source": "s"}]}, "match"),
    ({"needs": [{"what": "w", "match": "m", "min_version": "0.43.0"}]}, "source"),
    ({"needs": "hyperflow"}, "needs"),
    ({"newest_release": "newest"}, "newest_release"),
    ({"newest_release_date": "Dec 2"}, "newest_release_date"),
])
def test_a_bad_value_is_one_problem_naming_its_key(section, key):
    problems = Problems(_Doc())
    parse_comfy_versions(section, problems)
    assert len(problems.items) == 1, problems.items
    said = problems.items[0]
    assert f"{key}'" in said and ("allowed" in said or "must be" in said), said


def test_good_new_keys_are_read():
    problems = Problems(_Doc())
    got = parse_comfy_versions({"known_bad": [{**BAD, "below_version": "0.36.0", "gpu_kind": "laptop",
                                               "severity": "warn"}],
                                "needs": [{"what": "w", "match": " M ", "min_version": "0.43.0", "source": "s"}],
                                "newest_release": "0.47.1", "newest_release_date": "2026-12-02"}, problems)
    assert not problems.items
    (rule,) = got.known_bad
    assert (rule.below_version, rule.gpu_kind, rule.severity) == ("0.36.0", "laptop", "warn")
    assert got.needs == (FileNeed("w", "M", "0.43.0", "s"),)
    assert parse_comfy_versions({"known_bad": [BAD]}, Problems(_Doc())).known_bad[0].severity == "refuse"
