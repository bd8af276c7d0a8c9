"""An exporter that holds: idle and slow sockets, bursts of scrapes, TLS and basic auth
from a web config file, off-loopback listening, and per-host state a hostile host
cannot grow. The exporter runs as a real process; the clients are real sockets, urllib
and ssl over loopback with a certificate made here.
"""

from __future__ import annotations

import asyncio
import base64
import datetime
import ipaddress
import os
import re
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import bcrypt
import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.core import GaugeMetricFamily

from gpudash.cli import metrics_http
from gpudash.cli.metrics_http import Exposition, MetricsServer
from gpudash.domain.crashloop import MAX_UNITS, RestartWatch
from gpudash.domain.model import Unit

TICK = os.sysconf("SC_CLK_TCK")


def proc_stats(pid: int) -> tuple[int, float, float]:
    """(threads, RSS MiB, CPU seconds) of a real process, from /proc."""
    status = Path(f"/proc/{pid}/status").read_text()
    threads = int(re.search(r"^Threads:\s+(\d+)", status, re.M).group(1))  # type: ignore[union-attr]
    rss = int(re.search(r"^VmRSS:\s+(\d+)", status, re.M).group(1)) / 1024  # type: ignore[union-attr]
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return threads, rss, (int(fields[11]) + int(fields[12])) / TICK


