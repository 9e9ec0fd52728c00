"""The node pack: imports without ComfyUI, torch or the native library; its logic module on its own."""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path

import numpy as np
import pytest

NODES = Path(__file__).resolve().parents[2] / "nodes"


def _load_pack(path: Path, name: str = "h3kit_pack_under_test"):
    spec = importlib.util.spec_from_file_location(name, path / "__init__.py", submodule_search_locations=[str(path)])
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture
def logic():
    from pack_support import pack_module

    return pack_module("h3kit_decode.logic")


def test_pack_imports_without_comfyui_or_native(tmp_path, monkeypatch):
    assert "comfy" not in sys.modules
    # ComfyUI's folder_paths answers a loader node's file list when the UI asks (INPUT_TYPES), as for UNETLoader
    stub = type(sys)("folder_paths")
    stub.get_filename_list = lambda kind: []
    monkeypatch.setitem(sys.modules, "folder_paths", stub)
    pack = _load_pack(NODES)
    from h3kit.comfyui.deploy import EXPECTED_NODES

    assert sorted(pack.NODE_CLASS_MAPPINGS) == sorted(EXPECTED_NODES)  # what install's verification requires
    for name, cls in pack.NODE_CLASS_MAPPINGS.items():
        assert name.startswith("H3kit") and cls.CATEGORY == "h3kit"
        assert pack.NODE_DISPLAY_NAME_MAPPINGS[name].startswith("h3kit")
        assert isinstance(cls.INPUT_TYPES(), dict) and hasattr(cls, cls.FUNCTION)
    assert "comfy" not in sys.modules and "torch" not in sys.modules


def test_profile_info_rereads_the_profile_file(tmp_path, monkeypatch):
    """A copy of nodes/ as deploy makes it, with the bridge but no library anywhere: the node says so."""
    import shutil

    monkeypatch.delenv("H3KIT_NATIVE_LIB", raising=False)
    monkeypatch.setenv("H3KIT_HOME", str(tmp_path / "no-build-here"))
    copy = tmp_path / "ComfyUI-h3kit"
    shutil.copytree(NODES, copy, ignore=shutil.ignore_patterns("__pycache__"))
    prof = copy / "h3kit_profile.json"
    prof.write_text(json.dumps({"schema": "h3kit.node-profile/1", "profile": "nvidia-16gb",
                                "settings": {"vae_tile_size": 384, "vae_tile_overlap": 48, "vae_temporal_tile": 32,
                                             "max_frames": 121}}))
    pack = _load_pack(copy, "h3kit_pack_copy")
    node = pack.NODE_CLASS_MAPPINGS["H3kitProfileInfo"]()
    text, tile, overlap, temporal, frames = node.info()
    assert (tile, overlap, temporal, frames) == (384, 48, 32, 121)
    assert "nvidia-16gb" in text and "native library: not loaded" in text and "h3kit build" in text
    first_key = pack.NODE_CLASS_MAPPINGS["H3kitProfileInfo"].IS_CHANGED()
    prof.write_text(json.dumps({"profile": "nvidia-8gb", "settings": {"vae_tile_size": 192, "vae_tile_overlap": 32,
                                                                       "vae_temporal_tile": 16, "max_frames": 73}}))
    os.utime(prof, ns=(1, 10**18))  # a distinct mtime even on coarse clocks
    assert pack.NODE_CLASS_MAPPINGS["H3kitProfileInfo"].IS_CHANGED() != first_key
    text, tile, *_ = node.info()
    assert tile == 192 and "nvidia-8gb" in text


def test_profile_store_missing_and_corrupt(tmp_path, logic):
    from pack_support import pack_module

    profile = pack_module("h3k_profile")
    store = profile.ProfileStore(tmp_path / "h3kit_profile.json")
    assert store.current().tiles() == profile.VaeTiles() and "missing" in store.error
    assert logic.tile_values(store.current().tiles())["tile_size"] == 512
    (tmp_path / "h3kit_profile.json").write_text("{broken")
    assert store.current() == profile.PackProfile() and "unreadable" in store.error


def test_decode_tile_args_match_comfyui_vaedecodetiled(logic):
    # ComfyUI's VAEDecodeTiled with tile 512, overlap 64, temporal 64/8 on an SD VAE (8x, no time axis)
    assert logic.decode_tile_args(512, 64, 64, 8, 8, None) == {"tile_x": 64, "tile_y": 64, "overlap": 8,
                                                               "tile_t": None, "overlap_t": None}
    # a Wan-style video VAE: 8x spatial, 4x temporal; overlap clamped to tile/4
    assert logic.decode_tile_args(256, 96, 32, 8, 8, 4) == {"tile_x": 32, "tile_y": 32, "overlap": 8,
                                                            "tile_t": 8, "overlap_t": 2}


