"""The exporter's basic auth and web config under pressure (issue 29): a flood of wrong
passwords beside a real scraper, passwords bcrypt cannot take, unknown users' timing, a
web config changed while it runs (SIGHUP, a revoked password, a rotated certificate, a
broken file), a web config that secures nothing, and plain HTTP sent to TLS. The exporter
is a real process, the clients real sockets over loopback with a certificate made here.
"""

from __future__ import annotations

import asyncio
import json
import queue
import re
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import bcrypt
import pytest
from prometheus_client import CollectorRegistry
from test_exporter_hold import basic, make_certificate

from gpudash.cli import metrics_http, webconfig
from gpudash.cli.metrics_http import Exposition, MetricsServer

TESTS = Path(__file__).resolve().parent


class Exporter:
    """``gpudash exporter`` as a real process on 127.0.0.1; its stderr read line by line."""

    def __init__(self, *args: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "gpudash", "exporter", "--demo", "--listen", "127.0.0.1:0",
             "--interval", "0.5", *args],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        self.lines: queue.Queue[str | None] = queue.Queue()  # None: stderr ended
        self.said: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()
        first = self.wait_for(r"https?://127\.0\.0\.1:\d+/metrics")
        self.url = re.search(r"https?://127\.0\.0\.1:\d+/metrics", first).group(0)  # type: ignore[union-attr]
        self.port = int(self.url.rsplit(":", 1)[1].split("/")[0])

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.put(line)
        self.lines.put(None)

    def wait_for(self, pattern: str, timeout: float = 30.0) -> str:
        """The next stderr line matching ``pattern`` (lines before it are kept in said)."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self.lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                line = ""
            if not line:
                raise AssertionError(f"no line like {pattern!r} in {timeout} s (or it "
                                     f"exited); said: {''.join(self.said)}")
            self.said.append(line)
            if re.search(pattern, line):
                return line

    def stop(self) -> str:
        """SIGTERM; everything it said on stderr (it must exit 0)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout=30)
        while (line := self.lines.get(timeout=30)) is not None:
            self.said.append(line)
        said = "".join(self.said)
        assert self.proc.returncode == 0, said
        return said


def hashed(password: str, cost: int = 4) -> str:
    return bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds=cost)).decode()


def web_yml(cert: bool = True, **users: str) -> str:
    text = ("tls_server_config:\n  cert_file: exporter.crt\n  key_file: exporter.key\n"
            if cert else "")
    if users:
        text += "basic_auth_users:\n" + "".join(f"  {u}: '{h}'\n" for u, h in users.items())
    return text


def opener(cert_file: Path) -> urllib.request.OpenerDirector:
    trusted = ssl.create_default_context(cafile=str(cert_file))
    return urllib.request.build_opener(urllib.request.HTTPSHandler(context=trusted))


def status(open_: urllib.request.OpenerDirector, url: str, user: str, password: str) -> int:
    req = urllib.request.Request(url, headers={"Authorization": basic(user, password)})
    try:
        with open_.open(req, timeout=10) as answer:
            answer.read()
            return int(answer.status)
    except urllib.error.HTTPError as exc:
        return exc.code


def served_certificate(port: int) -> bytes:
    """The DER certificate the exporter presents now."""
    tls = ssl.create_default_context()
    tls.check_hostname = False
    tls.verify_mode = ssl.CERT_NONE
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw, \
            tls.wrap_socket(raw) as conn:
        der = conn.getpeercert(binary_form=True)
    assert der is not None
    return der


def pem_to_der(path: Path) -> bytes:
    return ssl.PEM_cert_to_DER_cert(path.read_text())


# --- a flood of wrong passwords --------------------------------------------------------


