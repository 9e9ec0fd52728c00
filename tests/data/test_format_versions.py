"""Evidence that depends on the ComfyUI (and torch) release: formats.<f>.runs_on.<backend>.since.

int8 formats on Apple MPS fail before ComfyUI's emulation fix (PR #16130, completed for H3 by #16285) and run,
emulated, from the conservative first good release the catalog names; an unknown version keeps the older report;
an entry gated on torch holds only where that torch is known; the format probe's measurement beats all of them.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from h3kit.data import catalog as catalog_mod
from h3kit.data import format_evidence, format_support
from h3kit.data.catalog import Machine
from h3kit.data.yamlio import Problems

CAT = catalog_mod.load()
INT8_FORMATS = ("int8_convrot", "w4a8", "convrot_w4a4", "int8")


def _first_good(fmt: str) -> str:
    return CAT.formats[fmt].since["mps"][0][0]


def _mac(version=None, torch=None) -> Machine:
    return Machine("mps", None, None, comfyui_version=version, torch_version=torch)


@pytest.mark.parametrize("fmt", INT8_FORMATS)
def test_int8_formats_fail_on_mps_before_the_fix_and_run_emulated_after(fmt):
    first = _first_good(fmt)
    before = CAT.evidence(fmt, _mac("0.33.0"), "dit")
    after = CAT.evidence(fmt, _mac(first), "dit")
    newer = CAT.evidence(fmt, _mac("0.38.1"), "dit")
    assert (before.status, before.kind) == ("fails", "reported")
    assert "predates" in before.source
    assert (after.status, after.kind) == ("runs", "reported")
    assert "#16130" in after.source and "emulated" in after.source
    assert newer.status == "runs"
    assert CAT.runnable(fmt, _mac(first), "dit")[0] is True  # a report off CUDA runs past `requires`
    assert CAT.runnable(fmt, _mac("0.33.0"), "dit")[0] is False


@pytest.mark.parametrize("fmt", INT8_FORMATS)
def test_an_unknown_comfyui_version_keeps_the_conservative_report(fmt):
    ev = CAT.evidence(fmt, _mac(None), "dit")
    assert ev.status == "fails"
    assert "not known" in ev.source


def test_the_first_good_release_is_conservative_and_explained():
    # #16130 merged about 2026-09-05 (0.35.0 came out 2026-09-09) and needed #16285 for H3: no release before
    # 0.35.0 can hold it, and the catalog must say why it chose the one it did.
    for fmt in INT8_FORMATS:
        need, torch, status, source = CAT.formats[fmt].since["mps"][0]
        assert format_support.version_of(need) >= format_support.version_of("0.35.0")
        assert torch is None and status == "runs"
        assert "#16285" in source and "conservative" in source


def test_other_backends_do_not_change_with_the_version():
    for version in (None, "0.33.0", "0.38.1"):
        assert CAT.evidence("int8_convrot", Machine("cuda", (8, 9), (13, 0), comfyui_version=version)).status == "runs"
        assert CAT.evidence("fp8_scaled", _mac(version)).status == "fails"  # float8 on MPS: no fix reported


def test_native_int8_on_torch_2_15_is_not_claimed():
    # ComfyUI PR #16451 (int8 on MPS with torch >= 2.15) is open: no entry may depend on torch yet.
    assert not any(e[1] for f in CAT.formats.values() for es in f.since.values() for e in es)


def _with_torch_entry() -> format_support.Format:
    fmt = CAT.formats["int8_convrot"]
    since = dict(fmt.since)
    since["mps"] = fmt.since["mps"] + (("0.40.0", "2.15", "runs", "native int8 (a made-up release for the test)"),)
    return replace(fmt, since=since)


def test_an_entry_with_torch_min_holds_only_where_that_torch_is_known():
    fmt = _with_torch_entry()
    assert "native" not in fmt.reported("mps", "0.40.0", None)[1]          # torch unknown: the emulated report
    assert "native" not in fmt.reported("mps", "0.40.0", "2.14.1")[1]      # torch too old
    assert "native" in fmt.reported("mps", "0.40.0", "2.15.0+cpu")[1]
    assert "native" not in fmt.reported("mps", "0.39.0", "2.15.0")[1]      # ComfyUI too old for it
    assert fmt.reported("mps", "0.39.0", "2.15.0")[0] == "runs"            # ... but past the emulation fix


def _probe(status: str, error: str | None = None):
    return format_evidence.parse({"schema": format_evidence.SCHEMA, "backend": "mps",
                                  "key": {"comfyui_version": "0.38.1", "torch": "2.14.0", "device": "mps"},
                                  "parts": {"dit": {"int8_convrot": {"status": status, "error": error}}}})


def test_the_format_probe_beats_every_report_whatever_the_version():
    failed = _probe("fails", "NotImplementedError: aten::_int_mm")
    ev = CAT.evidence("int8_convrot", _mac("0.38.1"), "dit", failed)
    assert (ev.status, ev.kind) == ("fails", "measured") and "_int_mm" in ev.detail
    ran = _probe("runs")
    ev = CAT.evidence("int8_convrot", _mac("0.33.0"), "dit", ran)
    assert (ev.status, ev.kind) == ("runs", "measured")
    assert CAT.evidence("int8_convrot", _mac(None), "dit", ran).status == "runs"


class _Doc:
    def where(self, keypath) -> str:
        return "catalog"


def _check(since) -> list[str]:
    data = {"formats": {"x": {"quality": 1, "runs_on": {
        **{b: {"status": "unknown", "source": "no report"} for b in format_support.RUNS_ON_BACKENDS},
        "mps": {"status": "fails", "source": "s", "since": since}}}}}
    problems = Problems(_Doc())
    format_support.check(data, problems)
    return problems.items


@pytest.mark.parametrize("since, word", [
    ([{"comfyui_min": "0.37.0", "status": "works", "source": "s"}], "status"),
    ([{"comfyui_min": "soon", "status": "runs", "source": "s"}], "comfyui_min"),
    ([{"comfyui_min": "0.37.0", "status": "runs"}], "source"),
    ([{"comfyui_min": "0.38.0", "status": "runs", "source": "s"},
      {"comfyui_min": "0.37.0", "status": "runs", "source": "s"}], "oldest"),
    ([{"comfyui_min": "0.37.0", "torch_min": "new", "status": "runs", "source": "s"}], "torch_min"),
    ([{"comfyui_min": "0.37.0", "status": "runs", "source": "s", "when": 1}], "when"),
    ([], "list"),
])
def test_the_check_refuses_a_bad_since_entry(since, word):
    said = " ".join(_check(since))
    assert word in said, said


def test_the_check_takes_a_good_since_list():
    data = {"formats": {"x": {"quality": 1, "runs_on": {
        **{b: {"status": "unknown", "source": "no report"} for b in format_support.RUNS_ON_BACKENDS},
        "mps": {"status": "fails", "source": "s", "since": [
            {"comfyui_min": "0.37.0", "status": "runs", "source": "s"},
            {"comfyui_min": "0.40.0", "torch_min": "2.15", "status": "runs", "source": "s"}]}}}}}
    problems = Problems(_Doc())
    format_support.check(data, problems)
    assert not problems.items


def test_the_plan_reads_the_report_for_the_comfyui_it_is_made_for():
    from pathlib import Path

    from h3kit.fingerprint.schema import load_file
    from h3kit.plan import make_plan
    fp = load_file(Path(__file__).parents[1] / "fixtures" / "fingerprints" / "apple-m2max-64gb.json")
    profiles = catalog_mod.load_profiles(CAT)
    old, new, unknown = (make_plan(fp, CAT, profiles, comfyui_version=v) for v in ("0.33.0", "0.38.1", None))
    # the int8 video VAE is planned on a Mac only where the emulation fix is in the ComfyUI release
    assert old.settings.vae_weights != "h3-vae-video-int8"
    assert unknown.settings.vae_weights != "h3-vae-video-int8"
    assert new.settings.vae_weights == "h3-vae-video-int8"
    assert new.evidence["vae"].status == "runs" and "#16130" in new.evidence["vae"].source
