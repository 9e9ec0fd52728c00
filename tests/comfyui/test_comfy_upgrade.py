"""`doctor --fix` for a ComfyUI without H3: a git checkout moves to the newest release tag with H3, and back.

Offline: small git repositories built here (tags v0.8.0, v0.31.0, v0.33.0, whose trees differ in
comfyui_version.py, the H3 files and requirements.txt), a throwaway venv outside the tree and pip on a
local folder of tiny wheels. The tree digest covers every file and link except .git.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import subprocess
import tarfile
from pathlib import Path

import pytest

from comfy_setup_support import pip_only_from
from comfy_setup_support import FP_4090, ctx, fill_wheelhouse, make_venv, make_wheel, pip_install
from h3kit.comfyui import manifest
from h3kit.comfyui import setup as comfy_setup
from h3kit.comfyui.locate import ComfyInstall
from h3kit.comfyui.setup import create
from h3kit.comfyui.versions import freeze, releases, upgrade
from h3kit.core.errors import BadInput, NotReady
from h3kit.core.paths import locations
from h3kit.core.tools import PipOptions
from h3kit.data import catalog as catalog_mod
from tests.fixtures.comfyui.comfy_tree import FAKE_FOLDER_PATHS, make_comfyui

pytestmark = pytest.mark.native  # installs: the session's native library, not a compile per test

CAT = catalog_mod.load()
H3_FILES = list(CAT.comfyui_h3.files)
OLD_REQS = "torch\ntorchvision\nh3-test-dep==1.0\n"
NEW_REQS = "torch\ntorchvision\ntorchaudio\nh3-test-dep>=2.0\ncomfy-tiny-dep\nav>=16\ncomfy-kitchen\ncomfy-aimdo\n"


def git(*args, cwd=None) -> str:
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@example.invalid", "-c",
                           "init.defaultBranch=master", *args], cwd=cwd, check=True, capture_output=True, text=True,
                          timeout=60).stdout.strip()


def write_release(root: Path, version: str, *, h3: bool, reqs: str) -> None:
    files = {"main.py": "print('ComfyUI')\n", "nodes.py": "NODE_CLASS_MAPPINGS = {}\n", "comfy/__init__.py": "",
             "folder_paths.py": FAKE_FOLDER_PATHS,  # loader nodes ask it for their file lists
             "comfy_extras/__init__.py": "", "custom_nodes/example_node.py.example": "# example\n",
             "comfyui_version.py": f'__version__ = "{version}"\n', "requirements.txt": reqs,
             ".gitignore": "/custom_nodes/*\n!/custom_nodes/example_node.py.example\n/output/\n/models/\n__pycache__/\n"}
    files.update({rel: f"# H3 in ComfyUI {version}\n" for rel in H3_FILES} if h3 else {})
    for rel in H3_FILES:
        if not h3 and (root / rel).exists():
            (root / rel).unlink()
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text, encoding="utf-8")


def release_repo(root: Path, *, newer=True, tip=True) -> Path:
    """Upstream: v0.8.0 (no H3), v0.31.0 and v0.33.0 (H3), then an untagged 0.34.0 tip."""
    root.mkdir(parents=True)
    git("init", "-q", cwd=root)
    steps = [("0.8.0", False, OLD_REQS, "v0.8.0")]
    steps += [("0.31.0", True, NEW_REQS, "v0.31.0"), ("0.33.0", True, NEW_REQS, "v0.33.0")] if newer else []
    steps += [("0.34.0", True, NEW_REQS, None)] if tip and newer else []
    for version, h3, reqs, tag in steps:
        write_release(root, version, h3=h3, reqs=reqs)
        git("add", "-A", cwd=root)
        git("commit", "-q", "-m", f"ComfyUI {version}", cwd=root)
        if tag:
            git("tag", tag, cwd=root)
    return root


def user_checkout(tmp_path: Path, upstream: Path, *, remote_only=True) -> Path:
    """The user's clone on their own branch 'mine' (v0.8.0 plus one commit); newer tags only upstream."""
    comfy = tmp_path / "ComfyUI"
    git("clone", "-q", str(upstream), str(comfy))
    git("checkout", "-q", "-b", "mine", "v0.8.0", cwd=comfy)
    (comfy / "my_notes.txt").write_text("the user's tracked file\n")
    git("add", "my_notes.txt", cwd=comfy)
    git("commit", "-q", "-m", "my change", cwd=comfy)
    if remote_only:
        git("tag", "-d", "v0.31.0", "v0.33.0", cwd=comfy)
    (comfy / "custom_nodes" / "MyPack").mkdir(parents=True)
    (comfy / "custom_nodes" / "MyPack" / "__init__.py").write_text("NODE_CLASS_MAPPINGS = {}\n")
    (comfy / "output").mkdir()
    (comfy / "output" / "render.png").write_bytes(b"\x89PNG the user's render")
    return comfy


