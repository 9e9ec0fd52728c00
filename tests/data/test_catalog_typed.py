"""The typed catalog: every section the planner, calibration and ComfyUI code read is a value, parsed at load.

A bad value in any of them is refused when the catalog loads, in one sentence naming file:line and the key
(exit 2), and no raw YAML is reachable from a Catalog or a Profile afterwards.
"""

from __future__ import annotations

import dataclasses

import pytest

from h3kit.core.errors import BadInput
from h3kit.core.paths import asset_dir
from h3kit.data import catalog as catalog_mod
from h3kit.data.architecture import Architecture, Tokens, block_flops, tokens_for
from h3kit.data.catalog_sections import ComfyModule, Sampling

CATALOG = (asset_dir("profiles") / "models" / "minimax-h3.yaml").read_text()
CAT = catalog_mod.load()


def _line_of(text: str, needle: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if needle in line)


def test_the_shipped_architecture_is_the_models_and_its_block_flops_follow_from_it():
    a = CAT.architecture
    assert (a.blocks, a.hidden, a.heads, a.head_dim, a.ffn) == (50, 5376, 56, 128, 14336)  # FACTS.md: DiT
    assert a.patch == (1, 2, 2) and a.params_full == 33.0e9 and CAT.blocks == a.blocks
    inner = a.heads * a.head_dim
    assert a.block_flops == block_flops(a.hidden, a.heads, a.head_dim, a.ffn) == \
        (2.0 * a.hidden * (4 * inner + 3 * a.ffn), 4.0 * inner)
    narrow = Architecture(blocks=2, hidden=512, heads=4, head_dim=128, ffn=1376)
    assert narrow.block_flops[0] < a.block_flops[0] and narrow.block_flops[1] < a.block_flops[1]


def test_frames_canvas_and_tokens_are_the_files_rules():
    assert (CAT.frames.base, CAT.frames.step, CAT.frames.fps) == (5, 17, 24)
    assert [CAT.frames.snap_up(n) for n in (1, 5, 22, 23, 100, 124)] == [5, 5, 22, 39, 107, 124]
    assert CAT.canvas.multiple_of == 32 and CAT.canvas.max_area == (1344, 768)
    assert CAT.canvas_ladder[0] == (1344, 768) and CAT.frames_ladder[-1] == 362
    assert tokens_for(CAT.tokens, 1344, 768, 73) == 42 * 24 * 19
    assert tokens_for(Tokens(16, 1), 32, 32, 3) == 12


def test_sampling_limits_and_comfyui_needs_are_values():
    assert CAT.sampling == Sampling(steps=20, sampler="res_multistep", scheduler="simple", cfg=1.0, shift_video=12.0,
                                    shift_audio=3.0, fps=24, seed=0, frames=124)
    assert CAT.limits.vae_tile_size == (128, 2048, 32) and CAT.limits.vae_tile_overlap == (0, 512)
    assert CAT.model.id == "minimax-h3" and CAT.model.comfyui_min_version == "0.30.0"
    av = next(m for m in CAT.comfyui_h3.modules if m.import_name == "av")
    assert av == ComfyModule("av", "av>=16", av.why, "16")
    assert list(av.to_json()) == ["import", "package", "min_version", "why"]  # the order the catalog writes
    assert CAT.comfyui_h3.release_tag_pattern == "v{version}" and "portable" in CAT.comfyui_h3.update
    (setup,) = CAT.reported_setups
    assert setup.backend == "cuda" and setup.gpu_memory == (None, 9 * 2**30)
    assert {p.id for p in CAT.measured} >= {"rtx4090-1344x768x73"}
    assert CAT.formats["int8_convrot"].requires.backends == ("cuda",) and CAT.formats["q8_0"].bits_per_weight == 8.5
    gguf = CAT.loader_packs["ComfyUI-GGUF"]
    assert gguf.git == "https://github.com/city96/ComfyUI-GGUF" and gguf.folder == "ComfyUI-GGUF" and gguf.nodes
    lora = CAT.weight("h3-lora-turbo").file
    assert lora.folder == "loras" and lora.bytes == 1_956_193_000 and lora.urls[0].startswith("https://huggingface.co/")


def test_no_raw_yaml_is_left_on_a_catalog_or_a_profile():
    assert not hasattr(CAT, "data") and not hasattr(CAT, "doc")
    profile = next(iter(catalog_mod.load_profiles(CAT).values()))
    assert not hasattr(profile, "doc") and profile.path.is_file() and isinstance(profile.written, dict)
    with pytest.raises(dataclasses.FrozenInstanceError):
        CAT.sequence = None  # a copy with other figures is dataclasses.replace, never an edit of the shared one


