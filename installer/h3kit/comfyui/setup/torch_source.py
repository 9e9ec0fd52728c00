"""Where the torch of a new ComfyUI comes from when PyTorch's own index cannot be reached.

The planned index (download.pytorch.org/whl/<build>, or `H3KIT_TORCH_INDEX_URL`,
a mirror of it) is probed first with a short connect (h3kit.core.net), so a
blocked host costs seconds, not pip's timeout times its retries. When it does
not answer, the index pip is configured with (pip.conf, PIP_INDEX_URL, a
mirror, `H3KIT_PIP_FIND_LINKS`) is asked, without installing anything
(`pip install --dry-run --report`), which torch it would give. Its build is
read from its metadata (h3kit.plan.torch_build.build_from_metadata) and
checked against this machine exactly as doctor checks an installed torch:

- a build that runs here is taken, with one line that says what it is, how
  many bytes it brings and why (on a CPU box the Linux x86_64 PyPI wheel is a
  CUDA build: it runs on the CPU, but is much larger than the CPU wheel);
- one that cannot drive this GPU (a CPU wheel on an NVIDIA PC, CUDA newer than
  the driver) stops with one sentence naming the unreachable index and the
  ways to point h3kit at a reachable one.

A mirror that replaces every index (`H3KIT_PIP_INDEX_URL`) or
`H3KIT_PIP_NO_INDEX` means the user already chose the source: nothing is probed.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from pathlib import Path
from urllib.parse import unquote, urlsplit

from h3kit.core import net
from h3kit.core.errors import NotReady
from h3kit.core.tools import PipOptions, run_pip
from h3kit.core.units import gb
from h3kit.data.fingerprint import Fingerprint
from h3kit.plan import torch_build

TORCH_INDEX_ENV = "H3KIT_TORCH_INDEX_URL"
_RANK = {"global": 0, "user": 1, "site": 2, ":env:": 3}  # pip's own order: a later one wins


def planned_index(choice: dict, environ=None) -> str | None:
    """The index the choice names; with $H3KIT_TORCH_INDEX_URL (a mirror of download.pytorch.org/whl) the
    same build's folder on that mirror (.../whl/cpu -> MIRROR/cpu)."""
    env = os.environ if environ is None else environ
    index, mirror = choice.get("index_url"), env.get(TORCH_INDEX_ENV)
    base = torch_build.builds_table()["index_base"].rstrip("/")
    if index and mirror and index.startswith(base + "/"):
        return mirror.rstrip("/") + index[len(base):]
    return index


def parse_pip_config(text: str) -> dict:
    """Pure: `pip config list` output -> {index_url, extra_index_urls [], find_links []} (pip's precedence)."""
    found: dict[str, tuple[int, str]] = {}
    for line in text.splitlines():
        m = re.match(r"^\s*(:env:|global|user|site)\.([\w-]+)\s*=\s*'?(.*?)'?\s*$", line)
        if not m:
            continue
        scope, key, value = m.groups()
        if key in ("index-url", "extra-index-url", "find-links") and _RANK[scope] >= found.get(key, (-1, ""))[0]:
            found[key] = (_RANK[scope], value)
    return {"index_url": found.get("index-url", (0, None))[1],
            "extra_index_urls": found.get("extra-index-url", (0, ""))[1].split(),
            "find_links": found.get("find-links", (0, ""))[1].split()}


def pip_sources(python: str, opts: PipOptions) -> dict:
    """Where pip in `python` looks for packages: its configuration plus h3kit's PipOptions."""
    from h3kit.core import subproc

    r = subproc.run([python, "-m", "pip", "config", "list"], timeout=60)
    cfg = parse_pip_config(r.stdout if r.ok else "")
    cfg["index_url"] = opts.index_url or cfg["index_url"] or "https://pypi.org/simple"
    cfg["find_links"] = [*opts.find_links, *cfg["find_links"]]
    return cfg


def describe_sources(src: dict) -> str:
    """'pypi.org, file:///opt/pypi/simple and /opt/wheels' (what pip was asked, for the one line)."""
    names = [net.host_of(src["index_url"]) if not net.is_local(src["index_url"]) else src["index_url"],
             *src["extra_index_urls"], *src["find_links"]]
    return ", ".join(names[:-1]) + (" and " if len(names) > 1 else "") + names[-1]


def read_report(report: dict, system: str) -> dict:
    """Pure: pip's --report JSON -> the torch it would install, as torch_build.check reads it, plus the wheels' URLs."""
    items = {i["metadata"]["name"].lower(): i for i in report.get("install", [])}
    torch = items.get("torch")
    if torch is None:
        return {"error": "pip would install no torch"}
    meta = torch["metadata"]
    have = torch_build.build_from_metadata(meta["version"], meta.get("requires_dist") or [], system)
    packages = {n: items[n]["metadata"]["version"] for n in torch_build.PACKAGES if n in items}
    return {"torch_version": meta["version"], "torch_build": have["backend"], "torch_cuda": have["cuda"],
            "build": have["build"], "packages": packages, "torch_url": torch["download_info"]["url"],
            "urls": [i["download_info"]["url"] for i in items.values()]}


