"""What a command gets and what it gives back.

Commands are plain functions `run(args, ctx) -> Outcome`. They never print
their result themselves (only progress, on stderr): the CLI prints the
Outcome as JSON (`--json`) or as text, and exits with its code. `Context`
is the terminal behind a `Session`: the only place h3kit prints progress
and reads an answer from the keyboard.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

from h3kit.core.session import Outcome, Session
from h3kit.steps.options import ComfyTarget

__all__ = ["Context", "Outcome", "comfyui_target"]


@dataclass
class Context(Session):
    @property
    def interactive(self) -> bool:
        """May we ask the user a question? Not with --yes, --json or no terminal."""
        return not self.yes and not self.json and sys.stdin is not None and sys.stdin.isatty()

    def progress(self, message: str) -> None:
        """A status line for people; stderr so --json's stdout stays one document."""
        self.log.info(message)
        print(message, file=sys.stderr, flush=True)

    def ask(self, question: str, default: str = "") -> str:
        if not self.interactive:
            return default
        try:
            return input(question)
        except EOFError:
            return default


def add_comfyui_target(p, what: str, python_note: str = "") -> None:
    """--comfyui PATH (`what`: which ComfyUI folder, in the command's words) and --comfyui-python PATH, the two
    flags `comfyui_target` reads back."""
    p.add_argument("--comfyui", metavar="PATH", help=what)
    p.add_argument("--comfyui-python", metavar="PATH", help="the Python that runs that ComfyUI" + python_note)


def add_fresh_probe(p) -> None:
    p.add_argument("--fresh-probe", action="store_true",
                   help="measure which weight formats run here again instead of using the cached format probe")


def comfyui_target(args) -> ComfyTarget:
    """--comfyui and --comfyui-python, for the commands that take them."""
    return ComfyTarget(args.comfyui, args.comfyui_python)
