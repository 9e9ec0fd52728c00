#!/usr/bin/env python3
"""h3kit's real-ComfyUI test tier on each ComfyUI release with H3, as a compatibility table.

    python3 scripts/compat_table.py [TAG ...] [--write] [--json FILE|-] [--timeout S] [--install-requirements]
    python3 scripts/compat_table.py --from-json FILE --write       # the page again from a saved run

For each release tag of the releases repo (default: all five, v0.30.0 ... v0.33.0-40; the repo is made by
scripts/make_comfyui_release_repo.sh) it checks the release out into a new temporary folder, gives it a
`venv/` (a link to --venv, a ComfyUI venv with torch; with --install-requirements a hard-linked copy,
`cp -al`, into which that release's requirements.txt is installed, torch kept), runs `scripts/test.sh` on
the tier's tests with H3KIT_COMFYUI_DIR pointing at the tree, under a per-release timeout, and reads
pytest's closing line. Without --install-requirements the shared venv is used as it is and the release's
pins it does not meet are recorded (the frontend and template packages, comfy-kitchen, comfy-aimdo differ
a little between releases).

Prints a markdown table (release, upstream commit, tree commit, date run, passed/failed/skipped, seconds,
verdict); --write also writes docs/comfyui-versions.md, --json the summary as JSON ("-": stdout, then no
table). Run it niced: it runs ComfyUI several times per release (about a quarter of an hour each on two
cores). The test venv is test.sh's own: set H3KIT_TEST_VENV (or --test-venv) to reuse one across releases.
Exit status: 0 when every release passed, 1 otherwise, 2 for bad arguments.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
RELEASES_GIT = Path("/root/comfy-releases.git")
VENV = Path("/root/ComfyUI-h3/venv")
TAGS = ("v0.30.0", "v0.31.0", "v0.32.0", "v0.33.0", "v0.33.0-40")
# The whole H3 path, the deploy round trip and every workflow, then the cheap ones (a minute or two each, no
# generation): model folders through ComfyUI's folder_paths, a Pinokio layout, and ComfyUI's own H3
# detection of a DiT file (model_detection) loading with no key missing.
TESTS = ("tests/real_comfyui/test_h3_real_comfyui.py",
         "tests/real_comfyui/test_deploy_real_comfyui.py",
         "tests/real_comfyui/test_workflows_real_comfyui.py",
         "tests/real_comfyui/test_model_folders_real_comfyui.py",
         "tests/real_comfyui/test_app_installs_real_comfyui.py",
         "tests/real_comfyui/test_streamed_loader_real_width.py::test_comfyui_detects_h3_and_every_key_loads")
PAGE = REPO / "docs" / "comfyui-versions.md"
TIMEOUT = 3600
KEEP_TORCH = ("torch", "torchvision", "torchaudio")
COUNTS = ("passed", "failed", "errors", "skipped", "xfailed", "xpassed", "deselected")
SUMMARY_WORD = {"error": "errors", "errors": "errors"}


# -- pure helpers (no processes) ------------------------------------------------------------------

def release_version(tag: str) -> tuple[str, int]:
    """("0.33.0", 40) for "v0.33.0-40": the release and the commits past it."""
    m = re.fullmatch(r"v?(\d+(?:\.\d+)*)(?:-(\d+))?", tag)
    if not m:
        raise ValueError(f"not a release tag: {tag!r} (v0.33.0 or v0.33.0-40)")
    return m.group(1), int(m.group(2) or 0)


def version_key(tag: str) -> tuple:
    version, past = release_version(tag)
    return tuple(int(p) for p in version.split(".")) + (past,)


def release_label(tag: str) -> str:
    version, past = release_version(tag)
    return f"{version} +{past}" if past else version


def parse_summary(text: str) -> dict | None:
    """pytest's closing line ("3 passed, 1 skipped, 2 warnings in 95.1s", "1 failed, 2 passed in ...",
    "no tests ran in 0.01s") as counts; None when there is none (pytest never finished)."""
    for line in reversed(text.splitlines()):
        line = line.strip().strip("=").strip()
        if not re.search(r"\bin \d+(?:\.\d+)?s\b", line):
            continue
        pairs = re.findall(r"(\d+) (passed|failed|skipped|errors?|xfailed|xpassed|deselected)\b", line)
        if not pairs and not line.startswith("no tests ran"):
            continue
        counts = dict.fromkeys(COUNTS, 0)
        for n, word in pairs:
            counts[SUMMARY_WORD.get(word, word)] += int(n)
        m = re.search(r"\bin (\d+(?:\.\d+)?)s\b", line)
        counts["pytest_seconds"] = float(m.group(1))
        counts["line"] = line
        return counts
    return None


def problem_lines(text: str) -> dict:
    """pytest's short summary (-ra, set in pyproject.toml): FAILED / ERROR / SKIPPED lines."""
    out = {"failed": [], "errors": [], "skipped": []}
    for line in text.splitlines():
        for prefix, key in (("FAILED ", "failed"), ("ERROR ", "errors"), ("SKIPPED ", "skipped")):
            if line.startswith(prefix):
                out[key].append(line[len(prefix):].strip())
    return out


