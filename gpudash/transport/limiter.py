"""How many SSH connects may be in flight at once, and how fast to retry when they fail.

256 hosts started together would open 256 TCP connections and 256 agent signing
requests in the same second: sshd's ``MaxStartups`` (10 by default) drops the excess, a
jump host or the agent chokes, and every host then fails and retries in step. So every
``dial`` of a process goes through one ``ConnectLimiter``: at most ``limit`` connects
(handshake + auth) in flight; while connects are failing, new ones wait a capped
exponential backoff (0.25 s, 0.5 s … 8 s) shared by all hosts, reset by the first success.
A host's own reconnect backoff (``reconnect``) comes on top of this.

The TCP connect itself is made before a slot is taken (``ssh.dial``): a host whose SYNs
go unanswered (a black hole: down, firewalled) waits out its own connect timeout without
holding a slot, so it delays no other host, and its timeout is not a sign of overload.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

DEFAULT_LIMIT = 8  # below OpenSSH's MaxStartups default of 10
BACKOFF_FIRST_S = 0.25
BACKOFF_MAX_S = 8.0


class ConnectLimiter:
    """A semaphore over connects plus a shared backoff while they fail."""

    def __init__(
        self,
        limit: int = DEFAULT_LIMIT,
        *,
        first_backoff: float = BACKOFF_FIRST_S,
        max_backoff: float = BACKOFF_MAX_S,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        if limit < 1:
            raise ValueError(f"connect limit must be >= 1, not {limit}")
        self.limit = limit
        self.first_backoff = first_backoff
        self.max_backoff = max_backoff
        self._clock = clock
        self._sleep = sleep
        self._slots: asyncio.Semaphore | None = None  # made in the loop that uses it
        self._loop: asyncio.AbstractEventLoop | None = None
        self.backoff = 0.0  # the current shared wait after a failure (0: none)
        self._not_before = 0.0
        self.in_flight = 0
        self.peak = 0  # the most connects ever in flight at once (for tests and logs)

    def _semaphore(self) -> asyncio.Semaphore:
        loop = asyncio.get_running_loop()
        if self._slots is None or self._loop is not loop:
            # A process may run several event loops one after another (the CLI, tests).
            self._slots, self._loop = asyncio.Semaphore(self.limit), loop
        return self._slots

    @asynccontextmanager
    async def slot(
        self, overload: Callable[[BaseException], bool] = lambda _exc: True
    ) -> AsyncIterator[None]:
        """Hold one connect slot for the body. A body that raises an exception for which
        ``overload`` says yes (a timeout, a reset: not a refused key) starts or doubles
        the shared backoff; a body that returns ends it. Cancellation does neither."""
        async with self._semaphore():
            wait = self._not_before - self._clock()
            if wait > 0:
                await self._sleep(wait)
            self.in_flight += 1
            self.peak = max(self.peak, self.in_flight)
            try:
                yield
            except asyncio.CancelledError:
                raise
            except BaseException as exc:
                if overload(exc):
                    self.failed()
                raise
            else:
                self.succeeded()
            finally:
                self.in_flight -= 1

    def failed(self) -> None:
        self.backoff = min(self.max_backoff, max(self.first_backoff, self.backoff * 2))
        self._not_before = self._clock() + self.backoff

    def succeeded(self) -> None:
        self.backoff = 0.0
        self._not_before = 0.0


# Every SSH connect of this process (jump hosts included) shares this one.
CONNECTS = ConnectLimiter()