@pytest.mark.serial  # its flood must not share the cores with another test
def test_a_flood_of_wrong_passwords_never_starves_a_remembered_scraper(tmp_path: Path) -> None:
    # before: 130 clients with a wrong password, each request marked busy before its auth
    # check and queued without bound for two bcrypt slots: with 128 busy every new
    # connection was closed, and the real scraper was reset 7 times in 9
    cert_file, _key = make_certificate(tmp_path)
    config = tmp_path / "web.yml"
    config.write_text(web_yml(prometheus=hashed("s3cret", cost=10)))
    exporter = Exporter("--web.config.file", str(config))
    flood = None
    try:
        scraper = opener(cert_file)
        assert status(scraper, exporter.url, "prometheus", "s3cret") == 200  # remembered now
        flood = subprocess.Popen([sys.executable, str(TESTS / "exporter_flood.py"),
                                  str(exporter.port), "130", "14"],
                                 stdout=subprocess.PIPE, text=True)
        assert flood.stdout is not None
        assert flood.stdout.readline().strip() == "flooding"
        answers = []
        started = time.monotonic()
        for i in range(9):  # a scrape every ~1.1 s, as Prometheus at a short interval
            while time.monotonic() < started + i * 1.1:
                time.sleep(0.05)
            try:
                answers.append(status(scraper, exporter.url, "prometheus", "s3cret"))
            except (urllib.error.URLError, OSError) as exc:
                answers.append(repr(exc))  # type: ignore[arg-type]
        seen = json.loads(flood.communicate(timeout=60)[0])
    finally:
        if flood is not None and flood.poll() is None:
            flood.kill()
        said = exporter.stop()
    assert answers == [200] * 9, (answers, seen)
    # it was a flood: wrong passwords answered all along, none let in (a loaded machine
    # answers fewer of them in the 14 s: each costs a bcrypt)
    assert seen.get("401", 0) + seen.get("503", 0) > 100 and "200" not in seen, seen
    assert "Traceback" not in said


async def test_auth_waits_inside_the_head_deadline_and_a_long_queue_is_a_503_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    from gpudash.cli.webreload import WebConfigFile

    monkeypatch.setattr(metrics_http, "HEAD_TIMEOUT_S", 2.0)
    config = tmp_path / "web.yml"  # ~0.6 s a check: the queue outlasts the deadline
    config.write_text(web_yml(cert=False, prometheus=hashed("s3cret", cost=13)))
    server = MetricsServer(Exposition(CollectorRegistry(), 60.0), WebConfigFile(config))
    port = await server.start("127.0.0.1", 0)
    request = (b"GET /metrics HTTP/1.1\r\nAuthorization: " + basic("prometheus", "nope").encode()
               + b"\r\n\r\n")

    async def ask() -> tuple[bytes, float]:
        started = time.monotonic()
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            writer.write(request)
            await writer.drain()
            async with asyncio.timeout(30):
                answer = await reader.read()
        except ConnectionError:
            answer = b""
        finally:
            writer.close()
        return answer[:12], time.monotonic() - started

    try:
        many = metrics_http.AUTH_CHECKS + metrics_http.AUTH_QUEUE + 30
        tasks = [asyncio.create_task(ask()) for _ in range(many)]
        await asyncio.sleep(0.3)
        # waiting for a check is not being answered: each can be dropped to make room
        assert not any(c.busy for c in server.connections)
        results = await asyncio.gather(*tasks)
    finally:
        await server.close()
    busy = [took for answer, took in results if answer == b"HTTP/1.1 503"]
    # at once, not after a wait (a check that ended meanwhile let one more in)
    assert len(busy) >= 20 and max(busy) < 1.0, results
    # the rest: a 401 within the head's deadline, or closed at it; none waits longer
    assert all(a in (b"HTTP/1.1 401", b"HTTP/1.1 503", b"") for a, _ in results), results
    assert max(took for _, took in results) < 2.0 + 1.0, results


# --- passwords bcrypt cannot take, unknown users ---------------------------------------


def test_an_overlong_password_is_a_401_and_no_traceback(tmp_path: Path) -> None:
    # before: bcrypt raised on a password over 72 bytes: the connection dropped, a traceback
    make_certificate(tmp_path)
    config = tmp_path / "web.yml"
    config.write_text(web_yml(prometheus=hashed("s3cret")))
    exporter = Exporter("--web.config.file", str(config))
    try:
        scraper = opener(tmp_path / "exporter.crt")
        assert status(scraper, exporter.url, "prometheus", "x" * 73) == 401
        assert status(scraper, exporter.url, "nobody", "é" * 40) == 401  # 80 bytes
        assert status(scraper, exporter.url, "prometheus", "s3cret") == 200
    finally:
        said = exporter.stop()
    assert "Traceback" not in said and "failed" not in said, said


