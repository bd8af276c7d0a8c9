"""A ready proof a host user cannot race (issue 29, item 1).

Seen: the collector looked up who listened on the probe's port, then made the GET in a
second step, and "nobody listens" let the GET decide. A host user whose listener was up
for 4 ms in every 6 ms got 80 of 100 probes over SSH counted as the loading unit's 200
(151 of 200 in the collector locally). Now the probe's own connection is the evidence:
the process at its other end must be the owner's before the request is even finished.

Real processes and sockets throughout: a real racing listener, the real collector
(locally and over the real sshd), real HTTP servers on 127.0.0.1 and ::1.
"""
# ruff: noqa: F811  (fixtures imported from sshd.fixture are redefined as parameters)

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from collector_run import read_line, request, start, stop
from sshd.fixture import SshdServer, gpus, ssh_source, sshd_fakegpu, sshd_server  # noqa: F401

from gpudash.collector.host.proof import (
    ESTABLISHED,
    connections,
    kernel_ip,
    owned_get,
    server_end,
)
from gpudash.collector.host.protocol import K_HTTP, K_READY, OP_HTTP

UNIT = "vllm-kimi-k25.service"  # the loading unit: no process of this machine is its

# Up for 4 ms in every 6 ms, answering 200 to whatever connects: the reproduction.
RACER = r"""
import socket, sys, time
port = int(sys.argv[1])
said = False
while True:
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        s.bind(("127.0.0.1", port))
        s.listen(64)
    except OSError:
        s.close(); time.sleep(0.001); continue
    if not said:
        print("up", flush=True); said = True
    end = time.monotonic() + 0.004
    s.settimeout(0.001)
    while time.monotonic() < end:
        try:
            c, _ = s.accept()
        except OSError:
            continue
        try:
            c.settimeout(0.2)
            c.recv(4096)
            c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
        except OSError:
            pass
        c.close()
    s.close()
    time.sleep(0.002)
"""


def free_port(family: int = socket.AF_INET, host: str = "127.0.0.1") -> int:
    with socket.socket(family) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


@pytest.fixture
def racer() -> Iterator[tuple[subprocess.Popen[str], int]]:
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-c", RACER, str(port)], stdout=subprocess.PIPE,
                            text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "up"
        yield proc, port
    finally:
        proc.kill()
        proc.wait()


def serve(host: str, port: int, tmp_path: Path) -> subprocess.Popen[bytes]:
    """``python -m http.server`` on (host, port): a real server, a real process."""
    server = subprocess.Popen([sys.executable, "-m", "http.server", "--bind", host, str(port)],
                              cwd=tmp_path, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE)
    deadline = time.monotonic() + 10
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    while time.monotonic() < deadline:
        with socket.socket(family) as s:
            if s.connect_ex((host, port)) == 0:
                return server
        time.sleep(0.05)
    server.kill()
    raise AssertionError("the server did not listen")


def _tally(replies: list[dict]) -> tuple[int, list[str]]:
    return (sum(1 for r in replies if r["status"] == 200),
            sorted({str(r["error"]).split(":")[0] for r in replies if r["status"] != 200}))


def test_a_racing_listener_gets_no_probe_counted_by_the_collector(racer) -> None:  # type: ignore[no-untyped-def]
    proc_racer, port = racer
    proc = start("serve", interval=None)
    try:
        assert json.loads(read_line(proc))["k"] == K_READY
        replies = []
        for i in range(200):
            request(proc, OP_HTTP, id=i, url=f"http://127.0.0.1:{port}/health", timeout=1,
                    unit=UNIT)
            reply = json.loads(read_line(proc, timeout=15))
            assert reply["k"] == K_HTTP and reply["id"] == i
            replies.append(reply)
    finally:
        stop(proc)
    ok, why = _tally(replies)
    assert ok == 0, f"{ok} of 200 probes counted as {UNIT}'s 200"
    # the racer was reached (not merely found down), and each time refused
    reached = [r for r in replies if r["error"] != "Connection refused"]
    assert len(reached) >= 5, why
    # and when it was seen answering, it was named, or said to be unprovable
    assert any(str(r["error"]).startswith((f"port {port} is not {UNIT}'s: pid "
                                           f"{proc_racer.pid}", f"port {port}: ", "who answers"))
               for r in reached), why


