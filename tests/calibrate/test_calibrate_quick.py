"""`h3kit calibrate --quick` end to end on this machine: real fingerprint, plan, native library, runner, disk."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from h3kit.calibrate import report
from h3kit.data.plan_doc import PlanSettings

pytestmark = pytest.mark.slow


def _positive(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and x > 0


def test_quick_calibration_writes_reports_with_measured_numbers(run_cli, h3kit_home, native_library_env):
    t0 = time.monotonic()
    code, out, err = run_cli("calibrate", "--quick", "--json")
    elapsed = time.monotonic() - t0
    assert code == 0, err
    doc = json.loads(out)
    assert report.validate(doc) == []
    assert elapsed < 60
    for ext in ("json", "md", "html"):
        assert Path(doc["report_files"][ext]).is_file()
        assert (h3kit_home / "reports" / f"latest.{ext}").is_file()
    native = doc["native"]
    assert native["selftest"]["passed"] is True
    assert all(_positive(k["gflop_per_s"]) and _positive(k["weight_gb_per_s"]) for k in native["kernels"])
    assert {(k["kind"], k["op"]) for k in native["kernels"]} == {(a, b) for a in ("q8_0", "q4_0") for b in ("matvec", "matmul")}
    assert [s["threads"] for s in native["scaling"]][0] == 1
    assert _positive(doc["disk"]["gb_per_s"])
    inf = doc["inference"]
    assert inf["status"] == "measured" and _positive(inf["relative_error"]) and inf["kernel_relative_error"] < 1e-4
    assert _positive(inf["peak_rss_bytes"]) and _positive(inf["bytes_streamed"])
    assert doc["decisions"] and all(d["evidence"] for d in doc["decisions"])
    assert any(_positive(d["value"]) for d in doc["decisions"])
    # the disk probe's rate, for the streamed text encoder's read per prompt in later plans
    (disk_read,) = [d for d in doc["decisions"] if d["setting"] == "disk_read_bytes_per_s"]
    assert disk_read["value"] == int(doc["disk"]["read_bytes_per_s"])
    est = doc["estimates"]
    assert est["label"] == "estimate" and _positive(est["seconds_per_step"]) and _positive(est["minutes_per_clip"])
    # No ComfyUI here: the time is the throughput table's, and the document says so plainly.
    assert est["kind"] == "table" and "table estimate" in est["note"] and est["timing"]["source"].startswith("table:")
    assert doc["h3_model"]["status"] != "measured" and doc["h3_model"]["reason"]
    assert any("table estimate" in s for s in doc["skipped"])
    assert _positive(est["time"]["seconds_per_clip"]) and _positive(est["memory"]["peak_rss_bytes"])
    assert est["alternatives"] and all(_positive(a["minutes_per_clip"]) for a in est["alternatives"])
    # h3kit's own kernel figure is only the appendix now
    assert est["native_appendix"]["label"].startswith("native-kernel") and est["seconds_per_step"] != \
        est["native_appendix"]["seconds_per_step"]
    assert {"canvas", "frames", "steps"} <= {d["setting"] for d in doc["decisions"]}
    assert doc["real_model"]["status"] == "not run"
    # No GPU here: the device part says it was skipped, and why.
    if doc["device"]["status"] != "measured":
        assert doc["device"]["reason"] and any("device" in s for s in doc["skipped"])
    # The config gained a calibrated: section the config loader accepts.
    from h3kit.data import config
    from h3kit.data.settings import Settings

    assert isinstance(config.load(h3kit_home / "config.yaml").calibrated, Settings)
    assert config.load(h3kit_home / "config.yaml").calibrated.disk_read_bytes_per_s == disk_read["value"]
    assert "calibrated:" in (h3kit_home / "config.yaml").read_text()


def test_rerun_after_profile_use_reports_against_the_new_profile(run_cli, h3kit_home, native_library_env):
    code, out, _ = run_cli("calibrate", "--quick", "--json")
    first = json.loads(out)["plan"]["profile"]
    other = "nvidia-12gb" if first != "nvidia-12gb" else "cpu-only"
    code, _, err = run_cli("profile", "use", other)
    assert code == 0, err
    code, out, err = run_cli("calibrate", "--quick", "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["plan"]["profile"] == other == doc["profile"]
    latest = json.loads((h3kit_home / "reports" / "latest.json").read_text())
    assert latest["plan"]["profile"] == other
    assert other in (h3kit_home / "reports" / "latest.md").read_text()


def _tree(home: Path) -> dict[str, int | None]:
    """Every path under H3KIT_HOME with its size (None for a folder), less the log every command appends to."""
    logs = home / "state" / "logs"
    return {str(p.relative_to(home)): (p.stat().st_size if p.is_file() else None) for p in sorted(home.rglob("*"))
            if p != logs.parent and p != logs and logs not in p.parents}


def test_dry_run_builds_and_writes_nothing(run_cli, h3kit_home, monkeypatch):
    """No library in the cache's record and none named: a dry run measures without it and builds none."""
    monkeypatch.delenv("H3KIT_NATIVE_LIB", raising=False)
    before = _tree(h3kit_home)
    code, out, err = run_cli("calibrate", "--quick", "--json", "--dry-run")
    assert code == 0, err
    doc = json.loads(out)
    assert _tree(h3kit_home) == before
    assert doc["report_files"] == {"json": None, "md": None, "html": None}
    assert doc["native"]["status"] == "skipped" and "dry run builds nothing" in doc["native"]["reason"]
    assert doc["disk"]["status"] == "measured"  # the probe file came and went
    assert "config_written" not in doc and "applied" not in doc


