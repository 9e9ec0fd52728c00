"""The Journal (h3kit.comfyui.journal) on its own: each operation names what it makes in the saved record before
it acts, a real SIGKILL at any of its file operations converges (settle, then the same run again gives the
clean run's tree and record), and nothing that is not h3kit's is overwritten."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from h3kit.comfyui import manifest as mf
from h3kit.comfyui.journal import Journal
from h3kit.core import files
from h3kit.core.errors import BadInput
from h3kit.core.files import sha256_bytes

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="SIGKILL")

OLD = {"a.txt": b"old a", "sub/b.txt": b"old b"}
NEW = {"a.txt": b"new a", "sub/b.txt": b"new b", "more/deep/c.txt": b"new c"}

# One run of an operation the way h3kit's callers run it: settle what a crash left, do the operation (what a
# rerun finds already done is not done again), save. argv: operation, folder.
CHILD = r"""
import sys
from pathlib import Path
from h3kit.comfyui import manifest as mf
from h3kit.comfyui.journal import Journal
from h3kit.core import files
OLD = %r
NEW = %r
op, root = sys.argv[1], Path(sys.argv[2])
tree, store = root / "tree", root / "record.json"
record = mf.load(store) if store.exists() else mf.Manifest(str(tree), path=store)
j = Journal(record)
j.settle()

def stage(folder, contents):
    if folder.exists():
        j.remove(folder)  # a crashed run's staged copy goes whole
    j.mkdir(folder, "staging")
    for rel, data in contents.items():
        files.make_dirs((folder / rel).parent)
        files.write_new(folder / rel, data)

if op == "write":
    j.write(tree / "a.txt", b"new a", "t")
elif op == "mkdirs":
    j.mkdirs([tree / "x", tree / "x" / "y", tree / "x" / "y" / "z"], "t")
elif op == "rename":
    if not (tree / "dst").is_dir():
        stage(tree / "stage", NEW)
        j.rename(tree / "stage", tree / "dst", NEW, "t")
elif op == "replace":
    stage(tree / "stage", NEW)
    j.replace(tree / "stage", tree / "dst", NEW, "t")
    j.save()
    j.remove(tree / "stage")
elif op == "remove":
    j.remove(tree / "dst" / "a.txt")
    j.remove(tree / "dst")
elif op == "back_up":
    if record.find(tree / "mine.txt") is None and (tree / "mine.txt").exists():
        j.back_up(tree / "mine.txt", tree, root / "backups")
    j.write(tree / "mine.txt", b"h3kit's", "t")
j.save()
""" % (OLD, NEW)

OPS = ("write", "mkdirs", "rename", "replace", "remove", "back_up")


def setup(root: Path, op: str) -> None:
    """The state before the operation: h3kit's earlier files (written through the Journal) or the user's."""
    tree = root / "tree"
    tree.mkdir(parents=True)
    j = Journal(mf.Manifest(str(tree), path=root / "record.json"))
    if op == "write":
        j.write(tree / "a.txt", b"old a", "t")
    elif op in ("replace", "remove"):
        j.mkdir(tree / "dst", "t")
        j.mkdirs([tree / "dst" / "sub"], "t")
        for rel, data in OLD.items():
            j.write(tree / "dst" / rel, data, "t")
    elif op == "back_up":
        (tree / "mine.txt").write_bytes(b"the user's")
    j.save()


def run(root: Path, op: str, kill: int | None = None, log: Path | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("H3KIT_TEST_")}
    if kill:
        env["H3KIT_TEST_KILL_AT"] = str(kill)
    if log:
        env["H3KIT_TEST_FILEOPS"] = str(log)
    return subprocess.run([sys.executable, "-c", CHILD, op, str(root)], env=env, capture_output=True, text=True,
                          timeout=120)


def state(root: Path) -> dict:
    """The tree (file -> content, folder -> None) and the record's entries (without times)."""
    tree = {p.relative_to(root).as_posix(): (None if p.is_dir() else p.read_bytes().decode())
            for p in sorted(root.rglob("*")) if not p.name.startswith(("record.json", ".record.json-"))}
    # (a kill mid-save leaves the record's random temporary file in h3kit's state folder, never in the tree)
    tree = {k.split("/", 3)[-1] if k.startswith("backups/") else k: v for k, v in tree.items()}  # (times in names)
    store = root / "record.json"
    entries = [] if not store.exists() else [
        (Path(e["path"]).relative_to(root).as_posix().split("/", 3)[-1] if "/backups/" in e["path"]
         else Path(e["path"]).relative_to(root).as_posix(), e["kind"], e["sha256"], e["role"], e.get("pending", False))
        for e in json.loads(store.read_text())["entries"]]
    return {"tree": tree, "entries": sorted(entries)}