def first_errors(text: str) -> dict[str, str]:
    """{test name: its first "E " line} from pytest's failure sections ("____ test_name ____")."""
    out, name = {}, None
    for line in text.splitlines():
        m = re.fullmatch(r"_{3,} (?:(?:ERROR at \w+ of )?)(\S.*?) _{3,}", line.strip())
        if m:
            name = m.group(1)
            continue
        if name and name not in out and line.startswith("E "):
            said = re.sub(r"\x1b\[[0-9;]*m", "", line[1:].strip())
            if '"]' in said:  # a message list followed by a log tail on the same line
                said = said[:said.index('"]') + 2]
            out[name] = said[:400]
    return out


def verdict(rc: int | None, counts: dict | None, timed_out: bool) -> str:
    if timed_out:
        return "timeout"
    if counts is None:
        return "error"
    if counts["failed"] or counts["errors"]:
        return "fail"
    if counts["passed"] == 0:
        return "skipped"
    return "pass" if rc == 0 else "error"


def requirement_pins(text: str) -> dict[str, str]:
    """{normalized name: spec} of requirements.txt lines that pin a version ("==")."""
    pins = {}
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        m = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)\s*==\s*([^\s;,]+)", line)
        if m:
            pins[normalize(m.group(1))] = m.group(2)
    return pins


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pins_not_met(pins: dict[str, str], installed: dict[str, str]) -> list[dict]:
    return [{"package": name, "release_pins": want, "venv_has": installed.get(name)}
            for name, want in sorted(pins.items()) if installed.get(name) != want]


def newest_passed(results: list[dict]) -> dict | None:
    passed = [r for r in results if r["verdict"] == "pass"]
    return max(passed, key=lambda r: version_key(r["tag"])) if passed else None


# -- the table and the page -------------------------------------------------------------------------

def table(results: list[dict]) -> str:
    rows = ["| release | upstream commit | tree commit | date run | passed / failed / skipped | seconds | verdict |",
            "|---|---|---|---|---|---|---|"]
    for r in sorted(results, key=lambda r: version_key(r["tag"])):
        c = r.get("counts")
        pfs = f"{c['passed']} / {c['failed'] + c['errors']} / {c['skipped']}" if c else "-"
        rows.append(f"| {release_label(r['tag'])} (`{r['tag']}`) | `{r['upstream_commit'] or '?'}` "
                    f"| `{r['tree_commit'][:8]}` | {r['date_run']} | {pfs} | {r['seconds']:.0f} | {r['verdict']} |")
    return "\n".join(rows)


