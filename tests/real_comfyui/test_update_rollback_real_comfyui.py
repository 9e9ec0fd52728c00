"""Update and rollback of a real ComfyUI (opt-in: H3KIT_COMFYUI_DIR, a git checkout with the release tags).

The ComfyUI under test is a clone of H3KIT_COMFYUI_DIR's repository (it must hold the tags v0.30.0 and
v0.33.0; scripts/make_comfyui_release_repo.sh makes such a repository from the public history) at
v0.30.0 on its own branch, with a hard-linked copy of that checkout's venv (pip replaces files, never
writes into them, so the original venv stays as it was) holding 0.30.0's own requirements. h3kit is
installed into it, then:

- `update --to 0.33.0` moves it to 0.33.0's commit, the self-test passes there and a working state is
  recorded; `rollback` returns it to 0.30.0's commit and branch with the same `pip freeze --all`, and a
  user's other pack, models, outputs and saved workflows are byte for byte as they were;
- `update` to where it already is says so and changes nothing;
- a user's own `git checkout` of another release is named by `doctor`, with the rollback command;
- a release whose tree renames `comfy.utils.calculate_parameters` (which the pack calls) is refused
  before anything moves, naming the function and where the pack uses it; with --force the self-test
  fails there and h3kit goes back by itself, exit 4;
- a kill at every journaled point of an update and of a rollback: the next `rollback` finishes it.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

COMFY = os.environ.get("H3KIT_COMFYUI_DIR")
pytestmark = [pytest.mark.native, pytest.mark.comfyui, pytest.mark.slow,
              pytest.mark.skipif(not COMFY, reason="set H3KIT_COMFYUI_DIR to a real ComfyUI checkout to run")]

KEEP_TORCH = "torch=={t}\ntorchvision=={v}\ntorchaudio=={a}\n"
USER_FILES = {"custom_nodes/MyPack/__init__.py": "NODE_CLASS_MAPPINGS = {}\n",
              "models/loras/mine.safetensors": "not really a LoRA\n",
              "output/render.png": "\x89PNG the user's render",
              "user/default/workflows/mine.json": '{"nodes": []}\n'}


def git(*args, cwd) -> str:
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@example.invalid", *args], cwd=cwd,
                          check=True, capture_output=True, text=True, timeout=300).stdout.strip()


def freeze(comfy: Path) -> str:
    return subprocess.run([str(comfy / "venv" / "bin" / "python"), "-m", "pip", "freeze", "--all"],
                          check=True, capture_output=True, text=True, timeout=300).stdout


def digest(comfy: Path) -> str:
    h = hashlib.sha256()
    for rel in sorted(USER_FILES):
        h.update(rel.encode() + b"\0" + (comfy / rel).read_bytes())
    return h.hexdigest()


def h3kit(env: dict, *argv: str, timeout: float = 900) -> tuple[int, dict, str]:
    p = subprocess.run([sys.executable, "-m", "h3kit", *argv, "--json"], capture_output=True, text=True,
                       timeout=timeout, env=env)
    try:
        doc = json.loads(p.stdout or "{}")
    except ValueError:
        doc = {"stdout": p.stdout}
    return p.returncode, doc, p.stderr


def _torch_pins(python: Path) -> str:
    out = subprocess.run([str(python), "-c", "from importlib import metadata as m; print(' '.join(m.version(n) for n "
                          "in ('torch', 'torchvision', 'torchaudio')))"], capture_output=True, text=True,
                         check=True, timeout=120).stdout.split()
    return KEEP_TORCH.format(t=out[0], v=out[1], a=out[2])


def _renamed_release(comfy: Path) -> None:
    """v0.33.1 (made here): v0.33.0 with comfy.utils.calculate_parameters renamed everywhere in ComfyUI."""
    git("checkout", "-q", "-b", "renamed", "v0.33.0", cwd=comfy)
    for path in list((comfy / "comfy").rglob("*.py")) + [comfy / "nodes.py"]:
        text = path.read_text(encoding="utf-8")
        if "calculate_parameters" in text:
            path.write_text(text.replace("calculate_parameters", "count_parameters"), encoding="utf-8")
    git("commit", "-q", "-am", "rename calculate_parameters", cwd=comfy)
    git("tag", "v0.33.1", cwd=comfy)


@pytest.fixture(scope="module")
def at_030(tmp_path_factory):
    base = Path(COMFY)
    tags = set(git("tag", "--list", cwd=base).split())
    if not {"v0.30.0", "v0.33.0"} <= tags:
        pytest.skip(f"{base} has no tags v0.30.0 and v0.33.0 (scripts/make_comfyui_release_repo.sh makes them)")
    root = tmp_path_factory.mktemp("update")
    comfy = root / "ComfyUI"
    git("clone", "-q", str(base), str(comfy), cwd=root)
    _renamed_release(comfy)
    git("checkout", "-q", "-B", "mine", "v0.30.0", cwd=comfy)
    subprocess.run(["cp", "-al", str(base / "venv"), str(comfy / "venv")], check=True, timeout=600)
    pins = root / "keep-torch.txt"
    pins.write_text(_torch_pins(comfy / "venv" / "bin" / "python"))
    subprocess.run([str(comfy / "venv" / "bin" / "python"), "-m", "pip", "install", "-q", "-c", str(pins), "-r",
                    str(comfy / "requirements.txt")], check=True, capture_output=True, timeout=900)
    for rel, text in USER_FILES.items():
        (comfy / rel).parent.mkdir(parents=True, exist_ok=True)
        (comfy / rel).write_text(text, encoding="utf-8")
    env = {**os.environ, "H3KIT_HOME": str(root / "home")}
    code, doc, err = h3kit(env, "install", "--comfyui", str(comfy), "--yes", "--skip-calibrate", "--no-models")
    assert code in (0, 3), err[-3000:]  # 3: the CPU plan is too slow to be useful, said and still installed
    return comfy, env


def test_update_then_rollback_restores_commit_branch_packages_and_leaves_user_files(at_030):
    comfy, env = at_030
    start_commit, start_freeze, start_user = git("rev-parse", "HEAD", cwd=comfy), freeze(comfy), digest(comfy)
    code, hist, err = h3kit(env, "history", "--comfyui", str(comfy))
    assert code == 0 and hist["states"][-1]["working"], (err[-2000:], hist)

    code, doc, err = h3kit(env, "update", "--comfyui", str(comfy), "--to", "0.33.0")
    assert code == 0, err[-3000:]
    assert git("rev-parse", "HEAD", cwd=comfy) == git("rev-parse", "v0.33.0^{commit}", cwd=comfy)
    assert doc["changed"] and doc["selftest"]["passed"] and doc["selftest"]["references_checked"] > 20
    assert "comfyui-frontend-package==1.47.11" not in freeze(comfy).lower().replace("_", "-")

    code, again, err = h3kit(env, "update", "--comfyui", str(comfy), "--to", "0.33.0")
    assert code == 0 and again["changed"] is False, err[-2000:]

    code, doc, err = h3kit(env, "rollback", "--comfyui", str(comfy))
    assert code == 0, err[-3000:]
    assert git("rev-parse", "HEAD", cwd=comfy) == start_commit
    assert git("rev-parse", "--abbrev-ref", "HEAD", cwd=comfy) == "mine"
    assert freeze(comfy) == start_freeze
    assert digest(comfy) == start_user


def test_doctor_names_a_users_own_checkout_and_the_rollback(at_030):
    comfy, env = at_030
    git("checkout", "-q", "v0.32.0", cwd=comfy)
    try:
        code, doc, err = h3kit(env, "doctor", "--comfyui", str(comfy))
        drift = next(f for f in doc["findings"] if f["check"] == "comfyui.drift")
        assert "0.30.0" in drift["message"] and "0.32.0" in drift["message"], drift
        assert "h3kit rollback" in drift["fix"], drift
    finally:
        git("checkout", "-q", "mine", cwd=comfy)


def test_a_renamed_comfy_function_is_refused_and_forced_goes_back_by_itself(at_030):
    comfy, env = at_030
    start, start_freeze = git("rev-parse", "HEAD", cwd=comfy), freeze(comfy)
    code, doc, err = h3kit(env, "update", "--comfyui", str(comfy), "--to", "0.33.1")
    assert code == 3, err[-2000:]
    assert "comfy.utils.calculate_parameters" in doc["error"] and "h3kit_streaming/load.py line" in doc["error"]
    assert git("rev-parse", "HEAD", cwd=comfy) == start and freeze(comfy) == start_freeze

    code, doc, err = h3kit(env, "update", "--comfyui", str(comfy), "--to", "0.33.1", "--force")
    assert code == 4, err[-3000:]
    assert "calculate_parameters" in doc["error"] and "went back" in doc["error"]
    assert git("rev-parse", "HEAD", cwd=comfy) == start and freeze(comfy) == start_freeze


def _points(env: dict, argv: list[str], log: Path) -> list[int]:
    """The journaled points of one run of `argv` (a counting run): every step mark and every history save's
    replace; with H3KIT_CRASH_ALL=1 every file operation."""
    log.unlink(missing_ok=True)
    code, _doc, err = h3kit({**env, "H3KIT_TEST_FILEOPS": str(log)}, *argv)
    assert code == 0, err[-2000:]
    rows = [line.split("\t") for line in log.read_text().splitlines()]
    if os.environ.get("H3KIT_CRASH_ALL") == "1":
        return [int(r[0]) for r in rows]
    return [int(r[0]) for r in rows if r[1] == "step" or (r[1] == "replace" and "history" in r[2])]


def _state_at(env: dict, comfy: Path, version: str) -> str:
    hist = h3kit(env, "history", "--comfyui", str(comfy))[1]
    return str(next(e["id"] for e in hist["states"] if e["working"] and e["state"]["version"] == version))


@pytest.mark.parametrize("command", ["update", "rollback"])
def test_a_kill_at_every_journaled_point_is_finished_by_the_next_rollback(at_030, tmp_path, command):
    comfy, env = at_030
    start = git("rev-parse", "HEAD", cwd=comfy)
    update = ["update", "--comfyui", str(comfy), "--to", "0.33.0"]
    if command == "rollback":  # a rollback needs somewhere to go back from
        assert h3kit(env, *update)[0] == 0
    back = ["rollback", _state_at(env, comfy, "0.30.0"), "--comfyui", str(comfy)]
    argv = update if command == "update" else back
    points = _points(env, argv, tmp_path / "ops.log")  # a counting run
    assert len(points) >= 4, points
    for point in points:
        if command == "update":
            assert h3kit(env, *back)[0] == 0
        else:
            assert h3kit(env, *update)[0] == 0
        code, _doc, _err = h3kit({**env, "H3KIT_TEST_KILL_AT": str(point)}, *argv)
        assert code != 0, f"point {point} did not kill"
        code, doc, err = h3kit(env, *back)  # finishes what the kill left, then goes to 0.30.0
        assert code == 0, (point, err[-2000:])
        assert h3kit(env, "history", "--comfyui", str(comfy))[1]["in_flight"] is None, point
        assert git("rev-parse", "HEAD", cwd=comfy) == start, point
