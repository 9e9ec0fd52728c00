"""A ComfyUI archive as the source: crafted tar members never land, or point, outside the folder it unpacks into.

Each case runs twice: with the standard library's `data` filter, and with it
taken away (as on Pythons older than 3.10.12 / 3.11.4), where h3kit's own
checks must refuse the same members a plain `extractall` would write.
"""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path

import pytest

from h3kit.comfyui.setup import source
from h3kit.core.errors import BadInput


def _add(t: tarfile.TarFile, name: str, data: bytes = b"x", *, kind=tarfile.REGTYPE, link: str = "",
         mode: int = 0o644) -> None:
    info = tarfile.TarInfo(name)
    info.type, info.linkname, info.mode = kind, link, mode
    info.size = len(data) if kind == tarfile.REGTYPE else 0
    t.addfile(info, io.BytesIO(data) if kind == tarfile.REGTYPE else None)


def _tar(path: Path, members) -> Path:
    with tarfile.open(path, "w:gz") as t:
        _add(t, "ComfyUI/main.py", b"print('comfy')\n")
        for m in members:
            _add(t, **m) if isinstance(m, dict) else _add(t, m)
    return path


def _sym(name, link):
    return {"name": name, "kind": tarfile.SYMTYPE, "link": link}


def _hard(name, link):
    return {"name": name, "kind": tarfile.LNKTYPE, "link": link}


@pytest.fixture(params=["data filter", "no filter"])
def filter_support(request, monkeypatch):
    if request.param == "no filter":
        monkeypatch.delattr(tarfile, "data_filter", raising=False)
    elif not hasattr(tarfile, "data_filter"):
        pytest.skip("this Python's tarfile has no data filter")
    return request.param


def _outside(tmp_path: Path) -> set[str]:
    """What exists in the parent of the unpack folder, besides the archive and the unpack folder itself."""
    return {p.name for p in tmp_path.iterdir()} - {"evil.tar.gz", "work"}


EVIL = {
    "dot-dot": ["../evil.txt"],
    "dot-dot deep": ["ComfyUI/comfy/../../../evil.txt"],
    "absolute": ["{tmp}/evil.txt"],
    "symlink out": [_sym("ComfyUI/out", "../../")],
    "absolute symlink": [_sym("ComfyUI/etc", "/etc")],
    "write through a symlink": [_sym("ComfyUI/up", ".."), "ComfyUI/up/../evil.txt"],
    "link to itself, then up": [_sym("ComfyUI/here", "."), _sym("ComfyUI/l1", "here/../..")],
    "hard link out": [_hard("ComfyUI/passwd", "../../evil-target")],
    "device": [{"name": "ComfyUI/dev", "kind": tarfile.CHRTYPE}],
}


@pytest.mark.parametrize("case", sorted(EVIL))
def test_members_escaping_the_folder_are_refused(tmp_path, filter_support, case):
    (tmp_path / "evil-target").write_text("a file outside that a hard link would expose")
    members = [m.replace("{tmp}", tmp_path.as_posix()) if isinstance(m, str) else m for m in EVIL[case]]
    archive = _tar(tmp_path / "evil.tar.gz", members)
    work = tmp_path / "work"
    work.mkdir()
    before = _outside(tmp_path)
    with pytest.raises(BadInput) as err:
        source.unpack(archive, work / "ComfyUI")
    assert "refused" in err.value.message and err.value.fix
    assert _outside(tmp_path) == before
    assert not (work / "ComfyUI").exists() and list(work.iterdir()) == []  # nothing half-unpacked is left


def test_a_plain_archive_unpacks_with_its_inner_links(tmp_path, filter_support):
    archive = _tar(tmp_path / "evil.tar.gz", [
        {"name": "ComfyUI/run.sh", "data": b"#!/bin/sh\n", "mode": 0o755},
        {"name": "ComfyUI/comfy", "kind": tarfile.DIRTYPE, "mode": 0o755},
        "ComfyUI/comfy/__init__.py",
        _sym("ComfyUI/latest", "comfy/__init__.py"),
        _hard("ComfyUI/copy.py", "ComfyUI/main.py"),
    ])
    work = tmp_path / "work"
    work.mkdir()
    source.unpack(archive, work / "ComfyUI")
    tree = work / "ComfyUI"
    assert (tree / "main.py").read_text() == "print('comfy')\n" and (tree / "copy.py").read_text() == "print('comfy')\n"
    assert os.readlink(tree / "latest") == "comfy/__init__.py" and (tree / "latest").read_text() == "x"
    assert os.access(tree / "run.sh", os.X_OK)


def test_the_source_step_refuses_an_evil_archive_and_leaves_no_folder(tmp_path, monkeypatch):
    from comfy_setup_support import ctx

    monkeypatch.delattr(tarfile, "data_filter", raising=False)
    archive = _tar(tmp_path / "ComfyUI.tar.gz", ["../evil.txt"])
    place = tmp_path / "place"
    place.mkdir()
    with pytest.raises(BadInput):
        source.fetch_source(ctx(), str(archive), place / "ComfyUI", 60)
    assert not (tmp_path / "evil.txt").exists() and list(place.iterdir()) == []


def test_a_zip_with_dot_dot_names_stays_inside(tmp_path):
    """zipfile drops absolute and '..' parts itself and makes no links: the member lands inside."""
    import zipfile

    archive = tmp_path / "evil.zip"
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr("ComfyUI/main.py", "print('comfy')\n")
        z.writestr("ComfyUI/../../evil.txt", "x")
    work = tmp_path / "work"
    work.mkdir()
    source.unpack(archive, work / "ComfyUI")
    assert not (tmp_path / "evil.txt").exists() and not (work / "evil.txt").exists()
    assert (work / "ComfyUI" / "main.py").is_file() and (work / "ComfyUI" / "evil.txt").is_file()
