"""Invalid config.yaml files and profiles: each is exit 2 with one sentence naming file:line and the key."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from h3kit.data import catalog as catalog_mod
from h3kit.core.errors import BadInput
from h3kit.core.paths import asset_dir

FP = str(Path(__file__).parents[1] / "fixtures" / "fingerprints" / "nvidia-rtx4090-24gb-64gb.json")

# (config text, line the error must name, words the message must contain)
BAD_CONFIGS = [
    ("profile: nvidia-13gb\n", 1, "allowed: auto"),
    ("# comment\nprofile: [a, b]\n", 2, "profile"),
    ("profile: auto\noverrides:\n  vae_tile_sise: 384\n", 3, "not a settings key"),
    ("overrides:\n  vae_tile_size: -384\n", 2, "128 to 2048"),
    ("overrides:\n  vae_tile_size: 300\n", 2, "multiple of 32"),
    ("overrides:\n  vae_tile_size: \"big\"\n", 2, "whole number"),
    ("overrides:\n  shard_size_bytes: -5\n", 2, "negative"),
    ("overrides:\n  preload_bytes: \"lots\"\n", 2, "not a size"),
    ("overrides:\n  quantization: q9_k\n", 2, "allowed:"),
    ("overrides:\n  dit_weights: h3-dit-huge\n", 2, "h3-dit-pruned-bf16"),
    ("overrides:\n  max_canvas: [1920, 1080]\n", 2, "multiples of 32"),
    ("overrides:\n  max_canvas: 1344\n", 2, "[WIDTH, HEIGHT]"),
    ("overrides:\n  max_frames: 100\n", 2, "5 + 17n"),
    ("overrides:\n  comfyui_args: --lowvram\n", 2, "list of strings"),
    ("overrides:\n  env: [A=1]\n", 2, "mapping"),
    ("overrides:\n  vae_tile_size: 256\n  vae_tile_overlap: 200\n", 3, "less than half"),
    ("overrides: [vae_tile_size]\n", 1, "mapping of settings"),
    ("calibrated:\n  max_shard_blocks: 0\n", 2, "1 to 50"),
    ("comfyui_path: 42\n", 1, "folder path"),
    ("profile: auto\noverrides:\n\tvae_tile_size: 384\n", 3, "not valid YAML"),
    ("profile: auto\n  overrides: 1\n", 2, "not valid YAML"),
    ("- profile\n- auto\n", 1, "must be a mapping"),
    ("profile: auto\nmodels:\n  mirror: ftp://mirror.example.org\n", 3, "http(s) base URL"),
    ("models:\n  mirror: hf-mirror.com\n", 2, "http(s) base URL"),
    ("models:\n  mirror: \"https://\"\n", 2, "http(s) base URL"),
    ("models:\n  mirror: https://hf-mirror.com:port\n", 2, "http(s) base URL"),
    ("models: https://hf-mirror.com\n", 1, "must be a mapping"),
    ("models:\n  miror: https://hf-mirror.com\n", 2, "allowed: mirror"),
    ("comfyui_python: [python3]\n", 1, "ComfyUI's python"),
]


@pytest.mark.parametrize("text,line,words", BAD_CONFIGS, ids=[f"config{i}" for i in range(len(BAD_CONFIGS))])
def test_bad_config_is_exit_2_naming_its_line(run_cli, h3kit_home, text, line, words):
    cfg = h3kit_home / "config.yaml"
    cfg.write_text(text)
    code, out, err = run_cli("plan", "--fingerprint", FP)
    assert code == 2
    assert "Traceback" not in err
    first = err.splitlines()[0]
    assert first.startswith(f"error: {cfg}:{line}:"), first
    assert words in first, first


def _profiles_with(tmp_path: Path, name: str, text: str) -> Path:
    folder = tmp_path / "profiles"
    shutil.copytree(asset_dir("profiles"), folder)
    (folder / f"{name}.yaml").write_text(text)
    return folder


GOOD = (asset_dir("profiles") / "nvidia-12gb.yaml").read_text()


def _line_of(text: str, needle: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if needle in line)


BAD_PROFILES = [
    ("schema: h3kit.profile/1", "schema: h3kit.profile/9", "allowed: h3kit.profile/1"),
    ("name: nvidia-12gb", "name: nvidia-twelve", "file name"),
    ("  backend: cuda", "  backend: opencl", "allowed: cuda"),
    ("  gpu_memory: [\"9 GiB\", \"13 GiB\"]", "  gpu_memory: [\"13 GiB\", \"9 GiB\"]", "MIN <= MAX"),
    ("  formats: [", "  formats: [fp4, ", "allowed:"),
    ("  stream_from: ram", "  stream_from: cloud", "allowed: ram, disk"),
    ("  comfyui_args: []", "  comfyui_args: [\"--fast\"]", "harms H3"),
    ("  vae_temporal_tile: 17", "  vae_temporal_tile: 0", "5 to 129"),
    ("  os_ram_headroom: \"4 GB\"", "  os_ram_headroom: \"four\"", "not a size"),
    ("  max_frames: 243", "  max_frames: 244", "5 + 17n"),
]


@pytest.mark.parametrize("old,new,words", BAD_PROFILES, ids=[f"profile{i}" for i in range(len(BAD_PROFILES))])
def test_bad_profile_names_file_line_and_key(tmp_path, old, new, words):
    assert old in GOOD, old
    text = GOOD.replace(old, new, 1)
    folder = _profiles_with(tmp_path, "nvidia-12gb", text)
    with pytest.raises(BadInput) as exc:
        catalog_mod.load_profiles(catalog_mod.load(), folder)
    assert exc.value.exit_code == 2
    expected_line = _line_of(text, new.strip().split(",")[0].split("[")[0].strip() or new.strip())
    assert str(exc.value.message).startswith(f"{folder / 'nvidia-12gb.yaml'}:{expected_line}:"), exc.value.message
    assert words in exc.value.message


def test_profile_missing_a_required_setting(tmp_path):
    text = GOOD.replace("  stream_from: ram\n", "")
    folder = _profiles_with(tmp_path, "nvidia-12gb", text)
    with pytest.raises(BadInput) as exc:
        catalog_mod.load_profiles(catalog_mod.load(), folder)
    assert f"nvidia-12gb.yaml:{_line_of(text, 'settings:')}:" in exc.value.message and "stream_from" in exc.value.message


CATALOG = (asset_dir("profiles") / "models" / "minimax-h3.yaml").read_text()
Q4_PRUNED = next(line for line in CATALOG.splitlines() if "id: h3-dit-pruned-q4_k_m," in line)
BF16_PRUNED = next(line for line in CATALOG.splitlines() if "id: h3-dit-pruned-bf16," in line)
Q4_FULL = next(line for line in CATALOG.splitlines() if "id: h3-dit-full-q4_k_m," in line)

# (the catalog line to change, its replacement, words the message must contain)
BAD_LOADS = [
    (Q4_PRUNED, Q4_PRUNED.replace("comfyui_loads: with_h3kit_loader", "comfyui_loads: maybe"), "allowed: stock, with_loader_pack"),
    (BF16_PRUNED, BF16_PRUNED.replace("comfyui_loads: stock", "comfyui_loads: yes"), "allowed: stock"),
    (BF16_PRUNED, BF16_PRUNED.replace("loader_pack: null", "loader_pack: ComfyUI-GGUF"), "use with_loader_pack"),
    (Q4_FULL, Q4_FULL.replace("loader_pack: ComfyUI-GGUF", "loader_pack: null"), "one of loader_packs"),
    (Q4_PRUNED, Q4_PRUNED.split(", comfyui_loads_source:")[0] + "}}", "comfyui_loads_source is missing"),
    (Q4_PRUNED, Q4_PRUNED.replace("comfyui_compat:", "compat_note:"), "comfyui_compat is missing"),
    (Q4_PRUNED, Q4_PRUNED.replace("loader: H3kitUnetLoaderGGUF", "loader: UnetLoaderGGUF"), "name h3kit's node"),
    (Q4_PRUNED, Q4_PRUNED.replace("loader_pack: ComfyUI-GGUF", "loader_pack: null"), "one of loader_packs"),
    (BF16_PRUNED, BF16_PRUNED.replace("comfyui_loads: stock", "comfyui_loads: unknown"), "says why"),
]


def _refused_catalog(tmp_path, old: str, new: str) -> tuple[str, BadInput]:
    """The shipped catalog with one line changed, and the BadInput (exit 2) loading it raises."""
    assert new != old
    text = CATALOG.replace(old, new, 1)
    (tmp_path / "minimax-h3.yaml").write_text(text)
    with pytest.raises(BadInput) as exc:
        catalog_mod.load(tmp_path)
    assert exc.value.exit_code == 2
    return text, exc.value


@pytest.mark.parametrize("old,new,words", BAD_LOADS, ids=[f"loads{i}" for i in range(len(BAD_LOADS))])
def test_bad_comfyui_loads_names_its_line(tmp_path, old, new, words):
    text, exc = _refused_catalog(tmp_path, old, new)
    message = exc.message
    assert message.startswith(f"{tmp_path / 'minimax-h3.yaml'}:{_line_of(text, new)}:"), message
    assert "file.comfyui_loads" in message and words in message, message


INT8_MPS = next(line for line in CATALOG.splitlines() if "mps: {status: fails" in line and "#92" in line)
BF16_CPU = next(line for line in CATALOG.splitlines() if line.strip().startswith("cpu: {status: unknown"))
PLACEMENT = next(line for line in CATALOG.splitlines() if line.strip().startswith("evidence_from:"))
SETUP_DIT = next(line for line in CATALOG.splitlines() if line.strip().startswith("files: {dit: h3-dit-pruned-int8"))

# (the catalog line to change, its replacement, the key the message names, words it must contain)
BAD_EVIDENCE = [
    (INT8_MPS, INT8_MPS.replace("status: fails", "status: broken"), "runs_on.mps.status", "allowed: runs, fails, unknown"),
    (INT8_MPS, INT8_MPS.split(", source:")[0] + "}", "runs_on.mps.source", "where this was reported or measured"),
    (BF16_CPU, BF16_CPU.replace("cpu:", "gpu:"), "runs_on.gpu", "is not a backend"),
    (PLACEMENT, PLACEMENT.replace("cpu", "tpu"), "placement[0].evidence_from", "allowed: cuda, mps"),
    (SETUP_DIT, SETUP_DIT.replace("h3-dit-pruned-int8_convrot", "h3-dit-pruned-int9"), "reported_setups[0].files.dit",
     "no weight entry has as its id"),
]


@pytest.mark.parametrize("old,new,key,words", BAD_EVIDENCE, ids=[f"evidence{i}" for i in range(len(BAD_EVIDENCE))])
def test_bad_runs_on_placement_or_reported_setup_names_its_line(tmp_path, old, new, key, words):
    text, exc = _refused_catalog(tmp_path, old, new)
    hit = next(p for p in exc.details["problems"] if f"{key}' " in p)
    assert hit.startswith(f"{tmp_path / 'minimax-h3.yaml'}:{_line_of(text, new)}:") and words in hit, hit


def test_a_format_without_every_backend_is_refused(tmp_path):
    _, exc = _refused_catalog(tmp_path, BF16_CPU + "\n", "")
    assert "runs_on' is missing 'cpu'" in exc.message and "status: unknown" in exc.message


def test_profile_why_must_explain_a_setting_it_sets(tmp_path):
    text = GOOD.replace("settings:\n", "why:\n  max_frame: \"typo\"\nsettings:\n", 1)
    folder = _profiles_with(tmp_path, "nvidia-12gb", text)
    with pytest.raises(BadInput) as exc:
        catalog_mod.load_profiles(catalog_mod.load(), folder)
    assert f"nvidia-12gb.yaml:{_line_of(text, 'max_frame:')}:" in exc.value.message and "why.max_frame" in exc.value.message


def test_broken_catalog_names_its_line(tmp_path):
    text = (asset_dir("profiles") / "models" / "minimax-h3.yaml").read_text()
    text = text.replace('size: "11.4 GB"', 'size: "eleven GB"', 1)
    (tmp_path / "minimax-h3.yaml").write_text(text)
    with pytest.raises(BadInput) as exc:
        catalog_mod.load(tmp_path)
    assert f"minimax-h3.yaml:{_line_of(text, 'eleven GB')}:" in exc.value.message and "size" in exc.value.message


@pytest.mark.parametrize("old,new,key", [
    ('inference_minimum: "0.8 GB"', 'inference_minimum: "0.8 gigs"', "comfyui.inference_minimum"),
    ('large_card_from: "16 GB"', 'large_card_from: big', "comfyui.reserve.large_card_from"),
    ("weights_share: 0.88", "weights_share: 88", "comfyui.weights_share"),
    ("temporal_compression: 4", "temporal_compression: four", "tokens.temporal_compression"),
    ("ladder: [22, 39,", "ladder: [twenty, 39,", "frames.ladder"),
])
def test_a_bad_planning_figure_names_its_line_when_the_catalog_loads(tmp_path, old, new, key):
    """The figures the planner computes with are parsed at load, so a bad one fails there, not mid-plan."""
    assert CATALOG.count(old) == 1, old
    text = CATALOG.replace(old, new)
    (tmp_path / "minimax-h3.yaml").write_text(text)
    with pytest.raises(BadInput) as exc:
        catalog_mod.load(tmp_path)
    assert exc.value.message.startswith(f"{tmp_path / 'minimax-h3.yaml'}:{_line_of(text, new)}:"), exc.value.message
    assert f"'{key}'" in exc.value.message