def page(summary: dict) -> str:
    results = summary["results"]
    newest = summary["newest_tested"]
    h3kits = ", ".join(f"`{h}`" for h in dict.fromkeys(r.get("h3kit") or summary["h3kit_commit"] for r in results))
    tests = summary["tests"]
    lines = [
        "# ComfyUI releases h3kit's real tier has run on",
        "",
        "h3kit's real-ComfyUI test tier (`tests/real_comfyui`, [development.md](development.md) \"Tests that",
        "need a real ComfyUI\") on every ComfyUI release with MiniMax H3 that could be had here: 0.30.0 to",
        "0.33.0, and 0.33.0 plus 40 commits (the newest the public snapshot holds). Made by",
        "`scripts/compat_table.py --write`; rerun it after a change to the pack or the workflows.",
        "",
        table(results),
        "",
        "\"passed / failed / skipped\" counts pytest's tests (errors count as failed); seconds are the whole",
        "`scripts/test.sh` run for that release (a ComfyUI started several times on the CPU). Verdict: pass",
        "when nothing failed and something ran; skipped when nothing ran (the tree lacks H3). The tests"
        + (f" (`-k {summary['k']}`):" if summary.get("k") else ":"),
        "",
        *[f"- `{t}`" for t in tests],
        "",
        f"**newest_tested: {newest or 'none'}**: the newest release that passed. The catalog's",
        "`comfyui_versions.newest_tested` (profiles/models/minimax-h3.yaml) should name it: it is the",
        "ComfyUI h3kit sets up, not simply the newest tag.",
        "",
        "## How the trees were made",
        "",
        "`scripts/make_comfyui_release_repo.sh` builds a small bare git repo with one commit per release from",
        "ComfyUI's public history (the yzkee/ComfyUI snapshot), each holding the upstream release commit's tree",
        "(the upstream commit above). Two tokenizer files are dropped because the snapshot lacks their blobs",
        "(`comfy/text_encoders/llama_tokenizer/tokenizer.json`, `comfy/text_encoders/qwen35_tokenizer/vocab.json`);",
        "neither is H3's (its text encoder reads `qwen25_tokenizer`). `scripts/compat_table.py` checks each",
        "release out into a new temporary folder and runs `scripts/test.sh` with `H3KIT_COMFYUI_DIR` set to it;",
        "the tests themselves work on a hard-linked throwaway copy of that tree.",
        "",
    ]
    return "\n".join(lines + _venv_lines(summary) + _findings_lines(summary) + _closing_lines(summary, h3kits))


def _venv_lines(summary: dict) -> list[str]:
    """Which venv the trees ran in, and the pins of each release it did not meet."""
    results, lines = summary["results"], []
    if summary.get("install_requirements"):
        lines += ["Each tree had its own venv: a hard-linked copy of the shared one with that release's",
                  "`requirements.txt` installed (torch kept).", ""]
    else:
        lines += [f"Every tree used one venv (`{summary['venv']}`: ComfyUI 0.33.0+40's requirements, "
                  f"{summary.get('torch') or 'torch'}, CPU only). The pins of a release that venv does not meet:",
                  ""]
        for r in sorted(results, key=lambda r: version_key(r["tag"])):
            diff = r.get("requirements_differ") or []
            said = ", ".join(f"{d['package']} {d['release_pins']} (venv {d['venv_has'] or 'none'})" for d in diff)
            lines.append(f"- {release_label(r['tag'])}: {said or 'none'}")
        lines += ["", "h3kit's pack imports none of these (the frontend, the template and docs packages,",
                  "comfy-kitchen's kernels, comfy-aimdo's allocator); `--install-requirements` reruns with each",
                  "release's own pins in a hard-linked copy of the venv.", ""]
    return lines