def test_an_unknown_user_costs_what_a_known_one_does(tmp_path: Path) -> None:
    # before: the hash compared against for an unknown user was cost 10 whatever the
    # configured ones were: at cost 12 an unknown user was answered in 0.08 s, a known
    # one in 0.31 s, which tells who exists
    config = tmp_path / "web.yml"
    config.write_text(web_yml(cert=False, prometheus=hashed("s3cret", cost=12)))
    web = webconfig.load(config)
    assert web.dummy[:7] == b"$2b$12$"
    assert not bcrypt.checkpw(b"", web.dummy)  # a hash nothing passes
    mixed = tmp_path / "mixed.yml"
    mixed.write_text(web_yml(cert=False, a=hashed("a", cost=5), b=hashed("b", cost=6)))
    assert webconfig.load(mixed).dummy[:7] == b"$2b$06$"  # as costly as the costliest
    # and as a client sees it: the fastest of a few answers each, so load only slows both
    exporter = Exporter("--web.config.file", str(config))
    try:
        def fastest(user: str) -> float:
            took = []
            for _ in range(4):
                started = time.monotonic()
                assert status(urllib.request.build_opener(), exporter.url, user, "wrong") == 401
                took.append(time.monotonic() - started)
            return min(took)

        known, unknown = fastest("prometheus"), fastest("nobody")
    finally:
        exporter.stop()
    assert unknown > 0.6 * known, (known, unknown)


# --- a web config changed while the exporter runs --------------------------------------


def test_a_revoked_password_and_a_rotated_certificate_take_effect_without_a_restart(
    tmp_path: Path,
) -> None:
    # before: the file was read once: the old password and certificate served until a restart
    old_cert, _key = make_certificate(tmp_path)
    config = tmp_path / "web.yml"
    config.write_text(web_yml(prometheus=hashed("old-password")))
    exporter = Exporter("--web.config.file", str(config))
    try:
        assert status(opener(old_cert), exporter.url, "prometheus", "old-password") == 200
        old_der = pem_to_der(old_cert)
        assert served_certificate(exporter.port) == old_der
        # the certificate rotated (renamed over the old, as certbot and cert-manager do),
        # the web config file itself untouched
        rotated = tmp_path / "rotated"
        rotated.mkdir()
        new_cert, _key = make_certificate(rotated)
        new_der = pem_to_der(new_cert)
        for name in ("exporter.crt", "exporter.key"):
            (rotated / name).replace(tmp_path / name)
        assert served_certificate(exporter.port) == new_der != old_der
        exporter.wait_for(r"web config .*reloaded \(changed\)")
        scraper = opener(tmp_path / "exporter.crt")
        assert status(scraper, exporter.url, "prometheus", "old-password") == 200
        # the password revoked: the one a scraper had passed with is checked anew
        config.write_text(web_yml(prometheus=hashed("new-password")))
        assert status(scraper, exporter.url, "prometheus", "old-password") == 401
        assert status(scraper, exporter.url, "prometheus", "new-password") == 200
        exporter.wait_for(r"web config .*reloaded \(changed\)")
    finally:
        said = exporter.stop()
    assert "Traceback" not in said


def test_sighup_reloads_the_web_config_and_never_stops_the_exporter(tmp_path: Path) -> None:
    # before: SIGHUP ended the exporter (exit 0): a reload by systemctl reload stopped it
    cert_file, _key = make_certificate(tmp_path)
    config = tmp_path / "web.yml"
    config.write_text(web_yml(prometheus=hashed("s3cret")))
    exporter = Exporter("--web.config.file", str(config))
    try:
        scraper = opener(cert_file)
        assert status(scraper, exporter.url, "prometheus", "s3cret") == 200
        for _ in range(3):
            exporter.proc.send_signal(signal.SIGHUP)
            exporter.wait_for(r"web config .*reloaded")
            assert exporter.proc.poll() is None
            assert status(scraper, exporter.url, "prometheus", "s3cret") == 200
    finally:
        exporter.stop()


def test_sighup_without_a_web_config_is_no_stop_either() -> None:
    exporter = Exporter()
    try:
        exporter.proc.send_signal(signal.SIGHUP)
        exporter.wait_for(r"SIGHUP: .*nothing to reload")
        with urllib.request.urlopen(exporter.url, timeout=10) as answer:
            assert answer.status == 200
    finally:
        exporter.stop()


