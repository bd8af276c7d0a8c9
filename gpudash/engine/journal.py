"""A started unit's journal, as its serving phase reads it: a help, never the proof."""

from __future__ import annotations

import asyncio
from collections import deque

from gpudash.protocol.source import Capability, HostControl, SourceError

LOG_TAIL = 200  # journal lines kept of a unit being started
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