def start_exporter(*args: str) -> tuple[subprocess.Popen[str], str]:
    """The exporter as a real process on loopback; (process, its metrics URL)."""
    proc = subprocess.Popen([sys.executable, "-m", "gpudash", "exporter", *args],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    line = proc.stderr.readline()
    found = re.search(r"(https?://127\.0\.0\.1:\d+/metrics)", line)
    if found is None:
        proc.kill()
        raise AssertionError(f"no URL: {line}{proc.stderr.read()}")
    return proc, found.group(1)


def stop(proc: subprocess.Popen[str]) -> str:
    proc.send_signal(signal.SIGTERM)
    _out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    return err


def wait_up(url: str, opener: urllib.request.OpenerDirector | None = None) -> str:
    deadline = time.monotonic() + 30
    while True:
        body = (opener or urllib.request.build_opener()).open(url, timeout=10).read().decode()
        if 'gpudash_link_up{host="demo-gpu01"} 1.0' in body or time.monotonic() > deadline:
            return body
        time.sleep(0.2)


@pytest.mark.serial  # its flood must not share the cores with another test
def test_a_thousand_idle_sockets_make_no_threads_and_pending_requests_no_scrapes() -> None:
    # before: 1002 threads; and 300 requests sent then abandoned cost 43.6 CPU s
    # (16 demo hosts, this machine): one full scrape each
    proc, url = start_exporter("--demo-hosts", "16", "--listen", "127.0.0.1:0",
                               "--interval", "1")
    port = int(url.rsplit(":", 1)[1].split("/")[0])
    idle: list[socket.socket] = []
    try:
        wait_up(url)
        threads0, rss0, _cpu = proc_stats(proc.pid)
        for _ in range(1000):
            idle.append(socket.create_connection(("127.0.0.1", port)))
        time.sleep(2)
        threads, rss, _cpu = proc_stats(proc.pid)
        assert threads <= threads0 + 8, (threads0, threads)
        assert rss - rss0 < 40, (rss0, rss)
        started = time.monotonic()
        assert "gpudash_link_up" in urllib.request.urlopen(url, timeout=10).read().decode()
        assert time.monotonic() - started < 5  # a real scraper is answered meanwhile
        cpu0 = proc_stats(proc.pid)[2]
        for s in idle[:300]:
            with _ignored():
                s.sendall(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            s.close()
        time.sleep(3)
        assert proc_stats(proc.pid)[2] - cpu0 < 3.0
    finally:
        for s in idle:
            s.close()
        stop(proc)


class _ignored:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> bool:
        return isinstance(exc[1], OSError)


class Counting:
    """A collector that counts how often the exposition is built."""

    def __init__(self) -> None:
        self.collected = 0

    def collect(self) -> Iterator[GaugeMetricFamily]:
        self.collected += 1
        time.sleep(0.2)  # a scrape of many hosts takes a while
        g = GaugeMetricFamily("built", "times built")
        g.add_metric([], self.collected)
        yield g


async def test_one_exposition_per_interval_for_every_scraper() -> None:
    registry = CollectorRegistry()
    counting = Counting()
    registry.register(counting)
    exposition = Exposition(registry, max_age_s=60.0)
    bodies = await asyncio.gather(*(exposition.get() for _ in range(50)))
    assert counting.collected == 1 and len(set(bodies)) == 1
    assert await exposition.get() == bodies[0] and counting.collected == 1
    await exposition.refresh()  # the next interval: built again, once
    assert counting.collected == 2


async def raw_request(port: int, data: bytes, pause: float = 0.0) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        for byte in data if pause else [data]:
            writer.write(bytes([byte]) if pause else byte)  # type: ignore[arg-type]
            await writer.drain()
            if pause:
                await asyncio.sleep(pause)
        return await asyncio.wait_for(reader.read(), 10)
    except (ConnectionError, OSError):
        return b""
    finally:
        writer.close()


async def test_a_slow_request_is_cut_at_an_absolute_deadline_and_idle_ones_evicted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(metrics_http, "HEAD_TIMEOUT_S", 0.5)
    registry = CollectorRegistry()
    registry.register(Counting())
    server = MetricsServer(Exposition(registry, 60.0), max_connections=4)
    port = await server.start("127.0.0.1", 0)
    try:
        started = time.monotonic()
        # a byte every 0.1 s: each read succeeds, the whole head never comes in time
        answer = await raw_request(port, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n", 0.1)
        assert answer == b"" and time.monotonic() - started < 3
        idle = [await asyncio.open_connection("127.0.0.1", port) for _ in range(10)]
        await asyncio.sleep(0.1)
        assert len(server.connections) <= 4 and server.evicted >= 6
        ok = await raw_request(port, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        assert ok.startswith(b"HTTP/1.1 200 OK") and b"built 1.0" in ok
        for _r, w in idle:
            w.close()
        assert (await raw_request(port, b"GET /nope HTTP/1.1\r\n\r\n")).startswith(b"HTTP/1.1 404")
        assert (await raw_request(port, b"garbage\r\n\r\n")).startswith(b"HTTP/1.1 400")
        huge = b"GET /metrics HTTP/1.1\r\nX: " + b"a" * 40000 + b"\r\n\r\n"
        assert (await raw_request(port, huge)).startswith(b"HTTP/1.1 431")
    finally:
        await server.close()


# --- TLS and basic auth (--web.config.file) ------------------------------------------


def make_certificate(directory: Path) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1, made now."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "gpudash test")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
            .sign(key, hashes.SHA256()))
    cert_file, key_file = directory / "exporter.crt", directory / "exporter.key"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                           serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    key_file.chmod(0o600)
    return cert_file, key_file


def test_tls_and_basic_auth_from_a_web_config_file(tmp_path: Path) -> None:
    cert_file, _key = make_certificate(tmp_path)
    hashed = bcrypt.hashpw(b"s3cret", bcrypt.gensalt(rounds=4)).decode().replace("$2b$", "$2y$")
    config = tmp_path / "web.yml"
    config.write_text("tls_server_config:\n  cert_file: exporter.crt\n  key_file: exporter.key\n"
                      f"basic_auth_users:\n  prometheus: {hashed}\n"
                      "http_server_config:\n  headers:\n    X-Frame-Options: deny\n")
    proc, url = start_exporter("--demo", "--listen", "127.0.0.1:0", "--interval", "0.5",
                               "--web.config.file", str(config))
    try:
        assert url.startswith("https://")
        trusted = ssl.create_default_context(cafile=str(cert_file))
        plain = urllib.request.build_opener(urllib.request.HTTPSHandler(context=trusted))
        with pytest.raises(urllib.error.HTTPError) as denied:
            plain.open(url, timeout=10)
        assert denied.value.code == 401
        assert denied.value.headers["WWW-Authenticate"] == 'Basic realm="gpudash"'
        for user, password in (("prometheus", "wrong"), ("nobody", "s3cret")):
            req = urllib.request.Request(url, headers={"Authorization": basic(user, password)})
            with pytest.raises(urllib.error.HTTPError) as denied:
                plain.open(req, timeout=10)
            assert denied.value.code == 401
        good = urllib.request.Request(url, headers={"Authorization": basic("prometheus",
                                                                           "s3cret")})
        deadline = time.monotonic() + 30
        while True:
            with plain.open(good, timeout=10) as answer:
                body = answer.read().decode()
                assert answer.headers["X-Frame-Options"] == "deny"
            if 'gpudash_link_up{host="demo-gpu01"} 1.0' in body or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert 'gpudash_link_up{host="demo-gpu01"} 1.0' in body
        with pytest.raises(urllib.error.URLError, match="CERTIFICATE_VERIFY_FAILED"):
            urllib.request.urlopen(url, timeout=10)  # a client that does not trust it
        with pytest.raises((urllib.error.URLError, ConnectionError, OSError)):  # no plain HTTP
            urllib.request.urlopen(url.replace("https://", "http://"), timeout=10).read()
    finally:
        err = stop(proc)
    assert "Traceback" not in err


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


@pytest.mark.parametrize(("content", "message"), [
    ("tls_server_config:\n  cert_file: x.crt\n  key_file: x.key\n  cipher_suites: [a]\n",
     "cipher_suites: not supported by gpudash"),
    ("tls_server_config:\n  cert_file: nope.crt\n  key_file: nope.key\n",
     "certificate or key not loaded"),
    ("basic_auth_users:\n  alice: plaintext\n", "alice: not a bcrypt hash"),
    ("bogus: 1\n", "unknown key(s) bogus"),
    ("tls_server_config: [\n", "not YAML"),
])
def test_a_bad_web_config_is_a_usage_error_naming_the_key(tmp_path: Path, content: str,
                                                          message: str) -> None:
    config = tmp_path / "web.yml"
    config.write_text(content)
    cp = subprocess.run([sys.executable, "-m", "gpudash", "exporter", "--demo", "--listen",
                         "127.0.0.1:0", "--web.config.file", str(config)],
                        capture_output=True, text=True, timeout=60)
    assert cp.returncode == 2, cp.stderr
    assert message in cp.stderr and str(config) in cp.stderr and "Traceback" not in cp.stderr


def test_listening_off_loopback_needs_a_web_config_or_the_flag() -> None:
    # before: --listen 0.0.0.0 served plain HTTP to the network without a word
    cp = subprocess.run([sys.executable, "-m", "gpudash", "exporter", "--demo", "--listen",
                         "0.0.0.0:0"], capture_output=True, text=True, timeout=60)
    assert cp.returncode == 2, cp.stderr
    assert "not a loopback address" in cp.stderr and "--web.config.file" in cp.stderr
    assert "--insecure-listen" in cp.stderr and "http://" not in cp.stderr
    from gpudash.cli.args import parse
    from gpudash.cli.exporter import listen_problem

    _cmd, args = parse(["exporter", "--demo", "--listen", "0.0.0.0:9835", "--insecure-listen"])
    assert listen_problem(args, args.listen, None) is None
    _cmd, args = parse(["exporter", "--demo", "--listen", "[::1]:9835"])
    assert listen_problem(args, args.listen, None) is None


# --- per-host state ----------------------------------------------------------------------


def test_a_hostile_host_cannot_grow_the_restart_watch() -> None:
    # before: every unit name a host ever sent was kept (38,272 series from one host)
    watch = RestartWatch()
    now = 0.0
    looping: frozenset[str] = frozenset()
    for batch in range(60):  # 60 x 256 fresh names, each seen restarting twice
        names = [f"evil-{batch}-{i}.service" for i in range(256)]
        for restarts in (0, 1, 2):
            now += 1.0
            looping = watch.observe([Unit(n, "activating", "auto-restart", n_restarts=restarts)
                                     for n in names], now)
    assert len(watch) <= MAX_UNITS and len(looping) <= MAX_UNITS
    assert sum(len(e) for e in watch._events.values()) <= 2 * MAX_UNITS
    assert len(watch._count) <= MAX_UNITS
    # a real crash loop is still seen
    honest = RestartWatch()
    for t, n in ((0.0, 0), (10.0, 1), (20.0, 2)):
        seen = honest.observe([Unit("vllm.service", "active", "running", n_restarts=n)], t)
    assert seen == {"vllm.service"}


def test_a_restart_count_no_systemd_writes_is_no_restart() -> None:
    # Seen: a snapshot with NRestarts 2**63 then inf ended the host's follower (the sum of
    # the events overflowed); the decoder bounds them, a source that skips it may not
    from gpudash.domain.crashloop import RestartWatch
    from gpudash.domain.model import Unit

    watch = RestartWatch()
    for t, n in enumerate((0, 2**63, float("inf"), float("nan"), -5, True, 1)):
        looping = watch.observe([Unit("vllm.service", "active", "running",
                                      n_restarts=n)], float(t))  # type: ignore[arg-type]
    assert looping == frozenset()  # one real restart (0 -> 1) is not a loop
