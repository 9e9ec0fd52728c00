"""The ComfyUI versions people run, typed: the newest one h3kit's real tier passed, the newest release there is,
flags a version needs on some machines, releases known to fail there, and files that need a newer ComfyUI
(the catalog's `comfyui_versions:` section).

Decided here once, from data: the planner asks `flags_for` what to add to a plan's ComfyUI flags and
`known_problems` what to warn about; setting up a new ComfyUI asks `newest_tested` which release to take;
an update asks `update_verdict` whether the target release fails on this machine (a rule's `severity`:
`refuse` stops the update, `warn` is said) and `needs_for` which of the machine's files need a newer one.

Each rule names the versions it holds for (`min_version` inclusive, `max_version` inclusive, `below_version`
exclusive: "0.36.0" for every 0.35.x), the backends, the largest card and the kind of card (`gpu_kind`:
laptop or desktop) it applies to. A version h3kit cannot read matches no rule. A card's kind is read from its
name (`gpu_kind_of`); NVIDIA's names say it ("... Laptop GPU"), others mostly do not, and a rule
for one kind of card does not hold for a card of unknown kind: a warning that may not apply is worse
than none, and an update is never refused on a guess.
"""

from __future__ import annotations

import datetime
import re
from dataclasses import dataclass
from typing import Any

from packaging.version import InvalidVersion, Version

from h3kit.data.yamlio import Problems, parse_size

BACKENDS = ("cuda", "rocm", "xpu", "mps", "directml", "cpu")
GPU_KINDS = ("laptop", "desktop")
SEVERITIES = ("refuse", "warn")
# NVIDIA's laptop parts: "NVIDIA GeForce RTX 5080 Laptop GPU"; older ones "... with Max-Q Design" or "... Mobile".
_LAPTOP = re.compile(r"\b(laptop|max-q|mobile)\b", re.IGNORECASE)
RULE_KEYS = ("min_version", "max_version", "below_version", "backends", "max_gpu_memory", "gpu_kind", "why", "source",
             "args", "problem", "fix", "unless_flag", "severity")
NEED_KEYS = ("what", "match", "min_version", "source")
SECTION_KEYS = ("newest_tested", "tested_source", "newest_release", "newest_release_date", "newest_release_source",
                "flags", "known_bad", "needs")
_VERSION_HELP = "allowed: a ComfyUI version in quotes, like \"0.35.0\""


def version_of(text: str | None) -> Version | None:
    try:
        return Version(str(text)) if text else None
    except InvalidVersion:
        return None


def gpu_kind_of(gpu_name: str | None) -> str | None:
    """The kind of card a GPU's name says: laptop where it says so (NVIDIA: "... Laptop GPU"), desktop for
    NVIDIA's other names, None where it does not say (no name, or another maker's without such a word)."""
    if not gpu_name:
        return None
    if _LAPTOP.search(gpu_name):
        return "laptop"
    return "desktop" if re.search(r"nvidia|geforce|quadro", gpu_name, re.IGNORECASE) else None


@dataclass(frozen=True)
class VersionRule:
    """A rule for ComfyUI versions in [min_version, max_version] and below `below_version`, on the named backends,
    cards up to `max_gpu_bytes` and of `gpu_kind`: the flags to add (`args`), or the problem and its fix
    (`problem`, `fix`, and `severity`: whether an update to such a version is refused or only warned about)."""

    min_version: str | None
    max_version: str | None
    backends: tuple[str, ...]
    max_gpu_bytes: int | None
    why: str
    source: str
    args: tuple[str, ...] = ()
    problem: str = ""
    fix: str = ""
    unless_flag: str | None = None  # the problem does not occur when this flag is passed
    below_version: str | None = None  # exclusive upper bound
    gpu_kind: str | None = None  # "laptop" / "desktop": holds only for that kind of card; None: any card
    severity: str = "refuse"  # known_bad only: "refuse" (an update will not move there) or "warn"

    def holds(self, version: str | None, backend: str, gpu_bytes: int | None, *, gpu_name: str | None = None) -> bool:
        v = version_of(version)
        if v is None or backend not in self.backends:
            return False
        if self.min_version and v < Version(self.min_version):
            return False
        if self.max_version and v > Version(self.max_version):
            return False
        if self.below_version and v >= Version(self.below_version):
            return False
        if self.gpu_kind and gpu_kind_of(gpu_name) != self.gpu_kind:
            return False
        return self.max_gpu_bytes is None or (gpu_bytes is not None and gpu_bytes <= self.max_gpu_bytes)


