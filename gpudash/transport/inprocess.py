"""This machine's stream collector in a thread of gpudash's own process.

The stream a local dashboard reads all day needs no privilege and no other interpreter:
the same ``collector.host`` program runs its ``loop.main`` in a thread, over two OS
pipes, and gpudash reads its lines as it reads a subprocess's. What changes is only the
cost: no second Python (about 19 MB and its start-up), nothing compressed or sent. The
lines, the merge patches, the pings and the decoder are the same code as on a remote
host. Requests that may need root (``serve``: signals, probes, with ``--sudo``) still run
as a program of their own.

The thread cannot be killed: closing its stdin ends it after its current sample; one
stuck in a driver call stays stuck (a daemon thread, gone with the process), and the
stream says so as a link presumed lost, as it would of a stuck subprocess.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
from typing import Any, BinaryIO

from gpudash.collector.host import loop
from gpudash.protocol.source import LinkLost, ProtocolError
from gpudash.transport.link import Pipe


class ThreadPipe(Pipe):
    """``loop.main(argv)`` in a daemon thread; its stdin and stdout are OS pipes."""

    def __init__(self, name: str, argv: list[str], line_limit: int) -> None:
        super().__init__(name, lambda: False, line_limit)
        self.argv = list(argv)
        in_r, self._in_w = os.pipe()
        os.set_blocking(self._in_w, False)  # a full pipe must never block the event loop
        self._out_r, out_w = os.pipe()
        self._inp: BinaryIO = os.fdopen(in_r, "rb")  # the collector's threads own these two
        self._out: BinaryIO = os.fdopen(out_w, "wb")
        self._error = ""
        self._done = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name=f"gpudash-collector {name}", daemon=True)
        self._reader: asyncio.StreamReader | None = None
        self._transport: asyncio.ReadTransport | None = None
        self._closed = False

    async def start(self) -> None:
        loop_ = asyncio.get_running_loop()
        reader = asyncio.StreamReader(limit=self.line_limit)
        out = os.fdopen(self._out_r, "rb", buffering=0)  # an fd: nothing on disk to wait for
        self._transport, _ = await loop_.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(reader), out)
        self._reader = reader
        self._thread.start()

    def _run(self) -> None:
        try:
            loop.main(self.argv, inp=self._inp, out=self._out)
        except BaseException as exc:  # noqa: BLE001 - said on the stream, as a program's stderr
            self._error = f"the collector stopped: {type(exc).__name__}: {exc}"
        finally:
            with contextlib.suppress(OSError):
                self._out.close()  # EOF for the reader
            self._done.set()

    async def _readline(self) -> bytes:
        assert self._reader is not None
        try:
            return await self._reader.readline()
        except ValueError:  # asyncio's "chunk exceeds the limit"
            raise ProtocolError(
                f"{self.name}: collector sent a line longer than {self.line_limit} bytes"
            ) from None

    def write(self, data: bytes) -> None:
        if self._closed:
            raise LinkLost(f"{self.name}: collector stdin closed")
        try:
            written = os.write(self._in_w, data)
        except OSError as exc:  # BlockingIOError: it has stopped reading
            raise LinkLost(f"{self.name}: collector stdin closed ({exc})") from None
        if written != len(data):
            raise LinkLost(f"{self.name}: collector stdin full")

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            os.close(self._in_w)  # the collector ends at EOF
        if self._transport is not None:
            self._transport.close()

    def stderr_tail(self) -> str:
        return self._error

    async def wait_closed(self) -> None:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(3):
                await asyncio.to_thread(self._done.wait, 2)

    @property
    def running(self) -> bool:
        return self._thread.is_alive()


async def start_thread_pipe(name: str, argv: list[str], line_limit: int) -> Any:
    """A started ``ThreadPipe`` running ``argv`` (``stream INTERVAL [--sudo]``)."""
    pipe = ThreadPipe(name, argv, line_limit)
    await pipe.start()
    return pipe
