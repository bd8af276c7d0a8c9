"""How a command ends: the hosts' links closed and its tasks ended, each bounded.

A command that has printed its verdict exits. A link that does not close, or a task that
outlives its cancel, must not keep it: on Python 3.11 ``asyncio.wait_for`` once lost the
cancel of a journal follower reading a loading vLLM's log, and ``asyncio.Runner`` then
waited for that follower for good, with ``gpudash start``'s verdict already printed.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine, Sequence
from typing import Any, TypeVar

from gpudash.engine.journal import task_stack
from gpudash.protocol.source import HostSource, SourceError

log = logging.getLogger("gpudash.cli")

CLOSE_TIMEOUT_S = 2.0  # closing the hosts' links; then, ending what still runs
CANCEL_EVERY_S = 0.1  # a task still running after its cancel is cancelled again this often

T = TypeVar("T")


async def close_all(sources: Sequence[HostSource]) -> None:
    """Close every source, side by side, all within ``CLOSE_TIMEOUT_S`` (their collectors
    end with their connections anyway)."""

    async def close(s: HostSource) -> None:
        try:
            await s.close()
        except (SourceError, OSError):
            pass  # closing a dead link has nothing left to report
        except Exception:  # noqa: BLE001 - logged: closing must not hide the outcome
            log.exception("closing %s failed", s.name)

    try:
        async with asyncio.timeout(CLOSE_TIMEOUT_S):
            await asyncio.gather(*(close(s) for s in sources))
    except TimeoutError:
        log.warning("closing %s took over %g s: left to end with gpudash",
                    ", ".join(s.name for s in sources), CLOSE_TIMEOUT_S)


async def end_tasks(limit_s: float = CLOSE_TIMEOUT_S) -> list[asyncio.Task[Any]]:
    """Cancel every other task of this loop, again while it runs, for at most ``limit_s``;
    the tasks still running then (each logged with where it waits)."""
    me = asyncio.current_task()
    left = {t for t in asyncio.all_tasks() if t is not me}
    loop = asyncio.get_running_loop()
    deadline = loop.time() + limit_s
    while left and loop.time() < deadline:
        for task in left:
            task.cancel()
        _, left = await asyncio.wait(left, timeout=min(CANCEL_EVERY_S,
                                                      max(0.0, deadline - loop.time())))
    for task in left:
        log.warning("%s still runs %g s after its cancel; abandoned: %s", task.get_name(),
                    limit_s, task_stack(task))
    return list(left)


class CommandLoop:
    """An ``asyncio.Runner`` for one command: the connection lives in it between the
    command's steps. On leaving it, what still runs is cancelled (``end_tasks``); a task
    that will not end is abandoned with its loop rather than waited for."""

    def __init__(self) -> None:
        self._runner = asyncio.Runner()
        self.abandoned: list[asyncio.Task[Any]] = []

    def __enter__(self) -> CommandLoop:
        self._runner.__enter__()
        return self

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return self._runner.run(coro)

    def __exit__(self, *exc: object) -> None:
        try:
            self.abandoned = self._runner.run(end_tasks())
        except BaseException:  # noqa: BLE001 - Ctrl+C while ending: end without waiting
            self.abandoned = [t for t in asyncio.all_tasks(self._runner.get_loop())
                              if not t.done()]
        if not self.abandoned:
            self._runner.close()
            return
        # asyncio.Runner.close would cancel them once more and wait for them for good
        loop = self._runner.get_loop()
        loop.close()
        asyncio.set_event_loop(None)
