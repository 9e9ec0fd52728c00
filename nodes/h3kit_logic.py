"""What the h3kit nodes compute, without importing ComfyUI or torch.

- `ProfileStore` reads `h3kit_profile.json` (written by `h3kit install` and
  `h3kit apply`) and reads it again whenever the file changes, so a profile
  switch takes effect at the next node run without restarting ComfyUI.
- `decode_tile_args` turns pixel tile sizes into the latent units
  `VAE.decode_tiled` takes, the same way ComfyUI's VAEDecodeTiled does.
- `chunked_decode` decodes a batch of frames chunk by chunk into one output
  allocated once, so memory beyond the output does not grow with frames.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

PROFILE_FILE = "h3kit_profile.json"
# Used when the pack has no profile file (copied by hand, or the file was removed).
FALLBACK = {"vae_tile_size": 512, "vae_tile_overlap": 64, "vae_temporal_tile": 64, "max_frames": 121}
DEFAULT_CHUNK_FRAMES = 8


class ProfileStore:
    """The active profile settings, re-read when the file's mtime or size changes."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self._stamp: object = "never read"
        self._doc: dict = {}
        self.error: str | None = None

    def stamp(self):
        try:
            st = self.path.stat()
            return (st.st_mtime_ns, st.st_size)
        except OSError:
            return None

    def document(self) -> dict:
        stamp = self.stamp()
        if stamp != self._stamp:
            self._stamp = stamp
            self._doc, self.error = {}, None
            if stamp is None:
                self.error = f"{self.path.name} is missing; using built-in defaults (run 'h3kit apply')"
            else:
                try:
                    doc = json.loads(self.path.read_text(encoding="utf-8"))
                    self._doc = doc if isinstance(doc, dict) else {}
                except (OSError, ValueError) as exc:
                    self.error = f"{self.path.name} is unreadable ({exc}); using built-in defaults (run 'h3kit apply')"
        return self._doc

    @property
    def profile(self) -> str:
        return str(self.document().get("profile") or "none")

    def settings(self) -> dict:
        merged = dict(FALLBACK)
        merged.update({k: v for k, v in (self.document().get("settings") or {}).items() if v is not None})
        return merged


def tile_values(settings: dict) -> dict:
    """The four INTs the nodes expose, from profile settings (pixels and frames)."""
    return {
        "tile_size": int(settings.get("vae_tile_size") or FALLBACK["vae_tile_size"]),
        "overlap": int(settings.get("vae_tile_overlap") or 0),
        "temporal_tile": int(settings.get("vae_temporal_tile") or FALLBACK["vae_temporal_tile"]),
        "max_frames": int(settings.get("max_frames") or FALLBACK["max_frames"]),
    }


def describe(profile: str, settings: dict, native_status: str, note: str | None = None) -> str:
    lines = [f"h3kit profile: {profile}"]
    for key in sorted(settings):
        if key in ("env",):
            continue
        lines.append(f"  {key}: {settings[key]}")
    if settings.get("env"):
        lines.append("  env: " + ", ".join(f"{k}={v}" for k, v in sorted(settings["env"].items())))
    lines.append(f"native library: {native_status}")
    if note:
        lines.append(f"note: {note}")
    lines.append("Launch flags change only when ComfyUI restarts (use run_h3kit).")
    return "\n".join(lines)


def decode_tile_args(tile_size: int, overlap: int, temporal_size: int, temporal_overlap: int,
                     spatial_compression: int, temporal_compression: int | None) -> dict:
    """Keyword arguments for VAE.decode_tiled, in latent units (mirrors ComfyUI's VAEDecodeTiled)."""
    if tile_size < overlap * 4:
        overlap = tile_size // 4
    if temporal_size < temporal_overlap * 2:
        temporal_overlap = temporal_overlap // 2
    if temporal_compression:
        tile_t = max(2, temporal_size // temporal_compression)
        overlap_t = max(1, min(tile_t // 2, temporal_overlap // temporal_compression))
    else:
        tile_t = overlap_t = None
    spatial = max(1, int(spatial_compression))
    return {"tile_x": tile_size // spatial, "tile_y": tile_size // spatial, "overlap": overlap // spatial,
            "tile_t": tile_t, "overlap_t": overlap_t}


def frame_chunks(total: int, chunk: int) -> list[tuple[int, int]]:
    chunk = max(1, int(chunk))
    return [(start, min(total, start + chunk)) for start in range(0, total, chunk)]


def chunked_decode(latent, chunk: int, decode, allocate, on_chunk=None):
    """Decode `latent` (batch first) in chunks into one output made by `allocate(shape, like)`.

    `decode(part)` returns images for that part, batch first; the output is
    allocated from the first chunk's shape, and each chunk is copied in and
    dropped before the next one is decoded.
    """
    total = int(latent.shape[0])
    output = None
    per_item = None
    for start, stop in frame_chunks(total, chunk):
        images = decode(latent[start:stop])
        n = int(images.shape[0])
        if output is None:
            per_item = max(1, n // (stop - start))  # video VAEs return several frames per latent item
            output = allocate((total * per_item,) + tuple(images.shape[1:]), images)
        output[start * per_item:start * per_item + n] = images
        del images
        if on_chunk is not None:
            on_chunk(stop - start)
    return output


def format_bytes(n: float) -> str:
    sign = "-" if n < 0 else ""
    n = abs(float(n))
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{sign}{n:.0f} {unit}" if unit == "B" else f"{sign}{n:.2f} {unit}"
        n /= 1024
    return f"{sign}{n:.2f} GiB"


def memory_report(before: dict, after: dict) -> str:
    """One line per memory pool: free before -> after (freed)."""
    parts = []
    for pool in sorted(set(before) & set(after)):
        b, a = before[pool], after[pool]
        if b is None or a is None:
            continue
        parts.append(f"{pool}: {format_bytes(b)} free -> {format_bytes(a)} free (freed {format_bytes(a - b)})")
    return "h3kit memory guard: " + ("; ".join(parts) if parts else "no memory figures available")
