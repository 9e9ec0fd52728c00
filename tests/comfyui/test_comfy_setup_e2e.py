"""`h3kit install --new-comfyui` end to end from a local bare git repository, pip on a local wheelhouse; then
`uninstall --purge`. Also: resuming after an interruption, archives as the source, missing git, a CPU machine."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest

from comfy_setup_support import FP_4090, ctx
from h3kit.comfyui import manifest
from h3kit.comfyui import setup as comfy_setup
from h3kit.comfyui.setup import create, source
from h3kit.core.errors import NotReady
from h3kit.core.paths import locations
from h3kit.core.venv import venv_python
from h3kit.fingerprint.schema import load_file
from tests.conftest import FIXTURES
from tests.fixtures.comfyui.comfy_tree import FAKE_FOLDER_PATHS, H3_FILES

pytestmark = pytest.mark.slow

MAIN_PY = '''import sys
from pathlib import Path
if "--help" in sys.argv:
    sys.stdout.write((Path(__file__).parent / "help.txt").read_text(encoding="utf-8"))
    sys.exit(0)
import torch, torchvision, torchaudio, comfy_tiny_dep
print("ComfyUI-shaped tree runs: torch", torch.__version__, "cuda", torch.version.cuda, "dep", comfy_tiny_dep.VALUE)
'''


def comfy_source_tree(root: Path) -> Path:
    """A small ComfyUI-shaped tree of a release with H3 (0.33.0 and H3's files: a new ComfyUI must have it):
    markers, user-data folders with ComfyUI's placeholder files, requirements."""
    files = {
        "main.py": MAIN_PY,
        "help.txt": (FIXTURES / "comfyui" / "help-0.8.0.txt").read_text(encoding="utf-8"),
        "nodes.py": "NODE_CLASS_MAPPINGS = {}\n",
        "folder_paths.py": FAKE_FOLDER_PATHS,
        "comfy/__init__.py": "",
        "comfy/cli_args.py": "# argument parser lives here in real ComfyUI\n",
        "comfy_extras/__init__.py": "",
        "comfyui_version.py": '__version__ = "0.33.0"\n',
        **{rel: "# H3 support (fake)\n" for rel in H3_FILES},
        "custom_nodes/websocket_image_save.py": "NODE_CLASS_MAPPINGS = {}\n",
        "models/checkpoints/put_checkpoints_here": "",
        "models/vae/put_vae_here": "",
        "output/_output_images_will_be_put_here": "",
        "input/example.png": "png",
        "requirements.txt": "torch\ntorchvision\ntorchaudio\ncomfy-tiny-dep\nav>=16\ncomfy-kitchen\ncomfy-aimdo\n",
    }
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text, encoding="utf-8")
    return root


def git(*args, cwd=None):
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@example.invalid", "-c", "init.defaultBranch=master",
                    *args], cwd=cwd, check=True, capture_output=True, timeout=60)


@pytest.fixture(scope="module")
def bare_repo(tmp_path_factory) -> Path:
    work = comfy_source_tree(tmp_path_factory.mktemp("comfy-src") / "ComfyUI")
    git("init", "-q", cwd=work)
    git("add", "-A", cwd=work)
    git("commit", "-q", "-m", "ComfyUI-shaped tree", cwd=work)
    git("tag", "v0.33.0", cwd=work)  # a new ComfyUI is cloned at its newest release tag with H3
    bare = work.parent / "ComfyUI.git"
    git("clone", "-q", "--bare", str(work), str(bare))
    return bare


def tree_snapshot(root: Path) -> set[str]:
    return {p.relative_to(root).as_posix() for p in root.rglob("*")}


