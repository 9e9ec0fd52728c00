"""Issue 35 (1-3): a format-probe cache of any shape but the schema is "no probe" with one warning naming the
file, for `models plan` and `doctor` alike, and `doctor --fresh-probe` measures again over it; the progress
line promises the real upper bound; a full h3kit home under the probe child is named as the home.

The probe child is a stand-in runner (a script in ComfyUI's Python, the test's own) that writes the recorded
probe (tests/fixtures/format_probe/cpu-comfyui-0.33.json) keyed to the stand-in ComfyUI, or fails as told;
the full-disk case at the end is the real bundled runner on a real full tmpfs (root only).
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from h3kit.calibrate import format_probe as fp
from h3kit.comfyui import locate
from h3kit.core.paths import locations
from h3kit.core.session import Session
from h3kit.data.format_evidence import parse, read

FIXTURES = Path(__file__).parents[1] / "fixtures"
REC = json.loads((FIXTURES / "format_probe" / "cpu-comfyui-0.33.json").read_text())
_spec = importlib.util.spec_from_file_location("comfy_tree", FIXTURES / "comfyui" / "comfy_tree.py")
comfy_tree = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(comfy_tree)

DEEP = "[" * 100000 + "]" * 100000  # json.loads raises RecursionError, which is no ValueError
BAD = {
    "a list": "[]",
    "a string": '"x"',
    "key a number": '{"key": 5}',
    "key a string": '{"key": "abc", "schema": "h3kit.format_probe/1"}',
    "formats a string": '{"formats": "x"}',
    "parts a string": json.dumps({**REC, "parts": "x"}),
    "parts a list": json.dumps({**REC, "parts": [["dit", {}]]}),
    "deeply nested": DEEP,
    "not JSON": "{not json",
    "not text": "\udcff\udcfe garbage",
}
RUNNER = """import json, sys
args = dict(zip(sys.argv[2::2], sys.argv[3::2]))
doc = json.loads(open({doc!r}, encoding="utf-8").read())
if doc.get("raise"):
    raise OSError(28, "No space left on device")
