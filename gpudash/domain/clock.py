"""One clock for a simulated host, the samples it streams, and the tests that follow it.

The demo's world ran on ``monotonic() x speed`` while its sample stream slept in wall time,
and tests waited on the wall clock for simulated events: under load a sample came between
a kill and its respawn, "attempt 2" was read where "attempt 1" was awaited. Everything that
waits on a simulated host now waits on that host's ``Clock``:

- ``WallClock``: real seconds (a real host's control, the CLI).
- ``ScaledClock``: ``speed`` simulated seconds per real one (the demo an operator watches,
  the CLI's demo at 20x).
- ``SteppedClock``: time that moves only when a test says so (``advance``); every sleeper
  whose deadline it passes wakes in deadline order, and what it then does within the same
  step (the next sample's sleep, a respawn's) happens within it too. No test waits on the
  wall clock for a simulated event.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from typing import Protocol


class Clock(Protocol):
    """Seconds that only go forward, and a way to wait for them. ``pace`` waits the
    operator's seconds (a sample interval, as ``--interval`` says it): real ones for a
    scaled clock, the clock's own for a stepped one."""

    def now(self) -> float: ...

    async def sleep(self, seconds: float) -> None: ...

    async def pace(self, seconds: float) -> None: ...


class WallClock:
    """Real time: ``time.monotonic`` and ``asyncio.sleep``."""

    def now(self) -> float:
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(0.0, seconds))

    async def pace(self, seconds: float) -> None:
        await asyncio.sleep(max(0.0, seconds))


class ScaledClock:
    """``speed`` seconds pass per real second (a demo plays minutes in seconds)."""

    def __init__(self, speed: float = 1.0, start: float = 0.0) -> None:
        if speed <= 0:
            raise ValueError(f"a clock's speed is positive, not {speed}")
        self.speed = speed
        self._start = start
        self._real0 = time.monotonic()

    def now(self) -> float:
        return self._start + (time.monotonic() - self._real0) * self.speed

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(0.0, seconds) / self.speed)

    async def pace(self, seconds: float) -> None:
        await asyncio.sleep(max(0.0, seconds))  # an operator's interval is real seconds


# Turns of the event loop given to what a wake-up sets going before the next deadline is
# looked at: enough for a sample to be decoded, triaged and posted, and its stream to ask
# for its next sleep.
SETTLE_TURNS = 8


class SteppedClock:
    """Time a test moves (``advance``, ``run_until``); sleeps wake in deadline order."""

    def __init__(self, start: float = 0.0) -> None:
        self._now = start
        self._sleepers: list[tuple[float, int, asyncio.Future[None]]] = []
        self._order = itertools.count()

    def now(self) -> float:
        return self._now

    @property
    def sleepers(self) -> int:
        """How many are waiting on this clock (a test may wait for one to appear)."""
        return sum(1 for _d, _n, f in self._sleepers if not f.done())

    async def sleep(self, seconds: float) -> None:
        if seconds <= 0:
            await asyncio.sleep(0)
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._sleepers, (self._now + seconds, next(self._order), future))
        await future

    async def pace(self, seconds: float) -> None:
        await self.sleep(seconds)  # one clock: the test's

    async def settle(self) -> None:
        """Let what is runnable run (woken sleepers, the work they set going)."""
        for _ in range(SETTLE_TURNS):
            await asyncio.sleep(0)

    async def advance(self, seconds: float) -> None:
        """Move time ``seconds`` on: each sleeper due by then wakes, in deadline order, with
        the clock at its deadline, and what it does next settles before the next one."""
        target = self._now + max(0.0, seconds)
        await self.settle()
        while self._sleepers and self._sleepers[0][0] <= target:
            deadline, _n, future = heapq.heappop(self._sleepers)
            if future.done():  # cancelled meanwhile
                continue
            self._now = max(self._now, deadline)
            future.set_result(None)
            await self.settle()
        self._now = target
        await self.settle()