def test_new_comfyui_install_then_purge(tmp_path, bare_repo, offline_pip, run_cli, h3kit_home):
    place = tmp_path / "place"
    place.mkdir()
    (place / "unrelated.txt").write_text("the user's own file")
    before_place = tree_snapshot(place)
    before_repo = tree_snapshot(bare_repo)
    target = place / "My ComfyUI"

    code, out, err = run_cli("install", "--new-comfyui", str(target), "--comfyui-source", str(bare_repo),
                             "--fingerprint", str(FP_4090), "--yes", "--skip-calibrate", "--no-models", "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["comfyui"]["path"] == str(target)
    assert doc["comfyui"]["torch"] == "2.14.1+cu130"
    assert "[3/5] Installing PyTorch cu130" in err and "Cloning ComfyUI" not in out

    python = venv_python(target / "venv")
    ran = subprocess.run([str(python), "main.py"], cwd=target, capture_output=True, text=True, timeout=60)
    assert "torch 2.14.1+cu130 cuda 13.0 dep 42" in ran.stdout, ran.stderr
    # ComfyUI's requirements name bare 'torch' and the wheelhouse has a newer torch 2.15.0: the constraints held.
    assert comfy_setup.probe_torch(python)["packages"]["torch"] == "2.14.1+cu130"
    record = manifest.load(manifest.manifest_path(locations().state_dir, target))
    assert [e.path for e in record.by_role("comfyui") if e.kind == "dir"] == [str(target), str(target / "venv")]
    assert record.extra["comfyui_setup"]["created_by"] == "h3kit"

    (target / "output" / "my_video.mp4").write_bytes(b"the user's render")
    code, out, err = run_cli("uninstall", "--comfyui", str(target), "--purge", "--dry-run", "--json")
    assert code == 0, err
    assert json.loads(out)["comfyui_purge"]["would_remove"] == str(target) and target.is_dir()
    assert f"{target / 'output'} (1 files" in err
    code, out, err = run_cli("uninstall", "--comfyui", str(target), "--purge", "--yes", "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["comfyui_purge"]["removed"] == str(target)
    assert not target.exists()
    kept = place / "My ComfyUI-kept-by-h3kit"
    assert (kept / "output" / "my_video.mp4").read_bytes() == b"the user's render"
    assert tree_snapshot(place) - {p for p in tree_snapshot(place) if p.startswith("My ComfyUI-kept-by-h3kit")} == before_place
    assert tree_snapshot(bare_repo) == before_repo
    assert not manifest.manifest_path(locations().state_dir, target).exists()


def test_interrupted_setup_resumes(tmp_path, bare_repo, wheelhouse, offline_pip, capsys):
    partial_house = tmp_path / "house"
    shutil.copytree(wheelhouse, partial_house)
    dep = next(partial_house.glob("comfy_tiny_dep-*.whl"))
    dep.rename(tmp_path / dep.name)  # the requirements step will fail: as if the network dropped there
    opts = comfy_setup.PipOptions([str(partial_house)], no_index=True)
    target = tmp_path / "ComfyUI"
    fp = load_file(FP_4090)
    with pytest.raises(NotReady) as err:
        comfy_setup.new_comfyui(ctx(), target, str(bare_repo), fp, opts=opts)
    assert "comfy-tiny-dep" in err.value.message
    (partial_house / dep.name).write_bytes((tmp_path / dep.name).read_bytes())
    capsys.readouterr()
    assert comfy_setup.new_comfyui(ctx(), target, str(bare_repo), fp, opts=opts) == target
    progress = capsys.readouterr().err
    for n in (1, 2, 3):
        assert f"[{n}/5]" in progress and progress.count("already done, skipped") == 3
    assert "[4/5] Installing ComfyUI's requirements (torch pinned)..." in progress


def test_refuses_a_non_empty_target_and_a_refused_machine(tmp_path, bare_repo, offline_pip):
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "mine.txt").write_text("x")
    with pytest.raises(Exception) as err:
        comfy_setup.new_comfyui(ctx(), busy, str(bare_repo), load_file(FP_4090))
    assert err.value.exit_code == 2 and (busy / "mine.txt").exists()
    with pytest.raises(NotReady) as err:
        comfy_setup.new_comfyui(ctx(), tmp_path / "new", str(bare_repo),
                                load_file(FIXTURES / "torchsel" / "darwin-m1-rosetta.json"))
    assert "arch -arm64" in err.value.fix and not (tmp_path / "new").exists()


def test_archive_source_and_missing_git(tmp_path, monkeypatch):
    src = comfy_source_tree(tmp_path / "ComfyUI-master")
    archive = tmp_path / "ComfyUI-master.zip"
    with zipfile.ZipFile(archive, "w") as z:
        for p in src.rglob("*"):
            if p.is_file():
                z.write(p, p.relative_to(tmp_path).as_posix())
    got = source.fetch_source(ctx(), str(archive), tmp_path / "from-zip", 60)
    assert got["kind"] == "archive" and (tmp_path / "from-zip" / "main.py").is_file()
    monkeypatch.setenv("PATH", str(tmp_path / "no-tools-here"))
    with pytest.raises(NotReady) as err:
        source.fetch_source(ctx(), "https://github.com/Comfy-Org/ComfyUI.git", tmp_path / "x", 60)
    assert "git is not installed" in err.value.message and not (tmp_path / "x").exists()


@pytest.mark.real_machine  # it sets the free disk itself
def test_not_enough_disk_is_refused_before_anything_is_written(tmp_path, bare_repo, monkeypatch):
    monkeypatch.setattr(shutil, "disk_usage", lambda p: shutil._ntuple_diskusage(10**12, 10**12 - 10**6, 10**6))
    with pytest.raises(NotReady) as err:
        comfy_setup.new_comfyui(ctx(), tmp_path / "new", str(bare_repo), load_file(FP_4090))
    assert "GB free" in err.value.message and not (tmp_path / "new").exists()


def test_a_new_comfyui_from_local_wheels_fits_a_disk_too_small_for_a_download(tmp_path, bare_repo, offline_pip,
                                                                                monkeypatch):
    """1 GB free is far below the 12 GB a CUDA download asks for, and ample for the tests' tiny wheelhouse."""
    monkeypatch.setattr(shutil, "disk_usage", lambda p: shutil._ntuple_diskusage(10**12, 10**12 - 10**9, 10**9))
    target = comfy_setup.new_comfyui(ctx(), tmp_path / "ComfyUI", str(bare_repo), load_file(FP_4090))
    assert comfy_setup.probe_torch(venv_python(target / "venv"))["packages"]["torch"].endswith("+cu130")
    monkeypatch.delenv("H3KIT_PIP_NO_INDEX")  # the same folder, but pip may also ask an index: the download figure
    with pytest.raises(NotReady) as err:
        comfy_setup.new_comfyui(ctx(), tmp_path / "Other", str(bare_repo), load_file(FP_4090))
    assert "with this torch build needs about 12.0 GB" in err.value.message and not (tmp_path / "Other").exists()


def test_cpu_machine_gets_cpu_wheels_of_all_three(tmp_path, bare_repo, offline_pip):
    """The wheelhouse offers torchaudio 2.11.0 as +cpu and +cu130; 'torchaudio>=2.11' alone would take +cu130."""
    target = comfy_setup.new_comfyui(ctx(), tmp_path / "ComfyUI", str(bare_repo),
                                     load_file(FIXTURES / "torchsel" / "linux-cpu-only.json"))
    packages = comfy_setup.probe_torch(venv_python(target / "venv"))["packages"]
    assert packages == {"torch": "2.14.1+cpu", "torchvision": "0.29.1+cpu", "torchaudio": "2.11.0+cpu"}


@pytest.mark.comfyui
@pytest.mark.skipif(not os.environ.get("H3KIT_COMFYUI_DIR"), reason="needs a real ComfyUI checkout in H3KIT_COMFYUI_DIR")
def test_real_comfyui_folder_as_source_and_its_placeholders_are_not_user_data(tmp_path):
    real = Path(os.environ["H3KIT_COMFYUI_DIR"])
    target = tmp_path / "ComfyUI"
    assert source.fetch_source(ctx(), str(real), target, 300)["kind"] in ("folder", "git-local")
    assert (target / "main.py").is_file() and not (target / "venv").exists()
    man = manifest.load_or_new(locations().state_dir, target)
    man.record_dir(target, role="comfyui")
    man.extra["comfyui_setup"] = {"created_by": "h3kit", "dir": str(target),
                                  "shipped": create.user_area_files(target)}
    assert comfy_setup.purge_plan(man)["user_data"] == []  # put_*_here and example nodes came with ComfyUI
    (target / "output").mkdir(exist_ok=True)  # 0.33 no longer ships output/ with a placeholder; ComfyUI makes it
    (target / "output" / "ComfyUI_00001_.png").write_bytes(b"png")
    assert [u["path"] for u in comfy_setup.purge_plan(man)["user_data"]] == [str(target / "output")]


def _killed_after_landing(tmp_path: Path, bare_repo: Path, name: str):
    """Install a new ComfyUI in a child killed (SIGKILL) at the first file operation after the rename that puts
    the fetched source in place; (argv, env, target). The operation is found by a logged run in another home."""
    import sys

    target = tmp_path / name
    log = tmp_path / "ops.log"
    argv = [sys.executable, "-m", "h3kit", "install", "--new-comfyui", str(target), "--comfyui-source",
            str(bare_repo), "--fingerprint", str(FP_4090), "--yes", "--skip-calibrate", "--no-models"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("H3KIT_TEST_")}
    probe = subprocess.run(argv, env={**env, "H3KIT_TEST_FILEOPS": str(log), "H3KIT_HOME": str(tmp_path / "probe")},
                           capture_output=True, text=True, timeout=600)
    assert probe.returncode == 0, probe.stderr
    ops = [line.split("\t") for line in log.read_text().splitlines()]
    landed = next(int(n) for n, op, path in ops if op == "replace" and path == str(target))
    shutil.rmtree(target)
    killed = subprocess.run(argv, env={**env, "H3KIT_TEST_KILL_AT": str(landed + 1)}, capture_output=True,
                            text=True, timeout=600)
    assert killed.returncode == -9 and (target / "main.py").is_file(), killed.stderr
    return argv, env, target


def _purge(env: dict, target: Path) -> None:
    import sys

    purge = subprocess.run([sys.executable, "-m", "h3kit", "uninstall", "--comfyui", str(target), "--purge", "--yes"],
                           env=env, capture_output=True, text=True, timeout=300)
    assert purge.returncode == 0, purge.stdout + purge.stderr
    assert not target.exists()


def test_a_kill_right_after_the_new_comfyui_lands_converges(tmp_path, bare_repo, offline_pip):
    """Issue 26 (5): before, the record was saved only after the rename: a rerun said "already exists and is not
    empty" and 'uninstall --purge' had no record (679 MB orphaned). Now the rerun finishes the setup."""
    argv, env, target = _killed_after_landing(tmp_path, bare_repo, "New ComfyUI")
    again = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr
    assert "interrupted run" in again.stderr and "already exists" not in again.stderr
    _purge(env, target)


def test_after_that_kill_uninstall_purge_removes_the_new_comfyui(tmp_path, bare_repo, offline_pip):
    _, env, target = _killed_after_landing(tmp_path, bare_repo, "Other ComfyUI")
    _purge(env, target)