@pytest.mark.ssh
async def test_a_racing_listener_gets_no_probe_counted_over_ssh(  # type: ignore[no-untyped-def]
        racer, sshd_server: SshdServer) -> None:
    _proc, port = racer
    source = ssh_source(sshd_server)
    try:
        answers = [await source.control.probe_http(f"http://127.0.0.1:{port}/health", 1, UNIT)
                   for _ in range(100)]
    finally:
        await source.close()
    counted = [a for a in answers if a.status == 200]
    assert counted == [], f"{len(counted)} of 100 probes counted as {UNIT}'s 200"
    assert all(a.error for a in answers)


def test_the_owners_own_server_answers_and_anothers_is_never_asked(tmp_path: Path) -> None:
    port = free_port()
    server = serve("127.0.0.1", port, tmp_path)
    try:
        url = f"http://127.0.0.1:{port}/"
        assert owned_get(url, 5, lambda pid, comm, cgroup: None if pid == server.pid
                         else f"not the server: {pid}") == (200, None)
        comm = Path(f"/proc/{server.pid}/comm").read_text().strip()
        refused = owned_get(url, 5, lambda pid, comm, cgroup: f"pid {pid} ({comm.strip()})")
        assert refused == (None, f"pid {server.pid} ({comm})")
    finally:
        server.terminate()
        _out, err = server.communicate(timeout=10)
    # http.server logs each request it answered: one (the accepted probe), the refused
    # one never finished its request head
    assert err.decode().count('"GET / HTTP/1.1"') == 1, err.decode()


@pytest.mark.parametrize("bind", ["::1", "::"])
def test_ipv6_and_dual_stack_servers_are_found_on_their_own_connection(
        bind: str, tmp_path: Path) -> None:
    port = free_port(socket.AF_INET6, "::1")
    server = serve(bind, port, tmp_path)
    try:
        host = "[::1]" if bind == "::1" else "127.0.0.1"  # "::" takes v4 as mapped v6
        assert owned_get(f"http://{host}:{port}/", 5, lambda pid, comm, cgroup: None
                         if pid == server.pid else f"pid {pid}") == (200, None)
    finally:
        server.kill()
        server.wait()


def test_nobody_listening_is_no_answer() -> None:
    status, why = owned_get(f"http://127.0.0.1:{free_port()}/", 2, lambda *a: None)
    assert status is None and "refused" in str(why).lower()


@pytest.mark.parametrize("url", ["https://127.0.0.1/", "http://gpu01.example/",
                                 "http://127.0.0.1/a b", "http://127.0.0.1/\r\nX: y"])
def test_only_a_plain_loopback_url_is_asked(url: str) -> None:
    status, why = owned_get(url, 1, lambda *a: None)
    assert status is None and why and why.startswith("not a")


def test_the_kernels_addresses_read_as_written() -> None:
    # /proc/net/tcp* print 32-bit words in host order (x86: little endian)
    if sys.byteorder == "little":
        assert kernel_ip("0100007F") == "127.0.0.1"
        assert kernel_ip("00000000000000000000000001000000") == "::1"
        assert kernel_ip("0000000000000000FFFF00000100007F") == "127.0.0.1"  # v4-mapped
    # and this machine's own connection is found from both ends
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        client = socket.create_connection(listener.getsockname())
        served, _ = listener.accept()
        with client, served:
            ours, theirs = client.getsockname(), client.getpeername()
            inode = server_end(ours, theirs, "/proc/net")
            assert inode is not None and inode != "0"
            assert os.readlink(f"/proc/self/fd/{served.fileno()}") == f"socket:[{inode}]"
            mine = {st for lo, re, st, i in connections("/proc/net")
                    if lo == ours and re == theirs and i != "0"}
            assert mine == {ESTABLISHED}


def test_behind_a_dnat_the_containers_own_namespace_is_looked_at(tmp_path: Path) -> None:
    # The kernel's text of a container's namespace (/proc/PID/net/tcp): the server end of
    # a DNATed connection has the translated addresses; our port is what is left of us.
    from gpudash.collector.host.proof import _in_other_nets

    net = tmp_path / "4242" / "net"
    net.mkdir(parents=True)
    head = ("  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid"
            "  timeout inode\n")
    line = ("   0: 020011AC:1F40 010011AC:{port:04X} 01 00000000:00000000 00:00000000 00000000"
            "     0        0 {inode} 1 0000000000000000 20 4 30 10 -1\n")
    (net / "tcp").write_text(head + line.format(port=40000, inode=777) +
                             line.format(port=40001, inode=888))
    (net / "tcp6").write_text(head)
    assert _in_other_nets(("127.0.0.1", 40001), [4242], str(tmp_path)) == "888"
    assert _in_other_nets(("127.0.0.1", 40002), [4242], str(tmp_path)) is None
