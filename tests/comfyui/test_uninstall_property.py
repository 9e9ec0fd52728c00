"""Property (issue 16): uninstall never deletes, moves or changes anything outside what h3kit installed.

Over trees made by a seeded random generator: after an install, each tree
gets a few of the things users do (MUTATIONS): symlinks in the pack to files
and folders inside and outside it, hard links between installed files and
files outside, pack folders (or the pack itself, or custom_nodes/) replaced
by links to copies elsewhere, folders replaced by files, edited files, added
files. Everything except the pack folder, the launcher and h3kit's home is
snapshotted before and after `h3kit uninstall` (each entry's inode, kind and
mode; a file's content hash and mtime; a link's target) and must be
unchanged. A folder's mtime is left out: removing h3kit's own entries from
custom_nodes/ rightly updates it. The seed is in each failure message; set
H3KIT_PROPERTY_SEEDS to run more.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import stat
from pathlib import Path

import pytest

from fixtures.comfyui import comfy_tree
from h3kit.cli.context import Context
from h3kit.comfyui import deploy
from h3kit.comfyui.locate import find
from h3kit.data.plan_doc import PlanSettings

FIXTURES = Path(__file__).parents[1] / "fixtures" / "comfyui"

SEEDS = int(os.environ.get("H3KIT_PROPERTY_SEEDS", "24"))
SETTINGS = {"vae_tile_size": 256, "vae_tile_overlap": 64, "vae_temporal_tile": 32, "max_frames": 73,
            "comfyui_args": ["--lowvram"], "env": {}}


def world_snapshot(world: Path, leave_out: list[Path]) -> dict:
    """Every entry under `world` not under `leave_out`, links not followed (see the module docstring)."""
    out = {}
    skip = {str(p) for p in leave_out}
    for dirpath, dirnames, filenames in os.walk(world):
        dirnames[:] = [d for d in dirnames if str(Path(dirpath) / d) not in skip]
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            if str(p) in skip:
                continue
            st = p.lstat()
            if stat.S_ISLNK(st.st_mode):
                out[str(p)] = ("link", st.st_ino, os.readlink(p))
            elif stat.S_ISDIR(st.st_mode):
                out[str(p)] = ("dir", st.st_ino, stat.S_IMODE(st.st_mode))
            else:
                out[str(p)] = ("file", st.st_ino, stat.S_IMODE(st.st_mode), st.st_mtime_ns,
                               hashlib.sha256(p.read_bytes()).hexdigest())
    return out


# -- what users do to an installed pack (each: rng, pack, comfy, outside) -----------------------------------


def _files(pack: Path, rng: random.Random) -> Path:
    return rng.choice(sorted(p for p in pack.rglob("*") if p.is_file() and not p.is_symlink()))


def _dirs(pack: Path, rng: random.Random) -> Path | None:
    found = sorted(p for p in pack.rglob("*") if p.is_dir() and not p.is_symlink())
    return rng.choice(found) if found else None


def link_to_outside_file(rng, pack, comfy, outside):
    target = outside / f"precious-{rng.randrange(10**6)}.bin"
    target.write_bytes(os.urandom(64))
    os.symlink(target, pack / f"link-{rng.randrange(10**6)}")


def link_to_outside_folder(rng, pack, comfy, outside):
    os.symlink(outside, (_dirs(pack, rng) or pack) / f"to-outside-{rng.randrange(10**6)}")


def link_inside_the_pack(rng, pack, comfy, outside):
    os.symlink(_files(pack, rng), pack / f"inner-link-{rng.randrange(10**6)}")


def link_into_comfyui(rng, pack, comfy, outside):
    os.symlink(comfy / "models", pack / f"models-link-{rng.randrange(10**6)}", target_is_directory=True)


def file_replaced_by_link_to_a_copy_outside(rng, pack, comfy, outside):
    victim = _files(pack, rng)
    copy = outside / f"copy-of-{victim.name}-{rng.randrange(10**6)}"
    shutil.copy2(victim, copy)  # same bytes: the hash matches the record
    victim.unlink()
    os.symlink(copy, victim)


def outside_hard_link_to_an_installed_file(rng, pack, comfy, outside):
    os.link(_files(pack, rng), outside / f"hard-{rng.randrange(10**6)}")


def installed_file_replaced_by_a_hard_link_from_outside(rng, pack, comfy, outside):
    victim = _files(pack, rng)
    mine = outside / f"mine-{victim.name}-{rng.randrange(10**6)}"
    shutil.copy2(victim, mine)
    victim.unlink()
    os.link(mine, victim)


def folder_replaced_by_a_link_to_a_copy(rng, pack, comfy, outside):
    folder = _dirs(pack, rng)
    if folder is None:
        return
    copy = outside / f"checkout-{folder.name}-{rng.randrange(10**6)}"
    shutil.copytree(folder, copy, symlinks=True)
    shutil.rmtree(folder)
    os.symlink(copy, folder, target_is_directory=True)


def pack_replaced_by_a_link_to_a_checkout(rng, pack, comfy, outside):
    copy = outside / f"dev-checkout-{rng.randrange(10**6)}"
    shutil.copytree(pack, copy, symlinks=True)
    shutil.rmtree(pack)
    os.symlink(copy, pack, target_is_directory=True)


def custom_nodes_moved_and_linked(rng, pack, comfy, outside):
    moved = outside / f"custom_nodes-{rng.randrange(10**6)}"
    shutil.move(str(comfy / "custom_nodes"), moved)
    os.symlink(moved, comfy / "custom_nodes", target_is_directory=True)


def folder_replaced_by_a_file(rng, pack, comfy, outside):
    folder = _dirs(pack, rng)
    if folder is None:
        return
    shutil.rmtree(folder)
    folder.write_text("a file where h3kit's folder was\n")


def file_edited(rng, pack, comfy, outside):
    victim = _files(pack, rng)
    victim.write_bytes(victim.read_bytes() + b"\n# edited by the user\n")


def files_added(rng, pack, comfy, outside):
    where = _dirs(pack, rng) or pack
    (where / f"notes-{rng.randrange(10**6)}.txt").write_text("mine")
    (where / "my folder" / "deep").mkdir(parents=True, exist_ok=True)
    (where / "my folder" / "deep" / "x.json").write_text("{}")


def launcher_replaced_by_a_link(rng, pack, comfy, outside):
    launcher = comfy / "run_h3kit.sh"
    if launcher.exists():
        keep = outside / f"my-launcher-{rng.randrange(10**6)}.sh"
        shutil.copy2(launcher, keep)
        launcher.unlink()
        os.symlink(keep, launcher)


def a_link_loop(rng, pack, comfy, outside):
    a, b = pack / f"loop-a-{rng.randrange(10**6)}", pack / f"loop-b-{rng.randrange(10**6)}"
    os.symlink(b, a)
    os.symlink(a, b)


MUTATIONS = [link_to_outside_file, link_to_outside_folder, link_inside_the_pack, link_into_comfyui,
             file_replaced_by_link_to_a_copy_outside, outside_hard_link_to_an_installed_file,
             installed_file_replaced_by_a_hard_link_from_outside, folder_replaced_by_a_link_to_a_copy,
             pack_replaced_by_a_link_to_a_checkout, custom_nodes_moved_and_linked, folder_replaced_by_a_file,
             file_edited, files_added, launcher_replaced_by_a_link, a_link_loop]
LAST = {pack_replaced_by_a_link_to_a_checkout, custom_nodes_moved_and_linked}  # after these the pack is elsewhere


def _outside_tree(outside: Path, rng: random.Random) -> None:
    (outside / "projects" / "renders").mkdir(parents=True)
    for i in range(rng.randrange(2, 6)):
        (outside / "projects" / f"file{i}.txt").write_bytes(os.urandom(rng.randrange(1, 200)))
    (outside / "projects" / "renders" / "clip.mp4").write_bytes(b"\x00mp4" * 16)


def test_uninstall_never_touches_anything_outside_what_it_installed(tmp_path, run_cli, h3kit_home):
    state, cache = Path(h3kit_home) / "state", Path(h3kit_home) / "cache"
    seen: dict[str, int] = {}
    for seed in range(SEEDS):
        rng = random.Random(seed)
        world = tmp_path / f"world-{seed}"
        outside = world / "outside ü"
        _outside_tree(outside, rng)
        comfy = comfy_tree.make_comfyui(world / "ComfyUI")
        inst = find(str(comfy), None, Context(yes=True))
        deploy.deploy(inst, settings=PlanSettings.from_json(SETTINGS), profile="cpu-only", library=None, state_dir=state, cache_dir=cache)
        pack = inst.node_dir
        chosen = rng.sample([m for m in MUTATIONS if m not in LAST], rng.randrange(1, 5))
        if rng.random() < 0.3:
            chosen.append(rng.choice(sorted(LAST, key=lambda m: m.__name__)))
        for mutate in chosen:
            mutate(rng, pack, comfy, outside)
            seen[mutate.__name__] = seen.get(mutate.__name__, 0) + 1
        leave_out = [pack, comfy / "run_h3kit.sh", Path(h3kit_home)]
        before = world_snapshot(world, leave_out)
        code, out, err = run_cli("uninstall", "--comfyui", str(comfy), "--yes", "--json")
        names = [m.__name__ for m in chosen]
        assert code in (0, 4) and "Traceback" not in err, (seed, names, code, err[-800:])
        after = world_snapshot(world, leave_out)
        changed = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
        assert not changed, (seed, names, changed[:5], [(before.get(k), after.get(k)) for k in changed[:2]])
        doc = json.loads(out)
        if code == 4:
            assert doc["behind_links"], (seed, names)
    if SEEDS >= 24:
        assert set(seen) == {m.__name__ for m in MUTATIONS}, sorted(set(m.__name__ for m in MUTATIONS) - set(seen))


@pytest.mark.parametrize("mutate", MUTATIONS, ids=lambda m: m.__name__)
def test_each_mutation_alone(tmp_path, run_cli, h3kit_home, mutate):
    """Each thing users do, on its own (the random test combines them)."""
    rng = random.Random(mutate.__name__)
    world = tmp_path / "world"
    outside = world / "outside"
    _outside_tree(outside, rng)
    comfy = comfy_tree.make_comfyui(world / "ComfyUI")
    inst = find(str(comfy), None, Context(yes=True))
    deploy.deploy(inst, settings=PlanSettings.from_json(SETTINGS), profile="cpu-only", library=None,
                  state_dir=Path(h3kit_home) / "state", cache_dir=Path(h3kit_home) / "cache")
    mutate(rng, inst.node_dir, comfy, outside)
    leave_out = [inst.node_dir, comfy / "run_h3kit.sh", Path(h3kit_home)]
    before = world_snapshot(world, leave_out)
    code, out, err = run_cli("uninstall", "--comfyui", str(comfy), "--yes", "--json")
    assert code in (0, 4) and "Traceback" not in err, err
    assert world_snapshot(world, leave_out) == before
