"""The typed fingerprint (h3kit.data.fingerprint): every saved fingerprint survives from_json/to_json byte for
byte, and the questions the layers ask of it have one answer each."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from h3kit.data.fingerprint import Fingerprint, Gpu
from h3kit.fingerprint import collect, this_machine
from h3kit.fingerprint.schema import load_file

FIXTURES = Path(__file__).parents[1] / "fixtures"
SAVED = sorted((FIXTURES / "fingerprints").glob("*.json")) + sorted((FIXTURES / "torchsel").glob("*.json"))
REPORTS = sorted((FIXTURES / "report").glob("*.json"))


def _indent(text: str) -> int:
    """The indent the fixture was written with (they are json.dumps output, some with 1, some with 2)."""
    second = text.splitlines()[1]
    return len(second) - len(second.lstrip(" "))


def _written(doc: dict, text: str) -> str:
    return json.dumps(doc, indent=_indent(text)) + ("\n" if text.endswith("\n") else "")


def test_there_are_fixtures_to_round_trip():
    assert len(SAVED) >= 30 and REPORTS


@pytest.mark.parametrize("path", SAVED, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_every_saved_fingerprint_round_trips_byte_for_byte(path):
    text = path.read_text(encoding="utf-8")
    assert _written(json.loads(text), text) == text  # the fixture is what json.dumps writes, so the test below is fair
    typed = Fingerprint.from_json(json.loads(text))
    assert _written(typed.to_json(), text) == text
    assert load_file(path) == typed


@pytest.mark.parametrize("path", REPORTS, ids=lambda p: p.stem)
def test_the_fingerprint_inside_each_calibration_report_round_trips(path):
    doc = json.loads(path.read_text(encoding="utf-8"))["fingerprint"]
    assert json.dumps(Fingerprint.from_json(doc).to_json()) == json.dumps(doc)


@pytest.mark.real_machine
def test_this_machine_is_what_collect_returns_parsed():
    doc = collect(timeout=5)
    typed = Fingerprint.from_json(doc)
    assert json.dumps(typed.to_json()) == json.dumps(doc)
    assert this_machine(timeout=5).backend == typed.backend


def _gpu(vendor, name, total, backend, **extra) -> dict:
    return {"vendor": vendor, "name": name, "memory_total_bytes": total, "memory_free_bytes": None,
            "unified_memory": False, "driver_version": None, "cuda_driver_version": None,
            "compute_capability": None, "backend": backend, **extra}


def test_the_primary_gpu_is_the_largest_one_something_computes_on():
    fp = Fingerprint.from_json({"gpus": [_gpu("intel", "iGPU", 2 * 2**30, "xpu"),
                                         _gpu("amd", "no backend", 16 * 2**30, None),
                                         _gpu("nvidia", "A", 8 * 2**30, "cuda"),
                                         _gpu("nvidia", "B", 8 * 2**30, "cuda")]})
    assert [g.name for g in fp.usable_gpus] == ["iGPU", "A", "B"]
    assert fp.primary_gpu.name == "A"  # the first of equals
    assert fp.backend == "cuda"
    assert [g.name for g in fp.gpus_of("nvidia")] == ["A", "B"] and fp.gpus_of("apple") == ()


def test_without_a_usable_gpu_the_machine_computes_on_the_cpu():
    rosetta = Fingerprint.from_json({"rosetta": True, "gpus": [_gpu("apple", "M1", 2**34, None)]})
    assert rosetta.primary_gpu is None and rosetta.backend == "cpu" and not rosetta.unified_memory
    assert Fingerprint.from_json({}).backend == "cpu"


def test_what_the_type_does_not_model_is_kept_and_readable():
    doc = {"schema": "h3kit.fingerprint/1", "notes": ["x"],
           "gpus": [_gpu("amd", "RX 7900 XTX", 24 * 2**30, "rocm", gfx_target="gfx1100")]}
    fp = Fingerprint.from_json(doc)
    assert fp.gpus[0].detail("gfx_target") == "gfx1100" and fp.gpus[0].detail("metal") is None
    assert fp.extra["notes"] == ["x"]
    assert list(fp.to_json()) == ["schema", "notes", "gpus"] and fp.to_json() == doc


def test_a_part_of_the_wrong_shape_reads_as_empty_and_is_written_back_as_it_was():
    doc = {"gpus": None, "disks": [{"path": "/", "free_bytes": 5}, "junk"], "cpu": "?"}
    fp = Fingerprint.from_json(doc)
    assert fp.gpus == () and [d.path for d in fp.disks] == ["/"] and fp.cpu.flags == ()
    assert fp.to_json() == doc


def test_missing_optional_keys_take_defaults_and_are_not_invented_on_the_way_out():
    fp = Fingerprint.from_json({"gpus": [{"vendor": "nvidia", "name": "T4", "memory_total_bytes": 16, "backend": "cuda"}]})
    gpu = fp.gpus[0]
    assert (gpu.driver_version, gpu.compute_capability, gpu.unified_memory) == (None, None, False)
    assert fp.memory.total_bytes is None and fp.ram_total_bytes == 0 and fp.system == "linux"
    assert fp.to_json() == {"gpus": [{"vendor": "nvidia", "name": "T4", "memory_total_bytes": 16, "backend": "cuda"}]}


def test_the_value_is_frozen_and_to_json_hands_out_a_copy():
    fp = load_file(FIXTURES / "fingerprints" / "nvidia-rtx4090-24gb-64gb.json")
    with pytest.raises(dataclasses.FrozenInstanceError):
        fp.gpus[0].backend = "rocm"  # type: ignore[misc]
    out = fp.to_json()
    out["gpus"][0]["backend"] = "rocm"
    out["synthetic"] = "changed"
    assert fp.backend == "cuda" and fp.to_json()["synthetic"] != "changed"
    assert isinstance(fp.primary_gpu, Gpu)
