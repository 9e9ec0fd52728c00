"""The error classes every command raises, each bound to a contract exit code.

A command raises one of these with a sentence that says what is wrong and a
fix; the CLI layer prints both (and the log path) and exits with `exit_code`.
Anything else that escapes is a bug: exit 1, message and log path, no bare
traceback on the terminal (the traceback goes to the log).
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_INTERNAL = 1
EXIT_BAD_INPUT = 2
EXIT_NOT_READY = 3
EXIT_VERIFY_FAILED = 4
EXIT_INTERRUPTED = 130


class H3kitError(Exception):
    """Base class: a message for the user, an optional fix, an exit code."""

    exit_code = EXIT_INTERNAL

    def __init__(self, message: str, fix: str | None = None, *, details: dict | None = None):
        super().__init__(message)
        self.message = message
        self.fix = fix
        self.details = details or {}

    def to_json(self) -> dict:
        return {
            "error": self.message,
            "fix": self.fix,
            "exit_code": self.exit_code,
            **({"details": self.details} if self.details else {}),
        }


class BadInput(H3kitError):
    """Usage errors, invalid config, unknown profile, bad paths (exit 2)."""

    exit_code = EXIT_BAD_INPUT


class NotReady(H3kitError):
    """The environment is not ready: no ComfyUI, no compiler, machine below the floor (exit 3)."""

    exit_code = EXIT_NOT_READY


class VerificationFailed(H3kitError):
    """Installed, but a verification step failed (exit 4)."""

    exit_code = EXIT_VERIFY_FAILED
