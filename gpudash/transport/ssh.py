"""A remote host over one asyncssh connection (through jump hosts if the config says so).

Everything OpenSSH's config says about reaching a host is honoured (HostName, Port, User,
IdentityFile, ProxyJump, ProxyCommand ...) except what gpudash never needs and must not
pass on: agent and X11 forwarding are always off. Host keys: see ``hostkeys``. A config
another user could have written is refused before asyncssh reads it: see ``sshconfig``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shlex
import socket
from dataclasses import field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import asyncssh

from gpudash.protocol.source import CommandResult, ConnectError, LinkLost, SourceError
from gpudash.record import record
from gpudash.transport.hostkeys import (
    HostKeyCheck,
    KnownHosts,
    KnownHostsFiles,
    known_hosts_files,
    local_tokens,
)
from gpudash.transport.hostsource import CollectorSource
from gpudash.transport.limiter import CONNECTS, ConnectLimiter
from gpudash.transport.link import LINE_LIMIT, Connection, HostFacts, Pipe
from gpudash.transport.sshconfig import UnsafeSshConfig, check_ssh_config

log = logging.getLogger("gpudash.transport")

CONNECT_TIMEOUT_S = 10.0
KEEPALIVE_INTERVAL_S = 5.0
KEEPALIVE_COUNT_MAX = 3
MAX_JUMPS = 8  # ProxyJump chains (and loops) end here
# What a command run to completion (systemctl, the shell fallback's signal) may leave in
# memory: the last MiB of its output. A host cannot make gpudash hold more.
RUN_OUTPUT_MAX = 1 << 20


@record
class SshTarget:
    """Where to connect: a config alias or host name, with optional user and port."""

    host: str
    user: str | None = None
    port: int | None = None


def parse_target(target: str) -> SshTarget:
    """``ssh://user@host:port``, ``user@host`` or ``host`` (an ``~/.ssh/config`` alias)."""
    text = target.strip()
    if text.startswith("ssh://"):
        parts = urlsplit(text)
        try:
            port = parts.port
        except ValueError:
            raise ConnectError(f"bad port in {target!r}") from None
        if not parts.hostname:
            raise ConnectError(f"no host in {target!r}")
        return SshTarget(parts.hostname, parts.username or None, port)
    user, at, host = text.rpartition("@")
    if not host or any(c.isspace() for c in text) or host.startswith("-"):
        raise ConnectError(f"not a host: {target!r} (use host, user@host or ssh://user@host:port)")
    return SshTarget(host, user if at else None, None)


def parse_jump(hop: str) -> SshTarget:
    """One ProxyJump hop: ``[user@]host[:port]``, ``[user@][v6addr]:port`` or an ssh:// URI."""
    text = hop.strip()
    if text.startswith("ssh://"):
        return parse_target(text)
    user, at, rest = text.rpartition("@")
    port: int | None = None
    if rest.startswith("["):
        host, _, tail = rest[1:].partition("]")
        if tail.startswith(":") and tail[1:].isdigit():
            port = int(tail[1:])
    else:
        host, colon, number = rest.rpartition(":")
        if colon and number.isdigit() and ":" not in host:
            port = int(number)
        else:
            host = rest
    if not host or any(c.isspace() for c in host) or host.startswith("-"):
        raise ConnectError(f"not a ProxyJump host: {hop!r}")
    return SshTarget(host, user if at else None, port)


class SshPipe(Pipe):
    def __init__(self, name: str, proc: Any, link_down: Any, line_limit: int) -> None:
        super().__init__(name, link_down, line_limit)
        self.proc = proc
        self._stderr = bytearray()
        self._drain = asyncio.ensure_future(self._collect_stderr())

    async def _collect_stderr(self) -> None:
        with contextlib.suppress(asyncssh.Error, OSError):
            while chunk := await self.proc.stderr.read(4096):
                self._stderr += chunk
                del self._stderr[:-4096]

    async def _readline(self) -> bytes:
        try:
            line: bytes = await self.proc.stdout.readline()
        except (asyncssh.Error, OSError) as exc:
            raise LinkLost(f"{self.name}: link lost ({exc})") from None
        return line

    def write(self, data: bytes) -> None:
        try:
            self.proc.stdin.write(data)
        except (asyncssh.Error, OSError) as exc:
            raise LinkLost(f"{self.name}: link lost ({exc})") from None

    def close(self) -> None:
        with contextlib.suppress(asyncssh.Error, OSError):
            self.proc.stdin.write_eof()
        self.proc.close()
        self._drain.cancel()

    def stderr_tail(self) -> str:
        return self._stderr.decode("utf-8", "replace")


