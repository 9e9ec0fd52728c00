"""Issue 26 (4, 12): uninstall with custom_nodes a link since before the install, and the streaming stats file
h3kit's own node writes into the pack."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from fixtures.comfyui import comfy_tree
from pack_support import pack_module

pytestmark = pytest.mark.native  # installs: the session's native library, not a compile per test

FIXTURES = Path(__file__).parents[1] / "fixtures" / "comfyui"
INSTALL = ("install", "--yes", "--skip-calibrate", "--no-models")


def test_custom_nodes_that_was_a_link_before_install_uninstalls_cleanly(tmp_path, run_cli):
    comfy = comfy_tree.make_comfyui(tmp_path / "c")
    shared = tmp_path / "shared custom_nodes"
    shutil.move(str(comfy / "custom_nodes"), str(shared))
    (comfy / "custom_nodes").symlink_to(shared, target_is_directory=True)
    before = comfy_tree.snapshot(shared)
    assert run_cli(*INSTALL, "--comfyui", str(comfy))[0] == 0
    assert (shared / "ComfyUI-h3kit" / "__init__.py").is_file()
    code, out, err = run_cli("uninstall", "--comfyui", str(comfy), "--yes")
    assert code == 0, out + err
    assert "is now a link" not in out
    assert not (shared / "ComfyUI-h3kit").exists()
    assert comfy_tree.snapshot(shared) == before and (comfy / "custom_nodes").is_symlink()


def test_custom_nodes_made_a_link_after_install_is_still_left_alone(tmp_path, run_cli):
    comfy = comfy_tree.make_comfyui(tmp_path / "c")
    assert run_cli(*INSTALL, "--comfyui", str(comfy))[0] == 0
    elsewhere = tmp_path / "elsewhere"
    shutil.move(str(comfy / "custom_nodes"), str(elsewhere))
    (comfy / "custom_nodes").symlink_to(elsewhere, target_is_directory=True)
    code, out, err = run_cli("uninstall", "--comfyui", str(comfy), "--yes")
    assert code == 4 and "is now a link" in out
    assert (elsewhere / "ComfyUI-h3kit" / "__init__.py").is_file()


def test_the_streaming_stats_written_by_h3kits_own_node_are_removed_with_the_pack(tmp_path, run_cli):
    comfy = comfy_tree.make_comfyui(tmp_path / "c")
    assert run_cli(*INSTALL, "--comfyui", str(comfy))[0] == 0
    pack = comfy / "custom_nodes" / "ComfyUI-h3kit"
    logic = pack_module("h3kit_streaming.logic")  # the node's own writer, imported as the pack's module
    doc = logic.stats_document("dit.safetensors", 4, {"bytes_read": 10, "steps": 1}, {"resident": []})
    logic.write_json_atomic(pack / logic.STATS_FILE, doc)
    te_stats = pack / pack_module("h3kit_streaming.te_logic").TE_STATS_FILE  # the streamed text encoder's
    logic.write_json_atomic(te_stats, dict(doc, file="te.safetensors"))
    mine = pack / "notes.txt"
    mine.write_text("mine\n")
    code, out, err = run_cli("uninstall", "--comfyui", str(comfy), "--yes", "--json")
    assert code == 0, err
    result = json.loads(out)
    backed = [b["path"] for b in result["backed_up"]]
    for stats in (pack / logic.STATS_FILE, te_stats):
        assert str(stats) not in backed and str(stats) in result["removed"]
    assert str(mine) in backed  # a file the user added is still theirs


def test_a_file_of_that_name_that_is_not_the_nodes_stays_the_users(tmp_path, run_cli):
    comfy = comfy_tree.make_comfyui(tmp_path / "c")
    assert run_cli(*INSTALL, "--comfyui", str(comfy))[0] == 0
    stats = comfy / "custom_nodes" / "ComfyUI-h3kit" / "h3kit_streaming_stats.json"
    stats.write_text('{"schema": "mine/1"}\n')
    code, out, err = run_cli("uninstall", "--comfyui", str(comfy), "--yes", "--json")
    assert code == 0 and str(stats) in [b["path"] for b in json.loads(out)["backed_up"]]