@pytest.mark.slow
@pytest.mark.parametrize("op", OPS)
def test_a_kill_at_any_step_settles_and_a_rerun_converges(tmp_path, op):
    clean = tmp_path / "clean"
    setup(clean, op)
    log = tmp_path / "ops.log"
    done = run(clean, op, log=log)
    assert done.returncode == 0, done.stderr
    want = state(clean)
    assert not [e for e in want["entries"] if e[4]]
    assert want["entries"] if op != "remove" else want == {"tree": {"tree": None}, "entries": []}
    count = len(log.read_text().splitlines())
    assert count >= 3  # at least: the record saved (write, replace), then the act
    for n in range(1, count + 1):
        root = tmp_path / f"kill{n}"
        setup(root, op)
        before = set((root / "tree").rglob("*"))
        killed = run(root, op, kill=n)
        assert killed.returncode == -signal.SIGKILL, (op, n, killed.stderr[-800:])
        # What the kill left: once settled, nothing is called "not ours", every entry is final and what it
        # names is as h3kit made it (or gone: a removal the record learns of at its next save), and everything
        # new in the tree is named in the record (or lies in a folder it names).
        record = mf.load(root / "record.json")
        assert "not ours" not in {f["outcome"] for f in Journal(record).settle()}, (op, n)
        assert all(not e.pending and (record.still_ours(e) or not os.path.lexists(e.path))
                   for e in record.entries), (op, n)
        named = {Path(e.path) for e in record.entries}
        for p in set((root / "tree").rglob("*")) - before:
            assert p in named or any(q in named for q in p.parents), (op, n, p)
        again = run(root, op)
        assert again.returncode == 0, (op, n, again.stderr[-800:])
        assert state(root) == want, (op, n)


@pytest.mark.parametrize("op", OPS)
def test_the_saved_record_names_each_path_before_the_act(tmp_path, monkeypatch, op):
    """At every file operation that makes or removes something in the tree, the record on disk already names
    the path (or a folder above it). (A backup's move is named by where it goes, outside the tree.)"""
    setup(tmp_path, op)
    real, seen = files.checkpoint, []
    tree = tmp_path / "tree"

    def check(what: str, path) -> None:
        p = Path(path)
        if tree in p.parents and what in ("mkdir", "mkdirs", "write", "rename", "replace", "unlink", "rmtree"):
            doc = json.loads((tmp_path / "record.json").read_text())
            named = {Path(e["path"]) for e in doc["entries"]}
            assert p in named or any(q in named for q in p.parents), (what, p)
            seen.append(what)
        real(what, path)

    monkeypatch.setattr(files, "checkpoint", check)
    monkeypatch.setattr(sys, "argv", ["child", op, str(tmp_path)])
    exec(compile(CHILD, "child", "exec"), {"__name__": "child"})
    assert seen, op


