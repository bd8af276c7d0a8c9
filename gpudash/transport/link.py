"""A host source built on the collector: one streaming channel, one request channel.

``CollectorSource`` holds everything that does not care whether the collector runs on
this machine (a subprocess) or on the far side of an SSH connection; subclasses say how
to start a program there and run a command there.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
import json
import shlex
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator
from typing import Any

from gpudash.collector import shell
from gpudash.collector.payload import collector_argv, payload
from gpudash.collector.wire import SnapshotDecoder, parse_message, to_snapshot
from gpudash.model import HostSnapshot, SourceKind
from gpudash.source import (
    CommandResult,
    ConnectError,
    HostControl,
    LinkLost,
    ProtocolError,
    SignalOutcome,
    SourceError,
)
from gpudash.transport.actions import (
    systemctl_argv,
    validate_pid,
    validate_signal,
    validate_unit,
    validate_verb,
)

FIRST_SAMPLE_TIMEOUT_S = 20.0  # python start + pynvml load + first systemctl on a busy host
MIN_READ_TIMEOUT_S = 1.5
REQUEST_TIMEOUT_S = 30.0
SYSTEMCTL_TIMEOUT_S = 150.0  # `systemctl stop` waits for TimeoutStopSec (90 s by default)


class Pipe(ABC):
    """A program running on the host: write to its stdin, read lines from its stdout."""

    @abstractmethod
    async def readline(self) -> bytes: ...

    @abstractmethod
    def write(self, data: bytes) -> None: ...

    @abstractmethod
    def close(self) -> None: ...

    @abstractmethod
    def stderr_tail(self) -> str: ...

    async def wait_closed(self) -> None:  # noqa: B027 - optional: most pipes need not wait
        """Wait (briefly) until the program is gone after ``close``."""


class CollectorSource(ABC):
    """``HostSource`` over a collector program on the host."""

    name: str

    def __init__(self, name: str, *, sudo: bool, read_only: bool) -> None:
        self.name = name
        self.sudo = sudo
        self.read_only = read_only
        self._control = CollectorControl(self)
        self._streams: set[Pipe] = set()
        self.watched: set[str] = set()

    # -- what a subclass provides

    @abstractmethod
    async def _ready(self) -> None:
        """Connect (if needed) and learn the host's facts; raises ``SourceError``."""

    @abstractmethod
    async def _open(self, command: list[str] | str) -> Pipe: ...

    @abstractmethod
    async def _run(self, argv: list[str], limit_s: float) -> CommandResult: ...

    @abstractmethod
    def _link_down(self) -> bool: ...

    python: str | None = "python3"  # None: the host has no python3, use the shell fallback
    is_root: bool = False
    send_pynvml: bool = True

    # -- HostSource

    @property
    def control(self) -> HostControl:
        return self._control

    async def close(self) -> None:
        pipes = list(self._streams)
        if self._control._pipe is not None:
            pipes.append(self._control._pipe)
        for pipe in pipes:
            pipe.close()
        self._control.drop()
        for pipe in pipes:
            await pipe.wait_closed()

    def stream(self, interval: float) -> AsyncIterator[HostSnapshot]:
        """Snapshots every ``interval`` seconds; raises ``LinkLost`` when the link drops."""
        if not 0.05 <= interval <= 3600:
            raise ValueError(f"interval out of range: {interval}")
        return self._stream(interval)

    async def _start_collector(self, mode: str, interval: float | None) -> Pipe:
        await self._ready()
        if self.python is None:
            raise ProtocolError("no python3 on the host")
        as_root = mode == "serve" and self.sudo and not self.is_root
        argv = collector_argv(self.python, mode, interval=interval, sudo=self.sudo)
        pipe = await self._open(["sudo", "-n", *argv] if as_root else argv)
        pipe.write(payload(with_pynvml=self.send_pynvml))
        for unit in sorted(self.watched):
            pipe.write(_request("watch", unit=unit))
        return pipe

    async def _stream(self, interval: float) -> AsyncIterator[HostSnapshot]:
        await self._ready()
        if self.python is None:
            async for snap in self._shell_stream(interval):
                yield snap
            return
        pipe = await self._start_collector("stream", interval)
        self._streams.add(pipe)
        decoder = SnapshotDecoder(self.name)
        limit_s = FIRST_SAMPLE_TIMEOUT_S
        try:
            while True:
                line = await self._readline(pipe, limit_s)
                limit_s = max(3 * interval, MIN_READ_TIMEOUT_S)
                yield self._finish(decoder.feed(line))
        finally:
            self._streams.discard(pipe)
            pipe.close()
            await pipe.wait_closed()

    async def _shell_stream(self, interval: float) -> AsyncIterator[HostSnapshot]:
        pipe = await self._open(shell.stream_command(interval))
        self._streams.add(pipe)
        limit_s = FIRST_SAMPLE_TIMEOUT_S
        try:
            while True:
                frame = await self._read_frame(pipe, limit_s)
                limit_s = max(3 * interval, MIN_READ_TIMEOUT_S) + 5  # nvidia-smi is slow
                yield self._shell_snapshot(frame)
        finally:
            self._streams.discard(pipe)
            pipe.close()
            await pipe.wait_closed()

    async def _read_frame(self, pipe: Pipe, limit_s: float) -> list[str]:
        frame: list[str] = []
        while True:
            line = (await self._readline(pipe, limit_s)).decode("utf-8", "replace").rstrip("\n")
            if line.startswith("@frame "):
                frame = []
            frame.append(line)
            if line == "@end":
                return frame
            if len(frame) > 200_000:
                raise ProtocolError("shell collector: frame too long")

    def _shell_snapshot(self, frame: list[str]) -> HostSnapshot:
        state = shell.parse_frame(frame)
        state["can_act"] = self.is_root or self.sudo
        if not state["can_act"]:
            state["cannot_act_reason"] = "login is not root; rerun with --sudo"
        return self._finish(to_snapshot(state, self.name, source=SourceKind.SHELL, degraded=True))

    def _finish(self, snap: HostSnapshot) -> HostSnapshot:
        if self.read_only:
            return dataclasses.replace(
                snap, can_act=False, cannot_act_reason="opened read-only (--read-only)"
            )
        return snap

    async def _readline(self, pipe: Pipe, limit_s: float) -> bytes:
        """One complete line, or ``LinkLost`` / ``ProtocolError`` saying why not."""
        try:
            line = await asyncio.wait_for(pipe.readline(), limit_s)
        except TimeoutError:
            raise LinkLost(
                f"{self.name}: no data for {limit_s:.1f} s; link presumed lost"
            ) from None
        except SourceError:
            raise
        except Exception as exc:  # noqa: BLE001 - any channel failure is a lost link
            raise LinkLost(f"{self.name}: link lost ({exc or type(exc).__name__})") from None
        if line.endswith(b"\n"):
            return line
        await asyncio.sleep(0.05)  # let a dropping connection report itself
        if self._link_down():
            raise LinkLost(f"{self.name}: connection closed")
        tail = pipe.stderr_tail().strip()
        if line:
            raise ProtocolError(f"{self.name}: collector output truncated")
        if "sudo:" in tail and "password is required" in tail:
            # Retrying cannot help: say what would.
            raise ConnectError(
                f"{self.name}: --sudo needs a NOPASSWD sudoers rule for this login "
                f"(`sudo -n` said: a password is required)"
            )
        raise LinkLost(f"{self.name}: collector exited" + (f": {tail[-300:]}" if tail else ""))

    def poke(self, unit: str | None) -> None:
        """Tell running collectors to watch ``unit`` and re-read unit states now."""
        if unit is not None:
            self.watched.add(unit)
        message = _request("watch", unit=unit) if unit else _request("refresh")
        for pipe in list(self._streams):
            with contextlib.suppress(Exception):
                pipe.write(message)