open(args["--out"], "w", encoding="utf-8").write(json.dumps(doc))
"""


def _stand_in(tmp_path: Path, monkeypatch, doc: dict | None = None) -> tuple[Path, Path]:
    """A stand-in ComfyUI whose probe child writes `doc` (default: the recorded probe keyed to it):
    (ComfyUI folder, its cache file)."""
    comfy = comfy_tree.make_comfyui(tmp_path / "Comfy")
    if doc is None:
        info = locate.inspect(locate.find(str(comfy), None, Session(), need_write=False))
        doc = json.loads(json.dumps(REC))
        doc["key"].update(comfyui_version=info["comfyui_version"], torch=info["torch"])
    (tmp_path / "doc.json").write_text(json.dumps(doc), encoding="utf-8")
    runner = tmp_path / "runner.py"
    runner.write_text(RUNNER.format(doc=str(tmp_path / "doc.json")), encoding="utf-8")
    monkeypatch.setattr(fp, "RUNNER", runner)
    return comfy, fp.cache_file(locations().cache_dir, comfy)


def _write_bad(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(text.encode("utf-8", "surrogateescape"))


def _warnings_naming(path: Path) -> list[str]:
    log = locations().log_file.read_text(encoding="utf-8")
    return [ln for ln in log.splitlines() if " WARNING " in ln and str(path) in ln]


def _no_bug(code: int, err: str) -> None:
    assert code != 1 and "internal error" not in err and "bug in h3kit" not in err and "Traceback" not in err, err


@pytest.mark.parametrize("shape", list(BAD))
def test_models_plan_reads_a_bad_cache_as_no_probe_with_one_warning(shape, tmp_path, run_cli, monkeypatch):
    comfy, path = _stand_in(tmp_path, monkeypatch, {})
    _write_bad(path, BAD[shape])
    code, out, err = run_cli("models", "plan", "--comfyui", str(comfy), "--json")
    _no_bug(code, err)
    assert code == 0 and json.loads(out)["schema"].startswith("h3kit.models/"), err
    said = _warnings_naming(path)
    assert len(said) == 1 and "planning without it" in said[0], said


@pytest.mark.parametrize("shape", list(BAD))
def test_doctor_measures_again_over_a_bad_cache_and_says_so_once(shape, tmp_path, run_cli, monkeypatch):
    comfy, path = _stand_in(tmp_path, monkeypatch)
    _write_bad(path, BAD[shape])
    code, out, err = run_cli("doctor", "--comfyui", str(comfy))
    _no_bug(code, err)
    assert "formats.cache: Format probe measured now" in out, out
    assert read(path) is not None  # the bad file is replaced by the measured probe
    assert len(_warnings_naming(path)) == 1


def test_doctor_fresh_probe_measures_again_without_reading_the_bad_cache(tmp_path, run_cli, monkeypatch):
    """The documented way out must not trip over the file it replaces (JSON too deep for the parser)."""
    comfy, path = _stand_in(tmp_path, monkeypatch)
    _write_bad(path, BAD["deeply nested"])
    code, out, err = run_cli("doctor", "--comfyui", str(comfy), "--fresh-probe")
    _no_bug(code, err)
    assert "asked for a fresh probe" in err and "formats.cache: Format probe measured now" in out, (out, err)
    assert parse(json.loads(path.read_text(encoding="utf-8"))).comfyui_version == "0.33.0"


def test_the_progress_line_promises_the_timeout_not_the_budget(tmp_path, monkeypatch):
    """A hung ComfyUI Python is stopped at TIMEOUT_S (240 s), so that is the bound the line states."""
    comfy, _path = _stand_in(tmp_path, monkeypatch)
    lines: list[str] = []
    ctx = Session()
    install = locate.find(str(comfy), None, ctx, need_write=False)
    ctx.progress = lines.append
    assert fp.format_evidence(ctx, install) is not None
    assert len(lines) == 1 and f"at most {fp.TIMEOUT_S // 60} min in all" in lines[0], lines
    assert f"at most {fp.BUDGET_S} s" not in lines[0]


def test_a_probe_child_out_of_space_names_the_full_home(tmp_path, monkeypatch, h3kit_home):
    comfy, _path = _stand_in(tmp_path, monkeypatch, {"raise": True})
    said: list[dict] = []
    install = locate.find(str(comfy), None, Session(), need_write=False)
    assert fp.format_evidence(Session(), install, findings=said) is None
    message, fix = said[0]["message"], said[0]["fix"]
    assert message.startswith(f"The format probe did not run: no space left on the disk that holds h3kit's home "
                              f"(H3KIT_HOME) {h3kit_home}"), message
    assert "OSError" not in message and "ComfyUI's Python" not in fix and "H3KIT_HOME" in fix, fix


def test_a_probe_child_on_a_really_full_home_names_the_home(tmp_path, monkeypatch):
    """The bundled runner on a folder that is no ComfyUI writes its 'skipped' document into a full tmpfs."""
    from small_disk import fill, small_tmpfs

    comfy = tmp_path / "NoComfy"
    comfy.mkdir()
    install = SimpleNamespace(path=comfy, python=Path(sys.executable))
    with small_tmpfs(tmp_path / "home", "1m") as home:
        monkeypatch.setenv("H3KIT_HOME", str(home))
        (home / "cache" / fp.FOLDER).mkdir(parents=True)
        fill(home, 0)
        said: list[dict] = []
        assert fp.format_evidence(Session(), install, info={"comfyui_version": "0.33.0", "torch": "x"},
                                  findings=said) is None
        message = said[0]["message"]
        assert f"no space left on the disk that holds h3kit's home (H3KIT_HOME) {home}" in message, message
        assert "H3KIT_HOME" in said[0]["fix"] and "OSError" not in message


def test_plan_with_a_saved_probe_nested_too_deep_is_bad_input(tmp_path, run_cli):
    deep = tmp_path / "probe.json"
    deep.write_text("[" * 100_000 + "]" * 100_000, encoding="utf-8")
    code, out, err = run_cli("plan", "--format-probe", str(deep))
    assert code == 2, err
    assert "nested too deep" in err and str(deep) in err and "Traceback" not in err
