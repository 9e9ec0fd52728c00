"""The H3kitCalibrationReport node's text, and the summary calibration writes into an installed pack."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from h3kit import calibrate
from pack_support import pack_module
from h3kit.cli.context import Context
from h3kit.data.plan_doc import PlanSettings

NODES = Path(__file__).resolve().parents[2] / "nodes"


@pytest.fixture
def node_logic():
    return pack_module("h3kit_calibration.summary")


def _doc() -> dict:
    return {"created": "2026-11-30T19:30:00+00:00", "profile": "cpu-only", "plan": {"profile": "cpu-only"},
            "duration_seconds": 3.2, "quick": True,
            "native": {"status": "measured", "best": {"kind": "q8_0", "gflop_per_s": 30.0, "weight_gb_per_s": 0.5,
                                                      "threads": 2}},
            "disk": {"gb_per_s": 1.8, "path": "/models"},
            "decisions": [calibrate.decision("vae_tile_size", 384, 256, "tile 384 was fastest within budget")],
            "report_files": {"html": "/reports/latest.html"}}


def test_summary_text_shows_lines_decisions_and_the_report(node_logic, tmp_path):
    path = tmp_path / node_logic.SUMMARY_FILE
    path.write_text(json.dumps(calibrate.summary_document(_doc())), encoding="utf-8")
    text = node_logic.summary_text(path)
    assert "profile cpu-only" in text
    assert "native q8_0 matmul: 30 GFLOP/s" in text
    assert "vae_tile_size: 384 (changed) -- tile 384 was fastest within budget" in text
    assert "/reports/latest.html" in text
    assert node_logic.summary_stamp(path) is not None


def test_summary_text_without_or_with_a_broken_file_says_what_to_do(node_logic, tmp_path):
    assert "run 'h3kit calibrate'" in node_logic.summary_text(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json", encoding="utf-8")
    assert "unreadable" in node_logic.summary_text(bad)
    assert node_logic.summary_stamp(tmp_path / "missing.json") is None


def test_pack_summary_is_written_only_into_a_pack_h3kit_installed(tmp_path, h3kit_home):
    from h3kit.comfyui import deploy
    from h3kit.comfyui import manifest as mf
    from h3kit.comfyui.locate import find

    from fixtures.comfyui import comfy_tree

    comfy = comfy_tree.make_comfyui(tmp_path / "ComfyUI")
    ctx = Context(yes=True)
    install = find(str(comfy), None, ctx)
    assert calibrate.write_pack_summary(ctx, install, _doc()) is None  # no pack yet: nothing written
    deploy.deploy(install, settings=PlanSettings(vae_tile_size=256), profile="cpu-only", library=None,
                  state_dir=ctx.locations.state_dir, cache_dir=ctx.locations.cache_dir)
    written = calibrate.write_pack_summary(ctx, install, _doc())
    assert written == str(install.node_dir / calibrate.SUMMARY_FILE)
    assert json.loads(Path(written).read_text())["schema"] == calibrate.SUMMARY_SCHEMA
    record = mf.load_or_new(ctx.locations.state_dir, install.path)
    entry = record.find(written)
    assert entry is not None and entry.role == "node-pack" and record.still_ours(entry)