class _Client(asyncssh.SSHClient):
    """asyncssh's callbacks for one connection: its host key decision and whether *this*
    connection was lost (a late callback of an old connection touches only its own)."""

    def __init__(self, check: HostKeyCheck) -> None:
        self.check = check
        self.lost = False

    def validate_host_public_key(self, host: str, addr: str, port: int, key: Any) -> bool:
        return self.check.judge(host, addr, port, key)

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True


@record
class SshSettings:
    """What the operator said about reaching hosts (the same for every jump host)."""

    config: Path | None
    known_hosts: Path | None  # replaces the config's UserKnownHostsFile everywhere
    accept_new_host_key: bool
    connect_timeout: float
    limiter: ConnectLimiter = CONNECTS  # shared by every host: no stampede on sshd or agent


@record(frozen=False)
class SshLink:
    """One live link: the connection to the host and those to its jump hosts."""

    conn: Any
    clients: list[_Client]  # the host's first, then the jump hosts'
    jumps: list[Any] = field(default_factory=list)  # innermost last

    def down(self) -> bool:
        return any(client.lost for client in self.clients)

    def close(self) -> None:
        for conn in [self.conn, *reversed(self.jumps)]:
            conn.close()


async def dial(
    target: SshTarget,
    settings: SshSettings,
    name: str,
    *,
    jump_for: str | None = None,
    via: SshLink | None = None,
    depth: int = 0,
) -> SshLink:
    """Connect to ``target`` (``name`` to the operator) as its config says, through
    ``via`` or its own ProxyJump. ``jump_for``: the host this one is a jump host for."""
    label = name if jump_for is None else f"{name} (jump host for {jump_for})"
    if depth > MAX_JUMPS:
        raise ConnectError(f"{label}: more than {MAX_JUMPS} jump hosts (a ProxyJump loop?)")
    common: dict[str, Any] = {
        "config": [str(settings.config)] if settings.config is not None else (),
        "port": target.port or (),
        "username": target.user or (),
        "connect_timeout": settings.connect_timeout,
        "keepalive_interval": KEEPALIVE_INTERVAL_S,
        "keepalive_count_max": KEEPALIVE_COUNT_MAX,
        "agent_forwarding": False,
        "x11_forwarding": False,
    }
    options, files = await _read_config(target, settings, label, common)
    known = await asyncio.to_thread(KnownHosts.load, files)
    jumps: list[Any] = []
    clients: list[_Client] = []
    if via is None and options.tunnel:  # ProxyJump: ours to make, so its keys are checked
        for hop in str(options.tunnel).split(","):
            jump = parse_jump(hop)
            via = await _through(jump, settings, jump.host, name, via, depth + 1)
        assert via is not None
    if via is not None:
        jumps, clients = [*via.jumps, via.conn], list(via.clients)
    check = HostKeyCheck(
        known,
        accept_new=settings.accept_new_host_key,
        name=name,
        jump_for=jump_for,
        alias=options.host_key_alias,
    )
    client = _Client(check)
    sock: socket.socket | None = None
    try:
        if via is None:  # the TCP connect waits for no slot: a black hole delays only itself
            async with asyncio.timeout(settings.connect_timeout):
                sock = await _tcp(options)
        async with settings.limiter.slot(_overloaded), \
                asyncio.timeout(settings.connect_timeout + 5):
            conn = await asyncssh.connect(
                target.host,
                tunnel=via.conn if via is not None else None,
                sock=sock,
                known_hosts=known.trusted,
                client_factory=lambda: client,
                **common,
            )
    except BaseException as exc:
        if sock is not None:
            sock.close()
        if via is not None:
            via.close()
        raise _connect_error(exc, check, label, settings.connect_timeout) from None
    link = SshLink(conn, [client, *clients], jumps)
    if check.new_key is not None:
        host, port, key = check.new_key
        try:
            await asyncio.to_thread(known.record, host, port, key)  # accept-new, as OpenSSH
        except OSError as exc:
            link.close()
            raise ConnectError(
                f"{label}: cannot record its new host key in {known.files.user[0]}: {exc}"
            ) from None
    return link