@pytest.mark.parametrize(("broken", "reason"), [
    ("tls_server_config: [\n", "not YAML"),
    ("basic_auth_users:\n  prometheus: plaintext\n", "prometheus: not a bcrypt hash"),
    ("", "removes tls_server_config: the exporter serves HTTPS until it restarts"),
])
def test_a_broken_new_web_config_keeps_the_old_one_and_says_why(
    tmp_path: Path, broken: str, reason: str,
) -> None:
    cert_file, _key = make_certificate(tmp_path)
    config = tmp_path / "web.yml"
    config.write_text(web_yml(prometheus=hashed("s3cret")))
    exporter = Exporter("--web.config.file", str(config))
    try:
        scraper = opener(cert_file)
        assert status(scraper, exporter.url, "prometheus", "s3cret") == 200
        config.write_text(broken)
        assert status(scraper, exporter.url, "prometheus", "s3cret") == 200  # the old one
        assert status(scraper, exporter.url, "prometheus", "wrong") == 401
        line = exporter.wait_for(r"web config")
        assert reason in line and str(config) in line and "kept" in line, line
        exporter.proc.send_signal(signal.SIGHUP)  # said again when asked, kept again
        assert reason in exporter.wait_for(r"web config")
        assert status(scraper, exporter.url, "prometheus", "s3cret") == 200
        config.write_text(web_yml(prometheus=hashed("mended")))  # mended: taken
        assert status(scraper, exporter.url, "prometheus", "mended") == 200
    finally:
        said = exporter.stop()
    assert "Traceback" not in said


# --- a web config that secures nothing; plain HTTP to TLS ------------------------------


@pytest.mark.parametrize("content", ["", "# nothing yet\n",
                                     "http_server_config:\n  headers:\n    X-A: b\n"])
def test_a_web_config_without_tls_or_users_does_not_lift_the_loopback_guard(
    tmp_path: Path, content: str,
) -> None:
    # before: an empty or headers-only file let --listen 0.0.0.0 serve plain HTTP, no auth.
    # The guard's decision is asked directly: nothing here binds off loopback.
    from gpudash.cli.args import parse
    from gpudash.cli.exporter import listen_problem, reload_problem

    config = tmp_path / "web.yml"
    config.write_text(content)
    web = webconfig.load(config)
    _cmd, args = parse(["exporter", "--demo", "--listen", "0.0.0.0:9835",
                        "--web.config.file", str(config)])
    problem = listen_problem(args, args.listen, web)
    assert problem is not None and "neither TLS nor basic_auth_users" in problem, problem
    assert str(config) in problem
    # on loopback it is only headers, as before; --insecure-listen still overrides
    _cmd, args = parse(["exporter", "--demo", "--listen", "127.0.0.1:9835"])
    assert listen_problem(args, args.listen, web) is None
    _cmd, args = parse(["exporter", "--demo", "--listen", "0.0.0.0:9835", "--insecure-listen"])
    assert listen_problem(args, args.listen, web) is None
    # and a config with either still lifts it
    users = tmp_path / "users.yml"
    users.write_text(web_yml(cert=False, prometheus=hashed("s3cret")))
    _cmd, args = parse(["exporter", "--demo", "--listen", "0.0.0.0:9835"])
    assert listen_problem(args, args.listen, webconfig.load(users)) is None
    # nor does one read again while it runs: the users removed, it is kept
    problem = reload_problem(args, args.listen, webconfig.load(users), web)
    assert problem is not None and "neither TLS nor basic_auth_users" in problem, problem


def test_plain_http_sent_to_the_tls_exporter_is_answered_400(tmp_path: Path) -> None:
    # before: the TLS handshake failed on it and the connection was dropped without a word
    cert_file, _key = make_certificate(tmp_path)
    config = tmp_path / "web.yml"
    config.write_text(web_yml(prometheus=hashed("s3cret")))
    exporter = Exporter("--web.config.file", str(config))
    try:
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(exporter.url.replace("https://", "http://"), timeout=10)
        assert refused.value.code == 400
        assert "HTTPS" in refused.value.read().decode()
        assert status(opener(cert_file), exporter.url, "prometheus", "s3cret") == 200
    finally:
        said = exporter.stop()
    assert "Traceback" not in said
