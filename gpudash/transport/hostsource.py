"""A ``HostSource`` made of a connection and the collector its probe chose.

``CollectorSource`` owns one ``Connection`` (SSH or local). On every use it asks the
connection for a live link; a new link (``HostFacts`` by identity) gets a new collector,
and the old one's programs are let go.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator

from gpudash.collector.hostside import OP_REFRESH, OP_WATCH
from gpudash.model import HostSnapshot
from gpudash.source import CommandResult, HostControl, SignalOutcome, SourceError
from gpudash.transport.actions import (
    container_argv,
    systemctl_argv,
    validate_pid,
    validate_signal,
)
from gpudash.transport.collectors import (
    Collector,
    CollectorOptions,
    ProcessIdentity,
    collector_for,
    request,
)
from gpudash.transport.link import Connection

SYSTEMCTL_TIMEOUT_S = 150.0  # `systemctl stop` waits for TimeoutStopSec (90 s by default)
CONTAINER_SLACK_S = 60.0  # beyond a stop's own timeout: the daemon's work, a slow rm
READ_ONLY_REASON = "opened read-only (--read-only)"


class CollectorSource:
    """``HostSource`` over a collector on the host."""

    def __init__(
        self, connection: Connection, *, sudo: bool, read_only: bool, send_pynvml: bool
    ) -> None:
        self.name = connection.name
        self.connection = connection
        self.sudo = sudo
        self.read_only = read_only
        self.options = CollectorOptions(self.name, sudo=sudo, send_pynvml=send_pynvml)
        self._collector: Collector | None = None
        self._choosing = asyncio.Lock()
        self._control = SourceControl(self)

    @property
    def watched(self) -> set[str]:
        """Units every collector reports even when none of their processes holds a GPU."""
        return self.options.watched

    @property
    def control(self) -> HostControl:
        return self._control

    @property
    def round_trip_s(self) -> float | None:
        """Seconds from writing a request to the host to reading its answer, measured on
        the running stream about once a second; None before the first answer and for
        the shell fallback (it takes no requests)."""
        collector = self._collector
        return None if collector is None else collector.round_trip_s()

    async def collector(self) -> Collector:
        """The collector of the live link, connecting (again) if needed."""
        async with self._choosing:
            facts = await self.connection.connect()
            old = self._collector
            if old is not None and old.facts is facts:
                return old
            self._collector = collector_for(self.connection, facts, self.options)
        if old is not None:
            await old.close()  # its programs ran over the link that went down
        return self._collector

    def stream(self, interval: float) -> AsyncIterator[HostSnapshot]:
        """Snapshots every ``interval`` seconds; raises ``LinkLost`` when the link drops."""
        if not 0.05 <= interval <= 3600:
            raise ValueError(f"interval out of range: {interval}")
        return self._stream(interval)

    async def _stream(self, interval: float) -> AsyncIterator[HostSnapshot]:
        collector = await self.collector()
        stream = collector.stream(interval)
        try:
            async for snap in stream:
                yield self.finish(snap)
        finally:
            await stream.aclose()  # type: ignore[attr-defined]

    def finish(self, snap: HostSnapshot) -> HostSnapshot:
        if self.read_only:
            return dataclasses.replace(snap, can_act=False, cannot_act_reason=READ_ONLY_REASON)
        return snap

    def poke(self, unit: str | None) -> None:
        """Tell running collectors to watch ``unit`` and re-read unit states now."""
        if unit is not None:
            self.watched.add(unit)
        if self._collector is not None:
            self._collector.poke(request(OP_WATCH, unit=unit) if unit else request(OP_REFRESH))

    def poke_container(self, container: str, runtime: str) -> None:
        """Tell the running collector to keep reporting ``container`` (a stopped one has no
        process to name it) and to re-read everything now."""
        if self._collector is not None:
            self._collector.poke(request(OP_WATCH, container=container, runtime=runtime))

    async def close(self) -> None:
        collector, self._collector = self._collector, None
        if collector is not None:
            await collector.close()
        await self.connection.close()


class SourceControl:
    """``HostControl`` of a ``CollectorSource``: every argument validated first."""

    def __init__(self, source: CollectorSource) -> None:
        self.source = source

    async def sample(self) -> HostSnapshot:
        """A fresh snapshot, taken now (unit states re-read)."""
        collector = await self.source.collector()
        return self.source.finish(await collector.sample())

    async def signal(
        self, pid: int, start_ticks: int | None, sig: int, *, boot_id: str | None = None
    ) -> SignalOutcome:
        """Signal ``pid`` only if the host still sees it started at ``start_ticks`` (in the
        boot ``boot_id``, when given)."""
        validate_pid(pid)
        validate_signal(sig)
        if self.source.read_only:
            return SignalOutcome.DENIED
        if start_ticks is None or isinstance(start_ticks, bool) or start_ticks < 0:
            return SignalOutcome.MISMATCH  # no identity, no signal
        try:
            collector = await self.source.collector()
            return await collector.signal(ProcessIdentity(pid, start_ticks, boot_id), sig)
        except SourceError:
            return SignalOutcome.UNKNOWN

    async def systemctl(self, verb: str, unit: str) -> CommandResult:
        """``[sudo -n] systemctl VERB -- UNIT`` on the host."""
        source = self.source
        argv = systemctl_argv(verb, unit, sudo=source.sudo)  # validated before anything runs
        if source.read_only:
            return CommandResult(tuple(argv), 1, f"refused: {READ_ONLY_REASON}")
        try:
            collector = await source.collector()
        except SourceError as exc:
            return CommandResult(tuple(argv), None, str(exc))
        argv = systemctl_argv(verb, unit, sudo=source.sudo and not collector.facts.is_root)
        result = await source.connection.run(argv, SYSTEMCTL_TIMEOUT_S)
        source.poke(unit)
        return result

    async def container(
        self, runtime: str, verb: str, container: str, stop_timeout: int = 10
    ) -> CommandResult:
        """``[sudo -n] docker|podman VERB -- CONTAINER`` on the host."""
        source = self.source
        argv = container_argv(runtime, verb, container, sudo=source.sudo,
                              stop_timeout=stop_timeout)  # validated before anything runs
        if source.read_only:
            return CommandResult(tuple(argv), 1, f"refused: {READ_ONLY_REASON}")
        try:
            collector = await source.collector()
        except SourceError as exc:
            return CommandResult(tuple(argv), None, str(exc))
        argv = container_argv(runtime, verb, container, stop_timeout=stop_timeout,
                              sudo=source.sudo and not collector.facts.is_root)
        source.poke_container(container, runtime)
        result = await source.connection.run(argv, stop_timeout + CONTAINER_SLACK_S)
        source.poke_container(container, runtime)
        return result

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)
