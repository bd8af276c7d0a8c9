"""Black-holed hosts do not hold the connect slots a healthy host waits for.

A black hole is made on loopback: a listening socket that never accepts, its one-place
accept queue already full, so the kernel drops every further SYN and a connect waits
out its timeout, as it would for a host that is down or firewalled. The healthy host is
a real OpenSSH sshd. Before the fix the limiter held its slot through the TCP connect:
32 black-holed hosts delayed a healthy host's reconnect by 72-96 s.
"""
# ruff: noqa: F811  (fixtures imported from sshd.fixture are redefined as parameters)

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Iterator

import pytest
from sshd.fixture import SshdServer, ssh_source, sshd_fakegpu, sshd_server  # noqa: F401

from gpudash.protocol.source import ConnectError
from gpudash.transport.limiter import ConnectLimiter

pytestmark = pytest.mark.ssh


@pytest.fixture
def black_hole() -> Iterator[int]:
    """A loopback port whose SYNs go unanswered."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    port = listener.getsockname()[1]
    filler = socket.create_connection(("127.0.0.1", port), timeout=2)  # the queue's one place
    probe = socket.socket()
    probe.settimeout(0.5)
    with pytest.raises(TimeoutError):
        probe.connect(("127.0.0.1", port))  # a black hole indeed
    probe.close()
    try:
        yield port
    finally:
        filler.close()
        listener.close()


async def test_black_holed_hosts_do_not_delay_a_healthy_hosts_connect(
    sshd_server: SshdServer, black_hole: int,
) -> None:
    from gpudash.transport.ssh import SshSource

    limiter = ConnectLimiter(8)
    holes = [SshSource(f"ssh://root@127.0.0.1:{black_hole}", known_hosts=sshd_server.known_hosts,
                       ssh_config=sshd_server.ssh_config, connect_timeout=6.0, limiter=limiter)
             for _ in range(32)]
    healthy = ssh_source(sshd_server, limiter=limiter)
    waiting = [asyncio.create_task(h.connection.connect()) for h in holes]
    try:
        await asyncio.sleep(0.5)  # all 32 are connecting
        started = time.monotonic()
        await asyncio.wait_for(healthy.connection.connect(), 30)
        took = time.monotonic() - started
        assert took < 4.0, f"the healthy host waited {took:.1f} s behind the black holes"
        results = await asyncio.gather(*waiting, return_exceptions=True)
        assert all(isinstance(r, ConnectError) and "no answer" in str(r) for r in results)
        assert limiter.backoff == 0.0  # a black hole is no sign of an overloaded sshd
    finally:
        for task in waiting:
            task.cancel()
        await asyncio.gather(*waiting, return_exceptions=True)
        await healthy.close()
        for h in holes:
            await h.close()