def test_dry_run_with_a_library_measures_and_writes_nothing(run_cli, h3kit_home, native_library_env):
    before = _tree(h3kit_home)
    code, out, err = run_cli("calibrate", "--quick", "--json", "--dry-run")
    assert code == 0, err
    doc = json.loads(out)
    assert _tree(h3kit_home) == before
    assert doc["native"]["status"] == "measured" and doc["inference"]["status"] == "measured"
    assert doc["report_files"]["html"] is None and doc["decisions"]


def test_calibration_in_an_installed_comfyui_applies_and_leaves_a_summary(run_cli, h3kit_home, tmp_path,
                                                                          native_library_env):
    """With a pack h3kit installed: the runner runs in that ComfyUI's Python, the new values are applied
    to the pack (the same code as `h3kit apply`), and the node's summary lands in the pack."""
    from h3kit.cli.context import Context
    from h3kit.comfyui import deploy
    from h3kit.comfyui.locate import find

    from fixtures.comfyui import comfy_tree

    comfy = comfy_tree.make_comfyui(tmp_path / "ComfyUI")
    ctx = Context(yes=True)
    install = find(str(comfy), None, ctx)
    deploy.deploy(install, settings=PlanSettings(vae_tile_size=256), profile="cpu-only", library=None,
                  state_dir=ctx.locations.state_dir, cache_dir=ctx.locations.cache_dir)
    code, out, err = run_cli("calibrate", "--quick", "--comfyui", str(comfy), "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["comfyui"]["comfyui_path"] == str(comfy)
    assert doc["applied"]["status"] == "applied", doc["applied"]
    assert Path(doc["applied"]["profile_file"]).is_file()
    summary = json.loads((install.node_dir / "h3kit_calibration.json").read_text())
    assert summary["report_html"] == doc["report_files"]["html"] and summary["lines"]
    assert doc["disk"]["path"] == str(comfy / "models")


def _venv_without_numpy(root: Path) -> Path:
    """A real venv like h3kit's own: this environment's packages (h3kit included, editable) minus numpy
    and what needs it, linked in rather than installed, so no network and a second or two."""
    import subprocess
    import sys
    import sysconfig

    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True, timeout=120)
    python = root / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True, timeout=60).stdout.strip())
    ours = Path(sysconfig.get_paths()["purelib"])
    for entry in ours.iterdir():
        if entry.name.split("-")[0].split(".")[0].lower() in ("numpy", "gguf", "__pycache__"):
            continue
        (site / entry.name).symlink_to(entry)
    return python


@pytest.mark.skipif(os.name == "nt", reason="links site-packages entries with symlinks")
def test_quick_calibration_in_a_venv_without_numpy_measures_the_scaled_dit(tmp_path, h3kit_home, native_library):
    """The installer's own venv has no numpy: the scaled DiT runs its native+python path and the
    report carries its error (`h3kit calibrate --quick --json` with no ComfyUI)."""
    import subprocess

    python = _venv_without_numpy(tmp_path / "venv")
    probe = subprocess.run([str(python), "-c", "import numpy"], capture_output=True, timeout=60)
    assert probe.returncode != 0, "numpy leaked into the test venv"
    env = {**os.environ, "H3KIT_HOME": str(h3kit_home), "H3KIT_NATIVE_LIB": str(native_library)}
    t0 = time.monotonic()
    proc = subprocess.run([str(python), "-m", "h3kit", "calibrate", "--quick", "--json"], capture_output=True,
                          text=True, env=env, timeout=120)
    elapsed = time.monotonic() - t0
    assert proc.returncode == 0, proc.stderr[-2000:]
    doc = json.loads(proc.stdout)
    assert doc["runner"]["numpy"] is None and doc["runner"]["python"].startswith(str(tmp_path))
    inf = doc["inference"]
    assert inf["status"] == "measured" and inf["path"] == "native+python", inf
    assert _positive(inf["relative_error"]) and inf["kernel_relative_error"] < 1e-4
    assert _positive(inf["seconds_per_block"]) and _positive(inf["bytes_streamed"]) and _positive(inf["peak_rss_bytes"])
    assert inf["config"]["hidden"] <= inf["requested_config"]["hidden"]
    assert not any("scaled DiT" in s and "numpy" in s for s in doc["skipped"])
    assert "native+python" in Path(doc["report_files"]["md"]).read_text()
    assert elapsed < 60
