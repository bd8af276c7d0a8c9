"""A remote host over one asyncssh connection, host keys verified like OpenSSH does."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import asyncssh

from gpudash.source import CommandResult, ConnectError, HostKeyError, LinkLost
from gpudash.transport.link import CollectorSource, Pipe

CONNECT_TIMEOUT_S = 10.0
KEEPALIVE_INTERVAL_S = 5.0
KEEPALIVE_COUNT_MAX = 3
DEFAULT_KNOWN_HOSTS = Path("~/.ssh/known_hosts")


@dataclass(frozen=True, slots=True)
class Target:
    """Where to connect: a config alias or host name, with optional user and port."""

    host: str
    user: str | None = None
    port: int | None = None


def parse_target(target: str) -> Target:
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
        return Target(parts.hostname, parts.username or None, port)
    user, at, host = text.rpartition("@")
    if not host or any(c.isspace() for c in text) or host.startswith("-"):
        raise ConnectError(f"not a host: {target!r} (use host, user@host or ssh://user@host:port)")
    return Target(host, user if at else None, None)


class SshPipe(Pipe):
    def __init__(self, proc: Any) -> None:
        self.proc = proc
        self._stderr = bytearray()
        self._drain = asyncio.ensure_future(self._collect_stderr())

    async def _collect_stderr(self) -> None:
        with contextlib.suppress(Exception):
            while chunk := await self.proc.stderr.read(4096):
                self._stderr += chunk
                del self._stderr[:-4096]

    async def readline(self) -> bytes:
        line: bytes = await self.proc.stdout.readline()
        return line

    def write(self, data: bytes) -> None:
        self.proc.stdin.write(data)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.proc.stdin.write_eof()
        with contextlib.suppress(Exception):
            self.proc.close()
        self._drain.cancel()

    def stderr_tail(self) -> str:
        return self._stderr.decode("utf-8", "replace")


class _Client(asyncssh.SSHClient):
    """Classifies a key that known_hosts did not vouch for: unknown, or changed."""

    def __init__(self, source: SshSource) -> None:
        self.source = source

    def validate_host_public_key(self, host: str, addr: str, port: int, key: Any) -> bool:
        source = self.source
        listed = source.known_hosts_entries(host, addr, port)
        source.key_verdict = ("changed" if listed else "unknown", host, port, key)
        return not listed and source.accept_new_host_key

    def connection_lost(self, exc: Exception | None) -> None:
        self.source.lost = True


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
    ) -> None:
        super().__init__(target, sudo=sudo, read_only=read_only)
        self.target = parse_target(target)
        self.accept_new_host_key = accept_new_host_key
        self.ssh_config = ssh_config
        self.known_hosts = known_hosts
        self.wanted_python = python
        self.connect_timeout = connect_timeout
        self.conn: Any = None
        self.lost = False
        self.key_verdict: tuple[str, str, int, Any] | None = None
        self._connecting = asyncio.Lock()

    # -- host keys

    def _known_hosts_path(self) -> Path:
        return (self.known_hosts or DEFAULT_KNOWN_HOSTS).expanduser()

    def known_hosts_entries(self, host: str, addr: str, port: int) -> bool:
        path = self._known_hosts_path()
        if not path.exists():
            return False
        try:
            matched = asyncssh.read_known_hosts(str(path)).match(host, addr, port)
        except (OSError, ValueError, asyncssh.Error):
            return True  # unreadable: never treat as "unknown, accept"
        return any(matched[:3])

    def _store_host_key(self, host: str, port: int, key: Any) -> None:
        path = self._known_hosts_path()
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        entry = host if port == 22 else f"[{host}]:{port}"
        words = key.export_public_key("openssh").decode().split()
        with path.open("a") as known:
            known.write(f"{entry} {words[0]} {words[1]}\n")

    def _host_key_error(self) -> HostKeyError:
        verdict, host, port, _key = self.key_verdict or ("unknown", self.target.host, 22, None)
        where = str(self.known_hosts or "~/.ssh/known_hosts")
        entry = host if port == 22 else f"[{host}]:{port}"
        if verdict == "changed":
            return HostKeyError(
                f"HOST KEY FOR {host} HAS CHANGED: it does not match {where}. This may be "
                f"an attack, or the host was reinstalled. Verify the new key out of band, "
                f"then remove the old one with `ssh-keygen -R '{entry}'`. Refusing to connect."
            )
        return HostKeyError(
            f"host key for {host} is not in {where}; verify it and run `ssh {self.name}` "
            f"once, or pass --accept-new-host-key"
        )

    # -- connection

    async def _ready(self) -> None:
        async with self._connecting:
            if self.conn is not None and not self.lost:
                return
            if self.conn is not None:  # the old connection dropped: start afresh
                self.conn.close()
                self.conn = None
                self._control.drop()
            await self._connect()

    async def _connect(self) -> None:
        target = self.target
        options: dict[str, Any] = {
            "known_hosts": str(self._known_hosts_path()) if self.known_hosts else (),
            "connect_timeout": self.connect_timeout,
            "keepalive_interval": KEEPALIVE_INTERVAL_S,
            "keepalive_count_max": KEEPALIVE_COUNT_MAX,
            "client_factory": lambda: _Client(self),
        }
        if self.known_hosts and not self.known_hosts.expanduser().exists():
            options["known_hosts"] = asyncssh.import_known_hosts("")
        if self.ssh_config is not None:
            options["config"] = [str(self.ssh_config)]
        if target.user:
            options["username"] = target.user
        if target.port:
            options["port"] = target.port
        self.key_verdict = None
        self.lost = False
        try:
            conn = await asyncio.wait_for(
                asyncssh.connect(target.host, **options), self.connect_timeout + 5
            )
        except asyncssh.HostKeyNotVerifiable:
            raise self._host_key_error() from None
        except asyncssh.PermissionDenied as exc:
            raise ConnectError(
                f"{self.name}: authentication refused ({exc.reason}); check ssh-agent / "
                f"IdentityFile and the login name"
            ) from None
        except TimeoutError:
            raise ConnectError(
                f"{self.name}: no answer within {self.connect_timeout:g} s"
            ) from None
        except (OSError, asyncssh.Error) as exc:
            raise ConnectError(f"cannot connect to {self.name}: {exc}") from None
        if self.key_verdict is not None and self.key_verdict[0] == "unknown":
            _verdict, host, port, key = self.key_verdict
            self._store_host_key(host, port, key)  # accept-new, as OpenSSH does
        self.conn = conn
        await self._probe()

    async def _probe(self) -> None:
        """Learn the login's uid and whether the host has the wanted python."""
        probe = (
            "id -u; command -v " + shlex.quote(self.wanted_python) + " >/dev/null 2>&1 "
            "&& echo python || echo no-python"
        )
        result = await self._run(["sh", "-c", probe], 15)
        words = result.output.split()
        if result.returncode != 0 or len(words) < 2 or not words[0].isdigit():
            raise ConnectError(f"{self.name}: cannot run commands ({result.output.strip()[:200]})")
        self.is_root = words[0] == "0"
        self.python = self.wanted_python if words[-1] == "python" else None

    def _link_down(self) -> bool:
        return self.lost

    async def _open(self, command: list[str] | str) -> Pipe:
        line = command if isinstance(command, str) else shlex.join(command)
        try:
            proc = await self.conn.create_process(line, encoding=None)
        except (OSError, asyncssh.Error) as exc:
            self.lost = self.lost or isinstance(exc, asyncssh.ConnectionLost | OSError)
            raise LinkLost(f"{self.name}: cannot open a channel: {exc}") from None
        return SshPipe(proc)

    async def _run(self, argv: list[str], limit_s: float) -> CommandResult:
        try:
            done = await asyncio.wait_for(
                self.conn.run(shlex.join(argv), check=False, stderr=asyncssh.STDOUT), limit_s
            )
        except TimeoutError:
            return CommandResult(tuple(argv), None, f"no answer within {limit_s:g} s")
        except (OSError, asyncssh.Error) as exc:
            return CommandResult(tuple(argv), None, f"link lost: {exc}")
        output = done.stdout if isinstance(done.stdout, str) else ""
        return CommandResult(tuple(argv), done.exit_status, output)

    async def close(self) -> None:
        await super().close()
        if self.conn is not None:
            self.conn.close()
            with contextlib.suppress(Exception):
                await self.conn.wait_closed()
            self.conn = None


def default_ssh_config() -> Path | None:
    path = Path(os.path.expanduser("~/.ssh/config"))
    return path if path.exists() else None