def test_chunked_decode_fills_one_preallocated_output(logic):
    latent = np.arange(10 * 4 * 2 * 2, dtype=np.float32).reshape(10, 4, 2, 2)
    allocations, seen = [], []

    def decode(part):
        seen.append(part.shape[0])
        return np.repeat(np.repeat(part.transpose(0, 2, 3, 1)[..., :3], 8, axis=1), 8, axis=2)

    def allocate(shape, like):
        allocations.append(shape)
        return np.empty(shape, dtype=like.dtype)

    out = logic.chunked_decode(latent, 4, decode, allocate)
    assert allocations == [(10, 16, 16, 3)] and seen == [4, 4, 2]
    np.testing.assert_array_equal(out, decode(latent))


def test_chunked_decode_video_items(logic):
    latent = np.zeros((2, 4, 3, 2, 2), dtype=np.float32)
    latent[1] = 1
    out = logic.chunked_decode(latent, 1, lambda p: np.broadcast_to(p[:, :1, :1, :1, :1], (1, 9, 16, 16, 3)).copy(),
                               lambda shape, like: np.empty(shape, like.dtype))
    assert out.shape == (2, 9, 16, 16, 3) and out[0].max() == 0 and out[1].min() == 1


def test_memory_report(logic):
    line = logic.memory_report({"device": 1 << 30, "ram": 4 << 30}, {"device": 3 << 30, "ram": 4 << 30})
    assert "device: 1.00 GiB free -> 3.00 GiB free (freed 2.00 GiB)" in line
    assert logic.memory_report({"device": None}, {"device": None}).endswith("no memory figures available")
    assert logic.frame_chunks(5, 2) == [(0, 2), (2, 4), (4, 5)]


def _node_modules() -> set[str]:
    """The pack's node modules (they define NODE_CLASS_MAPPINGS), as dotted names under the pack."""
    import ast

    def defines_nodes(path: Path) -> bool:
        return any(isinstance(n, ast.Assign) and any(getattr(t, "id", None) == "NODE_CLASS_MAPPINGS" for t in n.targets)
                   for n in ast.parse(path.read_text(encoding="utf-8")).body)

    return {".".join(p.relative_to(NODES).with_suffix("").parts) for p in NODES.rglob("*.py")
            if p.name != "__init__.py" and defines_nodes(p)}


def _relative_imports(path: Path) -> set[str]:
    """The pack modules `path` imports relatively, as dotted names under the pack."""
    import ast

    package = list(path.relative_to(NODES).parts[:-1])
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.level:
            base = package[: len(package) - (node.level - 1)] + (node.module.split(".") if node.module else [])
            found.add(".".join(base))
            found.update(".".join(base + [a.name]) for a in node.names)
    return found


def test_the_pack_is_grouped_by_feature_and_no_node_module_imports_another():
    """nodes/__init__.py only registers the feature packages' node modules; every other module reaches a node
    module never (what node modules share lives in h3kit_common)."""
    nodes = _node_modules()
    assert nodes == {"h3kit_calibration.node", "h3kit_decode.node", "h3kit_gguf.node", "h3kit_streaming.dit_node",
                     "h3kit_streaming.te_node"}
    assert not list(NODES.glob("h3kit_*.py"))  # no node module at the top: each in its feature package
    # besides the node modules, the pack's __init__ starts only the panel (its routes and queue guard)
    assert _relative_imports(NODES / "__init__.py") - {p.split(".")[0] for p in nodes} \
        - {"h3kit_panel", "h3kit_panel.register"} == nodes
    offenders = {f"{p.relative_to(NODES)} imports {m}" for p in NODES.rglob("*.py") if p.parent != NODES
                 for m in _relative_imports(p) & nodes}
    assert offenders == set()


def test_a_feature_package_imports_only_h3k_packages_h3kit_common_and_itself():
    """The seam between the pack's features (issue #46): what two features share lives in h3kit_common or an
    h3k_* package, so each h3kit_* feature package can change without another breaking."""
    offenders = set()
    for path in NODES.glob("h3kit_*/**/*.py"):
        own = path.relative_to(NODES).parts[0]
        for module in _relative_imports(path):
            top = module.split(".")[0]
            if top and top != own and top != "h3kit_common" and not top.startswith("h3k_"):
                offenders.add(f"{path.relative_to(NODES)} imports {module}")
    assert offenders == set()
    common = {m.split(".")[0] for p in (NODES / "h3kit_common").rglob("*.py") for m in _relative_imports(p)}
    assert {m for m in common if m.startswith("h3kit_") and m != "h3kit_common"} == set()  # the bottom of the seam
