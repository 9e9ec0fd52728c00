"""The format probe's document, cache and doctor table (pure parts), and the runner refusing cleanly.

Recorded output: tests/fixtures/format_probe/cpu-comfyui-0.33.json is the runner's `format-probe` job
as it ran in /work/comfy33's Python (ComfyUI 0.33.0, torch 2.14.1+cu130 without a GPU, so the CPU,
2 cores, ComfyUI-GGUF from the mirror in custom_nodes). Other machines are that record with one row
changed, named in each test. The real run is tests/real_comfyui/test_format_probe_real_comfyui.py.
"""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

import comfy_h3
from h3kit.data.fingerprint import Fingerprint
from h3kit.calibrate import format_probe as fp
from h3kit.core.session import Session
from h3kit.data.format_evidence import PARTS, parse

pytestmark = pytest.mark.native  # installs: the session's native library, not a compile per test

REC = json.loads((Path(__file__).parents[1] / "fixtures" / "format_probe" / "cpu-comfyui-0.33.json").read_text())
INFO = {"comfyui_version": "0.33.0", "torch": "2.14.1+cu130"}


def _with(part: str, fmt: str, **row) -> dict:
    doc = copy.deepcopy(REC)
    doc["parts"][part][fmt].update(row)
    return doc


def test_the_recorded_probe_has_every_format_for_both_parts():
    probe = parse(REC)
    assert (probe.comfyui_version, probe.torch, probe.device, probe.backend) == ("0.33.0", "2.14.1+cu130", "cpu", "cpu")
    for part in PARTS:
        assert set(probe.parts[part]) == set(fp.FORMAT_ORDER)
        for fmt in fp.FORMAT_ORDER:
            res = probe.parts[part][fmt]
            assert res.status == "runs" and res.device == "cpu" and res.dtype == "float32", (part, fmt)
            assert probe.runs(part, fmt) is True
    assert probe.seconds <= 60


def test_the_table_has_a_row_per_format_with_seconds_device_dtype_and_the_key():
    lines = fp.table_lines(parse(REC))
    assert lines[0].startswith("Format probe: ComfyUI 0.33.0, torch 2.14.1+cu130, cpu (backend cpu)")
    rows = {line.split()[0]: line for line in lines[2:2 + len(fp.FORMAT_ORDER)]}
    assert list(rows) == list(fp.FORMAT_ORDER)
    seconds = REC["parts"]["text_encoder"]["w4a8"]["seconds"]
    assert rows["w4a8"].count("runs") == 2 and f"{seconds:5.2f} s" in rows["w4a8"]
    assert "*" not in rows["bf16"] and "*" not in rows["int8_convrot"].split("runs")[1]  # the DiT's int8 kernel ran
    assert rows["q4_k"].count("s*") == 2  # GGUF: ComfyUI-GGUF dequantizes before the matmul
    assert "  * ComfyUI dequantizes these weights and runs a plain matmul here (no quantized kernel)" in lines
    assert "  DiT runs on cpu in float32" in lines and "  text encoder runs on cpu in float32" in lines
    assert lines[-1] == "  cache key: ComfyUI 0.33.0 | torch 2.14.1+cu130 | cpu"


def test_a_failing_and_a_skipped_format_show_their_one_line():
    """As on a Mac: int8 has no torch._int_mm on MPS (comfy-kitchen #92); no ComfyUI-GGUF installed."""
    doc = _with("dit", "int8_convrot", status="fails",
                error="NotImplementedError: Could not run 'aten::_int_mm' with arguments from the 'MPS' backend.")
    doc["parts"]["text_encoder"]["q4_k"] = {"status": "skipped", "seconds": 0.0, "device": None, "dtype": None,
                                            "error": "ComfyUI-GGUF is not installed in /x/custom_nodes"}
    probe = parse(doc)
    lines = fp.table_lines(probe)
    row = next(line for line in lines if line.startswith("  int8_convrot"))
    assert "FAILS" in row and "runs" in row  # the DiT fails, the text encoder runs
    assert "  int8_convrot (DiT): NotImplementedError: Could not run 'aten::_int_mm' with arguments from the " \
           "'MPS' backend." in lines
    assert "  q4_k (text encoder): ComfyUI-GGUF is not installed in /x/custom_nodes" in lines
    assert probe.runs("dit", "int8_convrot") is False and probe.runs("text_encoder", "q4_k") is None
    said = fp.result_finding(probe)
    assert said["status"] == "warn" and "these fail here: int8_convrot" in said["message"]
    assert fp.result_finding(parse(REC))["status"] == "ok"