async def _read_config(target: SshTarget, settings: SshSettings, label: str,
                       common: dict[str, Any]) -> tuple[Any, KnownHostsFiles]:
    """asyncssh's options for ``target`` as the config says, and the known_hosts files
    they name; the config checked first, as ssh checks it (a ProxyCommand there runs as
    us)."""
    try:
        await asyncio.to_thread(check_ssh_config, settings.config)
    except UnsafeSshConfig as exc:
        raise UnsafeSshConfig(f"not connecting to {label}: {exc}") from None
    try:
        # asyncssh reads the config (and keys) in a worker thread
        options = await asyncssh.SSHClientConnectionOptions.construct(host=target.host, **common)
        tokens = local_tokens(
            host=options.host,
            original=target.host,
            port=options.port,
            user=options.username,
            alias=options.host_key_alias,
        )
        files = known_hosts_files(options.config.get, settings.known_hosts, tokens)
    except (OSError, ValueError, asyncssh.Error) as exc:
        raise ConnectError(f"{label}: cannot read the ssh config: {exc}") from None
    return options, files


async def _tcp(options: Any) -> socket.socket | None:
    """The TCP connection to a host reached directly (HostName, Port, AddressFamily and
    BindAddress as the config says), made before a connect slot is taken: the limiter
    bounds handshakes and logins, and a host whose SYNs go unanswered must not hold a
    slot the healthy hosts wait for. None where asyncssh must make the connection itself
    (ProxyCommand, CanonicalizeHostname)."""
    if options.proxy_command or options.canonicalize_hostname:
        return None
    loop = asyncio.get_running_loop()
    infos = await loop.getaddrinfo(options.host, options.port, family=options.family or 0,
                                   type=socket.SOCK_STREAM)
    error: OSError = OSError(f"no address for {options.host}")
    for family, kind, proto, _name, addr in infos:
        sock = socket.socket(family, kind, proto)
        try:
            sock.setblocking(False)
            if options.local_addr:
                sock.bind(options.local_addr)
            await loop.sock_connect(sock, addr)
            return sock
        except OSError as exc:
            sock.close()
            error = exc
        except BaseException:
            sock.close()
            raise
    raise error


def _overloaded(exc: BaseException) -> bool:
    """A failed connect that more connects at once would make worse (a timeout, a reset,
    sshd's MaxStartups dropping us), not one the host decided (a key, a refused login)."""
    if isinstance(exc, asyncssh.PermissionDenied | asyncssh.HostKeyNotVerifiable):
        return False
    return isinstance(exc, TimeoutError | OSError | asyncssh.Error)


async def _through(
    target: SshTarget,
    settings: SshSettings,
    name: str,
    jump_for: str,
    via: SshLink | None,
    depth: int,
) -> SshLink:
    """The link to one jump host (``via`` the previous one, if any)."""
    try:
        return await dial(target, settings, name, jump_for=jump_for, via=via, depth=depth)
    except BaseException:
        if via is not None:
            via.close()
        raise


def _connect_error(
    exc: BaseException, check: HostKeyCheck, label: str, timeout_s: float
) -> BaseException:
    """The typed error for a failed connect, naming the host that failed."""
    if isinstance(exc, SourceError | asyncio.CancelledError | KeyboardInterrupt):
        return exc
    if isinstance(exc, asyncssh.HostKeyNotVerifiable):
        return check.error(exc.reason)
    if isinstance(exc, asyncssh.PermissionDenied):
        return ConnectError(
            f"{label}: authentication refused ({exc.reason}); check ssh-agent / "
            f"IdentityFile and the login name"
        )
    if isinstance(exc, TimeoutError):
        return ConnectError(f"{label}: no answer within {timeout_s:g} s")
    if isinstance(exc, OSError | asyncssh.Error | ValueError):
        return ConnectError(f"cannot connect to {label}: {exc}")
    log.error("%s: connecting failed unexpectedly", label, exc_info=exc)
    return ConnectError(f"cannot connect to {label}: {type(exc).__name__}: {exc}")