@dataclass(frozen=True)
class FileNeed:
    """Weight files whose name contains `match` (any case) need ComfyUI `min_version` or newer."""

    what: str
    match: str
    min_version: str
    source: str

    def applies(self, file_name: str) -> bool:
        return bool(file_name) and self.match.lower() in file_name.lower()


@dataclass(frozen=True)
class ComfyVersions:
    newest_tested: str | None = None  # the newest release h3kit's real-ComfyUI tier passed
    tested_source: str = ""
    flags: tuple[VersionRule, ...] = ()
    known_bad: tuple[VersionRule, ...] = ()
    needs: tuple[FileNeed, ...] = ()
    newest_release: str | None = None  # the newest ComfyUI release known to the catalog
    newest_release_date: str | None = None  # its date, "YYYY-MM-DD"
    newest_release_source: str = ""

    def flags_for(self, version: str | None, backend: str, gpu_bytes: int | None) -> list[VersionRule]:
        return [r for r in self.flags if r.holds(version, backend, gpu_bytes)]

    def known_problems(self, version: str | None, backend: str, gpu_bytes: int | None,
                       args: tuple[str, ...] | list[str], *, gpu_name: str | None = None) -> list[VersionRule]:
        return [r for r in self.known_bad if r.holds(version, backend, gpu_bytes, gpu_name=gpu_name)
                and not (r.unless_flag and r.unless_flag in args)]

    def update_verdict(self, version: str | None, backend: str, gpu_bytes: int | None, gpu_name: str | None,
                       args: tuple[str, ...] | list[str]) -> list[VersionRule]:
        """The known-bad rules that hold for target `version` on this machine: an update refuses to move there
        when any has severity "refuse", and says the "warn" ones."""
        return self.known_problems(version, backend, gpu_bytes, args, gpu_name=gpu_name)

    def needs_for(self, version: str | None, file_names: list[str] | tuple[str, ...]) -> list[tuple[FileNeed, str]]:
        """(need, file name) for each of `file_names` that needs a ComfyUI newer than `version` (none when the
        version cannot be read)."""
        v = version_of(version)
        if v is None:
            return []
        return [(n, name) for name in file_names for n in self.needs
                if n.applies(name) and v < Version(n.min_version)]

    def tested(self, version: str | None) -> bool:
        """Whether `version` is no newer than the newest release the real tier passed."""
        v, top = version_of(version), version_of(self.newest_tested)
        return v is not None and top is not None and v <= top


def _keys_ok(item: dict, problems: Problems, base: tuple, keys: tuple) -> bool:
    """No key outside `keys`: a misspelt one (below_verison) would otherwise widen the rule unseen."""
    unknown = [k for k in item if k not in keys]
    for key in unknown:
        problems.add(base + (key,), f"is not a key here; allowed: {', '.join(keys)}")
    return not unknown


def _versions_ok(item: dict, problems: Problems, base: tuple) -> bool:
    ok = True
    for key in ("min_version", "max_version", "below_version"):
        if item.get(key) is not None and (not isinstance(item[key], str) or version_of(item[key]) is None):
            problems.add(base + (key,), f"is {item[key]!r}; {_VERSION_HELP}")
            ok = False
    low, below = version_of(item.get("min_version")), version_of(item.get("below_version"))
    if ok and low is not None and below is not None and below <= low:
        problems.add(base + ("below_version",), f"is {item['below_version']!r}; allowed: a version above "
                     f"min_version {item['min_version']!r} (below_version is the first release it does not hold for)")
        ok = False
    return ok


def _machine_ok(item: dict, problems: Problems, base: tuple) -> bool:
    ok = True
    backends = item.get("backends") or []
    if not isinstance(backends, list) or not backends or any(b not in BACKENDS for b in backends):
        problems.add(base + ("backends",), f"is {backends!r}; allowed: a list of {', '.join(BACKENDS)}")
        ok = False
    gpu = item.get("max_gpu_memory")
    if gpu is not None and parse_size(gpu) is None:
        problems.add(base + ("max_gpu_memory",), f"is {gpu!r}; allowed: a size like \"16 GB\"")
        ok = False
    if item.get("gpu_kind") is not None and item["gpu_kind"] not in GPU_KINDS:
        problems.add(base + ("gpu_kind",), f"is {item['gpu_kind']!r}; allowed: {' or '.join(GPU_KINDS)} "
                     "(leave it out for any card)")
        ok = False
    return ok