def digest(root: Path, skip: tuple[str, ...] = ()) -> str:
    """sha256 over every file and link under root (path, exec bit, content or link target), .git and `skip`
    (relative paths) left out."""
    found = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d != ".git"]
        found += [Path(dirpath) / n for n in filenames + [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]]
    h = hashlib.sha256()
    for p in sorted(f for f in found if not any(f.relative_to(root).as_posix().startswith(s) for s in skip)):
        st = p.lstat()
        body = os.readlink(p).encode() if stat.S_ISLNK(st.st_mode) else p.read_bytes()
        h.update(f"{p.relative_to(root).as_posix()}\0{bool(st.st_mode & stat.S_IXUSR)}\0".encode())
        h.update(hashlib.sha256(body).digest())
    return h.hexdigest()


def head(comfy: Path) -> tuple[str, str]:
    return git("rev-parse", "HEAD", cwd=comfy), git("rev-parse", "--symbolic-full-name", "HEAD", cwd=comfy)


@pytest.fixture(scope="module")
def house(tmp_path_factory) -> Path:
    folder = fill_wheelhouse(tmp_path_factory.mktemp("upgrade-house"))
    for version in ("1.0", "2.0"):
        make_wheel(folder, "h3-test-dep", version, {"h3_test_dep.py": f"VERSION = {version!r}\n"})
    return folder


@pytest.fixture
def pip_here(house, monkeypatch) -> PipOptions:
    return pip_only_from(house, monkeypatch)


@pytest.fixture
def checkout(tmp_path, house, pip_here, venv_template):
    """(install, python): the user's checkout at 'mine', its venv outside the tree with a cu130 torch, no torchaudio."""
    upstream = release_repo(tmp_path / "upstream")
    comfy = user_checkout(tmp_path, upstream)
    python = make_venv(venv_template, tmp_path / "venv")
    pip_install(python, "torch==2.14.1+cu130", "torchvision==0.29.1+cu130", "h3-test-dep==1.0", wheelhouse=house)
    return ComfyInstall(comfy, "test", "plain", Path(python)), python


def packages(python: str) -> dict[str, str]:
    return {n: line.split("==")[1] for n, line in freeze.parse(freeze.freeze(ctx(), python)).items()}


def record_of(comfy: Path) -> manifest.Manifest:
    return manifest.load_or_new(locations().state_dir, comfy)


# -- pure parts ----------------------------------------------------------------------------------

def test_release_tags_newest_first_and_only_real_releases():
    tags = ["v0.8.0", "v0.31.0", "v0.33.0", "v0.34.0rc1", "v0.10.0", "latest", "v0.33", "vfoo", "0.40.0"]
    assert releases.releases(tags, "v{version}", "0.31.0") == ["v0.33.0", "v0.33", "v0.31.0"]
    assert releases.releases(tags, "v{version}", "0.35.0") == []
    assert releases.tag_version("v0.33.0", "v{version}") == releases.Version("0.33.0")
    assert releases.parse_ls_remote("abc\trefs/tags/v0.33.0\ndef\trefs/heads/master\n") == ["v0.33.0"]


def test_freeze_diff_and_restore_plan():
    before = ["pip==23.2.1", "h3-test-dep==1.0", "torch==2.14.1+cu130", "-e git+https://x/y.git#egg=y", "Old_Pkg==3"]
    now = ["pip==23.2.1", "h3_test_dep==2.0", "torch==2.14.1+cu130", "torchaudio==2.11.0+cu130"]
    todo = freeze.plan(before, now)
    assert todo["install"] == {None: ["h3-test-dep==1.0", "Old_Pkg==3"]}
    assert todo["remove"] == ["torchaudio"] and todo["editable"] == ["-e git+https://x/y.git#egg=y"]
    again = freeze.plan(["torch==2.13.0+cpu"], ["torch==2.14.1+cu130"])
    assert again["install"] == {"https://download.pytorch.org/whl/cpu": ["torch==2.13.0+cpu"]}