class SshConnection(Connection):
    """One host over SSH: one link at a time, opened on first use, again after a drop."""

    def __init__(
        self,
        name: str,
        settings: SshSettings,
        python: str = "python3",
        line_limit: int = LINE_LIMIT,
    ) -> None:
        self.name = name
        self.target = parse_target(name)
        self.settings = settings
        self.python = python
        self.line_limit = line_limit
        self.link: SshLink | None = None
        self._facts: HostFacts | None = None
        self._connecting = asyncio.Lock()

    @property
    def route(self) -> str:
        """What it was told, never anything secret."""
        target, config = self.target, self.settings.config
        login = f"{target.user}@" if target.user else ""
        port = f" port {target.port}" if target.port else ""
        return (f"SSH to {login}{target.host}{port} with "
                f"{'ssh config ' + str(config) if config else 'your ~/.ssh/config'} and agent")

    async def connect(self) -> HostFacts:
        async with self._connecting:
            if self.link is not None and not self.link.down() and self._facts is not None:
                return self._facts
            self._drop()
            self.link = await dial(self.target, self.settings, self.name)
            try:
                self._facts = await self.probe(self.python)
            except SourceError:
                self._drop()
                raise
            return self._facts

    def _drop(self) -> None:
        link, self.link, self._facts = self.link, None, None
        if link is not None:
            link.close()

    def link_down(self) -> bool:
        return self.link is None or self.link.down()

    async def open(self, command: list[str] | str) -> Pipe:
        link = self.link
        if link is None:
            raise LinkLost(f"{self.name}: not connected")
        line = command if isinstance(command, str) else shlex.join(command)
        try:
            # The window bounds how much of a line asyncssh buffers: a smaller one than
            # the longest line would cut a big snapshot in two.
            proc = await link.conn.create_process(
                line, encoding=None, window=self.line_limit, x11_forwarding=False
            )
        except (OSError, asyncssh.Error) as exc:
            raise LinkLost(f"{self.name}: cannot open a channel: {exc}") from None
        return SshPipe(self.name, proc, link.down, self.line_limit)

    async def run(self, argv: list[str], limit_s: float, stdin: bytes | None = None
                  ) -> CommandResult:
        link = self.link
        if link is None:
            return CommandResult(tuple(argv), None, "not connected")
        try:
            async with asyncio.timeout(limit_s):
                status, output = await self._run(link, shlex.join(argv), stdin)
        except TimeoutError:
            return CommandResult(tuple(argv), None, f"no answer within {limit_s:g} s")
        except (OSError, asyncssh.Error) as exc:
            return CommandResult(tuple(argv), None, f"link lost: {exc}")
        return CommandResult(tuple(argv), status, output)

    async def _run(self, link: SshLink, line: str, stdin: bytes | None = None
                   ) -> tuple[int | None, str]:
        """Run ``line`` to its end (``stdin`` on its input, then EOF); its exit status and
        the last ``RUN_OUTPUT_MAX`` bytes of its output (stdout and stderr together),
        invalid UTF-8 replaced."""
        proc = await link.conn.create_process(line, encoding=None, stderr=asyncssh.STDOUT)
        kept = bytearray()
        cut = 0
        try:
            if stdin is not None:
                proc.stdin.write(stdin)
                proc.stdin.write_eof()
            while chunk := await proc.stdout.read(1 << 16):
                kept += chunk
                if len(kept) > RUN_OUTPUT_MAX:
                    cut += len(kept) - RUN_OUTPUT_MAX
                    del kept[:-RUN_OUTPUT_MAX]
            await proc.wait_closed()
        finally:
            proc.close()
        output = kept.decode("utf-8", "replace")
        if cut:
            output = f"[{cut} bytes of output cut]\n" + output
        status: int | None = proc.exit_status
        return status, output

    async def close(self) -> None:
        link = self.link
        self._drop()
        if link is not None:
            with contextlib.suppress(asyncssh.Error, OSError):
                await link.conn.wait_closed()


class SshSource(CollectorSource):
    """``HostSource`` over SSH. One connection per host, opened on first use."""

    def __init__(
        self,
        target: str,
        *,
        sudo: bool = False,
        read_only: bool = False,
        accept_new_host_key: bool = False,
        ssh_config: Path | None = None,
        known_hosts: Path | None = None,
        python: str = "python3",
        connect_timeout: float = CONNECT_TIMEOUT_S,
        limiter: ConnectLimiter | None = None,
    ) -> None:
        settings = SshSettings(
            config=ssh_config,
            known_hosts=known_hosts.expanduser() if known_hosts is not None else None,
            accept_new_host_key=accept_new_host_key,
            connect_timeout=connect_timeout,
            limiter=limiter or CONNECTS,
        )
        connection = SshConnection(target, settings, python=python)
        super().__init__(connection, sudo=sudo, read_only=read_only, send_pynvml=True)
