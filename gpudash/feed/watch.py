"""A host followed for as long as the exporter runs: its newest state, replaced whole.

``HostWatch`` follows one host through the same reconnecting stream the dashboard uses
and keeps what it knows as one immutable ``WatchedHost``, replaced on every sample or link
change, so a reader (a scrape) takes one consistent reference per host.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from gpudash.domain.crashloop import RestartWatch
from gpudash.domain.model import HostSnapshot
from gpudash.feed.reconnect import LinkState, reconnecting_stream
from gpudash.protocol.source import HostSource, SourceError, round_trip_s

log = logging.getLogger("gpudash.feed.watch")

RETRY_S = 30.0  # a host whose stream gave up (a host key problem) is tried again after this


@dataclass(frozen=True, slots=True)
class WatchedHost:
    """What the exporter knows of one host at one instant (never mutated: replaced)."""

    name: str
    link: LinkState
    snapshot: HostSnapshot | None = None
    crash_looping: frozenset[str] = frozenset()  # unit names
    samples: int = 0  # snapshots received since the exporter started
    round_trip_s: float | None = None

    @property
    def up(self) -> bool:
        return self.link.state == "connected" and self.snapshot is not None


LinkListener = Callable[[str, LinkState], None]


class HostWatch:
    """Follows one host for as long as it runs; ``view`` is always its newest state."""

    def __init__(
        self, source: HostSource, interval: float, *, on_link: LinkListener | None = None,
        clock: Callable[[], float] = time.monotonic, retry_s: float = RETRY_S,
    ) -> None:
        self.source = source
        self.interval = interval
        self.on_link = on_link
        self.clock = clock
        self.retry_s = retry_s
        self.restarts = RestartWatch()
        self.view = WatchedHost(source.name, LinkState("connecting", time.time()))

    def link_changed(self, state: LinkState) -> None:
        self.view = replace(self.view, link=state)
        if self.on_link is not None:
            self.on_link(self.view.name, state)

    def sampled(self, snap: HostSnapshot) -> None:
        looping = self.restarts.observe(snap.units, self.clock())
        view = self.view
        self.view = WatchedHost(view.name, view.link, snap, looping, view.samples + 1,
                             round_trip_s(self.source))

    async def run(self) -> None:
        """Sample until cancelled. Nothing a host does ends this, nor any other host's."""
        while True:
            try:
                async for snap in reconnecting_stream(self.source, self.interval,
                                                      self.link_changed):
                    self.sampled(snap)
                self.link_changed(LinkState("error", time.time(), error="the stream ended"))
            except SourceError:
                pass  # a host key problem: reported by the stream; the operator must act
            except Exception as exc:  # noqa: BLE001 - a bug must not silence the other hosts
                log.exception("%s: following the host failed", self.view.name)
                self.link_changed(LinkState("error", time.time(),
                                            error=f"internal error: {type(exc).__name__}"))
            await asyncio.sleep(self.retry_s)
