"""Keep a host's snapshots flowing across dropped links, reporting every state change."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import AsyncIterator, Awaitable, Callable

from gpudash.domain.model import HostSnapshot
from gpudash.protocol.source import ConnectError, HostKeyError, HostSource, LinkLost, SourceError
from gpudash.record import record

BACKOFF_FIRST_S = 0.5
BACKOFF_MAX_S = 30.0


@record
class LinkState:
    """What the header shows for one host."""

    # "connecting", "connected", "stale", "reconnecting", "error"; "failed": given up, the
    # operator must act (a host key problem the dashboard does not retry)
    state: str
    since: float  # epoch seconds: when the link entered this state (stale: last sample)
    retry_in: float | None = None  # seconds until the next attempt
    error: str | None = None  # the SourceError's message, shown as is
    attempt: int = 0  # connecting: 0 for the first connection, then 1, 2, ...


async def reconnecting_stream(
    source: HostSource,
    interval: float,
    on_state: Callable[[LinkState], None],
    *,
    first_backoff: float = BACKOFF_FIRST_S,
    max_backoff: float = BACKOFF_MAX_S,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> AsyncIterator[HostSnapshot]:
    """Snapshots from ``source``, reconnecting with capped exponential backoff.

    A host key problem is not retried: it needs the operator (``HostKeyError`` is
    raised after being reported). Every other ``SourceError`` is reported as ``stale``
    (we had data) or ``error`` and retried after 0.5 s, 1 s, 2 s ... 30 s.
    """
    backoff = first_backoff
    last_sample: float | None = None
    for attempt in itertools.count():
        on_state(LinkState("connecting", time.time(), attempt=attempt))
        connected = False
        try:
            async for snap in source.stream(interval):
                if not connected:
                    connected = True
                    backoff = first_backoff
                    on_state(LinkState("connected", time.time()))
                last_sample = time.time()
                yield snap
        except HostKeyError as exc:
            on_state(LinkState("error", time.time(), None, str(exc)))
            raise
        except (LinkLost, ConnectError, SourceError) as exc:
            now = time.time()
            if last_sample is not None:
                on_state(LinkState("stale", last_sample, None, str(exc)))
            else:
                on_state(LinkState("error", now, None, str(exc)))
            on_state(LinkState("reconnecting", now, backoff, str(exc)))
            await sleep(backoff)
            backoff = min(backoff * 2, max_backoff)
            continue
        return  # the source ended its stream: nothing more to show
