"""The states h3kit recorded for one ComfyUI, and the one move in flight.

One JSON file per ComfyUI, `<state dir>/history/<slug>.json` (the slug of the install record), written
atomically each time:

- `states`: numbered 1, 2, 3... in the order recorded, each with the command that recorded it (install,
  apply, update, rollback, calibrate, doctor), the ComfyState (h3kit.comfyui.versions.state) and, when
  the self-test passed there, `working: true` and its `evidence`. `h3kit history` lists them;
  `h3kit rollback N` goes back to one.
- `in_flight`: the journal of an update or rollback (the state before, where it goes, the last step
  reached), written before the first change and cleared after the last. A crash leaves it, and the next
  `update`, `rollback` or `doctor --fix` finishes it first (h3kit.steps.versions.finish_in_flight): an
  update that did not prove itself goes back to the state before; a rollback is run again to its end.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from h3kit.comfyui import manifest as mf
from h3kit.comfyui.versions.state import ComfyState, from_json
from h3kit.core.errors import BadInput
from h3kit.core.files import atomic_write

SCHEMA = "h3kit.history/1"
FOLDER = "history"  # under h3kit's state dir; `uninstall --purge` removes it
KEEP_STATES = 50  # older non-working states are dropped past this; every working one is kept


@dataclass
class Entry:
    id: int
    recorded: str
    command: str
    state: ComfyState
    working: bool = False
    evidence: dict = field(default_factory=dict)
    note: str = ""

    def to_json(self) -> dict:
        return {"id": self.id, "recorded": self.recorded, "command": self.command, "working": self.working,
                "evidence": self.evidence, "note": self.note, "state": self.state.to_json()}


def _entry(doc: dict) -> Entry:
    return Entry(int(doc["id"]), doc.get("recorded", ""), doc.get("command", ""), from_json(doc["state"]),
                 bool(doc.get("working")), doc.get("evidence") or {}, doc.get("note", ""))


@dataclass
class History:
    path: Path
    comfyui: str
    states: list[Entry] = field(default_factory=list)
    in_flight: dict | None = None

    # -- reading ------------------------------------------------------------------------------------
    def last_working(self) -> Entry | None:
        return next((e for e in reversed(self.states) if e.working), None)

    def last(self) -> Entry | None:
        return self.states[-1] if self.states else None

    def get(self, state_id: int | str) -> Entry:
        """The state numbered `state_id`; BadInput naming the numbers there are."""
        try:
            wanted = int(str(state_id).lstrip("#"))
        except ValueError:
            wanted = None
        found = next((e for e in self.states if e.id == wanted), None)
        if found is None:
            have = ", ".join(str(e.id) for e in self.states[-10:]) or "none yet"
            raise BadInput(f"There is no recorded state {state_id!r} of the ComfyUI in {self.comfyui} "
                           f"(recorded: {have}).", "Run 'h3kit history' to see the states and their numbers.")
        return found

    # -- writing (each saves) -----------------------------------------------------------------------
    def record(self, command: str, state: ComfyState, *, working: bool, evidence: dict | None = None,
               note: str = "") -> Entry:
        entry = Entry((self.states[-1].id + 1) if self.states else 1, mf.now_iso(), command, state, working,
                      evidence or {}, note)
        self.states.append(entry)
        self._trim()
        self.save()
        return entry

    def begin(self, op: str, before: ComfyState, to: dict) -> None:
        """Journal a move before its first change: what it was, where it goes."""
        self.in_flight = {"op": op, "started": mf.now_iso(), "before": before.to_json(), "to": to,
                          "step": "intended"}
        self.save()

    def step(self, name: str) -> None:
        if self.in_flight is not None:
            self.in_flight["step"] = name
            self.save()

    def end(self) -> None:
        self.in_flight = None
        self.save()

    def _trim(self) -> None:
        extra = len(self.states) - KEEP_STATES
        if extra > 0:
            drop = {e.id for e in self.states[:-1] if not e.working}
            drop = set(sorted(drop)[:extra])
            self.states = [e for e in self.states if e.id not in drop]

    def to_json(self) -> dict:
        return {"schema": SCHEMA, "comfyui": self.comfyui, "states": [e.to_json() for e in self.states],
                "in_flight": self.in_flight}

    def save(self) -> Path:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        return atomic_write(self.path, json.dumps(self.to_json(), indent=1, ensure_ascii=False) + "\n")


def history_path(state_dir: Path, comfy_path: str | Path) -> Path:
    return Path(state_dir) / FOLDER / f"{mf.slug_for(Path(comfy_path))}.json"


def load(state_dir: Path, comfy_path: str | Path) -> History:
    """The history of the ComfyUI at `comfy_path` (empty when none is recorded); BadInput when unreadable."""
    path = history_path(state_dir, comfy_path)
    if not path.is_file():
        return History(path, mf.canonical(comfy_path))
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
        return History(path, doc.get("comfyui") or mf.canonical(comfy_path),
                       [_entry(e) for e in doc.get("states") or []], doc.get("in_flight"))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise BadInput(f"h3kit's history of the ComfyUI in {comfy_path} cannot be read ({path}: {exc}).",
                       f"Move {path} aside; h3kit starts a new history at its next command.") from None
