"""What the target ComfyUI's version changes in a plan: the headroom flag on 0.35+ for small cards, the known-bad
releases, files a version is too old to load, and which release a new ComfyUI takes."""

from __future__ import annotations

from pathlib import Path

import pytest
from h3kit.comfyui.versions.releases import releases
from h3kit.data import catalog as catalog_mod
from h3kit.fingerprint.schema import load_file
from h3kit.plan import make_plan

FPS = Path(__file__).parents[1] / "fixtures" / "fingerprints"
CAT = catalog_mod.load()
PROFILES = catalog_mod.load_profiles(CAT)


def _plan(fp: str, version: str | None, **kw):
    return make_plan(load_file(FPS / fp), CAT, PROFILES, comfyui_version=version, **kw)


@pytest.mark.parametrize("fp, version, headroom", [
    ("nvidia-rtx4060-8gb-16gb.json", "0.35.0", True),
    ("nvidia-rtx4060-8gb-16gb.json", "0.38.1", True),
    ("nvidia-rtx3060-12gb-32gb.json", "0.35.2", True),
    ("nvidia-rtx4060-8gb-16gb.json", "0.33.0", False),   # before comfy-aimdo 0.5
    ("nvidia-rtx4060-8gb-16gb.json", None, False),       # the ComfyUI is not known yet
    ("nvidia-rtx4090-24gb-64gb.json", "0.35.0", False),  # a 24 GB card does not need it
    ("apple-m2pro-32gb.json", "0.35.0", False),          # not CUDA
])
def test_the_headroom_flag_on_0_35_for_cards_of_16_gb_or_less(fp, version, headroom):
    plan = _plan(fp, version)
    args = list(plan.settings.comfyui_args)
    assert ("--vram-headroom" in args) is headroom, args
    if headroom:
        assert args[args.index("--vram-headroom") + 1] == "1"
        assert any("--vram-headroom 1" in r and "#16150" in r for r in plan.rationale)
    # Only the flags change: the files and canvas are the same plan.
    base = _plan(fp, None)
    assert plan.settings.dit_weights == base.settings.dit_weights and plan.settings.canvas == base.settings.canvas


def test_known_bad_releases_warn_with_the_fix_unless_the_flag_is_there():
    rules = CAT.comfyui_versions
    small = 8 * 2**30

    def crash(version, gpu, args):  # the 0.35.x crash on small cards (#16150), of all the rules that hold
        return [r for r in rules.known_problems(version, "cuda", gpu, args) if "#16150" in r.source]

    bad = crash("0.35.1", small, [])
    assert len(bad) == 1 and "--vram-headroom 1" in bad[0].fix
    assert crash("0.35.1", small, ["--vram-headroom", "1"]) == []
    assert len(crash("0.35.2", small, [])) == 1  # #16150 is open: every 0.35.x
    assert crash("0.36.0", small, []) == []
    assert crash("0.35.0", 24 * 2**30, []) == []
    assert rules.known_problems("not a version", "cuda", small, []) == []


def test_a_comfyui_too_old_for_a_file_never_gets_it_planned():
    # The 16 GB CPU box plans the int8 video VAE (it needs ComfyUI 0.31.0, #15334).
    newer = _plan("cpu-only-16gb.json", "0.31.0")
    assert newer.settings.vae_weights == "h3-vae-video-int8"
    older = _plan("cpu-only-16gb.json", "0.30.0")
    assert older.settings.vae_weights != "h3-vae-video-int8"
    assert any("minimax_h3_video_vae_int8_convrot.safetensors needs ComfyUI 0.31.0" in r for r in older.rationale)


def test_a_comfyui_newer_than_the_tested_one_is_said():
    plan = _plan("nvidia-rtx4090-24gb-64gb.json", "0.38.1")
    assert any("newer than 0.33.0" in r for r in plan.rationale)
    assert not any("newer than" in r for r in _plan("nvidia-rtx4090-24gb-64gb.json", "0.33.0").rationale)


def test_a_new_comfyui_takes_the_newest_tested_release_first():
    tags = ["v0.29.0", "v0.30.0", "v0.31.0", "v0.33.0", "v0.35.0", "v0.38.1", "v0.36.0-rc1", "latest"]
    assert releases(tags, "v{version}", "0.30.0", "0.33.0") == ["v0.33.0", "v0.31.0", "v0.30.0", "v0.35.0",
                                                               "v0.38.1"]
    assert releases(tags, "v{version}", "0.30.0")[0] == "v0.38.1"  # no tested release known: the newest
    assert CAT.comfyui_versions.newest_tested == "0.33.0"


def test_plan_takes_a_comfyui_version_and_refuses_a_bad_one(run_cli):
    fp = str(FPS / "nvidia-rtx4060-8gb-16gb.json")
    code, out, err = run_cli("plan", "--fingerprint", fp, "--comfyui-version", "0.35.0", "--json")
    assert code == 0, err
    args = __import__("json").loads(out)["settings"]["comfyui_args"]
    assert args[args.index("--vram-headroom") + 1] == "1"
    code, out, err = run_cli("plan", "--fingerprint", fp, "--comfyui-version", "latest")
    assert code == 2 and "--comfyui-version 'latest' is not a ComfyUI version" in err and "Traceback" not in err


@pytest.mark.parametrize("edit, where", [
    ('  newest_tested: "0.33.0"', '  newest_tested: "newest"'),
    ('      min_version: "0.35.0"', '      min_version: 35'),
    ('      backends: [cuda]', '      backends: [cudaa]'),
    ('      max_gpu_memory: "16.5 GiB"', '      max_gpu_memory: "lots"'),
    ('      gpu_kind: laptop', '      gpu_kind: notebook'),
    ('      severity: warn', '      severity: maybe'),
    ('      match: "lynnreal"', '      match: ""'),
    ('  newest_release_date: "2026-12-02"', '  newest_release_date: "2 December"'),
])
def test_a_bad_comfyui_versions_value_is_one_sentence(tmp_path, edit, where):
    from h3kit.core.errors import BadInput

    text = Path(CAT.path).read_text(encoding="utf-8")
    assert edit in text
    bad = tmp_path / "models"
    bad.mkdir()
    (bad / Path(CAT.path).name).write_text(text.replace(edit, where, 1), encoding="utf-8")
    with pytest.raises(BadInput) as err:
        catalog_mod.load(bad)
    assert "comfyui_versions" in err.value.message and f"{Path(CAT.path).name}:" in err.value.message
