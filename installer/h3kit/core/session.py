"""What a library step may know of the person running it: options, folders, and a way to ask.

Library code receives a `Session` and never prints or reads the terminal
itself: `progress` and `ask` go through whatever the CLI layer put behind
them (`h3kit.cli.context.Context` prints to stderr and reads stdin). The base
class here is the quiet, non-interactive one: progress goes to the log only
and every question gets its default answer, which is what scripts and tests
want.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from h3kit.core.paths import Locations, locations


@dataclass
class Outcome:
    """What a step or command gives back: the JSON document, the text a person reads, the exit code."""

    doc: dict | None  # the JSON document (carries "schema")
    text: str = ""
    code: int = 0
    warnings: list[str] = field(default_factory=list)


@dataclass
class Session:
    json: bool = False
    verbose: int = 0
    yes: bool = False
    dry_run: bool = False
    locations: Locations = field(default_factory=locations)
    log: logging.Logger = field(default_factory=lambda: logging.getLogger("h3kit"))

    @property
    def interactive(self) -> bool:
        """May we ask the user a question? The quiet session never may."""
        return False

    def progress(self, message: str) -> None:
        self.log.info(message)

    def confirm(self, question: str, default: bool = False) -> bool:
        """Yes/no; `--yes` answers yes, a non-interactive session the default."""
        if self.yes:
            return True
        if not self.interactive:
            return default
        answer = self.ask(question + (" [Y/n] " if default else " [y/N] "), "").strip().lower()
        return default if not answer else answer in ("y", "yes")

    def ask(self, question: str, default: str = "") -> str:
        """A line of text from the person; `default` when nobody can answer."""
        return default
