"""Every run appends to one log file under the state dir.

The terminal gets short sentences; the log gets the details and tracebacks,
so an error message can point at it.
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

FORMAT = "%(asctime)s %(levelname)s [%(process)d] %(name)s: %(message)s"
SCREEN_FORMAT = "%(levelname)s %(name)s: %(message)s"
# Files h3kit went on without (an app's settings that are a FIFO, a cache ref in another encoding): the user
# should see which and why, so these lines reach the screen without -v too (core.bounded_read's `.skipped`).
SKIPPED = "h3kit.skipped"


def skipped(line: str) -> None:
    """One "skipped <file>: <why>" line: in the log, and on the screen."""
    logging.getLogger(SKIPPED).warning("%s", line)


def _warn_once(log_file: Path, exc: BaseException | None) -> None:
    why = f" ({exc.strerror or exc})" if isinstance(exc, OSError) else ""
    sys.stderr.write(f"warning: cannot write the log file {log_file}{why}: logging to the screen only.\n")


def _screen_fallback(logger: logging.Logger) -> None:
    if not any(isinstance(h, logging.StreamHandler) and not isinstance(h, logging.FileHandler)
               for h in logger.handlers):
        sh = logging.StreamHandler(sys.stderr)
        sh.setFormatter(logging.Formatter(SCREEN_FORMAT))
        sh.setLevel(logging.WARNING)
        logger.addHandler(sh)


class _LogFile(logging.FileHandler):
    """A file handler that, when its file cannot be written (a full disk), says so once and goes quiet,
    instead of printing logging's traceback on the screen."""

    broken = False

    def emit(self, record):
        if not self.broken:
            super().emit(record)

    def handleError(self, record):  # noqa: N802 - logging API
        if self.broken:
            return
        self.broken = True
        _warn_once(Path(self.baseFilename), sys.exc_info()[1])
        _screen_fallback(logging.getLogger("h3kit"))


def setup(log_file: Path, verbose: int = 0) -> Path | None:
    """Attach a file handler (and a stderr one with -v). Returns the log path, or None if unwritable."""
    logger = logging.getLogger("h3kit")
    logger.setLevel(logging.DEBUG)
    for h in list(logger.handlers):
        logger.removeHandler(h)
        h.close()
    written: Path | None = None
    try:
        log_file.parent.mkdir(parents=True, exist_ok=True)
        fh = _LogFile(log_file, encoding="utf-8")
        fh.setFormatter(logging.Formatter(FORMAT))
        fh.setLevel(logging.DEBUG)
        logger.addHandler(fh)
        written = log_file
    except OSError as exc:  # a read-only home must not stop fingerprint or plan from working
        _warn_once(log_file, exc)
        _screen_fallback(logger)
    sh = logging.StreamHandler(sys.stderr)
    if verbose:
        sh.setFormatter(logging.Formatter(SCREEN_FORMAT))
        sh.setLevel(logging.DEBUG if verbose > 1 else logging.INFO)
    else:  # without -v the screen gets only the skipped files
        sh.setFormatter(logging.Formatter("note: %(message)s"))
        sh.setLevel(logging.WARNING)
        sh.addFilter(lambda record: record.name == SKIPPED)
    logger.addHandler(sh)
    logger.propagate = False
    logger.debug("h3kit start argv=%r pid=%d", sys.argv, os.getpid())
    return written