def _findings_lines(summary: dict) -> list[str]:
    """What the table found, and what did not pass with the first error of each failed test."""
    results, lines = summary["results"], []
    if summary.get("findings"):
        lines += ["## What this table found", ""] + [f"- {f}" for f in summary["findings"]] + [""]
    bad = [r for r in results if r["verdict"] != "pass"]
    if bad:
        lines += ["## What did not pass", ""]
        for r in sorted(bad, key=lambda r: version_key(r["tag"])):
            cause = r.get("cause") or "the first error of each failed test:"
            lines.append(f"- **{release_label(r['tag'])}** ({r['verdict']}): {cause}")
            if (summary.get("notes") or {}).get(r["tag"]):
                lines.append(f"  {summary['notes'][r['tag']]}")
            for key in ("failed", "errors"):
                for item in r.get("problems", {}).get(key, [])[:8]:
                    name = item.split(" - ", 1)[0].split("::")[-1]
                    said = (r.get("first_errors") or {}).get(name)
                    lines.append(f"  - `{item.split(' - ', 1)[0]}`" + (f": `{said[:300]}`" if said else ""))
        lines.append("")
    return lines


def _closing_lines(summary: dict, h3kits: str) -> list[str]:
    return [
        "## Newer than 0.33.0 + 40",
        "",
        "No ComfyUI newer than 0.33.0 plus 40 commits can be fetched here, so no release from 0.34 on is in",
        "the table. The 0.35+ compiler path (comfy-aimdo's malloc graph, `pause_malloc_graph` in",
        "`comfy/model_prefetch.py`, and `disable_comfy_compiler`, around h3kit's in-forward reads) is tested",
        "by feature detection on stand-in `comfy` modules shaped like ComfyUI's",
        "(`tests/nodes/test_compiler_pause.py`); none of the trees above has either name, so here the pack takes",
        "its \"absent\" branch. A release that passes here says nothing about 0.34 and later:",
        "newest_tested moves only when this table is run on one.",
        "",
        "## Run it again",
        "",
        "```sh",
        "scripts/make_comfyui_release_repo.sh            # the releases repo, once",
        "export H3KIT_TEST_VENV=/root/h3kit-test-venv    # one test venv for every release",
        "nice -n 10 python3 scripts/compat_table.py --write --json compat.json   # all five, in turn",
        "python3 scripts/compat_table.py --from-json compat.json --write       # the page again, nothing run",
        "python3 scripts/compat_table.py v0.33.0 --timeout 2400                 # one release",
        "```",
        "",
        f"Last run: {summary['started']} to {summary['finished']} ({summary['total_seconds'] / 60:.0f} minutes), "
        f"h3kit {h3kits} (\"+\": with uncommitted changes), {summary['host']}.",
        "",
    ]


# -- running ------------------------------------------------------------------------------------------

def git(releases: Path, *args: str) -> str:
    return subprocess.run(["git", "--git-dir", str(releases), *args], capture_output=True, text=True,
                          check=True, timeout=120).stdout.strip()


def installed_versions(python: Path) -> dict[str, str]:
    code = ("import importlib.metadata as m, json; "
            "print(json.dumps({d.metadata['Name']: d.version for d in m.distributions() if d.metadata['Name']}))")
    done = subprocess.run([str(python), "-c", code], capture_output=True, text=True, timeout=120, check=True)
    return {normalize(k): v for k, v in json.loads(done.stdout).items()}


def make_tree(releases: Path, tag: str, where: Path) -> Path:
    tree = where / f"ComfyUI-{tag}"
    subprocess.run(["git", "clone", "-q", "--shared", "--branch", tag, str(releases), str(tree)],
                   check=True, timeout=600, capture_output=True, text=True)
    return tree


