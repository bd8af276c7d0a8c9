"""A ready probe has an absolute deadline and never holds the collector's request loop
(issue 19, item 6).

Seen before: a server sending one byte a second kept `http_get(timeout=3)` blocked 20 s,
and with it the collector that answers samples and signals.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator

import pytest
from collector_run import read_line, request, start, stop

from gpudash.collector.host.loop import MAX_PROBES, Emitter, _probes, probe_later
from gpudash.collector.host.protocol import (
    K_FULL,
    K_HTTP,
    K_PONG,
    K_READY,
    OP_HTTP,
    OP_PING,
    OP_SAMPLE,
)
from gpudash.collector.host.ready import listening_inodes


@pytest.fixture
def dripping() -> Iterator[int]:
    """A server on 127.0.0.1 that answers a GET one byte a second, for ever."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    stopping = threading.Event()

    def serve(conn: socket.socket) -> None:
        with conn:
            conn.recv(4096)
            for byte in b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n" + b"x" * 100:
                if stopping.wait(1.0):
                    return
                try:
                    conn.sendall(bytes([byte]))
                except OSError:
                    return

    def accept() -> None:
        while not stopping.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            threading.Thread(target=serve, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    try:
        yield listener.getsockname()[1]
    finally:
        stopping.set()
        listener.close()


def test_a_dripping_server_gets_no_more_than_its_deadline_and_blocks_nothing(
        dripping: int) -> None:
    proc = start("serve", interval=None)
    try:
        assert json.loads(read_line(proc))["k"] == K_READY
        began = time.monotonic()
        request(proc, OP_HTTP, id=1, url=f"http://127.0.0.1:{dripping}/health",
                timeout=2)
        request(proc, OP_PING, id=2)  # asked while the probe hangs
        request(proc, OP_SAMPLE, id=3)
        replies = {}
        while len(replies) < 3:
            reply = json.loads(read_line(proc, timeout=15))
            replies[reply["id"]] = (reply, time.monotonic() - began)
        (pong, pong_at), (full, full_at) = replies[2], replies[3]
        assert pong["k"] == K_PONG and full["k"] == K_FULL
        http, http_at = replies[1]
        assert pong_at < 1.5 and full_at < http_at, replies  # not behind the probe
        assert http["status"] is None and http["error"] == "no answer within 2 s", http
        assert 1.9 < http_at < 4.0, http_at  # its deadline, not the drip's 40 s
    finally:
        stop(proc)


def test_probes_in_flight_are_bounded() -> None:
    held = [_probes.acquire(blocking=False) for _ in range(MAX_PROBES)]
    try:
        assert all(held)
        reply = probe_later(Emitter(None), "http://127.0.0.1:9/health", 1, 7)
        assert reply == {"k": K_HTTP, "status": None, "id": 7,
                         "error": "busy: too many probes in flight"}
    finally:
        for _ in held:
            _probes.release()


def test_a_port_another_process_listens_on_proves_nothing_for_the_unit(
        tmp_path) -> None:  # type: ignore[no-untyped-def]
    # issue 19, item 6: any user who bound the model's port while it was free made a swap
    # "serving"; the listener was never checked to be the unit's
    import subprocess
    import sys

    squat = socket.socket()
    squat.bind(("127.0.0.1", 0))
    port = squat.getsockname()[1]
    squat.close()
    server = subprocess.Popen([sys.executable, "-m", "http.server", "--bind", "127.0.0.1",
                               str(port)], cwd=tmp_path, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    proc = start("serve", interval=None)
    try:
        deadline = time.monotonic() + 10
        while not listening_inodes(port) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert json.loads(read_line(proc))["k"] == K_READY
        url = f"http://127.0.0.1:{port}/"
        request(proc, OP_HTTP, id=1, url=url, timeout=3)  # no unit named: asked
        request(proc, OP_HTTP, id=2, url=url, timeout=3, unit="vllm-kimi-k25.service")
        replies = {}
        while len(replies) < 2:
            reply = json.loads(read_line(proc, timeout=15))
            replies[reply["id"]] = reply
        assert replies[1]["status"] == 200, replies
        assert replies[2]["status"] is None, replies
        comm = open(f"/proc/{server.pid}/comm").read().strip()
        assert replies[2]["error"] == (f"port {port} is not vllm-kimi-k25.service's: pid "
                                       f"{server.pid} ({comm}, no unit) listens on it"), replies
    finally:
        stop(proc)
        server.kill()
        server.wait()
