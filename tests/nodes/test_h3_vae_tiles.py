"""Tiles that take effect on ComfyUI's MiniMax H3 video VAE (issue #13 part 4).

ComfyUI's MiniMaxH3VideoVAE.decode_tiled ignores its arguments; it tiles
itself from `tile_size` / `tile_overlap_min` read in `split_tiles` at decode
time. H3kitTiledVAEDecode sets those from the profile for the decode and
restores them; other VAEs keep getting decode_tiled's arguments. The pure
tests here need neither ComfyUI nor torch; the last one (opt-in,
H3KIT_COMFYUI_DIR) runs the node against a tiny real MiniMaxH3VideoVAE in
ComfyUI's own Python.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import re
import shutil
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
NODES = REPO / "nodes"


@pytest.fixture(scope="module")
def logic():
    from pack_support import pack_module

    return pack_module("h3kit_decode.logic")


class MiniMaxH3VideoVAE:
    """Shaped like comfy.ldm.minimax.vae.MiniMaxH3VideoVAE as far as tiling goes (vae.py:324-446, 695)."""

    def __init__(self):
        self.vae_ratio, self.vae_ratio_t, self.clip_length = 16, 4, 17
        self.tile_size, self.tile_overlap_min = 256, 64

    def split_tiles(self, input_len):
        return split_tiles(self.tile_size, self.tile_overlap_min, self.vae_ratio, input_len)

    def decode_tiled(self, z, **kwargs):
        return z


class SelfTilingVAE:
    """The same attributes under another class name: H3 only when the wrapper says handles_tiling."""

    tile_size, tile_overlap_min, vae_ratio = 256, 64, 16

    def split_tiles(self, input_len):
        return [0], [input_len], []

    def decode_tiled(self, z, **kwargs):
        return z


class TAEHV:
    """taeh3 / Wan-style: no tiling attributes of its own."""

    def decode(self, z):
        return z


def split_tiles(tile_size, overlap_min, ratio, input_len, max_rounds=10_000):
    """ComfyUI 0.33's MiniMaxH3VideoVAE.split_tiles (comfy/ldm/minimax/vae.py:424-446), with a bound on its loop."""
    if tile_size >= input_len:
        return [0], [input_len], []
    n = math.ceil(input_len / tile_size)
    for _ in range(max_rounds):
        overlaps = [overlap_min] * (n - 1)
        remaining = tile_size * n - sum(overlaps) - input_len
        if remaining < 0:
            n += 1
        else:
            break
    else:
        raise AssertionError(f"split_tiles never ends for tile {tile_size}, overlap {overlap_min}, length {input_len}")
    for i in range(remaining // ratio):
        overlaps[i % (n - 1)] += ratio
    starts = [0]
    for i in range(n - 1):
        starts.append(starts[-1] + tile_size - overlaps[i])
    return starts, [tile_size] * n, overlaps


# ------------------------------------------------------------------ detection

def test_h3_video_vae_is_recognised_by_duck_typing(logic):
    assert logic.is_h3_video_vae(MiniMaxH3VideoVAE())
    assert logic.is_h3_video_vae(type("Sub", (MiniMaxH3VideoVAE,), {})())  # a subclass still is one
    assert logic.is_h3_video_vae(SelfTilingVAE(), handles_tiling=True)
    assert not logic.is_h3_video_vae(SelfTilingVAE(), handles_tiling=False)
    assert not logic.is_h3_video_vae(TAEHV(), handles_tiling=True)
    assert not logic.is_h3_video_vae(None, handles_tiling=True)
    odd = MiniMaxH3VideoVAE()
    odd.tile_size = "256"  # not the integer split_tiles reads
    assert not logic.is_h3_video_vae(odd)
    no_split = MiniMaxH3VideoVAE()
    no_split.split_tiles = None
    assert not logic.is_h3_video_vae(no_split)


# ------------------------------------------------------------------ rounding and validation

@pytest.mark.parametrize("asked, applied", [
    ((256, 64), (256, 64)),    # H3's own tiles, unchanged
    ((384, 64), (384, 64)),
    ((512, 64), (512, 64)),
    ((500, 60), (496, 64)),    # nearest multiples of 16
    ((504, 56), (512, 64)),    # halves round up
    ((512, 0), (512, 16)),     # split_tiles slices tails with -overlap: at least one latent unit
    ((128, 96), (128, 64)),    # the tile is at least twice the overlap
    ((100, 64), (96, 48)),
    ((8, 8), (32, 16)),        # the smallest: two latent units, one of overlap
])
def test_h3_tile_values_round_and_validate(logic, asked, applied):
    values, notes = logic.h3_tile_values(*asked, ratio=16)
    assert (values["tile_size"], values["tile_overlap_min"]) == applied
    assert bool(notes) == (asked != applied)


def test_h3_tile_values_always_give_split_tiles_a_plan(logic):
    """Every profile value ends in tiles split_tiles can lay out: it terminates, the tiles cover the length
    on latent boundaries, and every overlap stays below the tile."""
    for tile in range(0, 1100, 24):
        for overlap in range(0, 600, 40):
            values, _ = logic.h3_tile_values(tile, overlap, ratio=16)
            t, o = values["tile_size"], values["tile_overlap_min"]
            assert t % 16 == 0 and o % 16 == 0 and 16 <= o and 2 * o <= t
            for length in range(16, 1600, 48):
                starts, lens, overlaps = split_tiles(t, o, 16, length)
                assert starts[0] == 0 and starts[-1] + lens[-1] == length
                assert all(s % 16 == 0 for s in starts) and all(0 < ov < t for ov in overlaps)


# ------------------------------------------------------------------ the plan

def test_plan_for_h3_sets_attributes_and_leaves_time_alone(logic):
    plan = logic.plan_decode(MiniMaxH3VideoVAE(), True, 384, 64, 17, 8, 16, 4)
    assert plan["h3"] and plan["attrs"] == {"tile_size": 384, "tile_overlap_min": 64}
    # decode_tiled's arguments only feed ComfyUI's memory estimate: one tile, no temporal tile
    assert plan["args"] == {"tile_x": 24, "tile_y": 24, "overlap": 4}
    assert any("vae_temporal_tile 17 not applied" in n and "17-frame clips" in n for n in plan["notes"])


def test_plan_for_other_vaes_is_decode_tiled_arguments(logic):
    wan = logic.plan_decode(TAEHV(), False, 256, 96, 32, 8, 8, 4)
    assert wan == {"h3": False, "attrs": {}, "notes": [],
                   "args": logic.decode_tile_args(256, 96, 32, 8, 8, 4)}
    assert wan["args"] == {"tile_x": 32, "tile_y": 32, "overlap": 8, "tile_t": 8, "overlap_t": 2}
    assert not logic.plan_decode(SelfTilingVAE(), False, 256, 64, 17, 8, 16, 4)["h3"]


def test_attributes_set_restores_even_when_the_body_raises(logic):
    vae = MiniMaxH3VideoVAE()
    with logic.attributes_set(vae, {"tile_size": 128, "tile_overlap_min": 32}) as saved:
        assert (vae.tile_size, vae.tile_overlap_min) == (128, 32) and saved == {"tile_size": 256, "tile_overlap_min": 64}
    assert (vae.tile_size, vae.tile_overlap_min) == (256, 64)
    with pytest.raises(MemoryError):
        with logic.attributes_set(vae, {"tile_size": 512, "tile_overlap_min": 64}):
            raise MemoryError("decode ran out of memory")
    assert (vae.tile_size, vae.tile_overlap_min) == (256, 64)
    with logic.attributes_set(None, {}):  # VAEs that get arguments instead: nothing to set
        pass


# ------------------------------------------------------------------ the node, with stand-ins for torch and ComfyUI

class _Array(np.ndarray):
    device = "cpu"


class _Wrapper:
    """comfy.sd.VAE as the node uses it; decode_tiled records the model's tile attributes when it runs."""

    latent_dim = 3

    def __init__(self, model, handles_tiling, spatial=16, temporal=4, fail=False):
        self.first_stage_model, self.handles_tiling = model, handles_tiling
        self._spatial, self._temporal, self.fail, self.calls = spatial, temporal, fail, []

    def spacial_compression_decode(self):
        return self._spatial

    def temporal_compression_decode(self):
        return self._temporal

    def decode_tiled(self, samples, **kwargs):
        m = self.first_stage_model
        self.calls.append((kwargs, getattr(m, "tile_size", None), getattr(m, "tile_overlap_min", None)))
        if self.fail:
            raise RuntimeError("decode failed")
        b, _, t, h, w = samples.shape
        return np.zeros((b, 22, h * self._spatial, w * self._spatial, 3), np.float32).view(_Array)


@pytest.fixture
def node(tmp_path, monkeypatch):
    pack_dir = tmp_path / "ComfyUI-h3kit"
    shutil.copytree(NODES, pack_dir, ignore=shutil.ignore_patterns("__pycache__"))
    (pack_dir / "h3kit_profile.json").write_text(json.dumps({"profile": "nvidia-16gb", "settings": {
        "vae_tile_size": 384, "vae_tile_overlap": 64, "vae_temporal_tile": 17, "max_frames": 0}}))
    fake_utils = types.SimpleNamespace(ProgressBar=lambda n: types.SimpleNamespace(update=lambda k: None))
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(
        empty=lambda shape, dtype=None, device=None: np.empty(shape, dtype)))
    monkeypatch.setitem(sys.modules, "comfy", types.SimpleNamespace(utils=fake_utils))
    monkeypatch.setitem(sys.modules, "comfy.utils", fake_utils)
    name = "h3kit_pack_h3_tiles"
    spec = importlib.util.spec_from_file_location(name, pack_dir / "__init__.py", submodule_search_locations=[str(pack_dir)])
    pack = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, name, pack)
    spec.loader.exec_module(pack)
    yield pack.NODE_CLASS_MAPPINGS["H3kitTiledVAEDecode"]()
    for sub in [k for k in sys.modules if k.startswith(name + ".")]:
        del sys.modules[sub]


