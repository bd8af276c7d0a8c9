"""The link to a host: line sizes, per-connection state, round trips, typed errors."""
# ruff: noqa: F811  (fixtures imported from sshd.fixture are redefined as parameters)

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from sshd.fixture import (  # noqa: F401
    SshdServer,
    first,
    gpus,
    ssh_source,
    sshd_fakegpu,
    sshd_server,
)

from gpudash.collector.host.protocol import PROTOCOL
from gpudash.demo.host import DemoHost
from gpudash.protocol.source import LinkLost, ProtocolError, round_trip_s
from gpudash.transport import LocalSource
from gpudash.transport import ssh as ssh_transport
from gpudash.transport.link import Connection, Pipe
from gpudash.transport.local import LocalConnection
from gpudash.transport.ssh import SshConnection, SshSettings


def fake_python(tmp_path: Path, body: str) -> str:
    """An executable that stands in for the host's python3 (the collector below the link)."""
    script = tmp_path / "fake-python3"
    script.write_text("#!/bin/sh\nexec python3 -c '" + body + "'\n")
    script.chmod(0o755)
    return str(script)


PROCS = 1300  # with 4000-byte cmdlines (within the decoder's bounds): about 5.3 MB
BIG_SNAPSHOT = f"""
import json, sys
procs = {{str(pid): {{"pid": pid, "cmdline": "x" * 4000}} for pid in range(2, {PROCS} + 2)}}
snap = {{"v": {PROTOCOL}, "taken_at": 1.0, "procs": procs}}
sys.stdout.write(json.dumps({{"k": "full", "s": snap}}) + "\\n")
sys.stdout.flush()
sys.stdin.buffer.read()
"""


@pytest.mark.ssh
async def test_a_snapshot_bigger_than_the_default_window_arrives_whole(
    sshd_server: SshdServer, tmp_path: Path
) -> None:
    python = fake_python(tmp_path, BIG_SNAPSHOT)
    for source in (ssh_source(sshd_server, python=python), LocalSource(python=python)):
        try:
            snap = await asyncio.wait_for(first(source.stream(0.5)), 30)
        finally:
            await source.close()
        assert len(snap.processes) == PROCS
        assert all(p.cmdline == "x" * 4000 for p in snap.processes)


@pytest.mark.ssh
async def test_a_late_lost_callback_of_a_closed_connection_leaves_the_new_one_alone(
    sshd_server: SshdServer, gpus, monkeypatch: pytest.MonkeyPatch
) -> None:
    clients: list[Any] = []
    created = ssh_transport._Client.__init__

    def remember(self: Any, *args: Any, **kw: Any) -> None:
        created(self, *args, **kw)
        clients.append(self)

    monkeypatch.setattr(ssh_transport._Client, "__init__", remember)
    source = ssh_source(sshd_server)
    try:
        await source.control.sample()
        await source.close()
        await source.control.sample()  # a new connection
        assert len(clients) == 2
        clients[0].connection_lost(None)  # the first connection's callback, delivered late
        await source.control.sample()
        await first(source.stream(0.2), 2)
        assert len(clients) == 2, "a healthy connection was thrown away"
    finally:
        await source.close()


@pytest.mark.ssh
async def test_lines_are_read_whole_up_to_the_limit_and_refused_past_it(
    sshd_server: SshdServer,
) -> None:
    limit = 1024 * 1024
    settings = SshSettings(sshd_server.ssh_config, sshd_server.known_hosts, False, 10.0)
    connections: list[Connection] = [
        SshConnection(sshd_server.target, settings, line_limit=limit),
        LocalConnection("here", os.environ, None, line_limit=limit),
    ]
    for connection in connections:
        try:
            await connection.connect()
            fits = await connection.open(["python3", "-c", f"print('x' * {limit - 1})"])
            assert len(await fits.readline(10)) == limit
            fits.close()
            past = await connection.open(["python3", "-c", f"print('x' * {2 * limit})"])
            with pytest.raises(ProtocolError, match="longer than"):
                await past.readline(10)
            past.close()
        finally:
            await connection.close()


CHATTY = "import sys\nwhile True: print('x' * 100, flush=True)"


