"""Installing the node pack and launcher into ComfyUI-shaped trees, verifying, applying."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fixtures.comfyui import comfy_tree
from h3kit.core.files import sha256_file
from h3kit.comfyui import deploy

from h3kit.comfyui import launcher
from h3kit.comfyui import manifest as mf
from h3kit.cli.context import Context
from h3kit.comfyui.locate import find
from h3kit.core.errors import VerificationFailed
from h3kit.data.plan_doc import PlanSettings

pytestmark = pytest.mark.native  # installs deploy the session's native library with the pack

FIXTURES = Path(__file__).parents[1] / "fixtures" / "comfyui"

# A recorded machine with room on its one disk ("/", so it holds any folder): an install that plans for it
# does not depend on this box's free disk, RAM or GPU.
ROOMY_FINGERPRINT = str(FIXTURES.parent / "fingerprints" / "nvidia-rtx4090-24gb-64gb.json")
# A real plan's settings (its weights name the workflows' files), with the values these tests vary.
GOLDEN = json.loads((FIXTURES.parent / "plans" / "nvidia-rtx4060-8gb-16gb.json").read_text(encoding="utf-8"))["settings"]
SETTINGS = {**GOLDEN, "vae_tile_size": 256, "vae_tile_overlap": 64, "vae_temporal_tile": 32, "max_frames": 73,
            "comfyui_args": ["--reserve-vram", "2.5", "--disable-pinned-memory", "--no-such-flag", "7", "--lowvram"],
            "env": {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}}


@pytest.fixture
def comfy(tmp_path) -> Path:
    return comfy_tree.make_comfyui(tmp_path / "Mein ComfyUI ü 日本")


def _deploy(install, h3kit_home, settings=SETTINGS, profile="nvidia-12gb", library=None, **kw):
    return deploy.deploy(install, settings=PlanSettings.from_json(settings), profile=profile, library=library,
                         state_dir=Path(h3kit_home) / "state", cache_dir=Path(h3kit_home) / "cache", **kw)


def test_help_flags_from_recorded_help():
    flags = launcher.parse_help_flags((FIXTURES / "help-0.8.0.txt").read_text(encoding="utf-8"))
    assert {"--reserve-vram", "--lowvram", "--cpu", "--disable-pinned-memory", "--listen", "--port"} <= flags
    assert "--no-such-flag" not in flags and "--fast-disk" not in flags
    assert "--base-" not in flags  # "--base-directory" cut where the help text wraps: no flag


def test_filter_args_drops_flags_with_their_values():
    kept, dropped = launcher.filter_args(SETTINGS["comfyui_args"], {"--reserve-vram", "--lowvram", "--disable-pinned-memory"})
    assert kept == ["--reserve-vram", "2.5", "--disable-pinned-memory", "--lowvram"]
    assert dropped == ["--no-such-flag", "7"]
    assert launcher.filter_args(["--cpu=1"], {"--cpu"}) == (["--cpu=1"], [])
    # as ComfyUI reads its command line: a prefix of one flag is that flag, one of several is refused
    accepted = {"--reserve-vram", "--disable-pinned-memory", "--disable-mmap", "--lowvram"}
    assert launcher.filter_args(["--reserve", "1", "--dis", "x", "--lowvram"], accepted) == \
        (["--reserve", "1", "--lowvram"], ["--dis", "x"])


def test_install_records_every_file_and_verifies(comfy, h3kit_home):
    inst = find(str(comfy), None, Context(yes=True))
    lib = Path(h3kit_home) / "libh3kit-test.so"
    lib.write_bytes(b"\x7fELF not really")
    res = _deploy(inst, h3kit_home, library=lib)
    node = comfy / "custom_nodes" / "ComfyUI-h3kit"
    assert res.created and node.is_dir()
    for name in ("__init__.py", "h3kit_decode/node.py", "h3kit_decode/logic.py", "h3kit_profile.json",
                 "lib/libh3kit-test.so"):
        assert (node / name).is_file(), name
    record = mf.load(res.manifest.path)
    on_disk = {str(p) for p in node.rglob("*")} | {str(node)}
    recorded = {e.path for e in record.entries if e.role == "node-pack"}
    assert on_disk == recorded
    for e in record.entries:
        if e.kind == "file":
            assert e.sha256 == sha256_file(e.path)
    profile = json.loads((node / "h3kit_profile.json").read_text(encoding="utf-8"))
    assert profile["profile"] == "nvidia-12gb" and profile["settings"]["vae_tile_size"] == 256
    assert not list((comfy / "custom_nodes").glob("*staging*"))
    assert deploy.verify(inst)["nodes"] == sorted(deploy.EXPECTED_NODES)


def test_pack_carries_each_library_with_its_self_test_program(comfy, h3kit_home):
    """The session's real build deployed: every variant's self-test program lands in lib/ beside its library,
    executable, and the pack's own bridge runs it there (calibration's self-test on the user's machine)."""
    built = sorted((Path(h3kit_home) / "cache" / "native").glob("*/libh3kit-baseline.so"))
    if not built:
        pytest.skip("no native build in this session")
    inst = find(str(comfy), None, Context(yes=True))
    _deploy(inst, h3kit_home, library=built[0])
    lib = comfy / "custom_nodes" / "ComfyUI-h3kit" / "lib"
    programs = sorted(p.name for p in lib.glob("h3k-selftest-*"))
    assert programs == sorted(p.name.replace("libh3kit-", "h3k-selftest-").removesuffix(".so")
                              for p in lib.glob("libh3kit-*"))
    assert all(os.access(lib / name, os.X_OK) for name in programs)
    code = ("import json, sys; sys.path.insert(0, sys.argv[1]); import h3k_native as n; l = n.load(); "
            "print(json.dumps([l.source, l.selftest()]))")
    out = subprocess.run([sys.executable, "-I", "-c", code, str(lib.parent)], capture_output=True, text=True,
                         timeout=120, env={"PATH": "/usr/bin:/bin", "H3KIT_HOME": str(Path(h3kit_home) / "none")})
    assert out.returncode == 0, out.stderr
    source, result = json.loads(out.stdout)
    assert source == "lib/ beside the bridge" and result["passed"] is True and result["checks"] > 20


