"""Per-host state as the dashboard sees it, and the loop that follows one host.

``follow_host`` reads a ``HostSource`` forever through the transport's
``reconnecting_stream``: every snapshot is triaged and handed on; a failure marks the host
failed until the stream is back. Nothing here draws anything.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field

from gpudash.domain.lint import Learned
from gpudash.domain.model import HostSnapshot
from gpudash.domain.triage import HostTriage, retriage
from gpudash.feed.reconnect import BACKOFF_MAX_S, LinkState, reconnecting_stream
from gpudash.protocol.source import HostKeyError, HostSource, round_trip_s
from gpudash.ui.crashes import CrashReasons

HISTORY = 300  # samples of memory history kept per host

log = logging.getLogger("gpudash.ui.hosts")


@dataclass
class HostView:
    """What the dashboard knows about one host right now."""

    source: HostSource
    name: str
    state: str = "connecting"  # connecting | connected | reconnecting | error
    error: str | None = None
    retry_at: float | None = None
    attempt: int = 0  # connection attempts since the last sample
    snapshot: HostSnapshot | None = None
    triage: HostTriage | None = None
    received_at: float | None = None
    rtt: float | None = None  # request round trip to the host, seconds (None: not known)
    history: deque[tuple[float, dict[int, int | None]]] = field(
        default_factory=lambda: deque(maxlen=HISTORY)
    )
    crashes: CrashReasons = field(default_factory=CrashReasons)  # why its units crash-loop

    def record(
        self, snapshot: HostSnapshot, result: HostTriage, rtt: float | None, now: float
    ) -> None:
        self.snapshot = snapshot
        self.triage = result
        self.rtt = rtt
        self.received_at = now
        self.state = "connected"
        self.error = None
        self.retry_at = None
        self.attempt = 0
        used = snapshot.used_by_gpu()
        if self.history and self.history[-1][1] == used:
            used = self.history[-1][1]  # memory as before: share it (300 samples x hosts)
        self.history.append((snapshot.taken_at, used))

    def age(self, now: float) -> float | None:
        return None if self.received_at is None else max(0.0, now - self.received_at)

    def status(self, now: float, stale_after: float) -> tuple[str, str]:
        """(text, kind) of the connection state; kind is ok | warn | error."""
        age = self.age(now)
        if self.state == "connected" and age is not None and age > stale_after:
            return f"stale {age:.0f} s", "warn"
        if self.state == "connected":
            return "connected", "ok"
        if self.state == "error":
            left = None if self.retry_at is None else max(0.0, self.retry_at - now)
            wait = "" if left is None else f", retry in {left:.0f} s"
            return f"error: {self.error}{wait}", "error"
        if self.state == "reconnecting":
            return "reconnecting", "warn"
        return "connecting", "warn"

    def used_total_mib(self) -> tuple[int | None, int | None]:
        if self.snapshot is None:
            return None, None
        used = [g.memory_used_mib for g in self.snapshot.gpus]
        total = [g.memory_total_mib for g in self.snapshot.gpus]
        return (
            None if any(u is None for u in used) else sum(u for u in used if u is not None),
            None if any(t is None for t in total) else sum(t for t in total if t is not None),
        )

    def orphan_count(self) -> int | None:
        """Orphans in the last sample; None before any (a host never read is not 0)."""
        return None if self.triage is None else len(self.triage.orphans())


async def follow_host(
    source: HostSource,
    interval: float,
    *,
    on_snapshot: Callable[[HostSnapshot, HostTriage, float | None], None],
    on_error: Callable[[str, float | None], None],
    on_connecting: Callable[[int], None],
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    learned: Callable[[HostSnapshot], Mapping[str, Learned]] | None = None,
) -> None:
    """Follow ``source`` until cancelled; the reconnect policy is the transport's.

    ``learned(snapshot)``: what gpudash saw of the units' stops on that host (unit ->
    ``Learned``), for the unit lint.

    ``on_snapshot(snapshot, triage, rtt)``: ``rtt`` is the host's request round trip as
    the transport measures it (None where it is not known, e.g. the demo).
    ``on_error(message, retry_in)``: ``retry_in`` None means it will not be retried
    (an unknown or changed host key needs the operator).
    """
    previous: HostSnapshot | None = None
    last: HostTriage | None = None

    def on_state(state: LinkState) -> None:
        if state.state == "connecting":
            on_connecting(state.attempt)
        elif state.state == "reconnecting":
            on_error(state.error or "link lost", state.retry_in)

    while True:
        try:
            async for snapshot in reconnecting_stream(source, interval, on_state, sleep=sleep):
                # An unchanged sample (the same processes and units) is not triaged again.
                seen = None if learned is None else learned(snapshot)
                last = retriage(snapshot, previous, last, learned=seen)
                on_snapshot(snapshot, last, round_trip_s(source))
                previous = snapshot
            message = "the host closed the stream"
        except HostKeyError as exc:
            on_error(str(exc), None)
            return
        except Exception as exc:  # a bug in a source must not freeze the screen
            log.exception("following %s failed", source.name)
            message = f"{type(exc).__name__}: {exc} (details in the log file)"
        on_error(message, BACKOFF_MAX_S)
        await sleep(BACKOFF_MAX_S)
