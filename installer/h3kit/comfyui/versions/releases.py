"""Release tags of ComfyUI, read (pure): which tags name releases, and the order h3kit takes them in."""

from __future__ import annotations

from packaging.version import InvalidVersion, Version


def tag_version(tag: str, pattern: str) -> Version | None:
    """The release version a tag names under `pattern` ('v{version}'); None for other tags and pre-releases."""
    head, _, tail = pattern.partition("{version}")
    if not tag.startswith(head) or not tag.endswith(tail) or len(tag) <= len(head) + len(tail):
        return None
    try:
        version = Version(tag[len(head):len(tag) - len(tail)])
    except InvalidVersion:
        return None
    return None if version.is_prerelease or version.is_devrelease else version


def releases(tags, pattern: str, minimum: str, newest_tested: str | None = None) -> list[str]:
    """The tags of releases >= minimum in the order h3kit takes them: those no newer than `newest_tested` (the
    newest release h3kit's real-ComfyUI tier passed, catalog `comfyui_versions.newest_tested`) newest first,
    then newer, untested ones oldest first (closest to what was tested). Without `newest_tested`, newest first."""
    found = [(v, t) for t in set(tags) if (v := tag_version(t, pattern)) is not None and v >= Version(minimum)]
    top = Version(newest_tested) if newest_tested else None
    tested = sorted(((v, t) for v, t in found if top is None or v <= top), reverse=True)
    untested = sorted((v, t) for v, t in found if top is not None and v > top)
    return [t for _v, t in tested + untested]


def parse_ls_remote(text: str) -> list[str]:
    """Tag names from `git ls-remote --tags --refs` ('<sha>\\trefs/tags/<name>' lines)."""
    return [ln.split("\trefs/tags/", 1)[1].strip() for ln in text.splitlines() if "\trefs/tags/" in ln]
