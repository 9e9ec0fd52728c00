"""Issue 16 acceptance: kill `h3kit install` at every file operation it performs, with SIGKILL and SIGINT.

How each point is hit: h3kit.core.files counts every file operation h3kit
performs (atomic_write's two steps, and the make-folder / write / rename /
replace / move / unlink / remove helpers every deploy and uninstall write
goes through; a staged file's write is also stopped half-way, `write-torn`).
`H3KIT_TEST_KILL_AT=N[:INT]` makes operation N send the process SIGKILL (or
SIGINT) just before it acts, `H3KIT_TEST_FILEOPS=FILE` logs each operation.
A counting run lists the operations of one install; then, for each point N,
the install is killed there (its own log must end at N, on the same
operation), and:

- rerun: `h3kit install` again must end verified, with every recorded entry
  final and still h3kit's, no staging folder and no `.h3kit-tmp` left; then
  `h3kit uninstall` must leave the ComfyUI tree byte-identical to before the
  first install, with nothing "moved to backup";
- or uninstall at once, after the crash: the same byte-identical tree,
  nothing called the user's.

Two scenarios: the first install into a ComfyUI, and a re-install over a
complete one (which replaces every file in place; there the rerun must give
the very tree and record of a clean install, and that state's uninstall is
checked at the end and after every "uninstall at once"). Each runs in its own
ComfyUI tree and h3kit home, in parallel (two workers: the suite's two
cores).

By default a sample runs (`sample_points`), SIGKILL then a rerun at: the
first and the last operation; every operation on the ComfyUI tree outside
the bulk phases (the rename into place, the mark, the launcher); every
record save, at its `replace` step; and the first and last operation of each
bulk phase (the staged copy, a re-install's per-file replaces). SIGINT then a
rerun at two of those. `H3KIT_CRASH_ALL=1` runs every point three ways:
SIGKILL then a rerun, SIGINT then a rerun, SIGKILL then an uninstall at once
(docs/deploy.md, "Crashes, full disks, two installs at once", has the counts and
times).
With H3KIT_COMFYUI_DIR set, `test_kill_points_in_a_real_comfyui` kills an
install into a hard-linked copy of that ComfyUI at a few points.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

FIXTURES = Path(__file__).parents[1] / "fixtures"
_spec = importlib.util.spec_from_file_location("comfy_tree", FIXTURES / "comfyui" / "comfy_tree.py")
comfy_tree = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(comfy_tree)

pytestmark = [pytest.mark.native, pytest.mark.skipif(sys.platform == "win32", reason="SIGKILL")]

FINGERPRINT = FIXTURES / "fingerprints" / "nvidia-rtx4060-8gb-16gb.json"  # a plan that fits: exit 0
INSTALL = ("install", "--yes", "--skip-calibrate", "--no-models", "--fingerprint", str(FINGERPRINT))
STAGING = "ComfyUI-h3kit.h3kit-staging.disabled"
ALL = os.environ.get("H3KIT_CRASH_ALL") == "1"
TIMEOUT = 120


# Runs h3kit commands one after another in one interpreter (a rerun and its uninstall cost one start-up),
# reporting after each: exit code, output, the ComfyUI tree's snapshot and the install record's entries.
DRIVER = r"""
import contextlib, importlib.util, io, json, sys
from pathlib import Path
from h3kit.cli import main
from h3kit.comfyui import manifest as mf
spec = importlib.util.spec_from_file_location("comfy_tree", sys.argv[1])
tree = importlib.util.module_from_spec(spec); spec.loader.exec_module(tree)
comfy, home = Path(sys.argv[2]), Path(sys.argv[3])
out = []
for argv in json.loads(sys.argv[4]):
    o, e = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(o), contextlib.redirect_stderr(e):
        rc = main(argv + ["--comfyui", str(comfy)])
    records = sorted((home / "state" / "manifests").glob("*.json"))
    entries = []
    for path in records:
        record = mf.load(path)
        entries += [[x.path, x.kind, x.sha256, x.role, x.pending, record.still_ours(x)] for x in record.entries]
    out.append({"rc": rc, "stdout": o.getvalue(), "stderr": e.getvalue(), "records": len(records),
                "entries": sorted(entries), "tree": {k: list(v) for k, v in tree.snapshot(comfy, skip=("venv",)).items()}})