@pytest.mark.ssh
async def test_a_reader_of_a_chatty_program_ends_on_its_cancel(
    sshd_server: SshdServer,
) -> None:
    """A journal follower of a loading vLLM outlived its cancel (CI, ``gpudash start``:
    its verdict printed, then 370 s waiting for it): on Python 3.11 ``asyncio.wait_for``
    lost a cancel that came as a line arrived, in about 2 of 3 tries on such a pipe."""
    settings = SshSettings(sshd_server.ssh_config, sshd_server.known_hosts, False, 10.0)
    connections: list[Connection] = [SshConnection(sshd_server.target, settings),
                                     LocalConnection("here", os.environ, None)]
    for connection in connections:
        try:
            await connection.connect()
            for n in range(12):
                pipe = await connection.open(["python3", "-c", CHATTY])
                far = asyncio.Event()

                async def follow(pipe: Pipe = pipe, far: asyncio.Event = far,
                                 lines: int = 200 + 50 * n) -> None:
                    while True:
                        await pipe.readline(30)
                        lines -= 1
                        if lines == 0:
                            far.set()

                task = asyncio.ensure_future(follow())
                await far.wait()  # then cancelled as it reads on: at another line each time
                task.cancel()
                done, _ = await asyncio.wait({task}, timeout=2)
                pipe.close()  # a reader that lived on ends here (its program gone)
                await pipe.wait_closed()
                await asyncio.wait({task}, timeout=5)
                assert done, f"{connection.name}: the reader lived on after its cancel (try {n})"
                assert task.cancelled()
        finally:
            await connection.close()
    # and none of the programs lives on, printing into a pipe for the rest of the run
    left = _running(CHATTY)
    for _ in range(100):
        if not left:
            break
        await asyncio.sleep(0.1)
        left = _running(CHATTY)
    assert not left, left


def _running(cmdline_part: str) -> list[int]:
    """The pids of this machine's processes whose command line contains ``cmdline_part``."""
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if cmdline_part in (entry / "cmdline").read_bytes().decode(errors="replace"):
                    out.append(int(entry.name))
            except OSError:
                continue
    return out


@pytest.mark.ssh
async def test_round_trip_is_measured_on_the_stream(sshd_server: SshdServer, gpus) -> None:
    source = ssh_source(sshd_server)
    try:
        assert round_trip_s(source) is None
        stream = source.stream(0.1)
        await first(stream, 15, keep_open=True)  # 1.5 s: a ping answered at least once
        rtt = round_trip_s(source)
        await stream.aclose()
    finally:
        await source.close()
    assert rtt is not None and 0 < rtt < 1.0
    assert round_trip_s(DemoHost()) is None


RELAY = """
import subprocess, sys, time
child = subprocess.Popen([sys.executable] + sys.argv[1:], stdin=subprocess.PIPE)
header = sys.stdin.buffer.readline()
sizes = [int(word) for word in header.split()]
child.stdin.write(header + sys.stdin.buffer.read(sum(sizes)))
child.stdin.flush()
for line in sys.stdin.buffer:  # every request after the collector itself: delayed
    time.sleep(DELAY)
    child.stdin.write(line)
    child.stdin.flush()
child.stdin.close()
sys.exit(child.wait())
"""


async def test_round_trip_is_the_requests_not_the_arrival_jitter(tmp_path: Path) -> None:
    """Requests take 0.4 s to reach the collector; snapshots still come every 0.1 s."""
    relay = tmp_path / "relay.py"
    relay.write_text(RELAY.replace("DELAY", "0.4"))
    python = tmp_path / "slow-python3"
    python.write_text(f'#!/bin/sh\nexec {sys.executable} {relay} "$@"\n')
    python.chmod(0o755)
    source = LocalSource(python=str(python))
    arrivals = []
    stream = source.stream(0.1)
    try:
        async for _snap in stream:
            arrivals.append(time.monotonic())
            if len(arrivals) == 20:
                break
        rtt = round_trip_s(source)
        await stream.aclose()  # type: ignore[attr-defined]
        assert round_trip_s(source) is None  # no stream, no round trip to show
    finally:
        await source.close()
    gaps = [b - a for a, b in itertools.pairwise(arrivals[1:])]
    assert statistics.median(gaps) < 0.2  # the samples themselves were not slow
    assert rtt is not None and 0.4 <= rtt < 1.5


class BrokenPipe(Pipe):
    """A pipe whose channel fails in a way nobody expected (a bug, say)."""

    async def _readline(self) -> bytes:
        raise RuntimeError("boom")

    def write(self, data: bytes) -> None:
        pass

    def close(self) -> None:
        pass

    def stderr_tail(self) -> str:
        return ""


async def test_unexpected_failures_are_logged_and_still_typed(
    caplog: pytest.LogCaptureFixture,
) -> None:
    pipe = BrokenPipe("h1", lambda: False, 1024)
    with caplog.at_level(logging.ERROR, logger="gpudash.transport"):
        with pytest.raises(LinkLost, match="h1: link lost \\(boom\\)"):
            await pipe.readline(1)
    record = next(r for r in caplog.records if r.name == "gpudash.transport")
    assert record.exc_info is not None and isinstance(record.exc_info[1], RuntimeError)