def _kind_ok(item: dict, problems: Problems, base: tuple, kind: str) -> bool:
    ok = True
    for key in ("why", "source") + (("problem", "fix") if kind == "known_bad" else ()):
        if not isinstance(item.get(key), str) or not item[key].strip():
            problems.add(base + (key,), "must be a sentence")
            ok = False
    args = item.get("args") or []
    if kind == "flags" and (not isinstance(args, list) or not args or not all(isinstance(a, str) for a in args)):
        problems.add(base + ("args",), "must be the ComfyUI arguments to add, as a list of strings")
        ok = False
    severity = item.get("severity")
    if severity is not None and (kind != "known_bad" or severity not in SEVERITIES):
        allowed = f"{' or '.join(SEVERITIES)}" if kind == "known_bad" else "none (only known_bad entries have one)"
        problems.add(base + ("severity",), f"is {severity!r}; allowed: {allowed}")
        ok = False
    return ok


def _rule(item: Any, problems: Problems, base: tuple, kind: str) -> VersionRule | None:
    if not isinstance(item, dict):
        problems.add(base, "must be a mapping")
        return None
    checks = (_keys_ok(item, problems, base, RULE_KEYS), _versions_ok(item, problems, base), _machine_ok(item, problems, base),
              _kind_ok(item, problems, base, kind))
    if not all(checks):
        return None
    gpu = item.get("max_gpu_memory")
    return VersionRule(item.get("min_version"), item.get("max_version"), tuple(item["backends"]),
                       parse_size(gpu) if gpu is not None else None, item["why"], item["source"],
                       tuple(item.get("args") or ()), item.get("problem", ""), item.get("fix", ""),
                       item.get("unless_flag"), item.get("below_version"), item.get("gpu_kind"),
                       item.get("severity") or "refuse")


def _need(item: Any, problems: Problems, base: tuple) -> FileNeed | None:
    if not isinstance(item, dict):
        problems.add(base, "must be a mapping (what, match, min_version, source)")
        return None
    ok = _keys_ok(item, problems, base, NEED_KEYS)
    for key, allowed in (("what", "a sentence naming the files"),
                         ("match", "a piece of the files' names, like \"hyperflow\""), ("source", "a sentence")):
        if not isinstance(item.get(key), str) or not item[key].strip():
            problems.add(base + (key,), f"is {item.get(key)!r}; allowed: {allowed}")
            ok = False
    low = item.get("min_version")
    if not isinstance(low, str) or version_of(low) is None:
        problems.add(base + ("min_version",), f"is {low!r}; {_VERSION_HELP}")
        ok = False
    return FileNeed(item["what"], item["match"].strip(), low, item["source"]) if ok else None


def _newest(section: dict, problems: Problems, base: tuple) -> tuple[str | None, str | None, str | None]:
    """(newest_tested, newest_release, newest_release_date), each None where absent or wrong (and said)."""
    out = []
    for key in ("newest_tested", "newest_release"):
        value = section.get(key)
        if value is not None and (not isinstance(value, str) or version_of(value) is None):
            problems.add(base + (key,), f"is {value!r}; {_VERSION_HELP}")
            value = None
        out.append(value)
    date = section.get("newest_release_date")
    if isinstance(date, datetime.date):
        date = date.isoformat()
    elif date is not None:
        try:
            date = datetime.date.fromisoformat(str(date)).isoformat()
        except ValueError:
            problems.add(base + ("newest_release_date",), f"is {date!r}; allowed: a date like \"2026-12-02\"")
            date = None
    return out[0], out[1], date


def _items(section: dict, key: str, problems: Problems, base: tuple) -> list:
    items = section.get(key) or []
    if not isinstance(items, list):
        problems.add(base + (key,), "must be a list")
        return []
    return items


def parse_comfy_versions(section: Any, problems: Problems) -> ComfyVersions:
    if section is None:
        return ComfyVersions()
    base = ("comfyui_versions",)
    if not isinstance(section, dict):
        problems.add(base, "must be a mapping (newest_tested, newest_release, flags, known_bad, needs)")
        return ComfyVersions()
    _keys_ok(section, problems, base, SECTION_KEYS)
    tested, newest, newest_date = _newest(section, problems, base)
    rules = {kind: tuple(r for i, item in enumerate(_items(section, kind, problems, base))
                         if (r := _rule(item, problems, base + (kind, i), kind)))
             for kind in ("flags", "known_bad")}
    needs = tuple(n for i, item in enumerate(_items(section, "needs", problems, base))
                  if (n := _need(item, problems, base + ("needs", i))))
    return ComfyVersions(tested, str(section.get("tested_source") or ""), rules["flags"], rules["known_bad"],
                         needs, newest, newest_date, str(section.get("newest_release_source") or ""))