def test_write_refuses_a_file_that_is_not_h3kits(tmp_path):
    j = Journal(mf.Manifest(str(tmp_path), path=tmp_path / "record.json"))
    theirs = tmp_path / "theirs.txt"
    theirs.write_bytes(b"the user's")
    with pytest.raises(BadInput, match="was not written by h3kit"):
        j.write(theirs, b"h3kit's", "t")
    assert theirs.read_bytes() == b"the user's" and not (tmp_path / "record.json").exists()
    j.write(tmp_path / "ours.txt", b"one", "t")
    (tmp_path / "ours.txt").write_bytes(b"edited")  # ours once, changed since: the user's now
    with pytest.raises(BadInput):
        j.write(tmp_path / "ours.txt", b"two", "t")
    assert (tmp_path / "ours.txt").read_bytes() == b"edited"
    os.symlink(theirs, tmp_path / "link")
    with pytest.raises(BadInput):
        j.write(tmp_path / "link", b"x", "t")
    assert theirs.read_bytes() == b"the user's"


def test_replace_rename_mkdir_and_remove_leave_what_is_not_h3kits(tmp_path):
    j = Journal(mf.Manifest(str(tmp_path), path=tmp_path / "record.json"))
    dst = tmp_path / "dst"
    j.mkdir(dst, "t")
    j.write(dst / "a.txt", b"old a", "t")
    (dst / "a.txt").write_bytes(b"edited")
    (tmp_path / "stage").mkdir()
    (tmp_path / "stage" / "a.txt").write_bytes(b"new a")
    with pytest.raises(BadInput):
        j.replace(tmp_path / "stage", dst, {"a.txt": b"new a"}, "t")
    assert (dst / "a.txt").read_bytes() == b"edited" and (tmp_path / "stage" / "a.txt").exists()
    assert not j.record.pending()  # refused before anything was named
    (tmp_path / "theirs").mkdir()
    with pytest.raises(BadInput):
        j.rename(tmp_path / "stage", tmp_path / "theirs", {"a.txt": b"new a"}, "t")
    with pytest.raises(FileExistsError):
        j.mkdir(tmp_path / "theirs", "t")
    assert j.record.find(tmp_path / "theirs") is None and (tmp_path / "stage" / "a.txt").exists()
    assert j.remove(dst / "a.txt") is False and (dst / "a.txt").read_bytes() == b"edited"
    assert j.record.find(dst / "a.txt") is None  # no longer h3kit's to remove, and said so once
    assert j.remove(tmp_path / "theirs") is False and (tmp_path / "theirs").is_dir()


def test_a_file_named_by_a_run_that_stopped_is_rewritten_as_h3kits(tmp_path):
    """Pending with the hash that run meant to write: h3kit's (no settle needed first); other content: refused."""
    j = Journal(mf.Manifest(str(tmp_path), path=tmp_path / "record.json"))
    f = tmp_path / "f.txt"
    j.intend_file(f, sha256_bytes(b"meant"), 5, "t")
    f.write_bytes(b"meant")
    j.write(f, b"again", "t")
    assert f.read_bytes() == b"again" and j.record.still_ours(j.record.find(f))
    j.intend_file(f, sha256_bytes(b"meant"), 5, "t")
    f.write_bytes(b"someone else")
    with pytest.raises(BadInput):
        j.write(f, b"x", "t")


def test_a_weights_hash_measured_on_arrival_is_kept_by_confirm(tmp_path):
    j = Journal(mf.Manifest(str(tmp_path), path=tmp_path / "record.json"))
    w = tmp_path / "w.safetensors"
    entry = j.intend_file(w, None, 4, "model", fetch={"part": str(w) + ".part"})
    j.save()
    assert json.loads((tmp_path / "record.json").read_text())["entries"][0]["fetch"] == {"part": str(w) + ".part"}
    w.write_bytes(b"abcd")
    j.confirm(w, sha256_bytes(b"abcd"), 4)
    j.save()
    [doc] = json.loads((tmp_path / "record.json").read_text())["entries"]
    assert entry.sha256 == sha256_bytes(b"abcd") and set(doc) == {"path", "kind", "sha256", "bytes", "role", "created"}
