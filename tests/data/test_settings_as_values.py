"""Settings as typed values (h3kit.data.settings.Settings): one field per key of the settings table, auto
explicit, and the layers profile < calibrated < overrides merged by the keys each one sets."""

from __future__ import annotations

import dataclasses

import pytest

from h3kit.data import catalog as catalog_mod
from h3kit.data import config as config_mod
from h3kit.data.settings import AUTO, AUTO_KEYS, KEYS, Settings, typed

CAT = catalog_mod.load()
PROFILES = catalog_mod.load_profiles(CAT)


def test_there_is_one_field_per_settings_key():
    assert [f.name for f in dataclasses.fields(Settings) if f.name != "given"] == list(KEYS)


def test_a_checked_layer_becomes_typed_values_and_remembers_what_it_set():
    layer = typed({"shard_size_bytes": "1 GB", "max_canvas": [864, 480], "cfg": 1, "stream_dit": True,
                   "timing": {"block_s_per_token": "1e-5", "block_s_per_token2": 0, "step_fixed_s": 2},
                   "comfyui_args": ["--lowvram"], "env": {"A": "1"}})
    assert (layer.shard_size_bytes, layer.max_canvas, layer.cfg, layer.stream_dit) == (10**9, (864, 480), 1.0, "on")
    assert dict(layer.timing) == {"block_s_per_token": 1e-5, "block_s_per_token2": 0.0, "step_fixed_s": 2.0}
    assert layer.comfyui_args == ("--lowvram",) and dict(layer.env) == {"A": "1"}
    assert layer.given == {"shard_size_bytes", "max_canvas", "cfg", "stream_dit", "timing", "comfyui_args", "env"}
    # what a layer does not set is auto where auto is allowed, else None (the profile must set those)
    assert all(getattr(layer, k) == AUTO for k in AUTO_KEYS if k not in layer.given)
    assert layer.vae_tile_size is None and layer.canvas is None
    assert typed(layer.as_dict()) == layer  # typing typed values changes nothing
    with pytest.raises(ValueError, match="not settings keys: vae_tile"):
        typed({"vae_tile": 512})


def test_overrides_beat_calibration_which_beats_the_profile_key_by_key(tmp_path):
    profile = PROFILES["nvidia-24gb"].settings
    path = tmp_path / "config.yaml"
    path.write_text("calibrated:\n  vae_tile_size: 256\n  max_frames: 73\noverrides:\n  max_frames: 124\n"
                    "  quantization: q8_0\n")
    cfg = config_mod.load(path, catalog=CAT, profile_names=sorted(PROFILES))
    merged = profile.over(cfg.calibrated).over(cfg.overrides)
    assert (merged.vae_tile_size, merged.max_frames, merged.quantization) == (256, 124, "q8_0")
    assert merged.max_canvas == profile.max_canvas and merged.dit_weights == profile.dit_weights == AUTO
    assert merged.given == profile.given | {"quantization"}
    assert profile.quantization == AUTO and profile.vae_tile_size != 256  # the layers themselves are unchanged


def test_a_config_built_in_code_types_its_mappings_like_a_loaded_one():
    cfg = config_mod.Config(overrides={"preload_bytes": "2 GB", "canvas": [640, 384]})
    assert isinstance(cfg.overrides, Settings) and cfg.overrides.preload_bytes == 2 * 10**9
    assert cfg.overrides.canvas == (640, 384) and not cfg.calibrated.given
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.overrides.canvas = (1, 1)  # type: ignore[misc]
    assert cfg.overrides.but(stream_from="disk").stream_from == "disk" and cfg.overrides.stream_from is None
