"""This machine as a host: the collector runs as a subprocess of gpudash."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import sys
from collections.abc import Mapping

from gpudash.collector.wire import MAX_LINE
from gpudash.source import CommandResult, ConnectError
from gpudash.transport.link import CollectorSource, Pipe


class ProcessPipe(Pipe):
    """A local subprocess with piped stdin/stdout; stderr kept for error messages."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self._stderr = bytearray()
        self._drain = asyncio.ensure_future(self._collect_stderr())

    async def _collect_stderr(self) -> None:
        assert self.proc.stderr is not None
        while chunk := await self.proc.stderr.read(4096):
            self._stderr += chunk
            del self._stderr[:-4096]

    async def readline(self) -> bytes:
        assert self.proc.stdout is not None
        return await self.proc.stdout.readline()

    def write(self, data: bytes) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(data)

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
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.proc.wait(), 5)


class LocalSource(CollectorSource):
    """``HostSource`` for the machine gpudash runs on (no SSH).

    ``env`` adds variables to the collector's environment (tests point
    ``LD_LIBRARY_PATH`` at a stand-in libnvidia-ml this way).
    """

    send_pynvml = False  # the installed pynvml is importable here

    def __init__(
        self,
        name: str | None = None,
        *,
        sudo: bool = False,
        read_only: bool = False,
        env: Mapping[str, str] | None = None,
        python: str = sys.executable,
    ) -> None:
        super().__init__(name or socket.gethostname(), sudo=sudo, read_only=read_only)
        self.env = {**os.environ, **(env or {})}
        self.python = python
        self.is_root = os.geteuid() == 0

    async def _ready(self) -> None:
        return None

    def _link_down(self) -> bool:
        return False

    async def _open(self, command: list[str] | str) -> Pipe:
        argv = ["sh", "-c", command] if isinstance(command, str) else command
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                env=self.env,
                limit=MAX_LINE,
            )
        except OSError as exc:
            raise ConnectError(f"cannot start the local collector: {exc}") from exc
        return ProcessPipe(proc)

    async def _run(self, argv: list[str], limit_s: float) -> CommandResult:
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT,
                env=self.env,
            )
        except OSError as exc:
            return CommandResult(tuple(argv), 127, str(exc))
        try:
            out, _ = await asyncio.wait_for(proc.communicate(), limit_s)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            return CommandResult(tuple(argv), None, f"no answer within {limit_s:g} s")
        return CommandResult(tuple(argv), proc.returncode, out.decode("utf-8", "replace"))