def test_undo_order_is_newest_first():
    record = manifest.Manifest("/c", extra={"torch_before": {"recorded": "2026-12-01T10:00:00+00:00"},
                                            "comfyui_upgrade": {"recorded": "2026-12-01T09:00:00+00:00"}})
    assert upgrade.recorded_actions(record) == ["torch", "comfyui_upgrade"]
    record.extra["comfyui_upgrade"]["recorded"] = "2026-12-01T10:00:00+00:00"  # one --fix run: torch, then upgrade
    assert upgrade.recorded_actions(record) == ["comfyui_upgrade", "torch"]
    assert upgrade.recorded_actions(manifest.Manifest("/c")) == []


# -- the fix and its undo ------------------------------------------------------------------------

@pytest.mark.slow
def test_upgrade_takes_the_newest_release_with_h3_then_undo_restores_tree_branch_and_packages(checkout, pip_here):
    install, python = checkout
    comfy = install.path
    tree_before, head_before, pkgs_before = digest(comfy), head(comfy), packages(python)
    assert upgrade.below_h3(install, CAT) and upgrade.kind_of(install) == "git"

    result = upgrade.upgrade_to_h3(ctx(), install, CAT, opts=pip_here)
    assert result["changed"] and result["to"]["tag"] == "v0.33.0" and result["to"]["version"] == "0.33.0"
    assert result["from"] == {"version": "0.8.0", "commit": head_before[0], "branch": "mine"}
    assert head(comfy) == (git("rev-parse", "v0.33.0^{commit}", cwd=comfy), "HEAD")  # detached at the tag
    assert git("rev-parse", "mine", cwd=comfy) == head_before[0]  # the user's branch did not move
    assert not upgrade.below_h3(install, CAT)
    assert (comfy / "output" / "render.png").is_file() and (comfy / "custom_nodes" / "MyPack").is_dir()
    after = packages(python)
    # torch stays the installed build (the wheelhouse offers torch 2.15.0); torchaudio of torch's build, not +cpu.
    assert after["torch"] == "2.14.1+cu130" and after["torchvision"] == "0.29.1+cu130"
    assert after["torchaudio"] == "2.11.0+cu130" and after["h3-test-dep"] == "2.0" and after["comfy-tiny-dep"] == "1.0"
    assert "added torchaudio==2.11.0+cu130" in result["packages"]
    saved = json.loads(Path(result["record"]).read_text())["extra"]["comfyui_upgrade"]
    assert saved["commit"] == head_before[0] and saved["branch"] == "mine" and "h3-test-dep==1.0" in saved["freeze"]

    done = upgrade.undo_recorded(ctx(), install, record_of(comfy), opts=pip_here)
    assert [d["action"] for d in done] == ["comfyui_upgrade"] and done[0]["checked_out"] == "mine"
    assert head(comfy) == (head_before[0], "refs/heads/mine")
    assert digest(comfy) == tree_before
    assert packages(python) == pkgs_before
    assert "comfyui_upgrade" not in record_of(comfy).extra
    with pytest.raises(BadInput) as err:
        upgrade.undo_recorded(ctx(), install, record_of(comfy), opts=pip_here)
    assert "no ComfyUI upgrade to undo" in err.value.message


def test_local_changes_are_refused_and_nothing_changes(checkout, pip_here):
    install, python = checkout
    (install.path / "nodes.py").write_text("# the user's edit\n")
    tree, where, pkgs = digest(install.path), head(install.path), packages(python)
    with pytest.raises(NotReady) as err:
        upgrade.upgrade_to_h3(ctx(), install, CAT, opts=pip_here)
    assert err.value.exit_code == 3 and "local changes to tracked files (nodes.py)" in err.value.message
    assert "stash" in err.value.fix
    assert (digest(install.path), head(install.path), packages(python)) == (tree, where, pkgs)
    assert "comfyui_upgrade" not in record_of(install.path).extra


