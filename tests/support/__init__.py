"""What the tests share: one definition each (issue 30, "a suite that helps").

``until`` is the wait on a simulated event: it steps the simulated host's clock
(``gpudash.domain.clock.SteppedClock``) until the condition holds, and gives the app a
real moment between steps to draw what the step set going. No test waits on the wall
clock for a simulated event; ``wait_for`` (tests/test_ui.py) is for what the screen does
by itself (a dialog mounted, a key handled).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gpudash.domain.clock import SteppedClock

STEP_S = 0.25  # simulated seconds per step: the dashboard's test interval
BUDGET_S = 900.0  # simulated seconds an awaited event may take at most


def stepped_clock_of(app: Any) -> SteppedClock:
    """The stepped clock of the app's (first) demo host."""
    for view in getattr(app, "views", ()):
        clock = getattr(view.source, "sim_clock", None)
        if isinstance(clock, SteppedClock):
            return clock
    raise AssertionError("the app follows no demo host on a SteppedClock")


async def until(pilot: Any, predicate: Callable[[], object], *, within_s: float = BUDGET_S,
                clock: SteppedClock | None = None, what: str = "") -> None:
    """Step the host's clock by ``STEP_S`` until ``predicate()`` holds; fail, saying how
    many simulated seconds passed, past ``within_s`` of them."""
    clock = clock or stepped_clock_of(pilot.app)
    waited = 0.0
    while not predicate():
        if waited >= within_s:
            raise AssertionError(f"{what or 'condition'} not met within {within_s:g} "
                                 "simulated seconds")
        await clock.advance(STEP_S)
        waited += STEP_S
        await pilot.pause(0.01)  # a real moment: the throttled redraw, the worker


async def run_until(clock: SteppedClock, predicate: Callable[[], object], *,
                    within_s: float = BUDGET_S, what: str = "") -> None:
    """``until`` without an app: the engine, the CLI in-process, a follower."""
    waited = 0.0
    while not predicate():
        if waited >= within_s:
            raise AssertionError(f"{what or 'condition'} not met within {within_s:g} "
                                 "simulated seconds")
        await clock.advance(STEP_S)
        waited += STEP_S