def test_node_sets_h3_tiles_for_the_decode_and_restores_them(node):
    vae = _Wrapper(MiniMaxH3VideoVAE(), handles_tiling=True)
    images, = node.decode({"samples": np.zeros((1, 24, 7, 32, 32), np.float32)}, vae)
    assert images.shape == (22, 512, 512, 3)
    assert vae.calls == [({"tile_x": 24, "tile_y": 24, "overlap": 4}, 384, 64)]
    assert (vae.first_stage_model.tile_size, vae.first_stage_model.tile_overlap_min) == (256, 64)
    assert "temporal tile is not applied" in node.DESCRIPTION


def test_node_restores_h3_tiles_when_the_decode_raises(node):
    vae = _Wrapper(MiniMaxH3VideoVAE(), handles_tiling=True, fail=True)
    with pytest.raises(RuntimeError, match="decode failed"):
        node.decode({"samples": np.zeros((1, 24, 7, 32, 32), np.float32)}, vae)
    assert vae.calls[0][1:] == (384, 64)
    assert (vae.first_stage_model.tile_size, vae.first_stage_model.tile_overlap_min) == (256, 64)


def test_node_passes_decode_tiled_arguments_to_other_video_vaes(node, logic):
    vae = _Wrapper(TAEHV(), handles_tiling=False, spatial=8, temporal=4)
    node.decode({"samples": np.zeros((1, 16, 6, 8, 8), np.float32)}, vae)
    assert vae.calls == [(logic.decode_tile_args(384, 64, 17, 8, 8, 4), None, None)]
    assert vae.calls[0][0]["tile_t"] == 4 and not hasattr(vae.first_stage_model, "tile_size")


