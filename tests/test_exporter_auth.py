"""The exporter's basic auth and web config under pressure (issue 29): a flood of wrong
passwords beside a real scraper, passwords bcrypt cannot take, unknown users' timing, a
web config changed while it runs (SIGHUP, a revoked password, a rotated certificate, a
broken file), a web config that secures nothing, and plain HTTP sent to TLS. The exporter
is a real process, the clients real sockets over loopback with a certificate made here.
"""

from __future__ import annotations

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
from test_exporter_hold import basic

from gpudash.cli import webconfig

TESTS = Path(__file__).resolve().parent


class Exporter:
    """``gpudash exporter`` as a real process on 127.0.0.1; its stderr read line by line."""

    def __init__(self, *args: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "gpudash", "exporter", "--demo", "--listen", "127.0.0.1:0",
             "--interval", "0.5", *args],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        self.lines: queue.Queue[str] = queue.Queue()
        self.said: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()
        first = self.wait_for(r"https?://127\.0\.0\.1:\d+/metrics")
        self.url = re.search(r"https?://127\.0\.0\.1:\d+/metrics", first).group(0)  # type: ignore[union-attr]
        self.port = int(self.url.rsplit(":", 1)[1].split("/")[0])

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.put(line)

    def wait_for(self, pattern: str, timeout: float = 30.0) -> str:
        """The next stderr line matching ``pattern`` (lines before it are kept in said)."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self.lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"no line like {pattern!r} in {timeout} s; said: "
                                     f"{''.join(self.said)}") from None
            self.said.append(line)
            if re.search(pattern, line):
                return line

    def stop(self) -> str:
        """SIGTERM; everything it said on stderr (it must exit 0)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout=30)
        time.sleep(0)  # let the reader thread see the end of stderr
        while True:
            try:
                self.said.append(self.lines.get(timeout=5))
            except queue.Empty:
                break
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


# --- a web config that secures nothing -------------------------------------------


@pytest.mark.parametrize("content", ["", "# nothing yet\n",
                                     "http_server_config:\n  headers:\n    X-A: b\n"])
def test_a_web_config_without_tls_or_users_does_not_lift_the_loopback_guard(
    tmp_path: Path, content: str,
) -> None:
    # before: an empty or headers-only file let --listen 0.0.0.0 serve plain HTTP, no auth.
    # The guard's decision is asked directly: nothing here binds off loopback.
    from gpudash.cli.args import parse
    from gpudash.cli.exporter import listen_problem

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