def test_a_file_the_release_would_overwrite_is_refused(checkout, pip_here):
    install, _python = checkout
    taken = install.path / H3_FILES[0]
    taken.parent.mkdir(parents=True)
    taken.write_text("# the user's own copy, untracked\n")
    with pytest.raises(NotReady) as err:
        upgrade.upgrade_to_h3(ctx(), install, CAT, opts=pip_here)
    assert "would overwrite files that git does not track" in err.value.message and H3_FILES[0] in err.value.message
    assert taken.read_text() == "# the user's own copy, untracked\n" and head(install.path)[1] == "refs/heads/mine"


def test_dry_run_says_what_it_would_do_and_changes_nothing(checkout, pip_here):
    install, python = checkout
    tree, where, tags, pkgs = digest(install.path), head(install.path), git("tag", cwd=install.path), packages(python)
    result = upgrade.upgrade_to_h3(ctx(dry_run=True), install, CAT, opts=pip_here)
    assert result["would_checkout"] == "v0.33.0" and result["would_fetch"] == "v0.33.0 from origin"
    assert git("tag", cwd=install.path) == tags  # nothing fetched
    git("fetch", "-q", "--no-tags", "origin", "refs/tags/v0.33.0:refs/tags/v0.33.0", cwd=install.path)
    result = upgrade.upgrade_to_h3(ctx(dry_run=True), install, CAT, opts=pip_here)
    assert result["would_checkout"] == "v0.33.0" and result["would_pin"]["torch"] == "2.14.1+cu130"
    assert result["would_install"] == ["torchaudio", "requirements.txt"] and not result["changed"]
    assert (digest(install.path), head(install.path), packages(python)) == (tree, where, pkgs)
    assert set(git("tag", cwd=install.path).split()) == set(tags.split()) | {"v0.33.0"}
    assert not manifest.manifest_path(locations().state_dir, install.path).exists()


def test_no_release_with_h3_is_a_clear_not_ready(tmp_path, house, pip_here, venv_template):
    comfy = release_repo(tmp_path / "ComfyUI", newer=False)
    python = make_venv(venv_template, tmp_path / "venv")
    pip_install(python, "torch==2.14.1+cu130", wheelhouse=house)
    install = ComfyInstall(comfy, "test", "plain", Path(python))
    tree = digest(comfy)
    with pytest.raises(NotReady) as err:
        upgrade.upgrade_to_h3(ctx(), install, CAT, opts=pip_here)
    assert err.value.message == (f"No release tag of ComfyUI 0.30.0 or newer with H3 (named like v0.30.0) is in "
                                 f"{comfy} (it has no git remote).")
    assert "--new-comfyui" in err.value.fix
    git("remote", "add", "origin", str(tmp_path / "gone.git"), cwd=comfy)  # a remote that cannot be reached
    with pytest.raises(NotReady) as err:
        upgrade.upgrade_to_h3(ctx(), install, CAT, opts=pip_here)
    assert "or its remotes (origin), and listing the tags of origin failed" in err.value.message
    assert "does not exist at that address" in err.value.message and digest(comfy) == tree


def test_portable_and_desktop_get_their_update_action_and_no_change(tmp_path):
    portable = make_comfyui(tmp_path / "p", layout="portable", h3=False)
    before = digest(portable.parent)
    with pytest.raises(NotReady) as err:
        upgrade.upgrade_to_h3(ctx(), ComfyInstall(portable, "test", "portable"), CAT)
    assert "ComfyUI 0.8.0 cannot run MiniMax H3" in err.value.message
    assert err.value.fix == CAT.comfyui_h3.update["portable"] and "update_comfyui.bat" in err.value.fix
    assert digest(portable.parent) == before
    with pytest.raises(NotReady) as err:
        upgrade.upgrade_to_h3(ctx(), ComfyInstall(make_comfyui(tmp_path / "d", h3=False), "test", "desktop"), CAT)
    assert err.value.fix == CAT.comfyui_h3.update["desktop"]
    with pytest.raises(NotReady) as err:  # a plain folder without git
        upgrade.upgrade_to_h3(ctx(), ComfyInstall(make_comfyui(tmp_path / "f", h3=False), "test", "plain"), CAT)
    assert "not a git checkout" in err.value.message and "--new-comfyui" in err.value.fix


# -- through the CLI: doctor --fix / --undo, uninstall ---------------------------------------------

