"""What the panel reads from the pack's folder: the cost model, the profile, the calibration summary.

`h3kit install` / `h3kit apply` write `h3kit_cost.json` and `h3kit_profile.json`
beside the nodes, `h3kit calibrate` writes `h3kit_calibration.json`. Each is
read again when its mtime or size changes (as `h3k_profile.ProfileStore`
does), so an apply run from the panel or a terminal takes effect at the next
request without restarting ComfyUI. A `Pack` is rooted at one folder so the
tests point it at their own.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from ..h3k_cost import COST_FILE, CostModel, CostUnavailable, read
from ..h3k_profile import PROFILE_FILE, PackProfile, ProfileStore
from ..h3kit_common.pack import SUMMARY_FILE
from ..h3kit_common.pack import PACK_DIR, PROFILE

QUEUE_GUARD_CHOICES = ("refuse", "warn")
NO_COST = f"this pack has no {COST_FILE} yet, so h3kit cannot price a graph; run 'h3kit apply'"


class CostStore:
    """h3kit_cost.json as a CostModel, read again when it changes; `problem` says why there is none."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self._stamp: object = "never read"
        self._model: CostModel | None = None
        self.problem: str | None = None

    def current(self) -> CostModel | None:
        stamp = _stamp(self.path)
        if stamp != self._stamp:
            self._stamp, self._model, self.problem = stamp, None, None
            if stamp is None:
                self.problem = NO_COST
            else:
                try:
                    self._model = read(self.path)
                except CostUnavailable as exc:
                    self.problem = f"{exc}; run 'h3kit apply' to write it again"
        return self._model


@dataclass
class Pack:
    """The pack's folder and the stores that read it."""

    dir: Path
    profile: ProfileStore
    cost: CostStore

    @classmethod
    def at(cls, folder: str | Path, profile: ProfileStore | None = None) -> Pack:
        folder = Path(folder)
        return cls(folder, profile or ProfileStore(folder / PROFILE_FILE), CostStore(folder / COST_FILE))

    def settings(self) -> dict:
        return json.loads(json.dumps(dict(self.profile.current().settings), default=str))

    def queue_guard(self) -> str:
        """The profile's `queue_guard` ("refuse" unless it says "warn")."""
        value = self.profile.current().settings.get("queue_guard")
        return value if value in QUEUE_GUARD_CHOICES else "refuse"

    def h3kit(self) -> dict:
        """How to run h3kit from here: the profile's `h3kit` section ({"command", "env", "comfyui"}), or {}."""
        profile: PackProfile = self.profile.current()
        section = getattr(profile, "h3kit", None)
        if not section:  # a PackProfile from before the field: the file itself
            section = _read_json(self.dir / PROFILE_FILE).get("h3kit")
        return dict(section) if isinstance(section, Mapping) else {}

    def calibration(self) -> dict | None:
        """The calibration summary's lines, report and date; None when there is none (or it is unreadable)."""
        doc = _read_json(self.dir / SUMMARY_FILE)
        if not doc:
            return None
        lines = doc.get("lines") if isinstance(doc.get("lines"), list) else []
        return {"lines": [str(line) for line in lines], "report_html": self.report_path(doc),
                "created": doc.get("created") if isinstance(doc.get("created"), str) else None}

    def report_path(self, doc: dict | None = None) -> str | None:
        """The calibration report's HTML file, when the summary names one that exists and ends in .html."""
        doc = _read_json(self.dir / SUMMARY_FILE) if doc is None else doc
        path = doc.get("report_html")
        if not isinstance(path, str) or not path.lower().endswith(".html"):
            return None
        return path if Path(path).is_file() else None


def _stamp(path: Path) -> tuple[int, int] | None:
    try:
        st = path.stat()
        return (st.st_mtime_ns, st.st_size)
    except OSError:
        return None


def _read_json(path: Path) -> dict[str, Any]:
    """A small JSON object file, or {} when it is missing, unreadable or something else."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return doc if isinstance(doc, dict) else {}


PACK = Pack.at(PACK_DIR, PROFILE)  # the deployed pack's own files, the profile store shared with the nodes