def give_venv(tree: Path, venv: Path, install: bool, where: Path, log) -> Path:
    """tree/venv: a link to `venv`, or (install) a hard-linked copy with the release's requirements."""
    if not install:
        os.symlink(venv, tree / "venv")
        return venv
    # cp -al needs one filesystem: beside the venv when the temporary folder is on another one
    home = where if os.stat(where).st_dev == os.stat(venv).st_dev else Path(tempfile.mkdtemp(
        prefix=".h3kit-compat-venv-", dir=venv.parent.parent))
    copy = home / "venv"
    subprocess.run(["cp", "-al", str(venv), str(copy)], check=True, timeout=600)
    python = copy / "bin" / "python"
    have = installed_versions(python)
    keep = home / "keep-torch.txt"
    keep.write_text("".join(f"{p}=={have[p]}\n" for p in KEEP_TORCH if p in have), encoding="utf-8")
    argv = [str(python), "-m", "pip", "install", "-q", "-c", str(keep), "-r", str(tree / "requirements.txt")]
    log.write(f"$ {' '.join(argv)}\n")
    log.flush()
    done = subprocess.run(argv, stdout=log, stderr=subprocess.STDOUT, timeout=1800)
    if done.returncode != 0:
        raise RuntimeError(f"pip could not install {tree.name}'s requirements (exit {done.returncode}; see the log)")
    os.symlink(copy, tree / "venv")
    return copy


def run_tests(tree: Path, tests: list[str], k: str | None, timeout: float, log, test_venv: str | None) \
        -> tuple[int | None, bool]:
    env = dict(os.environ, H3KIT_COMFYUI_DIR=str(tree))
    if test_venv:
        env["H3KIT_TEST_VENV"] = test_venv
    env.pop("H3KIT_HOME", None)  # test.sh makes a fresh one per run
    argv = ["bash", str(REPO / "scripts" / "test.sh"), *tests, *(["-k", k] if k else [])]
    log.write(f"$ H3KIT_COMFYUI_DIR={tree} {' '.join(argv)}\n")
    log.flush()
    proc = subprocess.Popen(argv, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

    def stop(signum, frame):  # this script stopped: stop the tests' process group with it
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        raise SystemExit(128 + signum)
    before = {s: signal.signal(s, stop) for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)}
    try:
        return _wait(proc, timeout, log)
    finally:
        for s, handler in before.items():
            signal.signal(s, handler)


def _wait(proc: subprocess.Popen, timeout: float, log) -> tuple[int | None, bool]:
    try:
        return proc.wait(timeout=timeout), False
    except subprocess.TimeoutExpired:
        # test.sh, pytest and any ComfyUI it started share the new session's process group
        for sig, grace in ((signal.SIGTERM, 30), (signal.SIGKILL, 30)):
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                break
            try:
                proc.wait(timeout=grace)
                break
            except subprocess.TimeoutExpired:
                continue
        log.write(f"\ncompat_table.py: stopped after {timeout:.0f} s (--timeout)\n")
        return None, True


def run_release(args, tag: str, logs: Path) -> dict:
    tree_commit = git(args.releases, "rev-parse", f"{tag}^{{commit}}")
    subject = git(args.releases, "log", "-1", "--format=%s", tree_commit)
    m = re.search(r"\(from ([0-9a-f]{7,40})\)\s*$", subject)
    result = {"tag": tag, "release": release_version(tag)[0], "commits_past_release": release_version(tag)[1],
              "upstream_commit": m.group(1) if m else None, "tree_commit": tree_commit,
              "release_date": git(args.releases, "log", "-1", "--format=%cs", tree_commit),
              "date_run": dt.date.today().isoformat(), "log": str(logs / f"{tag}.log"), "h3kit": h3kit_commit()}
    where = Path(tempfile.mkdtemp(prefix=f"h3kit-compat-{tag}-"))
    started = time.monotonic()
    with open(result["log"], "w", encoding="utf-8") as log:
        try:
            tree = make_tree(args.releases, tag, where)
            version_file = (tree / "comfyui_version.py").read_text(encoding="utf-8")
            vm = re.search(r"__version__\s*=\s*[\"']([^\"']+)", version_file)
            result["comfyui_version"] = vm.group(1) if vm else None
            result["has_h3"] = (tree / "comfy_extras" / "nodes_minimax_h3.py").is_file()
            pins = requirement_pins((tree / "requirements.txt").read_text(encoding="utf-8"))
            used = give_venv(tree, args.venv, args.install_requirements, where, log)
            result["venv"] = str(used)  # with --install-requirements, the release's pins it still misses: none
            result["requirements_differ"] = pins_not_met(pins, installed_versions(used / "bin" / "python"))
            rc, timed_out = run_tests(tree, args.tests, args.k, args.timeout, log, args.test_venv)
        except (subprocess.SubprocessError, OSError, RuntimeError, ValueError) as e:
            log.write(f"\ncompat_table.py: {e}\n")
            rc, timed_out, result["cause"] = None, False, f"could not set the release up: {e}"
    result["seconds"] = round(time.monotonic() - started, 1)
    text = Path(result["log"]).read_text(encoding="utf-8", errors="replace")
    counts = parse_summary(text)
    result.update(rc=rc, timed_out=timed_out, counts=counts, problems=problem_lines(text),
                  first_errors=first_errors(text), verdict=verdict(rc, counts, timed_out))
    if timed_out:
        result["cause"] = f"stopped after {args.timeout:.0f} s"
    elif result["verdict"] == "skipped":
        result["cause"] = "; ".join(result["problems"]["skipped"][:3]) or "no test ran"
    elif result["verdict"] == "error" and "cause" not in result:
        result["cause"] = f"test.sh exited {rc} without a pytest summary" if counts is None else f"test.sh exited {rc}"
    if not args.keep:
        shutil.rmtree(where, ignore_errors=True)
    else:
        result["tree"] = str(where)
    return result