_ids = itertools.count(1)


def _request(op: str, **fields: Any) -> bytes:
    return json.dumps({"op": op, **fields}).encode() + b"\n"


class CollectorControl:
    """``HostControl`` through a ``serve`` collector (signals, samples) and commands."""

    def __init__(self, source: CollectorSource) -> None:
        self.source = source
        self._pipe: Pipe | None = None
        self._lock = asyncio.Lock()

    def drop(self) -> None:
        if self._pipe is not None:
            self._pipe.close()
            self._pipe = None

    async def _ask(self, op: str, limit_s: float, **fields: Any) -> dict[str, Any]:
        async with self._lock:
            if self._pipe is None:
                pipe = await self.source._start_collector("serve", None)
                try:
                    ready = parse_message(await self.source._readline(pipe, FIRST_SAMPLE_TIMEOUT_S))
                except SourceError:
                    pipe.close()
                    raise
                if ready.get("k") != "ready":
                    pipe.close()
                    raise ProtocolError(f"{self.source.name}: collector did not start")
                self._pipe = pipe
            request_id = next(_ids)
            try:
                self._pipe.write(_request(op, id=request_id, **fields))
                while True:
                    reply = parse_message(await self.source._readline(self._pipe, limit_s))
                    if reply.get("id") == request_id:
                        return reply
            except SourceError:
                self.drop()
                raise

    async def sample(self) -> HostSnapshot:
        """A fresh snapshot, taken now (unit states re-read)."""
        source = self.source
        await source._ready()
        if source.python is None:
            pipe = await source._open(shell.stream_command(1, once=True))
            try:
                return source._shell_snapshot(
                    await source._read_frame(pipe, FIRST_SAMPLE_TIMEOUT_S)
                )
            finally:
                pipe.close()
        reply = await self._ask("sample", REQUEST_TIMEOUT_S)
        body = reply.get("s")
        if reply.get("k") != "full" or not isinstance(body, dict):
            raise ProtocolError(f"{source.name}: collector sent no snapshot")
        return source._finish(to_snapshot(body, source.name))

    async def signal(self, pid: int, start_ticks: int | None, sig: int) -> SignalOutcome:
        """Signal ``pid`` only if the host still sees it started at ``start_ticks``."""
        validate_pid(pid)
        validate_signal(sig)
        source = self.source
        if source.read_only:
            return SignalOutcome.DENIED
        if start_ticks is None or isinstance(start_ticks, bool) or start_ticks < 0:
            return SignalOutcome.MISMATCH  # no identity, no signal
        try:
            await source._ready()
            if source.python is None:
                argv = shlex.split(shell.signal_command(pid, start_ticks, sig))
                if source.sudo and not source.is_root:
                    argv = ["sudo", "-n", *argv]
                done = await source._run(argv, REQUEST_TIMEOUT_S)
                word = done.output.strip().splitlines()[-1:] if done.output else []
                return _outcome(word[0] if word else "unknown")
            reply = await self._ask(
                "signal", REQUEST_TIMEOUT_S, pid=pid, start=start_ticks, sig=sig
            )
        except SourceError:
            return SignalOutcome.UNKNOWN
        return _outcome(str(reply.get("outcome")))

    async def systemctl(self, verb: str, unit: str) -> CommandResult:
        """``[sudo -n] systemctl VERB -- UNIT`` on the host."""
        validate_verb(verb)
        validate_unit(unit)
        source = self.source
        argv = systemctl_argv(verb, unit, sudo=source.sudo and not source.is_root)
        if source.read_only:
            return CommandResult(tuple(argv), 1, "refused: opened read-only (--read-only)")
        try:
            await source._ready()
            result = await source._run(argv, SYSTEMCTL_TIMEOUT_S)
        except SourceError as exc:
            return CommandResult(tuple(argv), None, str(exc))
        source.poke(unit)
        if self._pipe is not None:
            with contextlib.suppress(Exception):
                self._pipe.write(_request("watch", unit=unit))
        return result

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


def _outcome(word: str) -> SignalOutcome:
    try:
        return SignalOutcome(word)
    except ValueError:
        return SignalOutcome.UNKNOWN