def wheel_bytes(urls: list[str]) -> int | None:
    """The bytes pip would fetch: local files by their size, remote ones by a HEAD request (None: unknown)."""
    import requests

    total = 0
    for url in urls:
        if url.startswith("file:"):
            path = Path(unquote(urlsplit(url).path))
            if not path.is_file():
                return None
            total += path.stat().st_size
            continue
        try:
            size = requests.head(url, timeout=(net.PROBE_SECONDS, 10), allow_redirects=True).headers.get("Content-Length")
        except requests.RequestException:
            return None
        if not (size or "").isdigit():
            return None
        total += int(size)
    return total


def _unreachable(choice: dict, planned: str, why: str, reason: str, opts_hint: str) -> NotReady:
    build = choice["build"]
    return NotReady(
        f"PyTorch's {build} index {planned} cannot be reached ({why}), and {reason}.",
        f"Point h3kit at a reachable copy of that index with {TORCH_INDEX_ENV}=URL (a mirror of {planned}), or put "
        f"the {build} wheels ({', '.join(torch_build.requirements(choice, local=True))}) in a folder and set "
        f"H3KIT_PIP_FIND_LINKS to it{opts_hint}; then run the same command again.")


def reachable_choice(ctx, python: str, choice: dict, fingerprint: Fingerprint, opts: PipOptions, *,
                     timeout: float) -> tuple[dict, dict | None]:
    """(the choice to install, what was taken instead and why | None). See the module docstring."""
    planned = planned_index(choice)
    if not planned or opts.no_index or opts.index_url:
        return choice, None
    why = net.unreachable(planned)
    if why is None:
        return dict(choice, index_url=planned), None
    src = pip_sources(python, opts)
    where = describe_sources(src)
    ctx.progress(f"    {net.host_of(planned)} cannot be reached ({why}); asking pip's own index ({where}) "
                 "for a torch that runs here.")
    fallback = dict(choice, index_url=None, local_tag=None)
    if src["index_url"] and not net.is_local(src["index_url"]) and net.unreachable(src["index_url"]) \
            and not (src["find_links"] or any(net.is_local(u) for u in src["extra_index_urls"])):
        raise _unreachable(choice, planned, why, f"neither can pip's index {src['index_url']} "
                           f"({net.unreachable(src['index_url'])})", "")
    with tempfile.TemporaryDirectory(prefix="h3kit-torch-") as tmp:
        report_path = Path(tmp) / "report.json"
        try:
            run_pip(ctx, python, ["install", "--dry-run", "--ignore-installed", "--quiet", "--report",
                                  str(report_path), *torch_build.requirements(fallback)],
                    f"Asking {where} which torch it has", timeout=timeout, opts=opts)
            report = json.loads(report_path.read_text(encoding="utf-8"))
        except (NotReady, OSError, ValueError) as exc:
            detail = exc.message.split(" failed: ", 1)[-1] if isinstance(exc, NotReady) else str(exc)
            raise _unreachable(choice, planned, why, f"pip's index ({where}) has no torch for it: {detail}", "") from None
    info = read_report(report, fingerprint.system)
    if "error" in info:
        raise _unreachable(choice, planned, why, f"pip's index ({where}) has no torch for it", "")
    problems = [m for m in torch_build.check(fingerprint, info) if m["status"] == "fail"]
    if problems:
        raise _unreachable(choice, planned, why, f"the torch {info['torch_version']} that pip's index ({where}) "
                           f"has is a {info['build']} build: {problems[0]['message']}", "")
    size = wheel_bytes(info["urls"])
    taken = {"planned_build": choice["build"], "planned_index": planned, "unreachable": why, "from": where,
             "torch": info["torch_version"], "build": info["build"], "backend": info["torch_build"],
             "packages": info["packages"], "download_bytes": size, "torch_url": info["torch_url"]}
    ctx.progress("    " + taken_line(taken, torch_build.builds_table()))
    return fallback, taken


def taken_line(taken: dict, table: dict, verb: str = "Taking") -> str:
    """Pure: the one line that says which torch was taken, its size, and why."""
    size = f", {gb(taken['download_bytes'])} to download with its libraries" if taken.get("download_bytes") else ""
    line = (f"{verb} torch {taken['torch']} ({taken['build']} build{size}) from {taken['from']}, because "
            f"{net.host_of(taken['planned_index'])} could not be reached.")
    if taken["planned_build"] == "cpu" and taken["backend"] != "cpu":
        cpu = table.get("cpu_wheel_bytes")
        smaller = f" (about {gb(cpu)})" if cpu else ""
        line += (f" It is a GPU build that also runs on the CPU; PyTorch's CPU wheel from {taken['planned_index']} "
                 f"is much smaller{smaller}.")
    return line


def taken_findings(record) -> list[dict]:
    """Doctor: which torch a new ComfyUI got instead of the planned one, and why (none when it got the planned one)."""
    taken = ((getattr(record, "extra", None) or {}).get("comfyui_setup") or {}).get("torch_taken")
    if not taken:
        return []
    return [{"check": "torch.source", "status": "ok", "fix": None,
             "message": f"{taken_line(taken, torch_build.builds_table(), 'Took')} (when h3kit set up this ComfyUI; "
                        f"{net.host_of(taken['planned_index'])}: {taken['unreachable']})"}]
