"""Issue 26: the crash harness at the weight write points: `h3kit models fetch` killed at its file operations.

Weights are entered in the record (pending: size, catalog hash, where the bytes go first) and saved
before a byte is written, then renamed into place, then recorded final. A stand-in catalog (below, in
the child) maps every weight to a small file, half of them with a catalog sha256 and half with a size
only, served from a local folder (`--from`, hard-linked on the same disk). For each point the fetch is
killed with SIGKILL, then either

- rerun: it must finish, with every weight recorded final under its real hash; then `models remove`
  must leave the ComfyUI tree as it was before the first fetch;
- or `models remove` at once: the same tree, nothing left that h3kit wrote (a complete weight killed
  right after its rename, which the record did not know before, and a partial download included).

By default: SIGKILL at each weight's rename into place and at the operation after it (the window the
record used to miss), at the first and the last; `H3KIT_CRASH_ALL=1`: every operation.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from test_crash_harness import ALL, FINGERPRINT, TIMEOUT, comfy_tree

pytestmark = [pytest.mark.native, pytest.mark.skipif(sys.platform == "win32", reason="SIGKILL")]

# The child: a small catalog, then `h3kit` with the given arguments (or, with "make-usb", the files to fetch).
CHILD = r"""
import dataclasses, hashlib, sys
from pathlib import Path
from h3kit.data import catalog as catalog_mod
from h3kit.models import files as model_files
real = catalog_mod.load()
weights, payloads = [], {}
for i, w in enumerate(real.dit + real.text_encoder + real.vae + real.audio_vae + real.lora):
    data = hashlib.sha256(w.id.encode()).digest() * (300 + 10 * i)
    f = dataclasses.replace(w.file, bytes=len(data), sha256=hashlib.sha256(data).hexdigest() if i % 2 else None)
    weights.append(dataclasses.replace(w, bytes=len(data), file=f))
    payloads[f.name or w.id + ".safetensors"] = data
kinds = {k: [w for w in weights if w.part == k] for k in ("dit", "text_encoder", "vae", "audio_vae", "lora")}
fake = dataclasses.replace(real, **kinds)
model_files._catalog = lambda catalog=None: catalog or fake
if sys.argv[1] == "make-usb":
    for name, data in payloads.items():
        (Path(sys.argv[2]) / name).write_bytes(data)
    sys.exit(0)
from h3kit.cli import main
sys.exit(main(sys.argv[1:]))
"""


class WeightRig:
    def __init__(self, root: Path, usb: Path):
        self.root, self.usb = root, usb
        self.comfy = comfy_tree.make_comfyui(root / "ComfyUI")
        self.home = root / "home"
        self.before = self.snapshot()
        self.log = root / "ops.log"

    def snapshot(self) -> dict:
        return {k: list(v) for k, v in comfy_tree.snapshot(self.comfy, skip=("venv",)).items()}

    def h3kit(self, *argv: str, kill: int | None = None, log: bool = False) -> subprocess.CompletedProcess:
        env = {k: v for k, v in os.environ.items() if not k.startswith("H3KIT_TEST_")}
        env["H3KIT_HOME"] = str(self.home)
        if kill or log:
            self.log.unlink(missing_ok=True)
            env["H3KIT_TEST_FILEOPS"] = str(self.log)
        if kill:
            env["H3KIT_TEST_KILL_AT"] = str(kill)
        return subprocess.run([sys.executable, "-c", CHILD, *argv, "--comfyui", str(self.comfy)], env=env,
                              capture_output=True, text=True, timeout=TIMEOUT)

    def fetch(self, **kw) -> subprocess.CompletedProcess:
        return self.h3kit("models", "fetch", "--fingerprint", str(FINGERPRINT), "--from", str(self.usb), "--json", **kw)

    def ops(self) -> list[tuple[str, str]]:
        return [tuple(x.split("\t")[1:3]) for x in self.log.read_text(encoding="utf-8").splitlines()]

    def record(self) -> list[dict]:
        found = sorted((self.home / "state" / "manifests").glob("*.json"))
        return json.loads(found[0].read_text(encoding="utf-8"))["entries"] if found else []

    def removed_all(self, why: str) -> None:
        done = self.h3kit("models", "remove", "--json")
        assert done.returncode == 0, (why, done.stderr[-1500:])
        changed = sorted(k for k in set(self.before) | set(self.snapshot()) if self.before.get(k) != self.snapshot().get(k))
        assert not changed, (why, changed[:10], json.loads(done.stdout).get("kept"))
        assert not [e for e in self.record() if e["role"] == "model"], why


def weight_points(ops: list[tuple[str, str]], comfy: str) -> list[int]:
    """Each weight's rename into place and the operation after it, and the first and last operation."""
    keep = {1, len(ops)}
    for n, (op, path) in enumerate(ops, 1):
        if op == "replace" and path.startswith(os.path.join(comfy, "models") + os.sep):
            keep |= {n, min(n + 1, len(ops))}
    return sorted(keep)


