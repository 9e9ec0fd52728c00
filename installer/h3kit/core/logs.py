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
        fh = logging.FileHandler(log_file, encoding="utf-8")
        fh.setFormatter(logging.Formatter(FORMAT))
        fh.setLevel(logging.DEBUG)
        logger.addHandler(fh)
        written = log_file
    except OSError:
        pass  # a read-only home must not stop fingerprint or plan from working
    if verbose:
        sh = logging.StreamHandler(sys.stderr)
        sh.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
        sh.setLevel(logging.DEBUG if verbose > 1 else logging.INFO)
        logger.addHandler(sh)
    logger.propagate = False
    logger.debug("h3kit start argv=%r pid=%d", sys.argv, os.getpid())
    return written
