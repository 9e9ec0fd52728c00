"""What the generated workflows open with: canvas, frames and steps, inside the memory limits.

The memory search (`search`) finds the largest canvas and frames that fit;
those are the limits (`max_canvas`, `max_frames`). The workflows open at
the limits unless a profile, calibration or the user (`overrides:`) names
`canvas`, `frames` or `steps`; such a value wins, and one beyond the limits
gets a warning instead of being changed behind the user's back.
"""

from __future__ import annotations

from h3kit.data.catalog import Catalog


def workflow_defaults(cat: Catalog, settings: dict, source: dict, max_canvas: tuple, max_frames: int
                      ) -> tuple[dict, list[str], list[str]]:
    """({canvas, frames, steps}, rationale sentences, warnings)."""
    sampling = cat.data.get("sampling") or {}
    canvas = tuple(settings.get("canvas") or max_canvas)
    frames = int(settings.get("frames") or max_frames)
    steps = int(settings.get("steps") or sampling.get("steps", 20))
    why, warnings = [], []
    if "canvas" in settings:
        why.append(f"The workflows open at {canvas[0]}x{canvas[1]}, as {source.get('canvas', 'the settings')} says.")
        if canvas[0] * canvas[1] > max_canvas[0] * max_canvas[1] or canvas[0] > max_canvas[0] or canvas[1] > max_canvas[1]:
            warnings.append(f"canvas {canvas[0]}x{canvas[1]} is beyond the largest canvas that fits in memory "
                            f"({max_canvas[0]}x{max_canvas[1]}); a run at it may run out of memory.")
    else:
        why.append(f"The workflows open at {canvas[0]}x{canvas[1]}, the largest canvas that fits.")
    if "frames" in settings:
        why.append(f"They open with {frames} frames, as {source.get('frames', 'the settings')} says.")
        if frames > max_frames:
            warnings.append(f"frames {frames} is beyond the most frames that fit in memory ({max_frames}); "
                            "a run with them may run out of memory.")
    else:
        why.append(f"They open with {frames} frames ({frames / sampling.get('fps', 24):.1f} s of video), the most that fit.")
    why.append(f"They sample {steps} steps" + (f", as {source['steps']} says." if "steps" in settings and "steps" in source
                                              else " (the catalog's default, as in ComfyUI's own H3 template)."))
    return {"canvas": list(canvas), "frames": frames, "steps": steps}, why, warnings
