"""Issue 35 B: a loader pack from $H3KIT_LOADER_SOURCES (a local folder or archive of ComfyUI-GGUF).

Only regular files and folders are copied into custom_nodes: a link counts as what it leads to while
that lies inside the source, and is refused otherwise; a pipe or a device is refused by name and never
opened (reading /dev/zero for the install record would never end). A source is the pack when
`__init__.py` and `nodes.py` are at its top, or in the one folder inside it (GitHub's "Download ZIP",
an archive unpacked into a folder of its own name); anything else is one sentence, nothing written.
An earlier install h3kit recorded that is not the pack is replaced on the next run, removing only
files the record names as h3kit's and that still hold what h3kit wrote.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import zipfile
from pathlib import Path

import pytest
from h3kit.cli.context import Context
from h3kit.comfyui.manifest import load_or_new
from h3kit.core.errors import BadInput
from h3kit.data import catalog as catalog_mod
from h3kit.models.loader_pack import install_loader_pack

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="links, pipes and /dev/zero")

ROLE = "loader-pack"


@pytest.fixture
def pack():
    return catalog_mod.load().loader_packs["ComfyUI-GGUF"]


@pytest.fixture
def comfy(tmp_path) -> Path:
    root = tmp_path / "ComfyUI"
    (root / "custom_nodes").mkdir(parents=True)
    (root / "main.py").write_text("# ComfyUI stand-in\n")
    return root


def gguf_tree(root: Path) -> Path:
    """A small tree laid out like ComfyUI-GGUF (no requirements.txt: nothing for pip to do)."""
    (root / "tools").mkdir(parents=True)
    (root / "__init__.py").write_text("from .nodes import NODE_CLASS_MAPPINGS\n")
    (root / "nodes.py").write_text("class UnetLoaderGGUF: pass\nclass CLIPLoaderGGUF: pass\n"
                                   "NODE_CLASS_MAPPINGS = {}\n")
    (root / "loader.py").write_text("# loader\n")
    (root / "tools" / "convert.py").write_text("# convert\n")
    return root


@contextlib.contextmanager
def deadline(seconds: int):
    """A hang (reading /dev/zero or a pipe) fails the test instead of stopping the run."""
    def stop(*_):
        raise TimeoutError(f"still running after {seconds}s")

    old = signal.signal(signal.SIGALRM, stop)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def _install(pack, comfy, source: Path, monkeypatch):
    monkeypatch.setenv("H3KIT_LOADER_SOURCES", str(source))
    with deadline(30):
        return install_loader_pack(Context(), pack, comfy)


def _dest(comfy) -> Path:
    return comfy / "custom_nodes" / "ComfyUI-GGUF"


@pytest.mark.parametrize("entry, make, says", [
    ("zero", lambda at: os.symlink("/dev/zero", at), "outside"),  # once hashed for the record: a hang
    (os.path.join("tools", "pipe"), os.mkfifo, "pipe"),
    ("dangling.py", lambda at: os.symlink("gone.py", at), "nowhere"),
], ids=["link-to-dev-zero", "pipe", "dangling-link"])
def test_what_is_no_regular_file_in_the_source_is_refused_by_name_not_read(pack, comfy, tmp_path, monkeypatch,
                                                                           entry, make, says):
    src = gguf_tree(tmp_path / "ComfyUI-GGUF")
    make(src / entry)
    with pytest.raises(BadInput) as exc:
        _install(pack, comfy, src, monkeypatch)
    assert str(src / entry) in exc.value.message and says in exc.value.message
    assert not os.path.lexists(_dest(comfy))


def test_links_inside_the_source_become_files_and_folders(pack, comfy, tmp_path, monkeypatch):
    src = gguf_tree(tmp_path / "ComfyUI-GGUF")
    os.symlink("loader.py", src / "alias.py")
    os.symlink("tools", src / "tools2")
    os.symlink("..", src / "tools" / "up")  # a link to a folder that holds it: copying would never end
    with pytest.raises(BadInput) as exc:
        _install(pack, comfy, src, monkeypatch)
    assert str(src / "tools" / "up") in exc.value.message
    (src / "tools" / "up").unlink()
    got = _install(pack, comfy, src, monkeypatch)
    dest = _dest(comfy)
    assert got["installed"]
    assert (dest / "alias.py").read_text() == "# loader\n" and not (dest / "alias.py").is_symlink()
    assert (dest / "tools2" / "convert.py").is_file() and not (dest / "tools2").is_symlink()
    man = load_or_new(Context().locations.state_dir, comfy)
    assert all(man.still_ours(e) for e in man.by_role(ROLE))
    assert {e.kind for e in man.by_role(ROLE)} == {"dir", "file"}


def test_a_folder_that_is_not_the_pack_is_refused(pack, comfy, tmp_path, monkeypatch):
    src = tmp_path / "ComfyUI-GGUF"
    src.mkdir()
    (src / "README.md").write_text("# ComfyUI-GGUF\n")
    with pytest.raises(BadInput) as exc:
        _install(pack, comfy, src, monkeypatch)
    assert str(src) in exc.value.message and "nodes.py" in exc.value.message and "H3KIT_LOADER_SOURCES" in exc.value.fix
    assert not os.path.lexists(_dest(comfy))


def test_the_pack_one_folder_down_is_unwrapped(pack, comfy, tmp_path, monkeypatch):
    """'Extract all' of ComfyUI-GGUF-main.zip makes ComfyUI-GGUF-main/ComfyUI-GGUF-main/; a zip of that
    folder has the pack two levels down."""
    outer = tmp_path / "unzipped" / "ComfyUI-GGUF-main"
    gguf_tree(outer / "ComfyUI-GGUF-main")
    got = _install(pack, comfy, outer, monkeypatch)
    assert got["installed"] and (_dest(comfy) / "nodes.py").is_file() and (_dest(comfy) / "tools").is_dir()
    assert not (_dest(comfy) / "ComfyUI-GGUF-main").exists()

    archive = tmp_path / "zips" / "ComfyUI-GGUF-main.zip"
    archive.parent.mkdir()
    with zipfile.ZipFile(archive, "w") as z:
        for p in sorted(outer.rglob("*")):
            z.write(p, Path("ComfyUI-GGUF-main") / p.relative_to(outer))
        z.writestr("__MACOSX/._x", b"")
    second = tmp_path / "ComfyUI2"
    (second / "custom_nodes").mkdir(parents=True)
    got = _install(pack, second, archive, monkeypatch)
    assert got["installed"] and (_dest(second) / "__init__.py").is_file()
    assert sorted(p.name for p in _dest(second).iterdir()) == ["__init__.py", "loader.py", "nodes.py", "tools"]


def test_an_archive_that_is_not_the_pack_is_refused(pack, comfy, tmp_path, monkeypatch):
    archive = tmp_path / "ComfyUI-GGUF.zip"
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr("ComfyUI-GGUF-main/README.md", "# just a readme\n")
    with pytest.raises(BadInput) as exc:
        _install(pack, comfy, archive, monkeypatch)
    assert str(archive) in exc.value.message and "nodes.py" in exc.value.message
    assert not os.path.lexists(_dest(comfy)) and list((comfy / "custom_nodes").iterdir()) == []


def _old_wrong_install(comfy: Path) -> Path:
    """What an older h3kit made of a README-only source: the folder and its file, recorded as the pack."""
    dest = _dest(comfy)
    (dest / "docs").mkdir(parents=True)
    (dest / "README.md").write_text("# ComfyUI-GGUF\n")
    (dest / "docs" / "notes.md").write_text("notes\n")
    man = load_or_new(Context().locations.state_dir, comfy)
    man.record_dir(dest, ROLE)
    man.record_dir(dest / "docs", ROLE)
    man.record_file(dest / "README.md", ROLE)
    man.record_file(dest / "docs" / "notes.md", ROLE)
    man.save()
    return dest


def test_an_earlier_install_that_is_not_the_pack_is_repaired(pack, comfy, tmp_path, monkeypatch):
    dest = _old_wrong_install(comfy)
    got = _install(pack, comfy, gguf_tree(tmp_path / "ComfyUI-GGUF"), monkeypatch)
    assert got["installed"] and (dest / "nodes.py").is_file()
    assert not (dest / "README.md").exists() and not (dest / "docs").exists()
    man = load_or_new(Context().locations.state_dir, comfy)
    assert all(Path(e.path).exists() and man.still_ours(e) for e in man.by_role(ROLE))
    assert _install(pack, comfy, tmp_path / "ComfyUI-GGUF", monkeypatch)["why"] == "already there"


@pytest.mark.parametrize("change", ["added", "edited"])
def test_the_repair_never_removes_what_is_not_h3kits(pack, comfy, tmp_path, monkeypatch, change):
    dest = _old_wrong_install(comfy)
    theirs = dest / "docs" / ("mine.txt" if change == "added" else "notes.md")
    theirs.write_text("the user's words\n")
    with pytest.raises(BadInput) as exc:
        _install(pack, comfy, gguf_tree(tmp_path / "ComfyUI-GGUF"), monkeypatch)
    assert str(theirs) in exc.value.message
    assert theirs.read_text() == "the user's words\n" and (dest / "README.md").is_file()



def test_a_clone_that_is_not_the_pack_is_taken_away_again(pack, comfy, tmp_path, monkeypatch):
    """A git repository (here a local checkout in H3KIT_LOADER_SOURCES) is cloned in place, then checked:
    all of it is h3kit's, so a wrong one goes again and the record forgets it; links in it are recorded as
    links, never read."""
    import subprocess

    src = tmp_path / "ComfyUI-GGUF"
    src.mkdir()
    (src / "README.md").write_text("# not the pack\n")
    os.symlink("/dev/zero", src / "zero")
    for cmd in (["init", "-q"], ["add", "-A"], ["-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "x"]):
        subprocess.run(["git", *cmd], cwd=src, check=True, capture_output=True, timeout=60)
    with pytest.raises(BadInput) as exc:
        _install(pack, comfy, src, monkeypatch)
    assert "is not ComfyUI-GGUF" in exc.value.message and "nodes.py" in exc.value.message
    assert not os.path.lexists(_dest(comfy))
    assert load_or_new(Context().locations.state_dir, comfy).by_role(ROLE) == []
