"""Reading the fleet from Prometheus: one refresh (``read_fleet``), its rows as JSON
(``fleet_json``), and the refresh loop the dashboard follows (``PromFeed``): the last good
rows are kept through failures (marked stale) and retried with capped backoff.

Each refresh first asks one small question (``PROBE``): are the recording rules' series
there (then they are read, else the raw queries), and is anything newer than what the
last read saw? When nothing is, the refresh reads nothing more: Prometheus has not
changed the answer (a recorded fleet changes once per evaluation interval)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from gpudash.fleetprom.client import PromClient, PromError, paused_collection
from gpudash.fleetprom.queries import PROBE, QUERIES, RECORDED
from gpudash.fleetprom.rows import PromFleet, PromHost, carried, fleet_of
from gpudash.fleetprom.sample import Sample
from gpudash.fleetprom.sshname import SshNameError, SshNameTemplate
from gpudash.record import record

log = logging.getLogger("gpudash.fleetprom")

BACKOFF_MAX_S = 60.0
JSON_SCHEMA = 1


async def read_fleet(client: PromClient, source: str = "raw") -> PromFleet:
    """Every host, from one round of the queries (side by side): the recorded series'
    (``source`` "recorded") or the raw sums; PromError if any fails. The rows are made in
    a worker thread: the dashboard's keys are not held while thousands are."""
    queries = (RECORDED if source == "recorded"
               else tuple((name, None, expr) for name, expr in QUERIES))
    answers = await client.query_all([expr for _name, _stat, expr in queries])
    tagged = [(name, stat, a) for (name, stat, _e), a in zip(queries, answers, strict=True)]
    fleet = await asyncio.get_running_loop().run_in_executor(None, _rows_of, tagged)
    return replace(fleet, source=source)


def _rows_of(answers: list[tuple[str, str | None, list[Sample]]]) -> PromFleet:
    """The rows of the answers (query family, the figure its samples are or None: they
    carry a ``stat`` label, samples)."""
    with paused_collection():
        named: dict[str, list[Sample]] = {}
        for name, stat, samples in answers:
            if stat is not None:
                for s in samples:
                    s.labels["stat"] = stat
            named.setdefault(name, []).extend(samples)
        return fleet_of(named)


@record
class Newest:
    """What ``PROBE`` says: which queries to read, and (recorded) when the rules that
    keep their figures were last evaluated (raw: None, every read may be new)."""

    source: str  # "recorded" or "raw"
    at: float | None


async def probe(client: PromClient) -> Newest:
    """Recorded or raw, and how new: one query, one series."""
    answer = await client.query(PROBE)
    at = max((s.value for s in answer), default=None)
    return Newest("raw", None) if at is None else Newest("recorded", at)


async def read_current(client: PromClient) -> PromFleet:
    """The fleet as it is now: the recorded series where the rules keep them, else raw."""
    return await read_fleet(client, (await probe(client)).source)


def _mib(value: float | None) -> int | None:
    return None if value is None else round(value / 2**20)


def host_json(host: PromHost, now: float, ssh: SshNameTemplate | None) -> dict[str, Any]:
    """One row as JSON: memory in MiB (as ``snapshot --json``), ages in seconds."""
    ssh_name: str | None = None
    ssh_error: str | None = None
    if ssh is not None:
        try:
            ssh_name = ssh.name(dict(host.labels))
        except SshNameError as exc:
            ssh_error = str(exc)
    age = host.age(now)
    return {
        "host": host.name, "labels": dict(host.labels), "sources": list(host.sources),
        "ssh_name": ssh_name, "ssh_name_error": ssh_error,
        "gpus": host.gpus, "gpus_held": host.gpus_held,
        "used_mib": _mib(host.used_bytes), "total_mib": _mib(host.total_bytes),
        "orphaned_mib": _mib(host.orphaned_bytes), "orphans": host.orphans,
        "reclaimable_mib": _mib(host.reclaimable_bytes),
        "unattributed_mib": _mib(host.unattributed_bytes),
        "stray_mib": _mib(host.stray_bytes), "unowned_mib": _mib(host.unowned_bytes),
        "crash_looping": None if host.crash_looping is None else list(host.crash_looping),
        "alerts": list(host.alerts), "link_up": host.link_up,
        "target_down": host.target_down,
        "scrape_age_s": None if age is None else round(age, 1),
        "sample_age_s": None if host.sampled_at is None else round(
            max(0.0, now - host.sampled_at), 1),
        "states": sorted(host.states(now)),
    }


def fleet_json(fleet: PromFleet, url: str, ssh: SshNameTemplate | None) -> dict[str, Any]:
    """The whole table as ``gpudash snapshot --prometheus URL --json`` prints it."""
    return {"schema": JSON_SCHEMA, "prometheus": url, "at": fleet.at, "source": fleet.source,
            "hosts": [host_json(h, fleet.at, ssh) for h in fleet.hosts]}


@record
class FeedState:
    """What the dashboard shows: the rows (the last good ones while failing), and the
    refresh's health."""

    fleet: PromFleet | None
    error: PromError | None = None
    failures: int = 0  # refreshes failed since the last good one
    retry_at: float | None = None  # monotonic: the next try, while failing
    refreshed_at: float | None = None  # monotonic: the last good refresh


class PromFeed:
    """Refreshes the fleet every ``interval`` and hands each new ``FeedState`` to
    ``on_state``; a failure keeps the last rows and retries after 1, 2, 4 ... up to
    BACKOFF_MAX_S seconds (never sooner than the interval)."""

    def __init__(self, client: PromClient, interval: float,
                 on_state: Callable[[FeedState], None],
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.client = client
        self.interval = interval
        self.on_state = on_state
        self.clock = clock
        self.state = FeedState(None)
        self.read_at: Newest | None = None  # what the probe said before the last read

    def _set(self, state: FeedState) -> None:
        self.state = state
        self.on_state(state)

    async def refresh(self) -> float:
        """One refresh; the seconds to wait before the next one."""
        started = self.clock()
        try:
            newest = await probe(self.client)
            if (newest.at is not None and newest == self.read_at
                    and self.state.error is None and self.state.fleet is not None):
                # nothing newer than the rows shown: Prometheus would answer the same
                return max(0.0, self.interval - (self.clock() - started))
            fleet = await read_fleet(self.client, newest.source)
        except PromError as exc:
            failures = self.state.failures + 1
            wait = max(self.interval, min(BACKOFF_MAX_S, 2.0 ** (failures - 1)))
            if self.state.error is None or str(self.state.error) != str(exc):
                log.warning("prometheus: %s", exc)
            self._set(FeedState(self.state.fleet, exc, failures, started + wait,
                                self.state.refreshed_at))
            return wait
        self.read_at = newest
        self._set(FeedState(carried(self.state.fleet, fleet), refreshed_at=self.clock()))
        return max(0.0, self.interval - (self.clock() - started))

    async def run(self) -> None:
        """Refresh until cancelled."""
        while True:
            wait = await self.refresh()
            await asyncio.sleep(wait)
