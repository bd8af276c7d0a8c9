"""This machine as a host: the collector runs as a subprocess of gpudash, or (the
dashboard's stream, ``in_process``) in a thread of its own process (``inprocess``)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import sys
from collections.abc import Mapping

from gpudash.protocol.source import CommandResult, ConnectError, LinkLost, ProtocolError
from gpudash.transport.hostsource import CollectorSource
from gpudash.transport.link import LINE_LIMIT, Connection, HostFacts, Pipe


class ProcessPipe(Pipe):
    """A local subprocess with piped stdin/stdout; stderr kept for error messages."""

    def __init__(self, name: str, proc: asyncio.subprocess.Process, line_limit: int) -> None:
        super().__init__(name, lambda: False, line_limit)
        self.proc = proc
        self._stderr = bytearray()
        self._drain = asyncio.ensure_future(self._collect_stderr())

    async def _collect_stderr(self) -> None:
        assert self.proc.stderr is not None
        while chunk := await self.proc.stderr.read(4096):
            self._stderr += chunk
            del self._stderr[:-4096]

    async def _readline(self) -> bytes:
        assert self.proc.stdout is not None
        try:
            return await self.proc.stdout.readline()
        except ValueError:  # asyncio's "chunk exceeds the limit"
            raise ProtocolError(
                f"{self.name}: collector sent a line longer than {self.line_limit} bytes"
            ) from None
        except OSError as exc:
            raise LinkLost(f"{self.name}: collector pipe failed ({exc})") from None

    def write(self, data: bytes) -> None:
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(data)
        except (OSError, RuntimeError) as exc:  # closed transport
            raise LinkLost(f"{self.name}: collector stdin closed ({exc})") from None

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()  # the collector exits on EOF
        if self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.kill()
        self._drain.cancel()

    def stderr_tail(self) -> str:
        return self._stderr.decode("utf-8", "replace")

    async def wait_closed(self) -> None:
        with contextlib.suppress(TimeoutError, ProcessLookupError, ChildProcessError):
            async with asyncio.timeout(5):
                await self.proc.wait()


class LocalConnection(Connection):
    """Runs programs here. The link never drops; the facts are known without a probe."""

    def __init__(
        self, name: str, env: Mapping[str, str], python: str | None, line_limit: int = LINE_LIMIT
    ) -> None:
        self.name = name
        self.env = dict(env)
        self.line_limit = line_limit
        self.facts = HostFacts(is_root=os.geteuid() == 0, python=python)

    @property
    def route(self) -> str:
        return "the collector on this machine"

    async def connect(self) -> HostFacts:
        return self.facts

    def link_down(self) -> bool:
        return False

    async def open(self, command: list[str] | str) -> Pipe:
        argv = ["sh", "-c", command] if isinstance(command, str) else command
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                env=self.env,
                limit=self.line_limit,
            )
        except OSError as exc:
            raise ConnectError(f"cannot start the local collector: {exc}") from exc
        return ProcessPipe(self.name, proc, self.line_limit)

    async def run(self, argv: list[str], limit_s: float, stdin: bytes | None = None
                  ) -> CommandResult:
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.DEVNULL if stdin is None else asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT,
                env=self.env,
            )
        except OSError as exc:
            return CommandResult(tuple(argv), 127, str(exc))
        try:
            async with asyncio.timeout(limit_s):
                out, _ = await proc.communicate(stdin)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            return CommandResult(tuple(argv), None, f"no answer within {limit_s:g} s")
        return CommandResult(tuple(argv), proc.returncode, out.decode("utf-8", "replace"))

    async def close(self) -> None:
        return None


class LocalSource(CollectorSource):
    """``HostSource`` for the machine gpudash runs on (no SSH).

    ``env`` adds variables to the collector's environment (tests point
    ``LD_LIBRARY_PATH`` at a stand-in libnvidia-ml this way). ``python`` None runs the
    shell fallback. ``in_process`` runs the stream collector in a thread here: it then
    sees this process's environment (and its libnvidia-ml), not ``env``.
    """

    def __init__(
        self,
        name: str | None = None,
        *,
        sudo: bool = False,
        read_only: bool = False,
        env: Mapping[str, str] | None = None,
        python: str | None = sys.executable,
        in_process: bool = False,
    ) -> None:
        connection = LocalConnection(
            name or socket.gethostname(), {**os.environ, **(env or {})}, python
        )
        # the installed pynvml is importable here: nothing to send
        super().__init__(connection, sudo=sudo, read_only=read_only, send_pynvml=False)
        self.options.in_process = in_process and python is not None