def test_launcher_keeps_accepted_flags_only_and_runs(comfy, h3kit_home):
    inst = find(str(comfy), None, Context(yes=True))
    res = _deploy(inst, h3kit_home)
    sh = Path(res.launcher["path"])
    assert sh == comfy / "run_h3kit.sh" and os.access(sh, os.X_OK)
    assert res.launcher["dropped"] == ["--no-such-flag", "7"]
    out = subprocess.run([str(sh), "--port", "8199"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "['--reserve-vram', '2.5', '--disable-pinned-memory', '--lowvram', '--port', '8199']" in out.stdout
    cached = list((Path(h3kit_home) / "cache" / "comfyui-help").glob("0.33.0-*.txt"))
    assert len(cached) == 1


def test_portable_launcher_is_a_bat_one_level_up(tmp_path, h3kit_home):
    comfy = comfy_tree.make_comfyui(tmp_path / "Program Files ß", layout="portable")
    inst = find(str(comfy), None, Context(yes=True))
    res = _deploy(inst, h3kit_home)
    bat = comfy.parent / "run_h3kit.bat"
    assert res.launcher["path"] == str(bat)
    text = bat.read_bytes().decode("utf-8")
    assert "%~dp0python_embeded\\python.exe" in text and 'cd /d "%~dp0ComfyUI"' in text
    assert "--reserve-vram 2.5" in text and "--no-such-flag" not in text and text.endswith("%*\r\nendlocal\r\n")


def test_foreign_folder_is_never_overwritten(comfy, run_cli):
    foreign = comfy / "custom_nodes" / "ComfyUI-h3kit"
    foreign.mkdir()
    (foreign / "my_notes.txt").write_text("mine")
    code, out, err = run_cli("install", "--comfyui", str(comfy), "--yes", "--skip-calibrate", "--no-models")
    assert code == 2
    assert "was not installed by h3kit" in err and "my_notes.txt" in err and "Traceback" not in err
    assert (foreign / "my_notes.txt").read_text() == "mine" and len(list(foreign.iterdir())) == 1


def test_reinstall_upgrades_in_place_keeping_user_files(comfy, h3kit_home):
    inst = find(str(comfy), None, Context(yes=True))
    first = _deploy(inst, h3kit_home)
    node = first.node_dir
    (node / "my_workflow.json").write_text("{}")
    (node / "h3kit_decode" / "logic.py").write_text("# edited by the user\n")
    second = _deploy(inst, h3kit_home, profile="cpu-only")
    assert not second.created
    assert (node / "my_workflow.json").read_text() == "{}"
    assert "edited by the user" not in (node / "h3kit_decode" / "logic.py").read_text()
    [backup] = second.backed_up
    assert Path(backup).read_text() == "# edited by the user\n" and str(Path(h3kit_home) / "state" / "backups") in backup
    record = mf.load(second.manifest.path)
    assert record.find(node / "my_workflow.json") is None
    assert record.still_ours(record.find(node / "h3kit_decode" / "logic.py"))


def test_interrupted_install_staging_is_cleaned(comfy, h3kit_home):
    inst = find(str(comfy), None, Context(yes=True))
    stale = comfy / "custom_nodes" / ("ComfyUI-h3kit" + deploy.STAGING_SUFFIX)
    stale.mkdir()
    (stale / deploy.STAGING_MARK).write_text("x")
    (stale / "half.py").write_text("half")
    res = _deploy(inst, h3kit_home)
    assert not stale.exists() and any("staging" in n for n in res.notes)


def test_verify_failure_is_exit_4(comfy, run_cli, monkeypatch):
    monkeypatch.setattr(deploy, "EXPECTED_NODES", deploy.EXPECTED_NODES + ("H3kitNotThere",))
    code, out, err = run_cli("install", "--comfyui", str(comfy), "--yes", "--skip-calibrate", "--no-models", "--json")
    assert code == 4
    doc = json.loads(out)
    assert "H3kitNotThere" in doc["error"] and doc["details"]["manifest"]


def test_broken_pack_fails_verification(comfy, h3kit_home):
    inst = find(str(comfy), None, Context(yes=True))
    res = _deploy(inst, h3kit_home)
    (res.node_dir / "h3kit_decode" / "node.py").write_text("raise RuntimeError('broken on purpose')\n")
    with pytest.raises(VerificationFailed, match="broken on purpose"):
        deploy.verify(inst)


def test_install_cli_json(comfy, run_cli, h3kit_home):
    code, out, err = run_cli("install", "--comfyui", str(comfy), "--fingerprint", ROOMY_FINGERPRINT, "--yes",
                             "--skip-calibrate", "--no-models", "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["schema"] == "h3kit.install/1" and doc["verified"] is True
    assert doc["comfyui"]["version"] == "0.33.0" and doc["node_dir"].endswith("ComfyUI-h3kit")
    assert doc["launchers"] == [str(comfy / "run_h3kit.sh")] and Path(doc["manifest"]).is_file()


def test_install_python_that_does_not_start_is_exit_3(comfy, run_cli):
    comfy_tree.broken_python(comfy)
    code, out, err = run_cli("install", "--comfyui", str(comfy), "--yes", "--skip-calibrate", "--no-models")
    assert code == 3 and "does not start" in err and "Traceback" not in err


@pytest.mark.parametrize("bad", ["missing", "file"])
def test_install_bad_paths_exit_2(tmp_path, run_cli, bad):
    path = tmp_path / "nothing here"
    if bad == "file":
        path.write_text("x")
    code, out, err = run_cli("install", "--comfyui", str(path), "--yes", "--skip-calibrate", "--no-models")
    assert code == 2 and err.count("error:") == 1


def test_install_without_comfyui_exit_3_names_flag(tmp_path, run_cli, monkeypatch):
    monkeypatch.delenv("COMFYUI_PATH", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli("install", "--yes", "--skip-calibrate", "--no-models")
    assert code == 3 and "--comfyui" in err


def test_apply_rewrites_profile_and_launcher(comfy, run_cli, planned):
    plans = planned
    plans.update(profile="nvidia-16gb", settings=dict(SETTINGS))
    assert run_cli("install", "--comfyui", str(comfy), "--yes", "--skip-calibrate", "--no-models")[0] == 0
    node = comfy / "custom_nodes" / "ComfyUI-h3kit"
    before_json, before_sh = (node / "h3kit_profile.json").read_text(), (comfy / "run_h3kit.sh").read_text()
    plans.update(profile="nvidia-12gb", settings=dict(SETTINGS, vae_tile_size=192, comfyui_args=["--novram"]))
    code, out, err = run_cli("apply", "--comfyui", str(comfy), "--yes", "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["previous_profile"] == "nvidia-16gb" and doc["profile"] == "nvidia-12gb" and doc["changed"]
    after = json.loads((node / "h3kit_profile.json").read_text())
    assert after["settings"]["vae_tile_size"] == 192 and (node / "h3kit_profile.json").read_text() != before_json
    sh = (comfy / "run_h3kit.sh").read_text()
    assert sh != before_sh and "--novram" in sh and "--reserve-vram" not in sh
    record = mf.load(doc["manifest"])
    assert record.still_ours(record.find(node / "h3kit_profile.json"))
    assert record.still_ours(record.find(comfy / "run_h3kit.sh"))


def test_apply_before_install_is_not_ready(comfy, run_cli):
    code, out, err = run_cli("apply", "--comfyui", str(comfy), "--yes")
    assert code == 3 and "not installed" in err


def test_symlinked_pack_folder_is_refused(comfy, tmp_path, run_cli):
    elsewhere = tmp_path / "dev checkout"
    elsewhere.mkdir()
    (elsewhere / "__init__.py").write_text("# a developer's own copy\n")
    os.symlink(elsewhere, comfy / "custom_nodes" / "ComfyUI-h3kit")
    code, out, err = run_cli("install", "--comfyui", str(comfy), "--yes", "--skip-calibrate", "--no-models")
    assert code == 2 and "a symlink" in err
    assert (elsewhere / "__init__.py").read_text() == "# a developer's own copy\n" and len(list(elsewhere.iterdir())) == 1


def test_models_failure_keeps_the_install_in_the_answer(comfy, run_cli, monkeypatch):
    from h3kit.core.errors import NotReady
    from h3kit.steps import install as install_step

    def offline(ctx, plan, comfyui_dir, *, skip, with_loaders, config=None, allow_unverified=False, folders=None):
        raise NotReady("Downloading a weight file failed (cannot connect).", "Check the network, then run the same command again.")

    monkeypatch.setattr(install_step, "ensure_models", offline)  # the name the install step calls
    code, out, err = run_cli("install", "--comfyui", str(comfy), "--fingerprint", ROOMY_FINGERPRINT, "--yes",
                             "--skip-calibrate", "--json")
    assert code == 3
    doc = json.loads(out)
    assert doc["error"].startswith("Downloading a weight file failed")  # the stand-in ran, not a real download
    assert doc["details"]["verified"] is True and doc["details"]["schema"] == "h3kit.install/1"
    assert (comfy / "custom_nodes" / "ComfyUI-h3kit" / "__init__.py").is_file()


@pytest.mark.parametrize("where", ["before-rename", "after-rename"])
def test_install_interrupted_half_way_then_reinstall(comfy, h3kit_home, monkeypatch, where):
    inst = find(str(comfy), None, Context(yes=True))
    real_rename = os.rename

    def interrupted_rename(src, dst):
        if where == "after-rename":
            real_rename(src, dst)
        raise KeyboardInterrupt

    monkeypatch.setattr(deploy.os, "rename", interrupted_rename)
    with pytest.raises(KeyboardInterrupt):
        _deploy(inst, h3kit_home)
    monkeypatch.setattr(deploy.os, "rename", real_rename)
    res = _deploy(inst, h3kit_home)
    assert not list((comfy / "custom_nodes").glob("*staging*"))
    assert not (res.node_dir / deploy.STAGING_MARK).exists()
    record = mf.load(res.manifest.path)
    assert all(record.still_ours(e) for e in record.entries)
    assert deploy.verify(inst)["verified"]


def test_desktop_base_folder_gets_the_pack_but_no_launcher(tmp_path, h3kit_home):
    base = tmp_path / "Documents" / "ComfyUI Desktop ü"
    (base / "custom_nodes").mkdir(parents=True)
    (base / "models").mkdir()
    (base / ".venv" / "bin").mkdir(parents=True)
    os.symlink(sys.executable, base / ".venv" / "bin" / "python")
    (base / "folder_paths.py").write_text("def get_filename_list(kind):\n    return []\n")  # ComfyUI's, for nodes
    inst = find(str(base), None, Context(yes=True))
    assert (inst.layout, inst.python_source) == ("desktop", ".venv inside ComfyUI")
    res = _deploy(inst, h3kit_home, settings=SETTINGS)
    assert res.launcher["path"] is None and "Desktop app" in res.launcher["detail"]
    assert deploy.verify(inst)["verified"]


def test_install_dry_run_writes_nothing(comfy, run_cli):
    before = comfy_tree.snapshot(comfy)
    code, out, err = run_cli("install", "--comfyui", str(comfy), "--yes", "--dry-run", "--json", "--no-models")
    assert code == 0, err
    assert json.loads(out)["dry_run"] is True and comfy_tree.snapshot(comfy) == before


def test_install_on_a_machine_below_the_floor_installs_then_exits_3(comfy, run_cli):
    """An 8 GB CPU box cannot run H3 even at the smallest settings (a 16 GB Mac can since issue #33): the pack is
    installed and verified (and the report written), no weights are downloaded, and the exit is 3 with what is short."""
    m1 = Path(__file__).parents[1] / "fixtures" / "fingerprints" / "cpu-only-8gb.json"
    code, out, err = run_cli("install", "--comfyui", str(comfy), "--fingerprint", str(m1), "--yes",
                             "--skip-calibrate", "--json")
    assert code == 3, err
    doc = json.loads(out)
    assert "below what the model needs" in doc["error"] and "short" in doc["error"]
    assert doc["details"]["verified"] is True
    assert (comfy / "custom_nodes" / "ComfyUI-h3kit" / "h3kit_profile.json").is_file()
    assert "models skipped: the plan does not fit" in " ".join(doc["details"]["notes"])
    assert not any((comfy / "models").rglob("*.part"))


def test_a_plan_short_of_disk_names_the_disk_as_the_fix_not_memory(comfy, run_cli, tmp_path):
    """The campaign's case: an install that stops because the files do not fit on the disk says to free that
    disk (how much, which), not to add RAM or a GPU."""
    doc = json.loads((Path(__file__).parents[1] / "fixtures" / "fingerprints" / "nvidia-rtx4090-24gb-64gb.json")
                     .read_text())
    doc["disks"] = [dict(doc["disks"][0], path="/Volumes/Small Disk", free_bytes=5_000_000_000)]
    small = tmp_path / "small-disk.json"
    small.write_text(json.dumps(doc))
    code, out, err = run_cli("install", "--comfyui", str(comfy), "--fingerprint", str(small), "--yes",
                             "--skip-calibrate", "--json")
    assert code == 3, err
    said = json.loads(out)
    assert "disk is short by" in said["error"] and "in the files phase" in said["error"]
    assert said["fix"].startswith("Free ") and "/Volumes/Small Disk" in said["fix"], said["fix"]
    assert "RAM" not in said["fix"] and "GPU" not in said["fix"], said["fix"]


@pytest.mark.slow
@pytest.mark.parametrize("saved", [False, True])
def test_install_with_a_profile_keeps_it_through_calibration(comfy, run_cli, tmp_path, saved):
    """Calibration re-applies the pack after it measured: with install's profile (and --fingerprint FILE's
    machine), never with the one it would pick for this machine by itself."""
    extra = []
    if saved:
        extra = ["--fingerprint", str(Path(__file__).parents[1] / "fixtures" / "fingerprints" / "apple-m2max-64gb.json")]
    code, out, err = run_cli("install", "--comfyui", str(comfy), "--profile", "apple-unified-48", "--yes",
                             "--no-models", "--json", *extra)
    assert code == 0, err
    doc = json.loads(out)
    assert doc["profile"] == "apple-unified-48"
    assert doc["report"], doc.get("notes")  # the calibration ran and re-applied the pack
    deployed = json.loads((comfy / "custom_nodes" / "ComfyUI-h3kit" / "h3kit_profile.json").read_text())
    assert deployed["profile"] == "apple-unified-48", deployed.get("profile")
