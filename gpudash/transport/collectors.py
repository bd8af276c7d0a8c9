"""How gpudash talks to a host once connected: the Python collector, or the shell fallback.

The source picks one per link after the probe (``HostFacts.python``); both give the same
three things: a stream of snapshots, a fresh sample, and a signal sent only to the process
the operator planned on (identity checked on the host, at the moment of sending).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import shlex
import time
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Callable
from dataclasses import field
from typing import Any

from gpudash.collector.host.protocol import (
    K_FULL,
    K_HTTP,
    K_PONG,
    OP_HTTP,
    OP_PING,
    OP_SAMPLE,
    OP_SIGNAL,
    OP_WATCH,
)
from gpudash.domain.model import HostSnapshot, SourceKind
from gpudash.protocol import shell
from gpudash.protocol.payload import collector_args, collector_argv, payload
from gpudash.protocol.source import (
    LinkLost,
    ListenerOwner,
    ProtocolError,
    SignalOutcome,
    SourceError,
)
from gpudash.protocol.wire import SnapshotDecoder, check_ready, parse_message, to_snapshot
from gpudash.record import record
from gpudash.transport.link import Connection, HostFacts, Pipe

FIRST_SAMPLE_TIMEOUT_S = 20.0  # python start + pynvml load + first systemctl on a busy host
MIN_READ_TIMEOUT_S = 1.5
SHELL_EXTRA_S = 5.0  # nvidia-smi is slow
REQUEST_TIMEOUT_S = 30.0
PING_EVERY_S = 1.0  # a stream measures its request round trip at most this often


@record
class ProcessIdentity:
    """Who a signal is for: checked on the host right before it is sent.

    Every field the host must match travels on; a new optional one (a boot id) is one
    more field here, one more entry in ``request_fields``.
    """

    pid: int
    start_ticks: int
    boot_id: str | None = None  # the host's boot the start ticks count from

    def request_fields(self) -> dict[str, Any]:
        """The fields of the collector's ``signal`` request."""
        fields: dict[str, Any] = {"pid": self.pid, "start": self.start_ticks}
        if self.boot_id is not None:
            fields["boot"] = self.boot_id
        return fields


@record(frozen=False)
class CollectorOptions:
    """What the source decided, shared by every collector it starts."""

    name: str
    sudo: bool
    send_pynvml: bool
    watched: set[str] = field(default_factory=set)  # units to report even without GPU holders
    in_process: bool = False  # the stream collector runs in a thread here (``inprocess``)


def request(op: str, **fields: Any) -> bytes:
    return json.dumps({"op": op, **fields}).encode() + b"\n"


class Collector(ABC):
    """One way of reading and acting on a host, bound to one link."""

    def __init__(self, connection: Connection, facts: HostFacts, options: CollectorOptions):
        self.connection = connection
        self.facts = facts
        self.options = options
        self.pipes: set[Pipe] = set()
        self.round_trip: RoundTrip | None = None  # the newest stream's

    @abstractmethod
    def stream(self, interval: float) -> AsyncIterator[HostSnapshot]: ...

    @abstractmethod
    async def sample(self) -> HostSnapshot: ...

    @abstractmethod
    async def signal(self, identity: ProcessIdentity, sig: int) -> SignalOutcome:
        """``SourceError`` when the outcome is not known."""

    def poke(self, message: bytes) -> None:  # noqa: B027 - the shell collector takes no requests
        """Send ``message`` to every running program that takes requests."""

    def round_trip_s(self) -> float | None:
        return None if self.round_trip is None else self.round_trip.seconds()

    async def open(self, command: list[str] | str) -> Pipe:
        pipe = await self.connection.open(command)
        self.pipes.add(pipe)
        return pipe

    async def release(self, pipe: Pipe) -> None:
        self.pipes.discard(pipe)
        pipe.close()
        await pipe.wait_closed()

    async def close(self) -> None:
        pipes = list(self.pipes)
        for pipe in pipes:
            pipe.close()
        self.pipes.clear()
        for pipe in pipes:
            await pipe.wait_closed()


