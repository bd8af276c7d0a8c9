"""The link to one host: a connection that runs programs there, and the pipes to them.

A ``Connection`` (``SshConnection`` or ``LocalConnection``) knows how to reach a host,
learn its facts (``connect``), start a program with piped stdin/stdout (``open``), run
a command to completion (``run``), and whether its link is down. It knows nothing of
the collector: which one runs, and how to talk to it, is ``collectors``' business.
"""

from __future__ import annotations

import asyncio
import logging
import shlex
from abc import ABC, abstractmethod
from collections.abc import Callable

from gpudash.protocol.source import (
    CommandResult,
    ConnectError,
    LinkLost,
    ProtocolError,
    SourceError,
)
from gpudash.protocol.wire import MAX_LINE
from gpudash.record import record

log = logging.getLogger("gpudash.transport")

# Every pipe reads lines of up to this many bytes (newline included), as the decoder
# accepts them: the SSH channel's window and the local stream limit are set from it.
LINE_LIMIT = MAX_LINE
PROBE_TIMEOUT_S = 15.0


@record(eq=False)
class HostFacts:
    """What one link learned about its host. A new object for every link, so whoever
    holds state tied to a link (a collector's pipes) can tell a reconnect by identity."""

    is_root: bool
    python: str | None  # the python3 to run the collector with; None: use the shell fallback


class Pipe(ABC):
    """A program running on the host: write to its stdin, read lines from its stdout."""

    def __init__(self, name: str, link_down: Callable[[], bool], line_limit: int) -> None:
        self.name = name
        self.link_down = link_down
        self.line_limit = line_limit

    @abstractmethod
    async def _readline(self) -> bytes:
        """The next line as the channel has it: may be partial at EOF or at the limit.
        Raises ``SourceError`` for failures the channel can name."""

    @abstractmethod
    def write(self, data: bytes) -> None:
        """Write to the program's stdin; ``LinkLost`` if it cannot take it any more."""

    @abstractmethod
    def close(self) -> None: ...

    @abstractmethod
    def stderr_tail(self) -> str: ...

    async def wait_closed(self) -> None:  # noqa: B027 - optional: most pipes need not wait
        """Wait (briefly) until the program is gone after ``close``."""

    async def readline(self, limit_s: float) -> bytes:
        """One complete line, or ``LinkLost`` / ``ProtocolError`` / ``ConnectError``
        saying why not."""
        try:
            # asyncio.timeout, not wait_for: on Python 3.11 wait_for loses a cancel that
            # comes as the line arrives, and a reader of a chatty journal lived on.
            async with asyncio.timeout(limit_s):
                line = await self._readline()
        except TimeoutError:
            raise LinkLost(
                f"{self.name}: no data for {limit_s:.1f} s; link presumed lost"
            ) from None
        except SourceError:
            raise
        except Exception as exc:
            # Not a failure the channel names: a bug here or in a library. Keep the
            # traceback for the log; the operator still gets a typed, worded error.
            log.exception("%s: reading from the host failed unexpectedly", self.name)
            raise LinkLost(f"{self.name}: link lost ({exc or type(exc).__name__})") from exc
        if line.endswith(b"\n"):
            return line
        await asyncio.sleep(0.05)  # let a dropping connection report itself
        if self.link_down():
            raise LinkLost(f"{self.name}: connection closed")
        if len(line) >= self.line_limit:
            raise ProtocolError(
                f"{self.name}: collector sent a line longer than {self.line_limit} bytes"
            )
        if line:
            raise ProtocolError(f"{self.name}: collector output truncated")
        tail = self.stderr_tail().strip()
        if "sudo:" in tail and "password is required" in tail:
            # Retrying cannot help: say what would.
            raise ConnectError(
                f"{self.name}: --sudo needs a NOPASSWD sudoers rule for this login "
                f"(`sudo -n` said: a password is required)"
            )
        raise LinkLost(f"{self.name}: collector exited" + (f": {tail[-300:]}" if tail else ""))


class Connection(ABC):
    """How to reach one host and run programs there."""

    name: str
    line_limit: int = LINE_LIMIT

    @abstractmethod
    async def connect(self) -> HostFacts:
        """The facts of a live link: the current one, or a new one if it is down.
        Raises ``SourceError`` (``HostKeyError`` when the host key is not vouched for)."""

    @abstractmethod
    async def open(self, command: list[str] | str) -> Pipe:
        """Start ``command`` (argv, or a shell command line) on the live link."""

    @abstractmethod
    async def run(self, argv: list[str], limit_s: float, stdin: bytes | None = None
                  ) -> CommandResult:
        """Run ``argv`` to completion (stdout and stderr together), ``stdin`` on its
        standard input (else none). Never raises for the host's sake: a lost link is
        ``returncode=None`` with the reason."""

    @abstractmethod
    def link_down(self) -> bool: ...

    @property
    @abstractmethod
    def route(self) -> str:
        """How this connection reaches its host, in the words of the command line."""

    @abstractmethod
    async def close(self) -> None: ...

    async def probe(self, python: str) -> HostFacts:
        """Learn the login's uid and whether the host has ``python``."""
        script = (
            "id -u; command -v " + shlex.quote(python) + " >/dev/null 2>&1 "
            "&& echo python || echo no-python"
        )
        result = await self.run(["sh", "-c", script], PROBE_TIMEOUT_S)
        words = result.output.split()
        if result.returncode != 0 or len(words) < 2 or not words[0].isdigit():
            raise ConnectError(f"{self.name}: cannot run commands ({result.output.strip()[:200]})")
        return HostFacts(is_root=words[0] == "0", python=python if words[-1] == "python" else None)