@pytest.mark.slow
def test_doctor_fix_then_undo_through_the_cli(checkout, run_cli):
    install, python = checkout
    pick = ("--comfyui", str(install.path), "--comfyui-python", python, "--fingerprint", str(FP_4090))
    code, out, err = run_cli("install", *pick, "--yes", "--skip-calibrate", "--no-models", "--json")
    assert code in (0, 3), err  # 3: installed, but this ComfyUI cannot run H3 yet
    ours = ("custom_nodes/ComfyUI-h3kit/", "run_h3kit.sh")  # h3kit's own files: --fix may re-apply them
    tree, where, pkgs = digest(install.path, ours), head(install.path), packages(python)
    code, out, err = run_cli("doctor", *pick, "--fix", "--dry-run", "--json")
    assert any("would move ComfyUI" in n and "v0.33.0" in n for n in json.loads(out)["notes"]), err
    code, out, err = run_cli("doctor", *pick, "--fix", "--dry-run")  # issue 26 (7): text mode says it too
    assert any(line.startswith("note: --dry-run: would move ComfyUI") and "v0.33.0" in line
               for line in out.splitlines()), out
    assert (digest(install.path, ours), head(install.path)) == (tree, where)

    code, out, err = run_cli("doctor", *pick, "--fix", "--yes", "--json")
    doc = json.loads(out)
    assert any("ComfyUI moved from 0.8.0 to v0.33.0 (0.33.0)" in n for n in doc["notes"]), err
    h3 = next(f for f in doc["findings"] if f["check"] == "comfyui.h3")
    assert h3["status"] == "ok" and h3["message"].startswith("fixed: ComfyUI 0.33.0 has MiniMax H3 support"), h3
    assert head(install.path)[1] == "HEAD" and packages(python)["h3-test-dep"] == "2.0"

    code, out, err = run_cli("doctor", "--comfyui", str(install.path), "--comfyui-python", python, "--undo", "--yes",
                             "--json")
    assert code == 0, err
    assert json.loads(out)["undone"][0]["checked_out"] == "mine"
    assert (digest(install.path, ours), head(install.path), packages(python)) == (tree, where, pkgs)


@pytest.mark.slow
def test_uninstall_puts_the_checkout_and_packages_back(checkout, pip_here, run_cli):
    install, python = checkout
    tree, where, pkgs = digest(install.path), head(install.path), packages(python)
    upgrade.upgrade_to_h3(ctx(), install, CAT, opts=pip_here)
    assert head(install.path)[1] == "HEAD"
    code, out, err = run_cli("uninstall", "--comfyui", str(install.path), "--comfyui-python", python, "--yes",
                             "--json")
    assert code == 0, err
    assert any("restored the ComfyUI checkout" in n and "mine" in n for n in json.loads(out)["torch"])
    assert (digest(install.path), head(install.path), packages(python)) == (tree, where, pkgs)
    assert not manifest.manifest_path(locations().state_dir, install.path).exists()


# -- a new ComfyUI takes a release with H3 --------------------------------------------------------

def test_new_comfyui_takes_the_newest_release_tag_not_the_tip(tmp_path):
    upstream = release_repo(tmp_path / "upstream")  # tip: untagged 0.34.0
    assert create.release_for_source(ctx(), str(upstream), CAT) == "v0.33.0"
    got = create._fetch_h3_release(ctx(), str(upstream), tmp_path / "new", 60, CAT)
    assert got["tag"] == "v0.33.0" and got["version"] == "0.33.0"
    assert (tmp_path / "new" / "comfyui_version.py").read_text() == '__version__ = "0.33.0"\n'


def test_new_comfyui_refuses_a_source_without_h3(tmp_path, pip_here):
    old = release_repo(tmp_path / "old", newer=False)
    folder = tmp_path / "folder"
    folder.mkdir()
    git("archive", "--format=tar", "-o", str(tmp_path / "old.tar"), "v0.8.0", cwd=old)
    with tarfile.open(tmp_path / "old.tar") as t:
        t.extractall(folder)
    from h3kit.fingerprint.schema import load_file

    for source in (str(old), str(folder)):
        target = tmp_path / f"new-{Path(source).name}"
        with pytest.raises(BadInput) as err:
            comfy_setup.new_comfyui(ctx(), target, source, load_file(FP_4090), opts=pip_here)
        assert err.value.exit_code == 2 and "ComfyUI 0.8.0 cannot run MiniMax H3" in err.value.message
        assert "0.30.0 or newer with --comfyui-source" in err.value.fix and not target.exists()
