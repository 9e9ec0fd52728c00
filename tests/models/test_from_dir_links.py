"""Issue 35 A: `h3kit models fetch --from DIR` where DIR holds links, as a Hugging Face cache does.

A Hugging Face cache keeps each file once under `models--Org--Name/blobs/<sha256>` and names it from
`snapshots/<rev>/<path in the repo>` through a relative link (`../../../blobs/<sha256>`). The weight
that lands in ComfyUI must be the file itself (a hard link of the blob, or a copy), never the link:
a relative link hard-linked into ComfyUI's models folder points nowhere there. A link that leads
nowhere in DIR is one sentence naming it; a dangling link an older h3kit left at the destination is
repaired on the next run, a user's own one is left alone.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from h3kit import models
from h3kit.comfyui.journal import Journal
from h3kit.comfyui.manifest import load_or_new
from h3kit.cli.context import Context
from h3kit.core.errors import BadInput
from h3kit.models.local import find_local, place_from_local

from test_models import FP_4090, _json, _plan, comfy, server, small  # noqa: F401 (fixtures)

REV = "8d3c1f0e2b7a4c5d6e9f00112233445566778899"


def hf_cache(hub: Path, payloads: dict, files, *, absolute: bool = False, skip_blobs: frozenset = frozenset()) -> dict:
    """The plan's files in a Hugging Face hub cache under `hub`, each named by its URL's repo and path;
    name -> (snapshot link, blob)."""
    out = {}
    for f in files:
        parts = urlsplit(f.urls[0]).path.strip("/").split("/")  # Org/Name/resolve/main/<path in repo>
        repo = hub / f"models--{parts[0]}--{parts[1]}"
        data = payloads[f.weight_id]
        blob = repo / "blobs" / hashlib.sha256(data).hexdigest()
        blob.parent.mkdir(parents=True, exist_ok=True)
        if f.name not in skip_blobs:
            blob.write_bytes(data)
        (repo / "refs").mkdir(exist_ok=True)
        (repo / "refs" / "main").write_text(REV)
        link = repo / "snapshots" / REV / Path(*parts[4:])
        link.parent.mkdir(parents=True, exist_ok=True)
        os.symlink(blob if absolute else os.path.relpath(blob, link.parent), link)
        out[f.name] = (link, blob)
    return out


def _fetch(run_cli, comfy, src):
    return _json(run_cli, "models", "fetch", "--fingerprint", str(FP_4090), "--comfyui", str(comfy), "--from", str(src))


@pytest.mark.parametrize("absolute", [False, True], ids=["relative-links", "absolute-links"])
def test_a_hugging_face_cache_gives_real_files_not_links(run_cli, server, small, comfy, tmp_path, absolute):
    files = models.files_for_plan(_plan())
    cache = hf_cache(tmp_path / "hf" / "hub", small, files, absolute=absolute)
    code, doc, err = _fetch(run_cli, comfy, tmp_path / "hf" / "hub")
    assert code == 0, err
    assert server.requests == []
    for f in files:
        dest = f.dest(comfy)
        assert not dest.is_symlink() and dest.is_file() and dest.read_bytes() == small[f.weight_id]
        assert os.path.samefile(dest, cache[f.name][1])  # the blob hard-linked, not the link
    code, st, _ = _json(run_cli, "models", "status", "--fingerprint", str(FP_4090), "--comfyui", str(comfy))
    assert code == 0 and {r["state"] for r in st["files"]} == {"present"} and all(r["by_h3kit"] for r in st["files"])
    code, gone, _ = _json(run_cli, "models", "remove", "--comfyui", str(comfy))
    assert code == 0 and len(gone["removed"]) == len(files) and not gone["kept"]
    for link, blob in cache.values():  # the cache is the user's: untouched
        assert link.is_symlink() and link.is_file() and blob.is_file()


def test_copied_across_disks_the_target_is_copied_not_the_link(small, tmp_path):
    f = models.files_for_plan(_plan())[0]
    cache = hf_cache(tmp_path / "hub", small, [f])
    want = f.want(tmp_path / "ComfyUI")
    got = place_from_local(want, cache[f.name][0], link=False, progress=False)
    assert got.method == "copy" and not want.dest.is_symlink() and want.dest.read_bytes() == small[f.weight_id]


def test_a_link_that_leads_nowhere_is_one_sentence_naming_it(run_cli, small, comfy, tmp_path):
    """The snapshots folder copied to a USB stick without its blobs: every link there dangles."""
    files = models.files_for_plan(_plan())
    cache = hf_cache(tmp_path / "hub", small, files, skip_blobs=frozenset(f.name for f in files))
    code, doc, err = _fetch(run_cli, comfy, tmp_path / "hub")
    assert code == 2, err
    link = cache[files[0].name][0]
    assert str(link) in doc["error"] and "does not exist" in doc["error"] and "internal error" not in err
    assert "Traceback" not in err and doc["fix"]
    for f in files:
        assert not os.path.lexists(f.dest(comfy))


def test_a_dangling_link_is_passed_over_for_a_real_copy_elsewhere(small, tmp_path):
    f = models.files_for_plan(_plan())[0]
    usb = tmp_path / "usb"
    (usb / f.folder).mkdir(parents=True)
    os.symlink("gone/" + f.name, usb / f.folder / f.name)
    (usb / "backup").mkdir()
    (usb / "backup" / f.name).write_bytes(small[f.weight_id])
    assert find_local(usb, f.name, f.folder) == usb / "backup" / f.name


def test_the_search_passes_over_odd_entries_and_link_loops(tmp_path):
    usb = tmp_path / "usb"
    (usb / "a" / "x.bin").mkdir(parents=True)  # a folder of that name
    (usb / "b").mkdir()
    os.mkfifo(usb / "b" / "x.bin")  # a pipe: never opened
    os.symlink("..", usb / "b" / "loop")  # walked into, this would never end
    os.symlink("/dev/zero", usb / "b" / "zero")
    (usb / "c").mkdir()
    os.symlink("/dev/zero", usb / "c" / "x.bin")  # a link to a device is not a model file
    assert find_local(usb, "x.bin") is None
    (usb / "d").mkdir()
    (usb / "d" / "x.bin").write_bytes(b"w")
    assert find_local(usb, "x.bin") == usb / "d" / "x.bin"


def test_the_named_source_is_checked_again_where_it_is_placed(small, tmp_path):
    f = models.files_for_plan(_plan())[0]
    dangling = tmp_path / f.name
    os.symlink("nowhere", dangling)
    with pytest.raises(BadInput) as exc:
        place_from_local(f.want(tmp_path / "ComfyUI"), dangling, progress=False)
    assert str(dangling) in exc.value.message and "does not exist" in exc.value.message


def _old_broken_state(comfy: Path, f, *, pending: bool) -> Path:
    """What an older h3kit left: the weight named in the record, and at its place the hard-linked relative link."""
    ctx = Context()
    man = load_or_new(ctx.locations.state_dir, comfy)
    journal = Journal(man)
    want = f.want(comfy)
    journal.intend_file(want.dest, None, want.bytes, "model", fetch={"part": str(want.part)})
    if not pending:
        journal.confirm(want.dest, "0" * 64, want.bytes)
    man.save()
    os.symlink("../../../blobs/" + "ab" * 32, want.dest)
    return want.dest


def test_a_rerun_repairs_the_dangling_link_an_older_h3kit_left(run_cli, small, comfy, tmp_path):
    """The record named the weight (pending) and the old fetch stopped right after putting the link there."""
    files = models.files_for_plan(_plan())
    hf_cache(tmp_path / "hub", small, files)
    broken = _old_broken_state(comfy, files[0], pending=True)
    code, doc, err = _fetch(run_cli, comfy, tmp_path / "hub")
    assert code == 0, err
    assert not broken.is_symlink() and broken.read_bytes() == small[files[0].weight_id]
    code, again, err = _fetch(run_cli, comfy, tmp_path / "hub")
    assert code == 0 and again["downloaded_bytes"] == 0


def test_a_link_where_a_confirmed_weight_was_is_not_h3kits(run_cli, small, comfy, tmp_path):
    """Confirmed, the weight was a file; a link there now was put by someone (the file moved to a drive that
    is not plugged in): named, and left as it is."""
    files = models.files_for_plan(_plan())
    hf_cache(tmp_path / "hub", small, files)
    broken = _old_broken_state(comfy, files[0], pending=False)
    code, doc, err = _fetch(run_cli, comfy, tmp_path / "hub")
    assert code == 2 and str(broken) in doc["error"] and "Traceback" not in err
    assert broken.is_symlink() and not broken.exists()


def test_a_users_own_dangling_link_at_the_destination_is_left_alone(run_cli, small, comfy, tmp_path):
    files = models.files_for_plan(_plan())
    hf_cache(tmp_path / "hub", small, files)
    theirs = files[0].dest(comfy)
    os.symlink("/mnt/unplugged/" + files[0].name, theirs)
    code, doc, err = _fetch(run_cli, comfy, tmp_path / "hub")
    assert code == 2 and str(theirs) in doc["error"] and "Traceback" not in err
    assert os.readlink(theirs) == "/mnt/unplugged/" + files[0].name


def test_a_cache_with_two_revisions_gives_the_one_main_names(small, tmp_path):
    """A cache keeps every revision it fetched; the file comes from the snapshot refs/main names, whatever
    the order of the revision hashes."""
    f = models.files_for_plan(_plan())[0]
    cache = hf_cache(tmp_path / "hub", small, [f])
    link, _blob = cache[f.name]
    snapshots = next(p for p in link.parents if p.name == "snapshots")
    older = snapshots / ("0" * 40) / link.relative_to(snapshots / REV)  # sorts before REV
    older.parent.mkdir(parents=True)
    older.write_bytes(b"an older revision")
    assert find_local(tmp_path / "hub", f.name) == link
