"""A ``HostSource`` made of a connection and the collector its probe chose.

``CollectorSource`` owns one ``Connection`` (SSH or local). On every use it asks the
connection for a live link; a new link (``HostFacts`` by identity) gets a new collector,
and the old one's programs are let go. The journal and container log lines it reads are
decoded, cut and rate-limited by ``gpudash.transport.loglines``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import shlex
import time
from collections.abc import AsyncIterator, Callable, Sequence
from urllib.parse import urlsplit

from gpudash.collector.host.protocol import CONTAINER_ID, OP_REFRESH, OP_WATCH
from gpudash.domain.model import HostSnapshot
from gpudash.domain.owners.slurm_node import node_argv
from gpudash.protocol.shell_listener import ask_owned
from gpudash.protocol.source import (
    LOOPBACK_HOSTS,
    Capability,
    CommandResult,
    HostControl,
    HttpAnswer,
    LinkLost,
    ListenerOwner,
    LogLine,
    ModelUnit,
    ProtocolError,
    SignalOutcome,
    SourceError,
)
from gpudash.serving import modelservers
from gpudash.transport.collectors import (
    Collector,
    CollectorOptions,
    ProcessIdentity,
    PythonCollector,
    collector_for,
    request,
)
from gpudash.transport.commands import (
    cat_argv,
    container_argv,
    container_logs_argv,
    daemon_reload_argv,
    drop_in_argvs,
    gpu_reset_argv,
    owner_argv,
    systemctl_argv,
    validate_container,
    validate_pid,
    validate_signal,
    validate_unit,
)
from gpudash.transport.link import Connection
from gpudash.transport.loglines import (
    JOURNAL_CURSOR,
    LineBudget,
    container_log_line,
    journal_line,
)

SYSTEMCTL_TIMEOUT_S = 150.0  # `systemctl stop` waits for TimeoutStopSec (90 s by default)
CONTAINER_RUNTIMES_ASKED = ("docker", "podman")  # in this order: the first that knows it
CONTAINER_SLACK_S = 60.0  # beyond a stop's own timeout: the daemon's work, a slow rm
READ_ONLY_REASON = "opened read-only (--read-only)"
QUERY_TIMEOUT_S = 20.0  # reading unit properties
RESET_TIMEOUT_S = 60.0  # nvidia-smi --gpu-reset: seconds on a real GPU, a minute at most
JOURNAL_QUIET_S = 24 * 3600.0  # a followed journal may be quiet that long: not a lost link


def loopback_url(url: str) -> str:
    """``url`` if it is plain http to the host's loopback, else ``ValueError``."""
    parts = urlsplit(url) if isinstance(url, str) else None
    if (parts is None or parts.scheme != "http" or parts.hostname not in LOOPBACK_HOSTS
            or any(c.isspace() for c in url) or len(url) > 2000):
        raise ValueError(f"not a loopback http URL: {url!r}")
    return url


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
        self.journal_budget = LineBudget()  # every journal of this host together

    @property
    def watched(self) -> set[str]:
        """Units every collector reports even when none of their processes holds a GPU."""
        return self.options.watched

    @property
    def control(self) -> HostControl:
        return self._control

    @property
    def route(self) -> str:
        return self.connection.route

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

    capabilities = frozenset(Capability)  # every host a collector runs on has them all

    def __init__(self, source: CollectorSource) -> None:
        self.source = source

    def watch_unit(self, unit: str | None) -> None:
        self.source.poke(unit)

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
        result = await self._administer(
            lambda sudo: systemctl_argv(verb, unit, sudo=sudo), SYSTEMCTL_TIMEOUT_S)
        self.source.poke(unit)
        return result

    async def owner_command(self, kind: str, verb: str, key: str) -> CommandResult:
        """``[sudo -n]`` the owner kind's command (``scancel JOBID``), built and validated
        by the kind's rules; refused where there is none."""
        argv = owner_argv(kind, verb, key)
        if argv is None:
            return CommandResult((kind, verb, key), 2, f"refused: {kind} has no {verb!r}")
        result = await self._administer(
            lambda sudo: ["sudo", "-n", *argv] if sudo else list(argv), QUERY_TIMEOUT_S)
        self.source.poke(None)  # its facts read again now, not in a few seconds
        return result

    async def node_state(self, verb: str, node: str, reason: str | None) -> CommandResult:
        """``[sudo -n] scontrol update NodeName=NODE State=DRAIN|RESUME [Reason="..."]`` on
        the host, every part checked first; the node's state read again at once."""
        try:
            argv = node_argv(verb, node, reason)
        except ValueError as exc:
            return CommandResult(("scontrol", "update"), 2, f"refused: {exc}")
        result = await self._administer(
            lambda sudo: ["sudo", "-n", *argv] if sudo else list(argv), QUERY_TIMEOUT_S)
        self.source.poke(None)
        return result

    async def gpu_reset(self, gpu: int) -> CommandResult:
        """``[sudo -n] nvidia-smi --gpu-reset -i GPU`` on the host; its memory read again
        at once."""
        try:
            gpu_reset_argv(gpu, sudo=False)
        except ValueError as exc:
            return CommandResult(("nvidia-smi", "--gpu-reset"), 2, f"refused: {exc}")
        result = await self._administer(lambda sudo: gpu_reset_argv(gpu, sudo=sudo),
                                        RESET_TIMEOUT_S)
        self.source.poke(None)
        return result

    async def unit_text(self, unit: str) -> str:
        """``systemctl cat -- UNIT`` on the host (host text: shown, never run)."""
        argv = cat_argv(unit)
        await self.source.collector()
        result = await self.source.connection.run(argv, QUERY_TIMEOUT_S)
        if result.returncode is None:
            raise LinkLost(f"{self.source.name}: {unit} not read: {result.output}")
        if not result.ok:
            raise SourceError(f"{self.source.name}: systemctl cat {unit} failed "
                              f"({result.returncode}): {result.output.strip()[:200]}")
        return result.output

    async def drop_in(self, unit: str, text: str | None) -> CommandResult:
        """Write gpudash's drop-in of ``unit`` (``install -d``, then ``tee`` with the text
        on its stdin) or remove exactly that file; through ``sudo -n`` as every action."""
        writing = text is not None
        count = len(drop_in_argvs(unit, writing, sudo=False))  # validated before any runs
        data = None if text is None else text.encode()
        result = CommandResult((), 1, "nothing run")
        for i in range(count):
            def argv_of(sudo: bool, i: int = i) -> list[str]:
                return drop_in_argvs(unit, writing, sudo=sudo)[i]

            result = await self._administer(argv_of, QUERY_TIMEOUT_S,
                                            stdin=data if i == count - 1 else None)
            if not result.ok:
                break
        if result.ok and writing:  # tee echoes the text: the record keeps no copy of it
            result = dataclasses.replace(result, output="")
        return result

    async def daemon_reload(self, unit: str) -> CommandResult:
        """``[sudo -n] systemctl daemon-reload``; ``unit`` is read afresh next sample."""
        validate_unit(unit)
        result = await self._administer(lambda sudo: daemon_reload_argv(sudo=sudo),
                                        SYSTEMCTL_TIMEOUT_S)
        self.source.poke(unit)
        return result

    async def container(
        self, runtime: str, verb: str, container: str, stop_timeout: int = 10,
        policy: str | None = None,
    ) -> CommandResult:
        """``[sudo -n] docker|podman VERB -- CONTAINER`` on the host."""
        result = await self._administer(
            lambda sudo: container_argv(runtime, verb, container, sudo=sudo,
                                        stop_timeout=stop_timeout, policy=policy),
            stop_timeout + CONTAINER_SLACK_S,
            before=lambda: self.source.poke_container(container, runtime))
        self.source.poke_container(container, runtime)
        return result

    async def _administer(
        self, argv_of: Callable[[bool], list[str]], timeout_s: float,
        before: Callable[[], None] | None = None, stdin: bytes | None = None,
    ) -> CommandResult:
        """Run the command ``argv_of(sudo)`` builds (and validates, before anything runs):
        refused when read-only; through ``sudo -n`` only where the login is not root."""
        source = self.source
        argv = argv_of(source.sudo)
        if source.read_only:
            return CommandResult(tuple(argv), 1, f"refused: {READ_ONLY_REASON}")
        try:
            collector = await source.collector()
        except SourceError as exc:
            return CommandResult(tuple(argv), None, str(exc))
        if before is not None:
            before()
        return await source.connection.run(
            argv_of(source.sudo and not collector.facts.is_root), timeout_s, stdin)

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)

    def clock(self) -> float:
        return time.monotonic()

    def _as_root(self, argv: list[str], collector: Collector) -> list[str]:
        return ["sudo", "-n", *argv] if self.source.sudo and not collector.facts.is_root else argv

    async def probe_http(self, url: str, timeout_s: float,
                         owner: ListenerOwner | None = None) -> HttpAnswer:
        """GET ``url`` on the host (its loopback): the status, or why there is none;
        given ``owner`` (a unit or a container), only from its own process at the other end
        of the probe's own connection (looked at by the Python collector, or by bash on the
        shell fallback's host)."""
        loopback_url(url)
        timeout_s = min(max(float(timeout_s), 0.1), 60.0)
        try:
            collector = await self.source.collector()
        except SourceError as exc:
            return HttpAnswer(url, None, str(exc))
        if isinstance(collector, PythonCollector):  # the collector asks, on the host
            try:
                status, error = await collector.http_get(url, timeout_s, owner)
            except SourceError as exc:
                return HttpAnswer(url, None, str(exc))
            return HttpAnswer(url, status, None if status is not None else error)
        if owner is not None:  # the same proof in bash: who holds the probe's connection
            status, error = await ask_owned(url, owner, self.source.connection.run,
                                            timeout_s)
            return HttpAnswer(url, status, error)
        # the shell fallback's host: curl, if it has one (no proxy; redirects not followed)
        argv = ["curl", "-s", "-o", "/dev/null", "--noproxy", "*", "-w", "%{http_code}\\n",
                "--max-time", f"{timeout_s:g}", "--", url]
        result = await self.source.connection.run(argv, timeout_s + 10)
        answer = (result.output.strip().splitlines()[-1:] or [""])[0].strip()
        if answer.isdigit() and int(answer) > 0:
            return HttpAnswer(url, int(answer), None)
        if result.returncode is None:
            return HttpAnswer(url, None, result.output or "no answer")
        return HttpAnswer(url, None, f"curl exit {result.returncode}"
                          + (" (connection refused)" if result.returncode == 7 else ""))

    async def model_units(self, patterns: Sequence[str] = ()) -> tuple[ModelUnit, ...]:
        """Every model-server unit on the host, running or not (see ``modelservers``)."""
        collector = await self.source.collector()
        plain = ["--no-legend", "--no-pager", "--plain"]
        units = await self.source.connection.run(
            ["systemctl", "list-units", "--type=service", "--all", *plain], QUERY_TIMEOUT_S)
        files = await self.source.connection.run(
            ["systemctl", "list-unit-files", "--type=service", *plain], QUERY_TIMEOUT_S)
        if units.returncode is None or files.returncode is None:
            raise LinkLost(f"{self.source.name}: unit list not read: "
                           f"{units.output if units.returncode is None else files.output}")
        names = []
        for name in modelservers.unit_names(units.output, files.output):
            try:
                names.append(validate_unit(name))
            except ValueError:
                continue  # host text that is no unit name: not asked about
        if not names:
            return ()
        show = await self.source.connection.run(
            ["systemctl", "show", "-p", ",".join(modelservers.SHOW_PROPERTIES), "--", *names],
            QUERY_TIMEOUT_S)
        if show.returncode is None:
            raise LinkLost(f"{self.source.name}: unit properties not read: {show.output}")
        del collector  # connected: the link the lists came over
        return modelservers.model_units(modelservers.parse_show(show.output), patterns)

    async def journal(self, unit: str, *, lines: int = 200, follow: bool = True,
                      after: str | None = None) -> AsyncIterator[LogLine]:
        """The unit's journal: the last ``lines`` (or, with ``after``, every line after that
        cursor: a follower resuming after a reconnect), then (``follow``) each new one."""
        unit = validate_unit(unit)
        lines = min(max(int(lines), 0), 10000)
        if after is not None and not JOURNAL_CURSOR.fullmatch(after):
            raise ValueError(f"not a journal cursor: {after!r}")
        collector = await self.source.collector()
        argv = ["journalctl", "--no-pager", "-o", "json", "-u", unit]
        argv += [f"--after-cursor={after}"] if after is not None else ["-n", str(lines)]
        if follow:
            argv.append("-f")
        pipe = await self.source.connection.open(shlex.join(self._as_root(argv, collector)))
        budget, dropped = self.source.journal_budget, 0
        try:
            while True:
                try:
                    raw = await pipe.readline(JOURNAL_QUIET_S if follow else QUERY_TIMEOUT_S)
                except LinkLost:
                    if not follow and not self.source.connection.link_down():
                        if dropped:
                            yield self._dropped(dropped, unit)
                        return  # journalctl printed its lines and exited
                    raise
                except ProtocolError:
                    continue  # a line longer than the channel's limit: skipped
                if not budget.take():
                    dropped += 1  # not even decoded
                    continue
                if dropped:
                    yield self._dropped(dropped, unit)
                    dropped = 0
                line = journal_line(raw, unit)
                if line is not None:
                    yield line
        finally:
            pipe.close()


    async def find_container(self, ref: str) -> tuple[str, str] | None:
        """``docker|podman inspect --format {{.Id}} -- REF`` (the name validated first), the
        id checked to be one, and the collector told to report it from now on."""
        ref = validate_container(ref)
        collector = await self.source.collector()
        for runtime in CONTAINER_RUNTIMES_ASKED:
            argv = [runtime, "inspect", "--type", "container", "--format", "{{.Id}}", "--",
                    ref]
            done = await self.source.connection.run(self._as_root(argv, collector),
                                                    QUERY_TIMEOUT_S)
            if done.returncode is None:
                raise LinkLost(f"{self.source.name}: {runtime} inspect: {done.output}")
            found = done.output.strip().splitlines()
            if done.returncode == 0 and len(found) == 1 and CONTAINER_ID.fullmatch(found[0]):
                self.source.poke_container(found[0], runtime)
                return runtime, found[0]
        return None

    async def container_logs(self, runtime: str, container: str, *, lines: int = 200,
                             follow: bool = True) -> AsyncIterator[LogLine]:
        """``docker|podman logs [--follow] --tail N --timestamps -- ID`` (stderr too), each
        line with the runtime's time stamp; bounded as the journal is."""
        argv = container_logs_argv(runtime, container, lines=int(lines), follow=follow)
        collector = await self.source.collector()
        origin = f"{runtime}:{container[:12]}"
        pipe = await self.source.connection.open(
            shlex.join(self._as_root(argv, collector)) + " 2>&1")
        budget, dropped = self.source.journal_budget, 0
        try:
            while True:
                try:
                    raw = await pipe.readline(JOURNAL_QUIET_S if follow else QUERY_TIMEOUT_S)
                except LinkLost:
                    if not follow and not self.source.connection.link_down():
                        return  # the runtime printed its lines and exited
                    raise
                except ProtocolError:
                    continue
                if not budget.take():
                    dropped += 1
                    continue
                if dropped:
                    yield self._dropped(dropped, origin)
                    dropped = 0
                yield container_log_line(raw, origin)
        finally:
            pipe.close()

    def _dropped(self, count: int, unit: str) -> LogLine:
        return LogLine(f"[gpudash: {count} journal line(s) dropped: more than "
                       f"{self.source.journal_budget.rate:g} a second from "
                       f"{self.source.name}]", None, unit)
