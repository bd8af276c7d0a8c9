"""gpudash's own log: ``$XDG_STATE_HOME/gpudash/gpudash.log``, for what the screen cannot hold.

Unexpected errors are shown to the operator in a line and written here with their
traceback, so a programming error is never disguised as "link lost" and never lost.
The file is opened by the rules of ``gpudash.state.files`` (0600, never through a link,
in a directory only the effective user can write). A record is one line: host text in a
message (a host's name, what it sent) is escaped as everywhere, so it cannot forge a line
of the log nor drive the terminal of whoever reads it.
"""

from __future__ import annotations

import copy
import io
import logging
import logging.handlers
import os
from pathlib import Path
from types import TracebackType

from gpudash.domain.untrusted import clean, clean_lines
from gpudash.state import files

LEVELS = ("debug", "info", "warning", "error")
MAX_BYTES = 2 * 1024 * 1024


def log_path() -> Path:
    from gpudash.state.paths import state_dir

    return state_dir() / "gpudash.log"


class StateFileHandler(logging.handlers.RotatingFileHandler):
    """A rotating log whose file (the current one, after every rotation too) is opened
    by the state-file rules: 0600, never through a symbolic link, a regular file."""

    def _open(self) -> io.TextIOWrapper:
        fd = files.open_append(Path(self.baseFilename))
        stream = os.fdopen(fd, "a", encoding=self.encoding, errors=self.errors)
        assert isinstance(stream, io.TextIOWrapper)
        return stream


class OneLineFormatter(logging.Formatter):
    """The message as one escaped line; a traceback below it, each of its lines escaped."""

    def formatMessage(self, record: logging.LogRecord) -> str:
        shown = copy.copy(record)  # other handlers of the record see it as it was
        shown.message = clean(record.message)
        return super().formatMessage(shown)

    def formatException(
        self, ei: tuple[type[BaseException], BaseException, TracebackType | None]
        | tuple[None, None, None],
    ) -> str:
        return "\n".join(clean_lines(super().formatException(ei).split("\n")))


def setup(level: str = "warning", path: Path | None = None) -> Path | str:
    """Send the ``gpudash`` loggers to the log file; returns it, or why it cannot be opened
    (a state directory refused: the reason says how to fix it)."""
    target = path or log_path()
    logger = logging.getLogger("gpudash")
    logger.setLevel(level.upper())
    logger.propagate = False
    for old in list(logger.handlers):
        logger.removeHandler(old)
        old.close()
    try:
        handler = StateFileHandler(
            target, maxBytes=MAX_BYTES, backupCount=2, encoding="utf-8", errors="backslashreplace"
        )
    except OSError as exc:
        logger.addHandler(logging.NullHandler())
        return f"the log file {target} cannot be opened: {exc}"
    handler.setFormatter(OneLineFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logger.addHandler(handler)
    return target