def test_a_catalog_without_a_sampling_section_opens_with_the_templates_defaults(tmp_path):
    start = CATALOG.index("\nsampling:")
    end = CATALOG.index("\n# Speed presets")
    (tmp_path / "minimax-h3.yaml").write_text(CATALOG[:start] + CATALOG[end:])
    assert catalog_mod.load(tmp_path).sampling == Sampling()


# (text to replace, its replacement, the key the message names)
BAD_SECTIONS = [
    ("  hidden: 5376", "  hidden: wide", "architecture.hidden"),
    ("  params_full: 33.0e9", "  params_full: many", "architecture.params_full"),
    ("  patch: [1, 2, 2]", "  patch: [1, 0, 2]", "architecture.patch"),
    ("  rule: {base: 5, step: 17}", "  rule: {base: 5, step: 0}", "frames.rule"),
    ("  max_area: [1344, 768]", "  max_area: 1344x768", "canvas.max_area"),
    ("  multiple_of: 32", "  multiple_of: 0", "canvas.multiple_of"),
    ("  steps: 20\n  sampler", "  steps: twenty\n  sampler", "sampling.steps"),
    ("  sampler: res_multistep", "  sampler: 3", "sampling.sampler"),
    ("  vae_tile_size: [128, 2048, 32]", "  vae_tile_size: [2048, 128]", "limits.vae_tile_size"),
    ('  comfyui_min_version: "0.30.0"', "  comfyui_min_version: 0.30", "model.comfyui_min_version"),
    ("encoders: [h264, aac]", "encoders: h264", "comfyui_h3.encoders"),
    ('release_tag_pattern: "v{version}"', 'release_tag_pattern: "v1"', "comfyui_h3.release_tag_pattern"),
    ('gpu_memory: [null, "9 GiB"]', 'gpu_memory: [null, "nine"]', "reported_setups[0].machine.gpu_memory"),
    ('comfyui_avoid_args: ["--fast",', 'comfyui_avoid_args: [7,', "comfyui_avoid_args"),
    ("name: minimax_h3_fl2v_turbo_8step_v1.0_comfyui_bf16.safetensors,",
     "nmae: minimax_h3_fl2v_turbo_8step_v1.0_comfyui_bf16.safetensors,", "lora[0].file.nmae"),
    ("comfyui_bf16.safetensors, bytes: 1956193000, sha256: null, urls: [https://huggingface.co/lightx2v",
     'comfyui_bf16.safetensors, bytes: "1.96 GB", sha256: null, urls: [https://huggingface.co/lightx2v', "lora[0].file.bytes"),
    ("{id: h3-lora-turbo, format: bf16, size: 1956193000, file: {folder: loras,",
     "{id: h3-lora-turbo, format: bf16, size: 1956193000, file: {folder: [loras],", "lora[0].file.folder"),
]


@pytest.mark.parametrize("old,new,key", BAD_SECTIONS, ids=[k for _, _, k in BAD_SECTIONS])
def test_a_bad_section_value_is_one_sentence_naming_its_line(tmp_path, old, new, key):
    assert CATALOG.count(old) == 1, old
    text = CATALOG.replace(old, new)
    (tmp_path / "minimax-h3.yaml").write_text(text)
    with pytest.raises(BadInput) as exc:
        catalog_mod.load(tmp_path)
    message = exc.value.message
    assert exc.value.exit_code == 2 and exc.value.details["problems"] == [message.rstrip(".")], message
    line = _line_of(text, new.splitlines()[0].strip())
    assert message.startswith(f"{tmp_path / 'minimax-h3.yaml'}:{line}: '{key}' "), message


def test_a_module_h3_needs_must_say_why(tmp_path):
    old = '{import: comfy_aimdo, package: comfy-aimdo, why: "ComfyUI 0.33\'s dynamic VRAM"}'
    assert CATALOG.count(old) == 1
    text = CATALOG.replace(old, "{import: comfy_aimdo, package: comfy-aimdo}")
    (tmp_path / "minimax-h3.yaml").write_text(text)
    with pytest.raises(BadInput) as exc:
        catalog_mod.load(tmp_path)
    assert exc.value.message.startswith(f"{tmp_path / 'minimax-h3.yaml'}:{_line_of(text, 'import: comfy_aimdo')}: "
                                        "'comfyui_h3.modules[3]' must be {import")