# ------------------------------------------------------------------ opt-in: a real ComfyUI

COMFY = os.environ.get("H3KIT_COMFYUI_DIR")

REAL = r"""
import importlib.util, json, os, sys
comfy_dir, testnode, vae_file, packs = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
sys.argv = [sys.argv[0], "--cpu"]
sys.path.insert(0, comfy_dir)
os.chdir(comfy_dir)
import comfy.options
comfy.options.enable_args_parsing()
import torch, comfy.sd, comfy.utils, nodes

def load(name, init, **kw):
    spec = importlib.util.spec_from_file_location(name, init, **kw)
    mod = importlib.util.module_from_spec(spec); sys.modules[name] = mod; spec.loader.exec_module(mod)
    return mod

load("tiny_h3_testnode", os.path.join(testnode, "__init__.py"), submodule_search_locations=[testnode])
vae = comfy.sd.VAE(sd=comfy.utils.load_torch_file(vae_file))
model = vae.first_stage_model
result = {"class": type(model).__name__, "handles_tiling": bool(vae.handles_tiling)}
seen = []
decode_pixels = model._decode_pixels
def spy(z):
    seen.append((model.tile_size, model.tile_overlap_min))
    return decode_pixels(z)
model._decode_pixels = spy
latent = {"samples": torch.randn(1, 24, 7, 24, 24, generator=torch.Generator().manual_seed(0))}  # 384x384, 22 frames
with torch.inference_mode():
    stock = nodes.VAEDecode().decode(vae, latent)[0]
    result["stock_tiles"] = len(seen)
    for name, pack in packs.items():
        seen.clear()
        mod = load("h3kit_pack_" + name, os.path.join(pack, "__init__.py"), submodule_search_locations=[pack])
        out = mod.NODE_CLASS_MAPPINGS["H3kitTiledVAEDecode"]().decode(latent, vae)[0]
        d = (out - stock).abs()
        result[name] = {"shape": list(out.shape), "identical": bool(torch.equal(out, stock)),
                        "max_abs_diff": float(d.max()), "mean_abs_diff": float(d.mean()),
                        "tile_decodes": len(seen), "tiles_during": sorted(set(seen)),
                        "tiles_after": [model.tile_size, model.tile_overlap_min]}
result["stock_shape"] = list(stock.shape)
result["stock_std"] = float(stock.std())
print("H3KIT-H3TILES " + json.dumps(result))
"""


