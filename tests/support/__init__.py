"""What the tests share: one definition each (issue 30, "a suite that helps").

``until`` is the wait on a simulated event: it steps the simulated host's clock
(``gpudash.domain.clock.SteppedClock``) until the condition holds, and gives the app a
real moment between steps to draw what the step set going. No test waits on the wall
clock for a simulated event; ``wait_for`` (tests/test_ui.py) is for what the screen does
by itself (a dialog mounted, a key handled).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, TypeVar

from gpudash.domain.clock import SteppedClock

STEP_S = 0.25  # simulated seconds per step: the dashboard's test interval
BUDGET_S = 900.0  # simulated seconds an awaited event may take at most

REAL_PAUSE_S = 0.005  # a real moment, where nothing waits on the stepped clock

T = TypeVar("T")


def stepped_clock_of(app: Any) -> SteppedClock:
    """The stepped clock of the app's (first) demo host."""
    for view in getattr(app, "views", ()):
        clock = getattr(view.source, "sim_clock", None)
        if isinstance(clock, SteppedClock):
            return clock
    raise AssertionError("the app follows no demo host on a SteppedClock")


async def until(pilot: Any, predicate: Callable[[], object], *, within_s: float = BUDGET_S,
                clock: Any = None, what: str = "") -> None:
    """Step the host's clock by ``STEP_S`` until ``predicate()`` holds; fail, saying how
    many simulated seconds passed, past ``within_s`` of them."""
    clock = clock_of(clock) if clock is not None else stepped_clock_of(pilot.app)
    waited = 0.0
    while not predicate():
        if waited >= within_s:
            raise AssertionError(f"{what or 'condition'} not met within {within_s:g} "
                                 "simulated seconds")
        await clock.advance(STEP_S)
        waited += STEP_S
        await asyncio.sleep(0.01)  # a real moment: the throttled redraw, the worker


async def run_until(host: Any, predicate: Callable[[], object], *,
                    within_s: float = BUDGET_S, what: str = "") -> None:
    """``until`` without an app: the engine, the CLI in-process, a follower (``host``: a
    demo host or its clock)."""
    clock = clock_of(host)
    waited = 0.0
    while not predicate():
        if waited >= within_s:
            raise AssertionError(f"{what or 'condition'} not met within {within_s:g} "
                                 "simulated seconds")
        await clock.advance(STEP_S)
        waited += STEP_S
        if not clock.sleepers:  # what is awaited waits on something else (a real timeout)
            await asyncio.sleep(REAL_PAUSE_S)


async def settled(pilot: Any, *, within_s: float = 10.0) -> None:
    """Wait, in real time, until the screen has nothing left to do: no layout, repaint or
    recompose pending, no callback waiting for a refresh, no throttled redraw waiting for
    its frame, the same three looks in a row. What a fixed ``pilot.pause(0.2)`` hoped for
    ("laid out by then"), without guessing how long it takes on a loaded machine."""
    deadline = time.monotonic() + within_s
    quiet = 0
    while quiet < 3:
        if time.monotonic() > deadline:
            raise AssertionError(f"the screen still busy after {within_s:g} s")
        await pilot._wait_for_screen()
        screen = pilot.app.screen
        feeds = getattr(pilot.app, "feeds", None)
        throttles = (feeds.view_redraw, feeds.rows_redraw) if feeds is not None else ()
        busy = (screen._layout_required or screen._scroll_required
                or screen._repaint_required or screen._recompose_required
                or screen._dirty_widgets or screen._callbacks
                or any(t.pending for t in throttles))
        if busy:
            screen._on_timer_update()  # what its update timer would do next
        quiet = 0 if busy else quiet + 1
        await asyncio.sleep(REAL_PAUSE_S)


def app_clock(sources: Iterable[Any]) -> Callable[[], float]:
    """The app's clock (epoch seconds: a sample's age, a link gone stale, an action's
    time) on the first demo host's stepped clock, so that the header's "last sample 1.6 s
    ago" moves only as the test steps the host; the wall's where no host runs on one."""
    for source in sources:
        sim = getattr(source, "sim", None)
        if sim is not None and isinstance(sim.clock, SteppedClock):
            return lambda: float(sim.boot_epoch + sim.now())
    return time.time


def clock_of(host: Any) -> SteppedClock:
    """The stepped clock of a demo host (or the clock itself)."""
    clock = getattr(host, "sim_clock", host)
    assert isinstance(clock, SteppedClock), f"{host!r} does not run on a SteppedClock"
    return clock


async def stepped(host: Any, work: Awaitable[T], *, within_s: float = BUDGET_S,
                  what: str = "") -> T:
    """Run ``work`` (an action through the engine, a follower's few samples) as a task and
    step the demo host's clock (``host``: the host or its clock) until it is done: it takes
    the simulated seconds it takes, whatever the machine's load. Fails past ``within_s`` of
    them, the task cancelled."""
    clock = clock_of(host)
    task = asyncio.ensure_future(work)
    try:
        await clock.settle()
        await run_until(clock, task.done, within_s=within_s, what=what or "the work")
    finally:
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
    return task.result()


class SelfSteppingClock(SteppedClock):
    """A stepped clock that steps itself, ``STEP_S`` at a time, while anything sleeps on it.

    For a synchronous call that runs its own event loop (the CLI in-process:
    ``run_reclaim``, ``run_fix``), which a test cannot step from outside: its host's
    simulated waits take no real time and end in the order of their deadlines, whatever
    the machine's load. The world moves only while the call waits on it: nothing happens
    on the host between two calls but what the test does to it."""

    def __init__(self, start: float = 0.0) -> None:
        super().__init__(start)
        self._driver: asyncio.Task[None] | None = None

    async def sleep(self, seconds: float) -> None:
        loop = asyncio.get_running_loop()  # each call of the CLI runs a loop of its own
        if seconds > 0 and (self._driver is None or self._driver.done()
                            or self._driver.get_loop() is not loop):
            self._driver = loop.create_task(self._drive())
        await super().sleep(seconds)

    async def _drive(self) -> None:
        await self.settle()
        while self.sleepers:
            await self.advance(STEP_S)


async def next_sample(pilot: Any, *, what: str = "") -> None:
    """Step until the app's current host has recorded one sample more: the host as it is
    now (after an action's report, say), then a real moment for the screen to draw it."""
    view = pilot.app.view
    seen = len(view.history)
    await until(pilot, lambda: len(view.history) > seen, what=what or "the next sample")
    await pilot.pause(0.05)
