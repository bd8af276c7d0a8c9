"""A started unit's journal, as its serving phase reads it: a help, never the proof."""

from __future__ import annotations

import asyncio
import io
from collections import deque
from typing import Any

from gpudash.protocol.source import Capability, HostControl, SourceError
from gpudash.serving.logsigns import Failure, failure

LOG_TAIL = 200  # journal lines kept of a unit being started
CRASH_LOG_READS = 3  # a crash the followed log does not explain: read the journal again
CRASH_LOG_WAIT_S = 0.5
JOURNAL_RETRY_S = 1.0  # a follower whose link dropped asks again this often


async def follow_journal(control: HostControl, unit: str, log_tail: deque[str]) -> None:
    """The started unit's journal, followed into ``log_tail`` while it loads; back
    on from the last line read after a lost link."""
    if Capability.JOURNAL not in control.capabilities:
        return
    cursor: str | None = None
    while True:
        try:
            # after a lost link: on from the last line read, nothing twice or missed
            lines = control.journal(unit, lines=LOG_TAIL, follow=True, after=cursor)
            async for line in lines:
                log_tail.append(line.message)
                cursor = line.cursor or cursor
        except SourceError:
            pass  # the log is a help, not the proof: the samples still decide
        else:
            return  # the journal ended (a host that cannot follow)
        if cursor is None and log_tail:
            return  # lines without cursors: cannot resume without showing some twice
        await asyncio.sleep(JOURNAL_RETRY_S)


async def journal_tail(control: HostControl, unit: str) -> list[str]:
    """The unit's last lines, read now (none where the host keeps no journal)."""
    if Capability.JOURNAL not in control.capabilities:
        return []
    out: list[str] = []
    try:
        async for line in control.journal(unit, lines=LOG_TAIL, follow=False):
            out.append(line.message)
    except SourceError:
        pass
    return out


def task_stack(task: asyncio.Task[Any]) -> str:
    """Where a task waits, in one line per frame (for the log)."""
    out = io.StringIO()
    task.print_stack(file=out)
    return out.getvalue().replace("\n", " | ")


async def failure_from_log(control: HostControl, unit: str, followed: list[str],
                           crashed: bool) -> tuple[list[str], Failure | None]:
    """(the log lines read, the failure they name) of a unit that does not serve. The
    follower can lag the crash it explains (a busy host, a slow link): a crashed unit is
    down, so its journal has the failure line now or very soon."""
    lines = followed or await journal_tail(control, unit)
    found = failure(lines)
    for _ in range(CRASH_LOG_READS if crashed and found is None else 0):
        tail = await journal_tail(control, unit)
        if failure(tail) is not None:
            return tail, failure(tail)
        await control.sleep(CRASH_LOG_WAIT_S)
    return lines, found
