"""Where the command line writes: the result to stdout, everything else to stderr.

Every line that can hold host text goes through ``gpudash.domain.untrusted.clean`` here, in one
place: a process named ``\\x1b[3A\\x1b[J`` cannot erase the plan above the prompt. Text is
given as its lines, never split here: a process named ``a\\n    ✔ ok`` is one line that
shows its ``\\x0a``, not a forged line of the report.
"""

from __future__ import annotations

import os
import shutil
import sys
import time
from collections.abc import Iterable, Sequence
from typing import TextIO

from gpudash.domain.untrusted import clean, clean_lines
from gpudash.engine import Progress


class Terminal:
    """The CLI's three streams, with the contract of gpudash.cli.contract."""

    def __init__(
        self, stdout: TextIO | None = None, stderr: TextIO | None = None,
        stdin: TextIO | None = None,
    ) -> None:
        self.stdout = stdout or sys.stdout
        self.stderr = stderr or sys.stderr
        self.stdin = stdin or sys.stdin

    def say(self, lines: str | Iterable[str]) -> None:
        """Plans, notices, errors: to stderr, one escaped line each (a ``str``: one line)."""
        for line in clean_lines(lines):
            self._write(self.stderr, line + "\n")

    def error(self, message: str | Sequence[str]) -> None:
        """A message (a ``str``: one line) on stderr; several lines come as a list."""
        lines = [message] if isinstance(message, str) else list(message)
        self.say([f"gpudash: {lines[0]}", *lines[1:]] if lines else [])

    def result(self, lines: str | Iterable[str]) -> None:
        """The result, to stdout, one escaped line each (a ``str``: one line); JSON
        already is escaped (``result_json``)."""
        self._write(self.stdout, "".join(line + "\n" for line in clean_lines(lines)))

    def result_json(self, document: str) -> None:
        self._write(self.stdout, document + "\n")

    def result_rendered(self, text: str) -> None:
        """A result rendered from text already escaped (its own colours kept)."""
        self._write(self.stdout, text)

    def confirm(self, question: str = "Proceed? [y/N] ") -> bool | None:
        """Ask on the terminal. None: no terminal to ask on. Ctrl+C propagates at once."""
        if not self.stdin.isatty():
            return None
        self._write(self.stderr, question)
        answer = self.stdin.readline()
        if not answer:  # EOF (Ctrl+D)
            self._write(self.stderr, "\n")
            return False
        return answer.strip().lower() in ("y", "yes")

    def progress(self) -> ProgressLine:
        return ProgressLine(self.stderr)

    def _write(self, stream: TextIO, text: str) -> None:
        try:
            stream.write(text)
            stream.flush()
        except OSError:  # BrokenPipeError, or EIO from a terminal that hung up
            # The reader went away (`| head`, a closed terminal): stop writing there,
            # quietly, for good.
            devnull = os.open(os.devnull, os.O_WRONLY)
            try:
                os.dup2(devnull, stream.fileno())
            except (OSError, ValueError):
                pass
            finally:
                os.close(devnull)


class ProgressLine:
    """Progress on stderr: one updating line on a terminal, a line per change in a pipe."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.tty = stream.isatty()
        self.last: str | None = None
        self.shown = False

    def __call__(self, p: Progress) -> None:
        # the time on each line: the log of what happened when, for a hand-off
        text = f"  .. {time.strftime('%H:%M:%S')} [{p.phase}] {p.message}"
        try:
            if self.tty:
                if p.term_left_s is not None:
                    text += f"  (KILL in {p.term_left_s:.0f} s)"
                width = shutil.get_terminal_size().columns
                self.stream.write("\r\x1b[K" + clean(text)[: max(10, width - 1)])
                self.shown = True
            elif f"{p.phase} {p.message}" != self.last:  # a line per change (not per tick)
                self.stream.write(clean(text) + "\n")
            self.last = f"{p.phase} {p.message}"
            self.stream.flush()
        except (BrokenPipeError, ValueError):
            self.tty = False

    def close(self) -> None:
        if self.tty and self.shown:
            try:
                self.stream.write("\r\x1b[K")
                self.stream.flush()
            except (BrokenPipeError, ValueError):
                pass