def test_the_cache_is_kept_while_the_setup_is_the_same():
    doc = {**REC, "machine_devices": "cpu"}
    same = dict(comfyui_version="0.33.0", torch="2.14.1+cu130", devices="cpu", gguf_pack=True)
    assert fp.still_valid(doc, **same) is None
    assert fp.still_valid(doc, **{**same, "comfyui_version": "0.34.0"}) == "ComfyUI 0.33.0 -> 0.34.0"
    assert fp.still_valid(doc, **{**same, "torch": "2.14.1+cpu"}) == "torch 2.14.1+cu130 -> 2.14.1+cpu"
    assert fp.still_valid(doc, **{**same, "devices": "nvidia RTX 4090"}) == "devices cpu -> nvidia RTX 4090"
    assert fp.still_valid(doc, **{**same, "gguf_pack": False}) == "a GGUF loader pack was removed"


def test_machine_devices_from_a_fingerprint():
    assert fp.machine_devices(None) is None
    assert fp.machine_devices(Fingerprint.from_json({"gpus": []})) == "cpu"
    gpus = [{"vendor": "nvidia", "name": "RTX 4090"}, {"vendor": "amd", "name": "RX 7900 XTX"}]
    assert fp.machine_devices(Fingerprint.from_json({"gpus": gpus})) == "amd RX 7900 XTX, nvidia RTX 4090"


def _install(tmp_path: Path, python: str) -> SimpleNamespace:
    comfy = tmp_path / "ComfyUI"
    (comfy / "custom_nodes" / "ComfyUI-GGUF").mkdir(parents=True)
    (comfy / "custom_nodes" / "ComfyUI-GGUF" / "dequant.py").write_text("", encoding="utf-8")
    return SimpleNamespace(path=comfy, python=Path(python))


def test_a_cached_probe_is_returned_without_running_anything(tmp_path, h3kit_home):
    ctx = Session()
    install = _install(tmp_path, str(tmp_path / "no-such-python"))  # running it would fail: the cache must answer
    path = fp.cache_file(ctx.locations.cache_dir, install.path)
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({**REC, "machine_devices": "cpu"}), encoding="utf-8")
    said: list[dict] = []
    probe = fp.format_evidence(ctx, install, fingerprint=Fingerprint(), info=INFO, findings=said)
    assert probe is not None and probe.path == path and probe.runs("text_encoder", "nvfp4") is True
    assert said == [{"check": "formats.cache", "status": "ok", "message": f"Format probe from the cache ({path}).",
                     "fix": None}]
    stale: list[dict] = []
    assert fp.format_evidence(ctx, install, info={**INFO, "torch": "2.15.0+cpu"}, run=False, findings=stale) is None
    assert stale[0]["status"] == "warn" and "torch 2.14.1+cu130 -> 2.15.0+cpu" in stale[0]["message"]


def test_a_probe_that_cannot_run_returns_none_and_says_why(tmp_path, h3kit_home):
    """The runner itself, in this Python, on a folder that is no ComfyUI: no traceback, one reason."""
    ctx = Session()
    install = _install(tmp_path, sys.executable)
    said: list[dict] = []
    assert fp.format_evidence(ctx, install, info=INFO, findings=said) is None
    assert said[0]["check"] == "formats.probe" and said[0]["status"] == "warn"
    assert said[0]["message"].startswith("The format probe did not run: ")
    assert "is not a ComfyUI folder" in said[0]["message"] or "torch is not importable" in said[0]["message"]
    assert not fp.cache_file(ctx.locations.cache_dir, install.path).exists()


