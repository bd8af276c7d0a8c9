"""How a command ends: its links closed and its tasks ended, each bounded, whatever they do
(``gpudash.cli.closing``)."""

from __future__ import annotations

import asyncio
import logging
import time

import pytest

from gpudash.cli import closing
from gpudash.cli.closing import CommandLoop, close_all
from gpudash.transport import LocalSource


async def _stubborn(cancels: list[int]) -> None:
    """Swallows every cancel, as a follower whose cancel ``asyncio.wait_for`` lost did."""
    while True:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            cancels.append(1)


async def _start(coro: object) -> None:
    asyncio.ensure_future(coro)  # type: ignore[arg-type]
    await asyncio.sleep(0)


def test_a_task_that_will_not_end_is_abandoned_not_waited_for(
    caplog: pytest.LogCaptureFixture,
) -> None:
    cancels: list[int] = []
    began = time.monotonic()
    with caplog.at_level(logging.WARNING, "gpudash.cli"), CommandLoop() as loop:
        loop.run(_start(_stubborn(cancels)))
    took = time.monotonic() - began
    assert took < closing.CLOSE_TIMEOUT_S + 1.5, took
    assert len(cancels) >= 5  # cancelled again and again, not once
    assert [t.get_coro().__name__ for t in loop.abandoned] == ["_stubborn"]  # type: ignore[union-attr]
    assert "still runs" in caplog.text and "_stubborn" in caplog.text


def test_what_ends_on_its_cancel_is_cancelled_and_the_loop_closed() -> None:
    ended: list[str] = []

    async def polite() -> None:
        try:
            await asyncio.sleep(3600)
        finally:
            ended.append("polite")

    began = time.monotonic()
    with CommandLoop() as loop:
        loop.run(_start(polite()))
        inner = loop.run(_loop_of())
    assert time.monotonic() - began < 1.0
    assert ended == ["polite"] and loop.abandoned == []
    assert inner.is_closed()


async def _loop_of() -> asyncio.AbstractEventLoop:
    return asyncio.get_running_loop()


class _Hangs(LocalSource):
    """This machine, whose close never returns (a link whose teardown hangs)."""

    async def close(self) -> None:
        await asyncio.sleep(3600)


def test_a_source_that_does_not_close_holds_the_end_only_so_long(
    caplog: pytest.LogCaptureFixture,
) -> None:
    began = time.monotonic()
    with caplog.at_level(logging.WARNING, "gpudash.cli"), CommandLoop() as loop:
        loop.run(close_all([_Hangs(), LocalSource()]))
    assert time.monotonic() - began < closing.CLOSE_TIMEOUT_S + 1.0
    assert f"took over {closing.CLOSE_TIMEOUT_S:g} s" in caplog.text