class RoundTrip:
    """A stream's request round trip: from writing a ``ping`` to reading its ``pong``.

    Taken while the collector waits for its next sample, this is what any request
    costs: the network both ways plus the collector's turnaround. A ping still
    unanswered counts for as long as it has been out, so a hung host shows as slow.
    """

    def __init__(self, every_s: float = PING_EVERY_S, clock: Callable[[], float] = time.monotonic):
        self.every_s = every_s
        self.clock = clock
        self.last_s: float | None = None
        self._ids = itertools.count(1)
        self._out: tuple[int, float] | None = None  # (id, sent at) of the unanswered ping
        self._sent_at = -float("inf")

    def ping(self) -> bytes | None:
        """The request to write now, or None when one is out or the last was recent."""
        now = self.clock()
        if self._out is not None or now - self._sent_at < self.every_s:
            return None
        self._out = (next(self._ids), now)
        self._sent_at = now
        return request(OP_PING, id=self._out[0])

    def answered(self, line: bytes) -> bool:
        """Whether ``line`` is our pong (then it is counted), not a snapshot."""
        if self._out is None or len(line) > 100 or K_PONG.encode() not in line:
            return False
        message = parse_message(line)
        if message.get("k") != K_PONG:
            return False
        if message.get("id") == self._out[0]:
            self.last_s = self.clock() - self._out[1]
            self._out = None
        return True

    def seconds(self) -> float | None:
        """The last round trip, or longer while a ping is out for longer than that."""
        if self._out is not None:
            waited = self.clock() - self._out[1]
            if waited > max(self.last_s or 0.0, self.every_s):
                return waited
        return self.last_s


class PythonCollector(Collector):
    """The Python collector (the package ``collector/host``), sent over stdin and run there:
    a ``stream`` program per stream and one ``serve`` program for requests."""

    def __init__(self, connection: Connection, facts: HostFacts, options: CollectorOptions):
        super().__init__(connection, facts, options)
        self._server: Pipe | None = None
        self._asking = asyncio.Lock()
        self._ids = itertools.count(1)

    async def _start(self, mode: str, interval: float | None) -> Pipe:
        assert self.facts.python is not None
        sudo = self.options.sudo
        if mode == "stream" and self.options.in_process:
            return await self._start_here(collector_args(mode, interval=interval, sudo=sudo))
        argv = collector_argv(self.facts.python, mode, interval=interval, sudo=sudo)
        as_root = mode == "serve" and sudo and not self.facts.is_root
        # built (and compressed) once per process, off the event loop
        data = await asyncio.to_thread(payload, with_pynvml=self.options.send_pynvml)
        pipe = await self.open(["sudo", "-n", *argv] if as_root else argv)
        try:
            pipe.write(data)
            for unit in sorted(self.options.watched):
                pipe.write(request(OP_WATCH, unit=unit))
        except SourceError:
            await self.release(pipe)
            raise
        return pipe

    async def _start_here(self, argv: list[str]) -> Pipe:
        from gpudash.transport.inprocess import start_thread_pipe

        pipe: Pipe = await start_thread_pipe(
            self.options.name, argv, self.connection.line_limit)
        self.pipes.add(pipe)
        try:
            for unit in sorted(self.options.watched):
                pipe.write(request(OP_WATCH, unit=unit))
        except SourceError:
            await self.release(pipe)
            raise
        return pipe

    async def stream(self, interval: float) -> AsyncIterator[HostSnapshot]:
        pipe = await self._start("stream", interval)
        decoder = SnapshotDecoder(self.options.name)
        self.round_trip = round_trip = RoundTrip()
        limit_s = FIRST_SAMPLE_TIMEOUT_S
        try:
            while True:
                # Pinged as the consumer asks for the next snapshot: the collector is
                # then waiting for its next sample and answers at once.
                ping = round_trip.ping()
                if ping is not None:
                    pipe.write(ping)
                line = await pipe.readline(limit_s)
                if round_trip.answered(line):
                    continue
                limit_s = max(3 * interval, MIN_READ_TIMEOUT_S)
                yield decoder.feed(line)
        finally:
            if self.round_trip is round_trip:
                self.round_trip = None  # no stream, no current round trip
            await self.release(pipe)

    async def _ask(self, op: str, limit_s: float, **fields: Any) -> dict[str, Any]:
        async with self._asking:
            if self._server is None:
                pipe = await self._start("serve", None)
                try:
                    ready = parse_message(await pipe.readline(FIRST_SAMPLE_TIMEOUT_S))
                    try:
                        check_ready(ready)  # the right collector, speaking our protocol
                    except ProtocolError as exc:
                        raise ProtocolError(f"{self.options.name}: {exc}") from None
                except SourceError:
                    await self.release(pipe)
                    raise
                self._server = pipe
            request_id = next(self._ids)
            try:
                self._server.write(request(op, id=request_id, **fields))
                while True:
                    reply = parse_message(await self._server.readline(limit_s))
                    if reply.get("id") == request_id:
                        return reply
            except SourceError:
                server, self._server = self._server, None
                await self.release(server)
                raise

    async def sample(self) -> HostSnapshot:
        reply = await self._ask(OP_SAMPLE, REQUEST_TIMEOUT_S)
        body = reply.get("s")
        if reply.get("k") != K_FULL or not isinstance(body, dict):
            raise ProtocolError(f"{self.options.name}: collector sent no snapshot")
        return to_snapshot(body, self.options.name)

    async def http_get(self, url: str, timeout_s: float, owner: ListenerOwner | None = None
                       ) -> tuple[int | None, str | None]:
        """A GET of ``url`` made by the collector on the host: (status, why not); given
        ``owner``, refused where a process not its own listens on its port."""
        extra: dict[str, str] = (
            {} if owner is None else {"unit": owner} if isinstance(owner, str)
            else {"container": owner.id, "runtime": owner.runtime})
        reply = await self._ask(OP_HTTP, timeout_s + REQUEST_TIMEOUT_S, url=url,
                                timeout=timeout_s, **extra)
        if reply.get("k") != K_HTTP:
            raise ProtocolError(f"{self.options.name}: collector sent no HTTP answer")
        status, error = reply.get("status"), reply.get("error")
        if not (status is None or (isinstance(status, int) and not isinstance(status, bool))):
            raise ProtocolError(f"{self.options.name}: bad HTTP status {status!r}")
        return status, None if error is None else str(error)[:200]

    async def signal(self, identity: ProcessIdentity, sig: int) -> SignalOutcome:
        reply = await self._ask(OP_SIGNAL, REQUEST_TIMEOUT_S, sig=sig, **identity.request_fields())
        return outcome(str(reply.get("outcome")))

    def poke(self, message: bytes) -> None:
        for pipe in list(self.pipes):
            with contextlib.suppress(LinkLost):  # that pipe's reader will say so
                pipe.write(message)


