"""What opening a host from the Prometheus fleet found, for its row once the table is back.

Enter opens a host over SSH (``gpudash HOST``); when that dashboard is quit the table comes
back with, for that host: why SSH did not reach it, or the host's own figures from its last
sample there (after a reap, its orphans gone and its memory back) until Prometheus has a
sample of the host at least as new; and the last action taken there.
"""

from __future__ import annotations

from dataclasses import replace

from gpudash.domain.fleet import HostSummary
from gpudash.fleetprom.rows import PromHost
from gpudash.record import record

MIB = 2.0**20


@record
class Visit:
    """One host opened over SSH and quit again."""

    ended_at: float  # this machine's clock: when its dashboard was quit
    error: str | None = None  # why SSH never reached it (None: it answered)
    taken_at: float | None = None  # the host's clock: its last sample there
    summary: HostSummary | None = None  # that sample's fleet figures
    action: str | None = None  # the last action there and its verdict, in words

    def newer_than(self, host: PromHost) -> bool:
        """Whether this visit's figures are newer than Prometheus' of ``host`` (its own
        sample time for gpudash's exporter, else the scrape's)."""
        if self.error is not None or self.taken_at is None or self.summary is None:
            return False
        seen = host.sampled_at if host.sampled_at is not None else host.scraped_at
        return seen is None or seen < self.taken_at


def as_visited(host: PromHost, visit: Visit | None) -> PromHost:
    """``host`` with the visit's figures where they are newer than Prometheus' (what
    Prometheus did not measure, alerts and dcgm's, stays as it said)."""
    if visit is None or not visit.newer_than(host) or visit.summary is None:
        return host
    s = visit.summary
    return replace(
        host, gpus=s.gpus_total, gpus_held=s.gpus_in_use,
        used_bytes=None if s.used_mib is None else s.used_mib * MIB,
        total_bytes=None if s.total_mib is None else s.total_mib * MIB,
        orphans=s.orphans, orphaned_bytes=None, reclaimable_bytes=s.reclaimable_mib * MIB,
        crash_looping=s.crash_looping)
