"""config.yaml: hand edits change the next plan; set_value/write_section keep the user's lines; bad files name their line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from h3kit.data import catalog as catalog_mod
from h3kit.data import config as config_mod
from h3kit.core.errors import BadInput

FP = Path(__file__).parents[1] / "fixtures" / "fingerprints"
F4090 = str(FP / "nvidia-rtx4090-24gb-64gb.json")
F3060 = str(FP / "nvidia-rtx3060-12gb-32gb.json")


def plan(run_cli, fp=F4090, *extra):
    code, out, err = run_cli("plan", "--fingerprint", fp, "--json", *extra)
    return code, json.loads(out), err


def test_hand_edit_changes_the_next_plan(run_cli, h3kit_home):
    code, before, _ = plan(run_cli)
    assert code == 0 and before["profile"] == "nvidia-24gb" and before["settings"]["vae_tile_size"] == 512
    (h3kit_home / "config.yaml").write_text("# mine\nprofile: nvidia-12gb\noverrides: {vae_tile_size: 384}\n")
    code, after, _ = plan(run_cli)
    assert code == 0
    assert after["profile"] == "nvidia-12gb"
    assert after["settings"]["vae_tile_size"] == 384
    assert "config.yaml:3" in after["settings_source"]["vae_tile_size"]
    assert any("vae_tile_size = 384" in r for r in after["rationale"])
    assert after["estimates"]["phases"]["decode"]["gpu_bytes"] < before["estimates"]["phases"]["decode"]["gpu_bytes"]


def test_profile_flag_beats_config(run_cli, h3kit_home):
    (h3kit_home / "config.yaml").write_text("profile: nvidia-12gb\n")
    code, p, _ = plan(run_cli, F4090, "--profile", "nvidia-24gb")
    assert code == 0 and p["profile"] == "nvidia-24gb"


def test_merge_order_profile_then_calibrated_then_overrides(run_cli, h3kit_home):
    (h3kit_home / "config.yaml").write_text(
        "calibrated:\n  vae_tile_size: 256\n  vae_temporal_tile: 9\noverrides:\n  vae_tile_size: 448\n")
    code, p, _ = plan(run_cli)
    assert code == 0
    assert p["settings"]["vae_tile_size"] == 448  # override beats calibration
    assert p["settings"]["vae_temporal_tile"] == 9  # calibration beats the profile
    assert p["settings_source"]["vae_temporal_tile"].startswith("calibration")


def test_override_that_does_not_fit_is_kept_with_a_warning(run_cli, h3kit_home):
    (h3kit_home / "config.yaml").write_text("overrides:\n  quantization: bf16\n  max_canvas: [1344, 768]\n  max_frames: 362\n")
    code, p, _ = plan(run_cli, F3060)
    assert code == 0
    assert p["settings"]["quantization"] == "bf16" and p["settings"]["max_frames"] == 362
    assert p["fits"] is False
    assert any("short by" in w for w in p["warnings"])
    assert any("overrides" in w for w in p["warnings"])


def test_forced_format_the_machine_cannot_run_is_warned(run_cli, h3kit_home):
    (h3kit_home / "config.yaml").write_text("overrides:\n  quantization: fp8_scaled\n")
    code, p, _ = plan(run_cli, F3060)  # compute capability 8.6
    assert code == 0 and p["settings"]["quantization"] == "fp8_scaled"
    assert any("compute capability" in w for w in p["warnings"])


def test_profile_use_rewrites_only_the_profile_key(run_cli, h3kit_home):
    cfg = h3kit_home / "config.yaml"
    original = ("# my settings, keep me\nprofile: auto   # was auto\n\ncomfyui_path: /opt/ComfyUI  # mine\n"
                "overrides:\n  # smaller tiles for my laptop\n  vae_tile_size: 256\n")
    cfg.write_text(original)
    code, out, err = run_cli("profile", "use", "nvidia-16gb")
    assert code == 0, err
    assert cfg.read_text() == original.replace("profile: auto   # was auto", "profile: nvidia-16gb   # was auto")
    assert config_mod.load(cfg).profile == "nvidia-16gb"


def test_profile_use_dry_run_writes_nothing(run_cli, h3kit_home):
    code, out, _ = run_cli("profile", "use", "cpu-only", "--dry-run", "--json")
    assert code == 0 and json.loads(out)["dry_run"] is True
    assert not (h3kit_home / "config.yaml").exists()


def test_profile_list_and_show(run_cli):
    code, out, _ = run_cli("profile", "list", "--json")
    names = [p["name"] for p in json.loads(out)["profiles"]]
    assert code == 0 and {"nvidia-8gb", "apple-unified-24", "cpu-only", "amd-rocm-16gb", "intel-arc-12gb"} <= set(names)
    code, out, _ = run_cli("profile", "show", "nvidia-12gb")
    assert code == 0 and "nvidia-12gb" in out and "vae_tile_size" in out
    code, _, err = run_cli("profile", "show", "nvidia-13gb")
    assert code == 2 and "nvidia-12gb" in err


def test_write_section_replaces_only_calibrated(tmp_path):
    cfg = tmp_path / "config.yaml"
    cfg.write_text("profile: auto\n# calibration below\ncalibrated:\n  vae_tile_size: 256\n# my overrides\noverrides:\n  max_frames: 73\n")
    config_mod.write_section(cfg, "calibrated", {"vae_tile_size": 384, "max_frames": 124})
    text = cfg.read_text()
    assert "# calibration below\ncalibrated:\n  vae_tile_size: 384\n  max_frames: 124\n# my overrides\noverrides:\n  max_frames: 73\n" in text
    loaded = config_mod.load(cfg)
    assert loaded.calibrated.as_dict() == {"vae_tile_size": 384, "max_frames": 124}
    assert loaded.overrides.as_dict() == {"max_frames": 73}
    config_mod.write_section(tmp_path / "fresh.yaml", "calibrated", {"vae_tile_size": 256})
    assert config_mod.load(tmp_path / "fresh.yaml").calibrated.as_dict() == {"vae_tile_size": 256}


def test_missing_config_is_defaults(tmp_path):
    c = config_mod.load(tmp_path / "none.yaml")
    assert c.profile == "auto" and not c.overrides.given and not c.calibrated.given and c.comfyui_path is None


def test_catalog_ids_are_stable_and_have_a_file_slot():
    cat = catalog_mod.load()
    for w in cat.dit + cat.text_encoder + cat.vae + cat.audio_vae:
        assert w.id.startswith("h3-") and w.file.folder in ("diffusion_models", "text_encoders", "vae")
        assert w.file.loader
    assert cat.blocks == 50
    assert cat.block_bytes(cat.weight("h3-dit-pruned-bf16")) * 50 >= cat.weight("h3-dit-pruned-bf16").bytes


@pytest.mark.parametrize("command", [["plan"], ["apply", "--comfyui", "/nonexistent"], ["models", "plan"],
                                     ["calibrate", "--dry-run"]])
def test_a_misspelt_or_duplicated_key_is_an_error_in_every_command(run_cli, h3kit_home, command):
    cfg = h3kit_home / "config.yaml"
    cfg.write_text("# mine\nprofle: nvidia-12gb\n")
    code, out, err = run_cli(*command)
    assert code == 2 and "config.yaml:2: 'profle' is not a config key; did you mean 'profile'?" in err, err
    cfg.write_text("profile: auto\noverrides:\n  vae_tile_size: 256\n  vae_tile_size: 192\n")
    code, out, err = run_cli(*command)
    assert code == 2 and "config.yaml:4: 'overrides.vae_tile_size' is set twice (first on line 3)" in err, err


def test_write_section_refuses_invalid_settings_and_leaves_the_file(tmp_path):
    cfg = tmp_path / "config.yaml"
    cfg.write_text("profile: auto  # keep\n")
    with pytest.raises(BadInput) as exc:
        config_mod.write_section(cfg, "calibrated", {"vae_tile_size": -1})
    assert exc.value.exit_code == 2 and "calibrated.vae_tile_size" in exc.value.message
    assert cfg.read_text() == "profile: auto  # keep\n"


def test_unknown_profile_flag_is_exit_2(run_cli):
    code, _, err = run_cli("plan", "--fingerprint", F4090, "--profile", "nvidia-13gb")
    assert code == 2 and "nvidia-12gb" in err and "Traceback" not in err


def test_profile_use_unknown_is_exit_2_and_writes_nothing(run_cli, h3kit_home):
    code, _, err = run_cli("profile", "use", "nvidia-7gb")
    assert code == 2 and not (h3kit_home / "config.yaml").exists()


def test_text_output_explains(run_cli):
    code, out, err = run_cli("plan", "--fingerprint", F3060)
    assert code == 0 and "fits: yes" in out and "why:" in out and "GPU budget" in out


def test_shard_override_is_rounded_to_whole_blocks(run_cli, h3kit_home):
    (h3kit_home / "config.yaml").write_text("overrides:\n  shard_size_bytes: \"1 GB\"\n")
    code, p, _ = plan(run_cli, F3060)
    block = p["settings"]["streaming"]["block_bytes"]
    assert code == 0 and p["settings"]["shard_size_bytes"] % block == 0 and p["settings"]["shard_size_bytes"] <= 10**9
    assert any("rounded to" in r for r in p["rationale"])


def test_models_mirror_and_comfyui_python_are_known_keys(run_cli, h3kit_home):
    """The download mirror and ComfyUI's interpreter path are read from config.yaml, not noted as unknown."""
    (h3kit_home / "config.yaml").write_text(
        "profile: auto\ncomfyui_python: /opt/ComfyUI/venv/bin/python\nmodels:\n  mirror: https://hf-mirror.com\n")
    code, p, _ = plan(run_cli)
    assert code == 0 and not any("not one of h3kit's" in w for w in p["warnings"])
    cfg = config_mod.load(h3kit_home / "config.yaml")
    assert cfg.mirror == "https://hf-mirror.com" and cfg.models == {"mirror": "https://hf-mirror.com"}
    assert cfg.comfyui_python == "/opt/ComfyUI/venv/bin/python"


def test_profile_use_keeps_the_models_section(run_cli, h3kit_home):
    cfg = h3kit_home / "config.yaml"
    original = "profile: auto\nmodels:\n  # close to me\n  mirror: http://10.0.0.5:8080/hf\n"
    cfg.write_text(original)
    code, _, err = run_cli("profile", "use", "cpu-only")
    assert code == 0, err
    assert cfg.read_text() == original.replace("profile: auto", "profile: cpu-only")
    assert config_mod.load(cfg).mirror == "http://10.0.0.5:8080/hf"