def run_point(root: Path, usb: Path, n: int, ops: list[tuple[str, str]], then: str) -> str:
    rig = WeightRig(root, usb)
    why = f"SIGKILL at {n}/{len(ops)} ({ops[n - 1][0]} {ops[n - 1][1]}), then {then}"
    killed = rig.fetch(kill=n)
    assert killed.returncode == -signal.SIGKILL, (why, killed.returncode, killed.stderr[-1500:])
    hit = rig.ops()
    assert len(hit) == n and hit[-1][0] == ops[n - 1][0], why  # the same operation (paths differ per rig)
    if then == "rerun":
        again = rig.fetch()
        assert again.returncode == 0, (why, again.stderr[-1500:])
        weights = [e for e in rig.record() if e["role"] == "model" and e["kind"] == "file"]
        assert weights and not [e for e in rig.record() if e.get("pending")], why
        from h3kit.core.files import sha256_file

        assert all(sha256_file(e["path"]) == e["sha256"] for e in weights), why
        assert not list(rig.comfy.rglob("*.part")), why
    rig.removed_all(why)
    return why


@pytest.mark.slow
def test_kill_while_fetching_weights_then_rerun_or_remove(tmp_path):
    usb = tmp_path / "usb"
    usb.mkdir()
    counting = WeightRig(tmp_path / "count", usb)
    made = subprocess.run([sys.executable, "-c", CHILD, "make-usb", str(usb)], capture_output=True, text=True,
                          timeout=TIMEOUT)
    assert made.returncode == 0, made.stderr
    done = counting.fetch(log=True)
    assert done.returncode == 0, done.stderr[-1500:]
    ops = counting.ops()
    landed = [n for n, (op, path) in enumerate(ops, 1) if op == "replace" and "/models/" in path]
    assert len(landed) >= 4, ops  # every weight lands through h3kit.core.files, so each is a point
    counting.removed_all("counting run")
    points = range(1, len(ops) + 1) if ALL else weight_points(ops, str(counting.comfy))
    jobs = [(n, then) for n in points for then in ("rerun", "remove")]
    with ThreadPoolExecutor(max_workers=2) as pool:
        list(pool.map(lambda job: run_point(tmp_path / f"p{job[0]}-{job[1]}", usb, job[0], ops, job[1]), jobs))
    print(f"\nweights crash harness: {len(ops)} operations, {len(jobs)} points x ways, all converge")


def test_the_weight_sample_takes_each_landing_and_the_operation_after():
    ops = [("write", "/h/m.json"), ("replace", "/h/m.json"), ("mkdir", "/c/models/x"), ("write", "/h/m.json"),
           ("replace", "/h/m.json"), ("replace", "/c/models/x/a.safetensors"), ("write", "/h/m.json"),
           ("replace", "/h/m.json")]
    assert weight_points(ops, "/c") == [1, 6, 7, 8]
