"""Per-host state as the dashboard sees it: the newest frame of the host's follower
(``gpudash.feed.follow``), the link as the header says it, and the memory, utilisation and
power histories the plot draws. Nothing here draws anything."""

from __future__ import annotations

import statistics
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import field

from gpudash.domain.model import HostSnapshot
from gpudash.domain.triage import HostTriage
from gpudash.feed.follow import Frame
from gpudash.protocol.source import HostSource
from gpudash.record import record
from gpudash.ui.crashes import CrashReasons
from gpudash.ui.gpu_history import GpuHistory, histories

RTT_JITTER = 0.25  # a round trip within this share of the one shown is shown as it was
RTT_PINGS = 5  # the round trip shown is the median of the last pings'


def shown_round_trip(shown: float | None, recent: Sequence[float]) -> float | None:
    """The round trip the header shows: the median of the ``recent`` pings', and the one
    shown until that differs from it by more than ``RTT_JITTER`` (and a millisecond).
    Each ping's own (15, 4, 7 ms on a quiet local host: the turnaround of two busy
    threads) redrew the header line every second, and said nothing a reader could use;
    a link that slows down shows within three samples."""
    if not recent:
        return None
    measured = statistics.median(recent)
    if shown is not None and abs(measured - shown) <= max(0.001, RTT_JITTER * shown):
        return shown
    return measured


@record(frozen=False, slots=False)
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
    rtt: float | None = None  # request round trip to the host as shown, seconds (None: not known)
    # memory, SM utilisation and power per GPU over the last samples, by metric name
    histories: Mapping[str, GpuHistory] = field(default_factory=histories)
    crashes: CrashReasons = field(default_factory=CrashReasons)  # why its units crash-loop
    _pings: deque[float] = field(default_factory=lambda: deque(maxlen=RTT_PINGS), repr=False)

    def record(self, frame: Frame, now: float) -> None:
        """The follower's newest sample (its snapshot and triage), received ``now``."""
        snapshot = frame.snapshot
        assert snapshot is not None
        self.snapshot = snapshot
        self.triage = frame.triage
        if frame.round_trip_s is None:
            self._pings.clear()  # a new link: nothing measured on it yet
        else:
            self._pings.append(frame.round_trip_s)
        self.rtt = shown_round_trip(self.rtt, self._pings)
        self.received_at = now
        self.state = "connected"
        self.error = None
        self.retry_at = None
        self.attempt = 0
        for series in self.histories.values():
            series.record(snapshot)

    @property
    def history(self) -> GpuHistory:
        """The memory history (what the plot shows first)."""
        return self.histories["memory"]

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
