"""One clock for a simulated host and the tests that follow it (issue 30, "one clock")."""

from __future__ import annotations

import asyncio

import pytest

from gpudash.domain.clock import ScaledClock, SteppedClock, WallClock


async def test_a_stepped_clock_wakes_sleepers_in_deadline_order_at_their_deadline() -> None:
    clock = SteppedClock(100.0)
    woke: list[tuple[str, float]] = []

    async def sleeper(name: str, seconds: float) -> None:
        await clock.sleep(seconds)
        woke.append((name, clock.now()))

    tasks = [asyncio.create_task(sleeper(n, s)) for n, s in (("b", 2.0), ("a", 1.0),
                                                               ("c", 5.0))]
    await clock.settle()
    assert clock.sleepers == 3 and woke == []
    await clock.advance(2.5)
    assert woke == [("a", 101.0), ("b", 102.0)] and clock.now() == 102.5
    await clock.advance(10)
    assert woke[-1] == ("c", 105.0) and clock.now() == 112.5
    await asyncio.gather(*tasks)


async def test_a_loop_that_sleeps_again_runs_every_step_of_an_advance() -> None:
    # a demo stream: a sample, then the interval, again and again
    clock = SteppedClock()
    samples: list[float] = []

    async def stream() -> None:
        while True:
            samples.append(clock.now())
            await clock.sleep(0.5)

    task = asyncio.create_task(stream())
    await clock.advance(2.0)
    assert samples == [0.0, 0.5, 1.0, 1.5, 2.0]
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    await clock.advance(1.0)  # a cancelled sleeper is skipped, never woken
    assert samples[-1] == 2.0


async def test_nothing_moves_without_a_step() -> None:
    clock = SteppedClock()
    task = asyncio.create_task(clock.sleep(0.1))
    await asyncio.sleep(0.05)  # real time passes: simulated time does not
    assert not task.done() and clock.now() == 0.0
    await clock.advance(0.1)
    assert task.done()


async def test_the_real_clocks_go_forward() -> None:
    wall, fast = WallClock(), ScaledClock(speed=100.0, start=50.0)
    a, b = wall.now(), fast.now()
    await fast.sleep(1.0)  # a simulated second: 10 ms of real time
    assert wall.now() > a and fast.now() >= b + 1.0
    with pytest.raises(ValueError):
        ScaledClock(speed=0)