print("H3KIT-DRIVER " + json.dumps(out))
"""


class Rig:
    """One ComfyUI tree and one h3kit home, brought back to the same state after every point."""

    def __init__(self, root: Path, native: Path | None, comfy: Path | None = None):
        self.root = root
        self.comfy = comfy or comfy_tree.make_comfyui(root / "ComfyUI ü")
        if not (self.comfy / "folder_paths.py").exists():  # as in a real ComfyUI (a node lists its files with it)
            (self.comfy / "folder_paths.py").write_text("def get_filename_list(kind):\n    return []\n"
                                                        "def get_full_path(kind, name):\n    return None\n")
        self.home = root / "h3kit home"
        if native is not None and native.is_dir():
            shutil.copytree(native, self.home / "cache" / "native")
        self.before = self.snapshot()
        self.installed: dict | None = None  # the tree and record of a clean install, once known
        self.ops_log = root / "ops.log"

    def snapshot(self) -> dict:
        return {k: list(v) for k, v in comfy_tree.snapshot(self.comfy, skip=("venv",)).items()}

    def _env(self, kill: str | None = None, log: bool = False) -> dict:
        env = {k: v for k, v in os.environ.items() if not k.startswith("H3KIT_TEST_") and k != "COMFYUI_PATH"}
        env["H3KIT_HOME"] = str(self.home)
        if kill:
            env["H3KIT_TEST_KILL_AT"] = kill
        if log or kill:
            self.ops_log.unlink(missing_ok=True)
            env["H3KIT_TEST_FILEOPS"] = str(self.ops_log)
        return env

    def h3kit(self, *argv: str, kill: str | None = None, log: bool = False) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "h3kit", *argv, "--comfyui", str(self.comfy)],
                              env=self._env(kill, log), capture_output=True, text=True, timeout=TIMEOUT)

    def run(self, *commands: tuple[str, ...]) -> list[dict]:
        """`commands` in one interpreter; one report each (see DRIVER)."""
        done = subprocess.run([sys.executable, "-c", DRIVER, str(FIXTURES / "comfyui" / "comfy_tree.py"),
                               str(self.comfy), str(self.home), json.dumps([list(c) for c in commands])],
                              env=self._env(), capture_output=True, text=True, timeout=TIMEOUT * len(commands))
        line = next((x for x in done.stdout.splitlines() if x.startswith("H3KIT-DRIVER ")), None)
        assert line is not None, (done.returncode, done.stdout[-800:], done.stderr[-1500:])
        return json.loads(line[len("H3KIT-DRIVER "):])

    def ops(self) -> list[tuple[str, str]]:
        lines = self.ops_log.read_text(encoding="utf-8").splitlines() if self.ops_log.exists() else []
        return [tuple(line.split("\t")[1:3]) for line in lines]

    # -- the checks ------------------------------------------------------------------------------------
    def installed_ok(self, report: dict, why: str) -> None:
        """Verified, every entry final and still h3kit's, no staging or .h3kit-tmp left; and, once a clean
        install is known, the very same tree and record (so its uninstall is that clean install's)."""
        assert report["rc"] == 0 and "verified" in report["stdout"], (why, report["stdout"][-800:],
                                                                      report["stderr"][-1500:])
        assert report["records"] == 1 and report["entries"], why
        assert not [e for e in report["entries"] if e[4] or not e[5]], (why, [e for e in report["entries"]
                                                                              if e[4] or not e[5]])
        left = [k for k in report["tree"] if k.endswith(".h3kit-tmp") or STAGING in k]
        assert not left, (why, left)
        state = {"tree": report["tree"], "entries": [e[:4] for e in report["entries"]]}
        if self.installed is None:
            self.installed = state
        else:
            diff = sorted(k for k in set(state["tree"]) | set(self.installed["tree"])
                          if state["tree"].get(k) != self.installed["tree"].get(k))
            assert not diff and state["entries"] == self.installed["entries"], (why, diff[:10])

    def uninstalled_ok(self, report: dict, why: str) -> None:
        assert report["rc"] == 0, (why, report["stdout"][-800:], report["stderr"][-1500:])
        doc = json.loads(report["stdout"])
        assert doc["backed_up"] == [] and doc["kept"] == [], (why, doc["backed_up"], doc["kept"])
        assert report["records"] == 0, why
        changed = sorted(k for k in set(report["tree"]) | set(self.before)
                         if report["tree"].get(k) != self.before.get(k))
        assert not changed, (why, changed[:10])


def sample_points(ops: list[tuple[str, str]], comfy: str) -> list[int]:
    """The default sample (1-based): the first and last operation; every operation on the ComfyUI tree
    outside the two bulk phases (the rename into place, the mark, the launcher); each record save at its
    `replace` step (written, not yet in place); and the first and last operation of each bulk phase (the
    staged copy, a re-install's per-file replaces)."""
    keep, phases = {1, len(ops)}, {}
    for n, (op, path) in enumerate(ops, 1):
        if STAGING in path or (op == "replace" and "/ComfyUI-h3kit/" in path):
            phases.setdefault("staging" if STAGING in path else "replace", []).append(n)
        elif path.startswith(comfy + os.sep) or ("/manifests/" in path and op == "replace"):
            keep.add(n)
    for ns in phases.values():
        keep |= {ns[0], ns[-1]}
    return sorted(keep)


def _kill(rig: Rig, n: int, sig: str, ops: list[tuple[str, str]]) -> None:
    why = f"killed with SIG{sig} at operation {n} ({ops[n - 1][0]} {ops[n - 1][1]})"
    done = rig.h3kit(*INSTALL, kill=f"{n}:{sig}")
    expected = -signal.SIGKILL if sig == "KILL" else 130
    assert done.returncode == expected, (why, done.returncode, done.stderr[-1500:])
    hit = rig.ops()
    assert len(hit) == n and hit[-1] == ops[n - 1], (why, hit[-1:])
    if sig == "INT":
        assert "Traceback" not in done.stderr and "interrupted" in done.stderr, (why, done.stderr[-800:])


def plan_points(ops: list[tuple[str, str]], every: bool, comfy: str = "") -> list[tuple[int, str, str]]:
    """(point, signal, then) to run: every point with SIGKILL then a rerun, SIGINT then a rerun, and SIGKILL then
    an uninstall at once; or the sample with SIGKILL and a rerun, plus SIGINT at two of its points."""
    if every:  # one way at every point, then the next way (so a partial run has covered whole ways)
        return [(n, s, t) for s, t in (("KILL", "rerun"), ("INT", "rerun"), ("KILL", "uninstall"))
                for n in range(1, len(ops) + 1)]
    sampled = sample_points(ops, comfy)
    return [(n, "KILL", "rerun") for n in sampled] + [(n, "INT", "rerun") for n in sampled[1::max(1, len(sampled) // 2)][:2]]


def run_scenario(rig: Rig, scenario: str, every: bool) -> dict:
    """Count one install's operations in the scenario's steady state, then kill it at each point.

    fresh: not installed; each point is killed, rerun (or not) and uninstalled, which must give the tree
    from before. reinstall: installed; each point is killed and rerun, which must give the very tree and
    record of a clean install (so its uninstall is that one's, checked at the end); with the "uninstall"
    follow-up, uninstall runs at once and the pack is installed again.
    """
    warm = rig.run(INSTALL, ("uninstall", "--yes", "--json"), INSTALL)  # h3kit's first-run files out of the way
    rig.installed_ok(warm[0], "warm-up")
    rig.uninstalled_ok(warm[1], "warm-up")
    rig.installed_ok(warm[2], "warm-up")
    if scenario == "fresh":
        rig.uninstalled_ok(rig.run(("uninstall", "--yes", "--json"))[0], "warm-up")
    start = time.monotonic()
    counted = rig.h3kit(*INSTALL, log=True)
    assert counted.returncode == 0, counted.stderr[-1500:]
    ops = rig.ops()
    if scenario == "fresh":
        rig.uninstalled_ok(rig.run(("uninstall", "--yes", "--json"))[0], "counting run")
    plan = plan_points(ops, every, str(rig.comfy))
    for n, sig, then in plan:
        _kill(rig, n, sig, ops)
        why = f"{scenario}: SIG{sig} at {n}/{len(ops)} ({ops[n - 1][0]} {ops[n - 1][1]}), then {then}"
        if then == "rerun" and scenario == "fresh":
            again, gone = rig.run(INSTALL, ("uninstall", "--yes", "--json"))
            rig.installed_ok(again, why)
            rig.uninstalled_ok(gone, why)
        elif then == "rerun":
            rig.installed_ok(rig.run(INSTALL)[0], why)
        else:
            commands = [("uninstall", "--yes", "--json")] + ([INSTALL] if scenario == "reinstall" else [])
            reports = rig.run(*commands)
            if reports[0]["rc"] == 2 and "has no install record" in reports[0]["stderr"]:
                assert reports[0]["tree"] == rig.before, why  # killed before the first save: nothing there
            else:
                rig.uninstalled_ok(reports[0], why)
            if scenario == "reinstall":
                rig.installed_ok(reports[1], why + ", installed again")
        if every:
            print(f"crash harness: ok {why}", flush=True)  # progress of the long run, for its log
    if scenario == "reinstall":
        rig.uninstalled_ok(rig.run(("uninstall", "--yes", "--json"))[0], "reinstall: the end")
    return {"scenario": scenario, "operations": len(ops), "points": len(plan),
            "kinds": sorted({op for op, _ in ops}), "seconds": round(time.monotonic() - start, 1)}


def _native(h3kit_home: Path) -> Path:
    return Path(h3kit_home) / "cache" / "native"


@pytest.mark.slow
def test_kill_at_every_file_operation_then_rerun_and_uninstall(tmp_path, h3kit_home, capsys):
    rigs = {s: Rig(tmp_path / s, _native(h3kit_home)) for s in ("fresh", "reinstall")}
    with ThreadPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(lambda s: run_scenario(rigs[s], s, ALL), rigs))
    with capsys.disabled():  # the figures for the README, past pytest's capture
        for r in results:
            print(f"\ncrash harness ({'every point' if ALL else 'sample'}): {json.dumps(r)}")
    fresh, again = results
    assert fresh["operations"] >= 40 and again["operations"] >= 40  # the whole pack, not a stub run
    assert {"rename", "write", "write-torn", "replace", "mkdir"} <= set(fresh["kinds"])
    assert {"replace", "write", "rmtree"} <= set(again["kinds"])


def test_the_sample_takes_the_boundaries_of_each_phase():
    ops = [("write", "/h/cache/native/build.json"), ("write", "/h/state/manifests/m.json"),
           ("replace", "/h/state/manifests/m.json"), ("mkdir", f"/c/custom_nodes/{STAGING}"),
           ("write", f"/c/custom_nodes/{STAGING}/a"), ("write-torn", f"/c/custom_nodes/{STAGING}/a"),
           ("rename", "/c/custom_nodes/ComfyUI-h3kit"), ("replace", "/c/custom_nodes/ComfyUI-h3kit/a"),
           ("replace", "/c/custom_nodes/ComfyUI-h3kit/b"), ("replace", "/c/custom_nodes/ComfyUI-h3kit/c"),
           ("write", "/c/run_h3kit.sh"), ("write", "/h/state/manifests/m.json"),
           ("replace", "/h/state/manifests/m.json")]
    assert sample_points(ops, "/c") == [1, 3, 4, 6, 7, 8, 10, 11, 13]


def test_the_hook_costs_nothing_when_unset_and_counts_when_set(tmp_path):
    """Unset: no counting at all. Set: each operation is logged, and operation N is where the process dies."""
    from h3kit.core import files

    assert files._HOOK is None  # this test process runs without the variables
    script = ("from pathlib import Path; from h3kit.core import files; import sys\n"
              "d = Path(sys.argv[1])\n"
              "for i in range(5):\n"
              "    files.atomic_write(d / f'f{i}', b'x' * 10)\n")
    log = tmp_path / "ops.log"
    env = {**os.environ, "H3KIT_TEST_KILL_AT": "4", "H3KIT_TEST_FILEOPS": str(log)}
    done = subprocess.run([sys.executable, "-c", script, str(tmp_path)], env=env, timeout=60)
    assert done.returncode == -signal.SIGKILL
    assert [line.split("\t")[1] for line in log.read_text().splitlines()] == ["write", "replace", "write", "replace"]
    assert (tmp_path / "f0").read_bytes() == b"x" * 10 and not (tmp_path / "f1").exists()
    [left] = [p.name for p in tmp_path.iterdir() if p.name.startswith(".f1-")]  # the random temporary name
    assert left.endswith(".tmp")


@pytest.mark.comfyui
def test_kill_points_in_a_real_comfyui(tmp_path, h3kit_home):
    """A hard-linked copy of the real ComfyUI: SIGKILL at the record saves around the rename and at the
    launcher, then rerun and uninstall (each install imports the pack with ComfyUI's own Python)."""
    from comfy_h3 import h3_comfyui, make_test_comfyui

    real, _python, why = h3_comfyui()
    if real is None:
        pytest.skip(why)
    rig = Rig(tmp_path, _native(h3kit_home), comfy=make_test_comfyui(real, tmp_path / "ComfyUI"))
    warm = rig.run(INSTALL, ("uninstall", "--yes", "--json"))
    rig.installed_ok(warm[0], "warm-up")
    rig.uninstalled_ok(warm[1], "warm-up")
    assert rig.h3kit(*INSTALL, log=True).returncode == 0
    ops = rig.ops()
    rig.uninstalled_ok(rig.run(("uninstall", "--yes", "--json"))[0], "counting run")
    rename = next(n for n, (op, _) in enumerate(ops, 1) if op == "rename")
    launcher = next(n for n, (_, path) in enumerate(ops, 1) if path.endswith("run_h3kit.sh"))
    for n, sig in ((rename - 1, "KILL"), (rename, "KILL"), (rename + 1, "INT"), (launcher + 1, "KILL")):
        _kill(rig, n, sig, ops)
        again, gone = rig.run(INSTALL, ("uninstall", "--yes", "--json"))
        rig.installed_ok(again, f"real ComfyUI, SIG{sig} at {n}")
        rig.uninstalled_ok(gone, f"real ComfyUI, SIG{sig} at {n}")
