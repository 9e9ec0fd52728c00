"""profiles/published_runs.yaml and its reader: every key checked, catalog ids known, the Mac sentence read from it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from h3kit.core.errors import BadInput
from h3kit.data import catalog as catalog_mod
from h3kit.data import published_runs
from h3kit.data.fingerprint import Fingerprint
from h3kit.data.yamlio import parse_yaml
from h3kit.plan import make_plan

ROOT = Path(__file__).resolve().parents[2]
TABLE = ROOT / "profiles" / "published_runs.yaml"
MAC = ROOT / "tests" / "fixtures" / "fingerprints" / "apple-m2max-64gb.json"
NVIDIA = ROOT / "tests" / "fixtures" / "fingerprints" / "nvidia-rtx4090-24gb-64gb.json"


def _ids(cat):
    return {"dit": [w.id for w in cat.dit], "text_encoder": [w.id for w in cat.text_encoder],
            "vae": [w.id for w in cat.vae], "lora": [w.id for w in cat.lora]}


def test_the_shipped_table_reads_with_the_catalogs_ids():
    table = published_runs.load(ids=_ids(catalog_mod.load()))
    assert table.runs and all(r.source for r in table.runs)
    assert all(any((r.published.seconds_per_step, r.published.seconds_per_clip, r.published.peak_gpu_bytes))
               for r in table.runs)


@pytest.mark.parametrize("old, new, where", [
    ("schema: h3kit.published-runs/1", "schema: h3kit.published-runs/1\nextra: 1", "'extra' is not a key"),
    ("    published: {seconds_per_step: 11}", "    published: {seconds_per_step: 11}\n    speedup: 2",
     "'runs[2].speedup' is not a key"),
    ("steps: 20, cfg: 1.0,\n            sampler: null", "steps: 20, cfg: 1.0, seed: 3,\n            sampler: null",
     "setup.seed' is not a key"),
    ('gpu: "NVIDIA GeForce RTX 5080 Laptop GPU", gpu_memory: "16 GiB"',
     'gpu: "NVIDIA GeForce RTX 5080 Laptop GPU", vram: 3, gpu_memory: "16 GiB"', "machine.vram' is not a key"),
    ("published: {seconds_per_step: 11}", "published: {seconds_per_step: -11}", "seconds_per_step' is -11"),
])
def test_an_unknown_key_or_a_bad_figure_is_refused_with_its_line(old, new, where):
    text = TABLE.read_text(encoding="utf-8")
    assert old in text
    with pytest.raises(BadInput) as exc:
        published_runs.check(parse_yaml(text.replace(old, new, 1), Path("published_runs.yaml")))
    assert "published_runs.yaml:" in exc.value.message and where in exc.value.message


def test_a_setup_naming_a_file_the_catalog_lacks_is_refused():
    text = TABLE.read_text(encoding="utf-8").replace("dit: h3-dit-pruned-fp8_scaled", "dit: h3-dit-nonesuch", 1)
    with pytest.raises(BadInput) as exc:
        published_runs.check(parse_yaml(text, Path("published_runs.yaml")), _ids(catalog_mod.load()))
    assert "'h3-dit-nonesuch', not a dit id of the catalog" in exc.value.message


def test_a_mac_plan_says_once_how_the_native_engine_compared_with_the_tables_figures():
    cat = catalog_mod.load()
    profiles = catalog_mod.load_profiles(cat)
    native, comfy = published_runs.load().native_comparison()
    mac = make_plan(Fingerprint.from_json(json.loads(MAC.read_text())), cat, profiles)
    said = [r for r in mac.rationale if "native engine" in r]
    assert len(said) == 1
    ratio = comfy.published.seconds_per_step / native.published.seconds_per_step
    assert f"{ratio:.1f}x" in said[0] and f"{native.published.seconds_per_step:g}" in said[0]
    assert f"{comfy.published.seconds_per_step:g} s/step" in said[0] and "plans ComfyUI" in said[0]
    pc = make_plan(Fingerprint.from_json(json.loads(NVIDIA.read_text())), cat, profiles)
    assert not any("native engine" in r for r in pc.rationale)
