"""gpudash's own log: ``$XDG_STATE_HOME/gpudash/gpudash.log``, for what the screen cannot hold.

Unexpected errors are shown to the operator in a line and written here with their
traceback, so a programming error is never disguised as "link lost" and never lost.
"""

from __future__ import annotations

import logging
import logging.handlers
from pathlib import Path

LEVELS = ("debug", "info", "warning", "error")
MAX_BYTES = 2 * 1024 * 1024


def log_path() -> Path:
    from gpudash.state.paths import state_dir

    return state_dir() / "gpudash.log"


def setup(level: str = "warning", path: Path | None = None) -> Path | None:
    """Send the ``gpudash`` loggers to the log file; returns it (None if it cannot be opened)."""
    target = path or log_path()
    logger = logging.getLogger("gpudash")
    logger.setLevel(level.upper())
    logger.propagate = False
    for old in list(logger.handlers):
        logger.removeHandler(old)
        old.close()
    try:
        target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        handler = logging.handlers.RotatingFileHandler(
            target, maxBytes=MAX_BYTES, backupCount=2, encoding="utf-8", errors="backslashreplace"
        )
    except OSError:
        logger.addHandler(logging.NullHandler())
        return None
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logger.addHandler(handler)
    return target
