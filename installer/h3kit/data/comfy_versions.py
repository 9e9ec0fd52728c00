"""The ComfyUI versions people run, typed: the newest one h3kit's real tier passed, flags a version needs on
some machines, and releases known to fail there (the catalog's `comfyui_versions:` section).

Decided here once, from data: the planner asks `flags_for` what to add to a plan's ComfyUI flags and
`known_problems` what to warn about; setting up a new ComfyUI asks `newest_tested` which release to take.
Each rule names the versions it holds for (`min_version` inclusive, `max_version` inclusive), the
backends and the largest card it applies to; a version h3kit cannot read matches no rule.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from packaging.version import InvalidVersion, Version

from h3kit.data.yamlio import Problems, parse_size

BACKENDS = ("cuda", "rocm", "xpu", "mps", "directml", "cpu")


def version_of(text: str | None) -> Version | None:
    try:
        return Version(str(text)) if text else None
    except InvalidVersion:
        return None


@dataclass(frozen=True)
class VersionRule:
    """A rule for ComfyUI versions in [min_version, max_version] on the named backends and cards up to
    `max_gpu_bytes`: the flags to add (`args`), or the problem and its fix (`problem`, `fix`)."""

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

    def holds(self, version: str | None, backend: str, gpu_bytes: int | None) -> bool:
        v = version_of(version)
        if v is None or backend not in self.backends:
            return False
        if self.min_version and v < Version(self.min_version):
            return False
        if self.max_version and v > Version(self.max_version):
            return False
        return self.max_gpu_bytes is None or (gpu_bytes is not None and gpu_bytes <= self.max_gpu_bytes)


@dataclass(frozen=True)
class ComfyVersions:
    newest_tested: str | None = None  # the newest release h3kit's real-ComfyUI tier passed
    tested_source: str = ""
    flags: tuple[VersionRule, ...] = ()
    known_bad: tuple[VersionRule, ...] = ()

    def flags_for(self, version: str | None, backend: str, gpu_bytes: int | None) -> list[VersionRule]:
        return [r for r in self.flags if r.holds(version, backend, gpu_bytes)]

    def known_problems(self, version: str | None, backend: str, gpu_bytes: int | None,
                       args: tuple[str, ...] | list[str]) -> list[VersionRule]:
        return [r for r in self.known_bad if r.holds(version, backend, gpu_bytes)
                and not (r.unless_flag and r.unless_flag in args)]

    def tested(self, version: str | None) -> bool:
        """Whether `version` is no newer than the newest release the real tier passed."""
        v, top = version_of(version), version_of(self.newest_tested)
        return v is not None and top is not None and v <= top


def _rule(item: Any, problems: Problems, base: tuple, kind: str) -> VersionRule | None:
    if not isinstance(item, dict):
        problems.add(base, "must be a mapping")
        return None
    ok = True
    for key in ("min_version", "max_version"):
        if item.get(key) is not None and (not isinstance(item[key], str) or version_of(item[key]) is None):
            problems.add(base + (key,), f"is {item[key]!r}; allowed: a ComfyUI version in quotes, like \"0.35.0\"")
            ok = False
    backends = item.get("backends") or []
    if not isinstance(backends, list) or not backends or any(b not in BACKENDS for b in backends):
        problems.add(base + ("backends",), f"is {backends!r}; allowed: a list of {', '.join(BACKENDS)}")
        ok = False
    gpu = item.get("max_gpu_memory")
    gpu_bytes = parse_size(gpu) if gpu is not None else None
    if gpu is not None and gpu_bytes is None:
        problems.add(base + ("max_gpu_memory",), f"is {gpu!r}; allowed: a size like \"16 GB\"")
        ok = False
    for key in ("why", "source") + (("problem", "fix") if kind == "known_bad" else ()):
        if not isinstance(item.get(key), str) or not item[key].strip():
            problems.add(base + (key,), "must be a sentence")
            ok = False
    args = item.get("args") or []
    if kind == "flags" and (not isinstance(args, list) or not args or not all(isinstance(a, str) for a in args)):
        problems.add(base + ("args",), "must be the ComfyUI arguments to add, as a list of strings")
        ok = False
    if not ok:
        return None
    return VersionRule(item.get("min_version"), item.get("max_version"), tuple(backends), gpu_bytes, item["why"],
                       item["source"], tuple(args), item.get("problem", ""), item.get("fix", ""),
                       item.get("unless_flag"))


def parse_comfy_versions(section: Any, problems: Problems) -> ComfyVersions:
    if section is None:
        return ComfyVersions()
    base = ("comfyui_versions",)
    if not isinstance(section, dict):
        problems.add(base, "must be a mapping (newest_tested, flags, known_bad)")
        return ComfyVersions()
    tested = section.get("newest_tested")
    if tested is not None and (not isinstance(tested, str) or version_of(tested) is None):
        problems.add(base + ("newest_tested",), f"is {tested!r}; allowed: a ComfyUI version in quotes")
        tested = None
    rules = {}
    for kind in ("flags", "known_bad"):
        items = section.get(kind) or []
        if not isinstance(items, list):
            problems.add(base + (kind,), "must be a list")
            items = []
        rules[kind] = tuple(r for i, item in enumerate(items) if (r := _rule(item, problems, base + (kind, i), kind)))
    return ComfyVersions(tested, str(section.get("tested_source") or ""), rules["flags"], rules["known_bad"])
