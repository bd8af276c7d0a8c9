"""A real Prometheus server on 127.0.0.1 (Debian's ``prometheus``), for end-to-end tests.

``prometheus_server`` is a pytest fixture factory: ``prometheus_server(targets)`` writes
a config that scrapes ``targets`` every second (and loads the documented alert rules),
starts the server on a free loopback port with its own TSDB dir, waits until it is
ready, and stops it after the test. ``query`` asks its HTTP API. Where the binary is
missing the test skips, except with ``CI=true``: there it fails (tests/run.sh installs it).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
ALERT_RULES = ROOT / "docs" / "prometheus" / "gpudash-alerts.yml"
RECORDING_RULES = ROOT / "docs" / "prometheus" / "gpudash-records.yml"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def prometheus_binary() -> str:
    path = shutil.which("prometheus")
    if path is None:
        reason = "no prometheus binary (apt-get install prometheus; tests/run.sh does)"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"required under CI=true: {reason}", pytrace=False)
        pytest.skip(reason)
    return path


class Prometheus:
    def __init__(self, base: str, proc: subprocess.Popen[bytes], log: Path) -> None:
        self.base = base
        self.proc = proc
        self.log = log

    def api(self, path: str, **params: str) -> Any:
        url = f"{self.base}{path}?{urllib.parse.urlencode(params)}"
        with urllib.request.urlopen(url, timeout=10) as r:
            doc = json.load(r)
        assert doc["status"] == "success", doc
        return doc["data"]

    def query(self, expr: str) -> dict[frozenset[tuple[str, str]], float]:
        """An instant query: {labels (without __name__): value}."""
        data = self.api("/api/v1/query", query=expr)
        assert data["resultType"] == "vector", data
        return {frozenset((k, v) for k, v in r["metric"].items() if k != "__name__"):
                float(r["value"][1]) for r in data["result"]}

    def wait(self, expr: str, pred: Callable[[dict[frozenset[tuple[str, str]], float]], bool],
             timeout: float = 30.0) -> dict[frozenset[tuple[str, str]], float]:
        """Poll ``expr`` until ``pred`` holds for its result; fail with the last one."""
        deadline = time.monotonic() + timeout
        while True:
            result = self.query(expr)
            if pred(result):
                return result
            if time.monotonic() > deadline:
                raise AssertionError(f"{expr}: still {result} after {timeout:g} s")
            time.sleep(0.25)


def start(tmp: Path, targets: list[str], *, rules: Path | list[Path] | None = ALERT_RULES,
          timeout: float = 60.0, jobs: dict[str, list[str]] | None = None,
          evaluation_interval: str = "1s", out_of_order: str | None = None) -> Prometheus:
    """``targets`` in job "gpudash"; ``jobs``: other scrape jobs (name -> targets);
    ``rules``: rule files loaded, evaluated every ``evaluation_interval``;
    ``out_of_order``: how far behind the newest sample one is still taken (a recording
    rule's, when backfilled blocks reach past now: bench/prom_fleet_bench.py)."""
    binary = prometheus_binary()
    tmp.mkdir(parents=True, exist_ok=True)
    config = tmp / "prometheus.yml"
    doc: dict[str, Any] = {
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s",
                   "evaluation_interval": evaluation_interval},
        "scrape_configs": [{"job_name": name, "static_configs": [{"targets": t}]}
                           for name, t in {"gpudash": targets, **(jobs or {})}.items()
                           if t],
    }
    if out_of_order is not None:
        doc["storage"] = {"tsdb": {"out_of_order_time_window": out_of_order}}
    if rules is not None:
        doc["rule_files"] = [str(r) for r in ([rules] if isinstance(rules, Path) else rules)]
    config.write_text(json.dumps(doc))  # JSON is YAML
    port = free_port()
    log = tmp / "prometheus.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [binary, f"--config.file={config}", f"--web.listen-address=127.0.0.1:{port}",
             f"--storage.tsdb.path={tmp / 'tsdb'}", "--storage.tsdb.retention.time=1h"],
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=tmp,
        )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(f"{base}/-/ready", timeout=2) as r:
                if r.status == 200:
                    return Prometheus(base, proc, log)
        except OSError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise AssertionError(f"prometheus did not start: {log.read_text()[-3000:]}")
        time.sleep(0.2)


def stop(server: Prometheus) -> None:
    server.proc.terminate()
    try:
        server.proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        server.proc.kill()
        server.proc.wait()


@pytest.fixture
def prometheus_server(tmp_path: Path) -> Iterator[Callable[..., Prometheus]]:
    started: list[Prometheus] = []

    def make(targets: list[str], **kw: Any) -> Prometheus:
        server = start(tmp_path / f"prometheus{len(started)}", targets, **kw)
        started.append(server)
        return server

    yield make
    for server in started:
        stop(server)


class Exporter:
    """``gpudash exporter`` as a subprocess on a free loopback port; stderr to a file
    (a pipe nobody reads could fill and stall it)."""

    def __init__(self, log: Path, *args: str, timeout: float = 30.0) -> None:
        self.log = log
        with log.open("w") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "gpudash", "exporter", "--listen", "127.0.0.1:0",
                 *args],
                stdout=subprocess.DEVNULL, stderr=err, stdin=subprocess.DEVNULL,
                env=os.environ.copy(),
            )
        deadline = time.monotonic() + timeout
        while "http://127.0.0.1:" not in (text := log.read_text()):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.proc.kill()
                raise AssertionError(f"exporter did not start: {text}")
            time.sleep(0.05)
        self.target = text.split("http://")[1].split("/")[0]

    def stop(self) -> tuple[int, str]:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        return self.proc.returncode, self.log.read_text()