def h3kit_commit() -> str:
    """HEAD's short commit, and with local changes "+" and a hash of them (the working tree is what runs)."""
    def out(*argv: str) -> str:
        return subprocess.run(["git", "-C", str(REPO), "--no-optional-locks", *argv], capture_output=True,
                              text=True, timeout=60, check=True).stdout
    try:
        head = out("rev-parse", "--short=8", "HEAD").strip()
        changes = out("diff", "HEAD") + out("ls-files", "--others", "--exclude-standard")
    except (subprocess.SubprocessError, OSError):
        return "unknown"
    import hashlib
    return head + (f"+{hashlib.sha256(changes.encode()).hexdigest()[:8]}" if changes else "")


def torch_version(venv: Path) -> str | None:
    try:
        v = installed_versions(venv / "bin" / "python").get("torch")
    except (subprocess.SubprocessError, OSError, ValueError):
        return None
    return f"torch {v}" if v else None


def arguments(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("tags", nargs="*", metavar="TAG", help=f"release tags (default: {' '.join(TAGS)})")
    ap.add_argument("--releases", type=Path, default=RELEASES_GIT, help=f"the releases repo (default {RELEASES_GIT})")
    ap.add_argument("--venv", type=Path, default=VENV, help=f"a ComfyUI venv with torch (default {VENV})")
    ap.add_argument("--install-requirements", action="store_true",
                    help="install each release's requirements.txt into a hard-linked copy of --venv")
    ap.add_argument("--tests", nargs="+", default=list(TESTS), metavar="PATH", help="test files or node ids")
    ap.add_argument("-k", help="a pytest -k expression on top of --tests")
    ap.add_argument("--timeout", type=float, default=TIMEOUT, help=f"seconds per release (default {TIMEOUT})")
    ap.add_argument("--test-venv", help="test.sh's venv (H3KIT_TEST_VENV; default: the environment's, else test.sh's)")
    ap.add_argument("--logs", type=Path, help="folder for each release's test log (default: a new temporary one)")
    ap.add_argument("--keep", action="store_true", help="leave each release's tree in place")
    ap.add_argument("--write", action="store_true", help=f"write {PAGE.relative_to(REPO)}")
    ap.add_argument("--json", metavar="FILE", help="write the summary as JSON to FILE ('-': stdout, no table)")
    ap.add_argument("--from-json", type=Path, metavar="FILE", help="run nothing: the table from a saved --json")
    ap.add_argument("--note", action="append", default=[], metavar="TAG=TEXT",
                    help="a sentence on why a release did not pass, for the page (repeatable; kept in the JSON)")
    ap.add_argument("--finding", action="append", default=[], metavar="TEXT",
                    help="something the table turned up, for the page's \"What this table found\" (repeatable)")
    args = ap.parse_args(argv)
    args.tags = args.tags or list(TAGS)
    if any("=" not in n for n in args.note):
        ap.error("--note takes TAG=TEXT")
    try:
        for tag in args.tags:
            release_version(tag)
    except ValueError as e:
        ap.error(str(e))
    if not args.from_json:
        if not (args.releases / "HEAD").is_file():
            ap.error(f"no releases repo at {args.releases} (scripts/make_comfyui_release_repo.sh makes it)")
        unknown = [t for t in args.tags if subprocess.run(
            ["git", "--git-dir", str(args.releases), "rev-parse", "--verify", "--quiet", f"{t}^{{commit}}"],
            capture_output=True, timeout=60).returncode != 0]
        if unknown:
            ap.error(f"{args.releases} has no tag {', '.join(unknown)} (git --git-dir {args.releases} tag lists them)")
        if not (args.venv / "bin" / "python").exists():
            ap.error(f"no Python in {args.venv}/bin")
        missing = [t for t in args.tests if not (REPO / t.split("::")[0]).exists()]
        if missing:
            ap.error(f"no such test file: {', '.join(missing)}")
        args.venv = args.venv.absolute()  # a link to it must work from the tree; keep the venv's own path
    return args


def main(argv=None) -> int:
    args = arguments(argv)
    if args.from_json:
        summary = json.loads(args.from_json.read_text(encoding="utf-8"))
    else:
        logs = args.logs or Path(tempfile.mkdtemp(prefix="h3kit-compat-logs-"))
        logs.mkdir(parents=True, exist_ok=True)
        started, t0, h3kit = dt.datetime.now().astimezone(), time.monotonic(), h3kit_commit()
        results = []
        for tag in sorted(args.tags, key=version_key):
            print(f"compat_table.py: {tag} ... (log {logs / (tag + '.log')})", file=sys.stderr, flush=True)
            r = run_release(args, tag, logs)
            c = r["counts"]
            print(f"compat_table.py: {tag}: {r['verdict']} in {r['seconds']:.0f} s"
                  + (f" ({c['line']})" if c else ""), file=sys.stderr, flush=True)
            results.append(r)
        newest = newest_passed(results)
        summary = {"schema": "h3kit.compat_table/1", "started": started.isoformat(timespec="seconds"),
                   "finished": dt.datetime.now().astimezone().isoformat(timespec="seconds"),
                   "total_seconds": round(time.monotonic() - t0, 1), "h3kit_commit": h3kit,
                   "host": f"{os.cpu_count()} CPUs, {sys.platform}", "releases_repo": str(args.releases),
                   "venv": str(args.venv), "torch": torch_version(args.venv),
                   "install_requirements": args.install_requirements, "tests": args.tests, "k": args.k,
                   "timeout_seconds": args.timeout, "logs": str(logs),
                   "newest_tested": newest["release"] if newest else None,
                   "newest_tested_tag": newest["tag"] if newest else None, "results": results}
    if args.finding:
        summary["findings"] = [*(summary.get("findings") or []), *args.finding]
    if args.note:
        summary["notes"] = {**(summary.get("notes") or {}), **dict(n.split("=", 1) for n in args.note)}
    if args.json:
        text = json.dumps(summary, indent=2) + "\n"
        if args.json == "-":
            sys.stdout.write(text)
        else:
            Path(args.json).write_text(text, encoding="utf-8")
    if args.json != "-":
        print(table(summary["results"]))
        print(f"\nnewest_tested: {summary['newest_tested'] or 'none'}")
    if args.write:
        PAGE.write_text(page(summary), encoding="utf-8")
        print(f"wrote {PAGE}", file=sys.stderr)
    return 0 if all(r["verdict"] == "pass" for r in summary["results"]) else 1


if __name__ == "__main__":
    sys.exit(main())