def test_no_comfyui_is_a_finding_not_an_error():
    said: list[dict] = []
    assert fp.format_evidence(Session(), None, findings=said) is None
    assert said[0]["status"] == "warn" and "no ComfyUI" in said[0]["message"]


@pytest.mark.parametrize("bad", [{"schema": "h3kit.format_probe/1", "status": "skipped", "reason": "x"},
                                 {"schema": "other/1"}])
def test_a_runner_document_that_is_no_probe_is_refused_by_the_reader(bad):
    with pytest.raises(ValueError):
        parse(bad)


def _stand_in_with_probe(tmp_path: Path) -> tuple[Path, Path, dict]:
    """A stand-in ComfyUI (tests/fixtures/comfyui) whose probe is in the cache, with fp8_scaled failing for the
    DiT: (ComfyUI folder, cache file, the document)."""
    import importlib.util

    from h3kit.comfyui import locate
    from h3kit.core.paths import locations

    tree = Path(__file__).parents[1] / "fixtures" / "comfyui" / "comfy_tree.py"
    spec = importlib.util.spec_from_file_location("comfy_tree", tree)
    comfy_tree = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(comfy_tree)
    comfy = comfy_tree.make_comfyui(tmp_path / "Comfy ä")
    info = locate.inspect(locate.find(str(comfy), None, Session(), need_write=False))
    doc = _with("dit", "fp8_scaled", status="fails", error="TypeError: float8 is not supported here")
    doc["key"].update(comfyui_version=info["comfyui_version"], torch=info["torch"])  # the stand-in's own
    doc["gguf_pack"] = None  # the stand-in has no ComfyUI-GGUF
    path = fp.cache_file(locations().cache_dir, comfy)
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(doc), encoding="utf-8")
    return comfy, path, doc


def test_install_plans_with_the_probe_before_any_download(tmp_path, h3kit_home, run_cli):
    comfy, _path, _doc = _stand_in_with_probe(tmp_path)
    code, out, err = run_cli("install", "--comfyui", str(comfy), "--yes", "--skip-calibrate", "--no-models", "--json")
    assert code == 0, err
    notes = json.loads(out)["notes"]
    assert any(n.startswith("planned with h3kit's format probe on this machine (ComfyUI ") and
               n.endswith(": 23 format/part pairs run") for n in notes), notes


def test_install_for_a_saved_fingerprint_does_not_plan_with_this_machines_probe(tmp_path, h3kit_home, run_cli):
    comfy, _path, _doc = _stand_in_with_probe(tmp_path)
    saved = comfy_h3.roomy_fingerprint(run_cli, tmp_path)  # this machine's, saved, with room on its disks
    code, out, err = run_cli("install", "--comfyui", str(comfy), "--fingerprint", saved, "--yes",
                             "--skip-calibrate", "--no-models", "--json")
    assert code == 0, err
    assert not any(n.startswith("planned with") for n in json.loads(out)["notes"])


def test_doctor_prints_the_cached_table_and_json_carries_it(tmp_path, h3kit_home, run_cli):
    """Doctor runs no probe when the cache has one, and prints it."""
    comfy, path, doc = _stand_in_with_probe(tmp_path)
    code, out, _err = run_cli("doctor", "--comfyui", str(comfy))
    assert "Format probe: ComfyUI" in out and "  fp8_scaled (DiT): TypeError: float8 is not supported here" in out
    assert f"[ok  ] formats.cache: Format probe from the cache ({path})." in out
    assert "[WARN] formats.probe: 23 of 24 format/part pairs run on cpu" in out
    code, out, _err = run_cli("doctor", "--comfyui", str(comfy), "--json")
    carried = json.loads(out)["format_probe"]
    assert carried["parts"]["dit"]["fp8_scaled"]["status"] == "fails" and carried["key"] == doc["key"]
