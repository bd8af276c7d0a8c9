"""One follower per host: every reader of a host's stream sees the same frames.

``HostFollower`` follows one host through ``reconnecting_stream`` for as long as it runs
and keeps what it knows as one immutable ``Frame``, replaced on every sample and every link
change: the snapshot (with what changed, as the decoder saw it), its triage (reused where
nothing it rests on changed), the link's state, and the crash-loop verdict of the samples
seen so far (``crashloop.RestartWatch``, the one rule). The dashboard and the exporter both
read frames: they cannot disagree on what a host is doing. Nothing here draws anything.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import replace

from gpudash.domain.crashloop import RestartWatch
from gpudash.domain.lint import Learned
from gpudash.domain.model import HostSnapshot
from gpudash.domain.triage import HostTriage, retriage
from gpudash.feed.reconnect import BACKOFF_MAX_S, LinkState, reconnecting_stream
from gpudash.protocol.source import HostKeyError, HostSource, SourceError, round_trip_s
from gpudash.record import record

log = logging.getLogger("gpudash.feed.follow")

RETRY_S = 30.0  # after the stream ended, or a host key problem where the caller retries


@record
class Frame:
    """What is known of one host at one instant (never mutated: replaced)."""

    name: str
    link: LinkState
    snapshot: HostSnapshot | None = None
    triage: HostTriage | None = None
    samples: int = 0  # snapshots received since the follower started
    round_trip_s: float | None = None
    received_at: float | None = None  # the follower's clock, at the newest sample

    @property
    def up(self) -> bool:
        return self.link.state == "connected" and self.snapshot is not None

    @property
    def crash_looping(self) -> frozenset[str]:
        """The units systemd keeps restarting, as the samples so far show it."""
        return frozenset() if self.triage is None else self.triage.crash_looping


# A new frame, and whether a sample made it (False: the link changed).
FrameListener = Callable[[Frame, bool], None]
Learn = Callable[[HostSnapshot], Mapping[str, Learned]]


class HostFollower:
    """Follows one host until cancelled; ``frame`` is always its newest state.

    ``learned(snapshot)``: what gpudash saw of the units' stops on that host, for the unit
    lint. ``retry_host_key``: seconds before a host key problem is tried again; None: never
    (the dashboard's operator must act; the exporter retries).
    """

    def __init__(
        self, source: HostSource, interval: float, *, on_frame: FrameListener | None = None,
        learned: Learn | None = None, clock: Callable[[], float] = time.monotonic,
        retry_host_key: float | None = RETRY_S, retry_s: float = RETRY_S,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.source = source
        self.interval = interval
        self.on_frame = on_frame
        self.learned = learned
        self.clock = clock
        self.retry_host_key = retry_host_key
        self.retry_s = retry_s
        self.sleep = sleep
        self.restarts = RestartWatch()
        self.frame = Frame(source.name, LinkState("connecting", time.time()))

    def _set(self, frame: Frame, sampled: bool) -> None:
        self.frame = frame
        if self.on_frame is not None:
            self.on_frame(frame, sampled)

    def link_changed(self, state: LinkState) -> None:
        self._set(replace(self.frame, link=state), False)

    def sampled(self, snapshot: HostSnapshot) -> None:
        """One sample: triaged against the one before, the crash-loop watch told."""
        now = self.clock()
        last = self.frame
        looping = self.restarts.observe(snapshot.units, now)
        seen = None if self.learned is None else self.learned(snapshot)
        result = retriage(snapshot, last.snapshot, last.triage, learned=seen,
                          crash_looping=looping)
        self._set(Frame(last.name, last.link, snapshot, result, last.samples + 1,
                        round_trip_s(self.source), now), True)

    async def run(self) -> None:
        """Sample until cancelled. Nothing a host does ends this (a host key problem does
        where ``retry_host_key`` is None), nor a bug in a source: it is logged, said, and
        the host tried again."""
        while True:
            wait = self.retry_s
            try:
                async for snapshot in reconnecting_stream(self.source, self.interval,
                                                          self.link_changed, sleep=self.sleep):
                    self.sampled(snapshot)
                why = "the host closed the stream"
            except HostKeyError as exc:
                if self.retry_host_key is None:  # never retried: the operator must act
                    self.link_changed(LinkState("failed", time.time(), None, str(exc)))
                    return
                why, wait = str(exc), self.retry_host_key
            except SourceError as exc:
                why = str(exc)
            except Exception as exc:  # a bug in a source must not freeze or end anything
                log.exception("following %s failed", self.source.name)
                why, wait = f"{type(exc).__name__}: {exc} (details in the log file)", \
                    BACKOFF_MAX_S
            self.link_changed(LinkState("reconnecting", time.time(), wait, why))
            await self.sleep(wait)
