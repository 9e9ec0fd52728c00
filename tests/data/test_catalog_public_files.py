"""The community quantizations public by December 2026 are in the catalog with the names and bytes their sources
confirm (/work/research/issue32.md sections 3 and 7), and the planner treats them like every other file."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from h3kit.data import catalog as catalog_mod
from h3kit.data.config import Config
from h3kit.fingerprint.schema import load_file
from h3kit.plan import make_plan

CAT = catalog_mod.load()
FPS = Path(__file__).parents[1] / "fixtures" / "fingerprints"


@pytest.mark.parametrize("wid, name, size, comfyui_min", [
    # Kijai's W4A8, not AX1Y2JP's re-upload (12,540,884,878)
    ("h3-dit-pruned-w4a8", "minimax_h3_fl2va_pruned_w4a8_mixed.safetensors", 12540858008, "0.31.0"),
    ("h3-dit-pruned-nvfp4", "MiniMax_H3_FL2VA_pruned_nvfp4.safetensors", 12528636865, None),
    ("h3-dit-pruned-convrot_w4a4", "MiniMax_H3_FL2VA_pruned_mixed_int4_int8_convrot.safetensors", None, None),
    ("h3-dit-pruned-convrot_w4a4-simple", "minimax_h3_fl2va_pruned_int4_convrot_simple.safetensors", 16825666232, None),
    ("h3-te-qwen3vl32b-convrot_w4a4", "qwen3vl_32b_minimax_h3_int4_convrot.safetensors", None, None),
    ("h3-te-qwen3vl32b-q2_k", "qwen3vl-32B-MiniMax-H3-Q2_K.gguf", 8487968160, None),
    # Comfy-Org's int8 VAE; Kijai's file of the same name (2.95 GiB) is another file
    ("h3-vae-video-int8", "minimax_h3_video_vae_int8_convrot.safetensors", 2811065184, "0.31.0"),
])
def test_the_public_file_is_listed_as_published(wid, name, size, comfyui_min):
    w = CAT.weight(wid)
    assert w is not None and w.file.name == name
    assert w.file.bytes == size
    assert w.file.comfyui_min == comfyui_min
    assert w.file.urls and all(u.startswith("https://huggingface.co/") and u.endswith("/" + name) for u in w.file.urls)
    assert not w.file.unverified and w.file.source
    if size and w.part != "vae":  # (the VAE's older "2.81 GB" figure is 1 MB short; its bytes are exact)
        assert w.bytes >= size  # the planning figure of a new entry never under-counts the file


def test_no_catalog_file_is_unverified_any_more():
    assert not [w.id for w in CAT.dit + CAT.text_encoder + CAT.vae if w.file.unverified]


def test_int4_convrot_ranks_below_the_8_bit_formats_and_beside_w4a8():
    q = {f: CAT.formats[f].quality for f in ("int8_convrot", "fp8_scaled", "w4a8", "convrot_w4a4", "q3_k_m")}
    assert q["q3_k_m"] < q["convrot_w4a4"] < q["w4a8"] < q["fp8_scaled"] < q["int8_convrot"]
    assert q["w4a8"] - q["convrot_w4a4"] <= 2


def test_the_q2_k_text_encoder_is_never_picked_by_itself_but_can_be_named():
    te = CAT.weight("h3-te-qwen3vl32b-q2_k")
    assert te.comfyui_loads == "reported_broken" and te.file.comfyui_loads_source.endswith("/471")
    fp = load_file(FPS / "apple-m1-16gb.json")
    profiles = catalog_mod.load_profiles(CAT)
    assert make_plan(fp, CAT, profiles).settings.text_encoder_weights != te.id
    # held whole (no streamed text encoder, which would run a better file), the smallest encoder would be picked
    # if it were known to load: it is held back by its report alone
    loads = replace(te, file=replace(te.file, comfyui_loads="with_h3kit_loader"))
    cat = replace(CAT, text_encoder=[loads if w.id == te.id else w for w in CAT.text_encoder])
    held = Config(overrides={"text_encoder_stream": "off"})
    assert make_plan(fp, cat, catalog_mod.load_profiles(cat), config=held).settings.text_encoder_weights == te.id


def test_a_comfyui_too_old_for_w4a8_does_not_get_it():
    old = [w.id for w in CAT.dit if w.file.comfyui_min and w.file.comfyui_min > "0.30.0"]
    assert "h3-dit-pruned-w4a8" in old