def _comfy_at_least(comfy: Path, wanted=(0, 31)) -> bool:
    try:
        text = (comfy / "comfyui_version.py").read_text(encoding="utf-8")
    except OSError:
        return False
    m = re.search(r"__version__\s*=\s*[\"'](\d+)\.(\d+)", text)
    return bool(m) and (int(m.group(1)), int(m.group(2))) >= wanted


@pytest.mark.skipif(not COMFY or not (Path(COMFY) / "comfy/ldm/minimax/vae.py").is_file()
                    or not _comfy_at_least(Path(COMFY)),
                    reason="set H3KIT_COMFYUI_DIR to a ComfyUI >= 0.31 (with comfy/ldm/minimax/vae.py) to run")
def test_real_h3_video_vae_tiles_take_effect(tmp_path):
    comfy = Path(COMFY)
    python = next((p for p in (comfy / "venv/bin/python", comfy / ".venv/bin/python") if p.exists()), None)
    assert python, f"no venv in {comfy}"
    env = {"PYTHONDONTWRITEBYTECODE": "1", "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    only_video = {"dit": None, "text_encoder": None, "taeh3": None, "audio_vae": None}
    subprocess.run([str(python), str(REPO / "tests/support/comfy_h3/make_tiny_h3.py"), "--out", str(tmp_path / "models"),
                    "--names", json.dumps(only_video)], env=env, check=True, capture_output=True, timeout=600)
    packs = {}
    for tile, overlap in ((256, 64), (128, 32)):
        pack = tmp_path / f"pack{tile}" / "ComfyUI-h3kit"
        shutil.copytree(NODES, pack, ignore=shutil.ignore_patterns("__pycache__"))
        (pack / "h3kit_profile.json").write_text(json.dumps({"profile": "test", "settings": {
            "vae_tile_size": tile, "vae_tile_overlap": overlap, "vae_temporal_tile": 17, "max_frames": 0}}))
        packs[f"tile{tile}"] = str(pack)
    p = subprocess.run([str(python), "-c", REAL, str(comfy), str(REPO / "tests/support/comfy_h3/tiny_h3_testnode"),
                        str(tmp_path / "models/vae/h3tiny_video_vae_fp16.safetensors"), json.dumps(packs)],
                       cwd=comfy, env=env, capture_output=True, text=True, timeout=900)
    line = next((x for x in p.stdout.splitlines() if x.startswith("H3KIT-H3TILES ")), None)
    assert line, p.stdout[-2000:] + p.stderr[-4000:]
    r = json.loads(line.split(" ", 1)[1])
    print(json.dumps(r))
    assert r["class"] == "MiniMaxH3VideoVAE" and r["handles_tiling"]
    assert r["stock_shape"] == [22, 384, 384, 3] and r["stock_std"] > 0.01  # not a flat image
    same, small = r["tile256"], r["tile128"]
    # 256/64 is the VAE's own setting: the same 2x2 tiles as stock, bit for bit
    assert same["identical"] and same["tiles_during"] == [[256, 64]] and same["tile_decodes"] == r["stock_tiles"] == 4
    # 128/32 really tiles smaller (4x4 per clip) and blends: different, but close
    assert small["tiles_during"] == [[128, 32]] and small["tile_decodes"] == 16
    assert not small["identical"] and 0 < small["mean_abs_diff"] < 0.01 and small["max_abs_diff"] < 0.1
    assert same["tiles_after"] == small["tiles_after"] == [256, 64]  # restored after each decode
