"""What a command gets and what it gives back.

Commands are plain functions `run(args, ctx) -> Outcome`. They never print
their result themselves (only progress, on stderr): the CLI prints the
Outcome as JSON (`--json`) or as text, and exits with its code.
"""

from __future__ import annotations

import logging
import sys
from dataclasses import dataclass, field
from typing import Any

from h3kit.errors import NotReady
from h3kit.paths import Locations, locations


@dataclass
class Outcome:
    doc: dict | None  # the JSON document (carries "schema")
    text: str = ""  # what a person reads without --json
    code: int = 0
    warnings: list[str] = field(default_factory=list)


@dataclass
class Context:
    json: bool = False
    verbose: int = 0
    yes: bool = False
    dry_run: bool = False
    locations: Locations = field(default_factory=locations)
    log: logging.Logger = field(default_factory=lambda: logging.getLogger("h3kit"))

    @property
    def interactive(self) -> bool:
        """May we ask the user a question? Not with --yes, --json or no terminal."""
        return not self.yes and not self.json and sys.stdin is not None and sys.stdin.isatty()

    def progress(self, message: str) -> None:
        """A status line for people; stderr so --json's stdout stays one document."""
        self.log.info(message)
        print(message, file=sys.stderr, flush=True)

    def confirm(self, question: str, default: bool = False) -> bool:
        if self.yes:
            return True
        if not self.interactive:
            return default
        suffix = " [Y/n] " if default else " [y/N] "
        try:
            answer = input(question + suffix).strip().lower()
        except EOFError:
            return default
        return default if not answer else answer in ("y", "yes")


def not_built_yet(name: str, issue: int) -> Any:
    raise NotReady(
        f"'h3kit {name}' is not built yet in this version.",
        f"It arrives with issue #{issue}; update h3kit (./install.sh) and try again.",
    )
