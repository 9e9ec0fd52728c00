"""The node pack's profile file, `h3kit_profile.json`, as one typed value both sides share.

`h3kit install` and `h3kit apply` write it (h3kit.comfyui.deploy builds the
bytes with `PackProfile.to_bytes`, reached as `h3kit.bundled.h3k_profile`);
the nodes read it back with `ProfileStore`, which reads it again whenever the
file changes, so `h3kit apply` takes effect at the next node run without
restarting ComfyUI.

The document is `{"schema", "profile", "h3kit_version", "settings"}`, where
`settings` is the plan's `settings` (h3kit's PlanSettings as JSON) kept whole:
the profile node shows all of it and `to_json` writes it back unchanged. The
nodes read only what they use, at the places the plan puts it:

- the tiled decode: `vae_tile_size`, `vae_tile_overlap`, `vae_temporal_tile`,
  `max_frames` (`VaeTiles`; the built-in values when the pack has no profile);
- the streamed DiT loader: `streaming.page_cache`, `streaming.preload_bytes`
  (the streamed run's, else `preload_bytes`), `streaming.prefetch_blocks` and
  `shard_size_bytes` (`DiTLoaderSettings`).

Standard library only, never `import h3kit`: this runs in ComfyUI's Python.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Mapping

SCHEMA = "h3kit.node-profile/1"
PROFILE_FILE = "h3kit_profile.json"


def _count(value: Any) -> int | None:
    """A JSON number as a non-negative int; None for anything else (absent, a string, a bool, negative)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        return None
    return int(value)


def _section(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


@dataclass(frozen=True)
class VaeTiles:
    """The tiled decode's sizes (pixels and frames); the defaults are what a pack without a profile uses."""

    tile_size: int = 512
    overlap: int = 64
    temporal_tile: int = 64
    max_frames: int = 121

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any]) -> VaeTiles:
        """0 or an unset value means the default, except the overlap, which may be 0."""
        overlap = _count(settings.get("vae_tile_overlap"))
        return cls(tile_size=_count(settings.get("vae_tile_size")) or cls.tile_size,
                   overlap=cls.overlap if overlap is None else overlap,
                   temporal_tile=_count(settings.get("vae_temporal_tile")) or cls.temporal_tile,
                   max_frames=_count(settings.get("max_frames")) or cls.max_frames)

    def as_settings(self) -> dict[str, int]:
        return {"vae_tile_size": self.tile_size, "vae_tile_overlap": self.overlap,
                "vae_temporal_tile": self.temporal_tile, "max_frames": self.max_frames}


@dataclass(frozen=True)
class DiTLoaderSettings:
    """What the plan set for H3kitStreamedDiTLoader's inputs; None where it set nothing (the node's own default)."""

    page_cache: str | None = None
    preload_bytes: int | None = None
    shard_size_bytes: int | None = None
    prefetch_blocks: int | None = None

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any]) -> DiTLoaderSettings:
        streaming = _section(settings.get("streaming"))
        preload = _count(streaming.get("preload_bytes"))
        cache = streaming.get("page_cache")
        return cls(page_cache=cache if isinstance(cache, str) else None,
                   preload_bytes=_count(settings.get("preload_bytes")) if preload is None else preload,
                   shard_size_bytes=_count(settings.get("shard_size_bytes")),
                   prefetch_blocks=_count(streaming.get("prefetch_blocks")))


@dataclass(frozen=True)
class PackProfile:
    """h3kit_profile.json: the profile's name, the h3kit that wrote it, and the plan's settings.

    `h3kit` says how to run that h3kit again from ComfyUI (the panel's preset switch): {"command": [python,
    "-m", "h3kit"], "env": {"H3KIT_HOME": ...} (only what it was run with), "comfyui": the ComfyUI folder}."""

    profile: str | None = None
    h3kit_version: str | None = None
    settings: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    schema: str = SCHEMA
    h3kit: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))

    def __post_init__(self):
        object.__setattr__(self, "settings", MappingProxyType(dict(_section(self.settings))))
        object.__setattr__(self, "h3kit", MappingProxyType(dict(_section(self.h3kit))))

    def h3kit_command(self) -> list[str] | None:
        """The recorded command that runs h3kit (a list of strings), or None when the profile holds none."""
        command = self.h3kit.get("command")
        ok = isinstance(command, list) and command and all(isinstance(c, str) and c for c in command)
        return list(command) if ok else None

    @classmethod
    def from_json(cls, doc: Any) -> PackProfile:
        """Tolerant: what a document lacks, or holds in another type, reads as unset."""
        doc = _section(doc)
        name, version = doc.get("profile"), doc.get("h3kit_version")
        return cls(profile=name if isinstance(name, str) else None,
                   h3kit_version=version if isinstance(version, str) else None,
                   settings=_section(doc.get("settings")),
                   schema=doc["schema"] if isinstance(doc.get("schema"), str) else SCHEMA,
                   h3kit=_section(doc.get("h3kit")))

    def to_json(self) -> dict:
        doc = {"schema": self.schema, "profile": self.profile, "h3kit_version": self.h3kit_version,
               "settings": dict(self.settings)}
        if self.h3kit:
            doc["h3kit"] = json.loads(json.dumps(dict(self.h3kit)))
        return doc

    def to_bytes(self) -> bytes:
        """The file's bytes: the same settings always give the same bytes (sorted keys, two-space indent)."""
        return (json.dumps(self.to_json(), indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode("utf-8")

    @property
    def name(self) -> str:
        return self.profile or "none"

    def tiles(self) -> VaeTiles:
        return VaeTiles.from_settings(self.settings)

    def dit_loader(self) -> DiTLoaderSettings:
        return DiTLoaderSettings.from_settings(self.settings)

    def shown_settings(self) -> dict[str, Any]:
        """Every setting that has a value, over the built-in tile sizes: what the profile node prints."""
        return {**VaeTiles().as_settings(), **{k: v for k, v in self.settings.items() if v is not None}}


class ProfileStore:
    """The pack's profile file, read again when its mtime or size changes; `error` says why it is not in use."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self._stamp: object = "never read"
        self._profile = PackProfile()
        self.error: str | None = None

    def stamp(self) -> tuple[int, int] | None:
        try:
            st = self.path.stat()
            return (st.st_mtime_ns, st.st_size)
        except OSError:
            return None

    def current(self) -> PackProfile:
        stamp = self.stamp()
        if stamp != self._stamp:
            self._stamp, self._profile, self.error = stamp, PackProfile(), None
            if stamp is None:
                self.error = f"{self.path.name} is missing; using built-in defaults (run 'h3kit apply')"
            else:
                try:
                    self._profile = PackProfile.from_json(json.loads(self.path.read_text(encoding="utf-8")))
                except (OSError, ValueError) as exc:
                    self.error = f"{self.path.name} is unreadable ({exc}); using built-in defaults (run 'h3kit apply')"
        return self._profile


__all__ = ["PROFILE_FILE", "SCHEMA", "DiTLoaderSettings", "PackProfile", "ProfileStore", "VaeTiles"]