class ShellCollector(Collector):
    """``protocol/shell.py``'s POSIX sh script, for hosts without python3."""

    async def stream(self, interval: float) -> AsyncIterator[HostSnapshot]:
        pipe = await self.open(shell.stream_command(interval))
        limit_s = FIRST_SAMPLE_TIMEOUT_S
        try:
            while True:
                frame = await self._frame(pipe, limit_s)
                limit_s = max(3 * interval, MIN_READ_TIMEOUT_S) + SHELL_EXTRA_S
                yield self._snapshot(frame)
        finally:
            await self.release(pipe)

    async def sample(self) -> HostSnapshot:
        pipe = await self.open(shell.stream_command(1, once=True))
        try:
            return self._snapshot(await self._frame(pipe, FIRST_SAMPLE_TIMEOUT_S))
        finally:
            await self.release(pipe)

    async def signal(self, identity: ProcessIdentity, sig: int) -> SignalOutcome:
        argv = shlex.split(
            shell.signal_command(identity.pid, identity.start_ticks, sig, identity.boot_id)
        )
        if self.options.sudo and not self.facts.is_root:
            argv = ["sudo", "-n", *argv]
        done = await self.connection.run(argv, REQUEST_TIMEOUT_S)
        if done.returncode is None:
            raise LinkLost(f"{self.options.name}: {done.output}")
        words = done.output.strip().splitlines()[-1:]
        return outcome(words[0] if words else "unknown")

    async def _frame(self, pipe: Pipe, limit_s: float) -> list[str]:
        reader = shell.FrameReader()
        while True:
            line = await pipe.readline(limit_s)
            frame = reader.feed(line.decode("utf-8", "replace").removesuffix("\n"))
            if frame is not None:
                return frame

    def _snapshot(self, frame: list[str]) -> HostSnapshot:
        state = shell.parse_frame(frame)
        state["can_act"] = self.facts.is_root or self.options.sudo
        if not state["can_act"]:
            state["cannot_act_reason"] = "login is not root; rerun with --sudo"
        return to_snapshot(state, self.options.name, source=SourceKind.SHELL, degraded=True)


def collector_for(connection: Connection, facts: HostFacts, options: CollectorOptions) -> Collector:
    """The collector a probed host gets: Python where it has python3, else the shell."""
    kind = PythonCollector if facts.python is not None else ShellCollector
    return kind(connection, facts, options)


def outcome(word: str) -> SignalOutcome:
    try:
        return SignalOutcome(word)
    except ValueError:
        return SignalOutcome.UNKNOWN
