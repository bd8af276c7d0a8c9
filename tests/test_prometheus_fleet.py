"""The fleet through Prometheus, on real parts: a real Prometheus (tests/promserver.py)
scrapes gpudash's own exporter over the demo fleet and dcgm-exporter's series (a static
exposition named and labelled as dcgm-exporter's source does, in both spellings of the
host label); ``gpudash snapshot --prometheus URL --json`` reads the table from it. Then
every way a Prometheus can fail: down, hung, 401, TLS nobody trusts, garbage, a query
error, an answer too big: one line and exit 3, never a traceback.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from promfakes import (
    TOTAL_MIB,
    answering,
    dcgm_exposition,
    empty_vector,
    exposition_handler,
    serving,
    silent_server,
)
from promserver import (
    ALERT_RULES,
    RECORDING_RULES,
    Exporter,
    Prometheus,
    free_port,
    start,
    stop,
)
from test_exporter_hold import make_certificate

from gpudash.fleetprom.client import PromClient, PromError
from gpudash.fleetprom.fleet import fleet_json, read_fleet
from gpudash.fleetprom.queries import QUERIES
from gpudash.state.promconfig import PromSettings

ROOT = Path(__file__).resolve().parent.parent
DEMO = [f"demo-gpu0{i}" for i in range(1, 6)]
OLD_USED = [40000, 30, 20000, 0]  # dgx-old: GPU 0 runs job 4242; GPU 2 is held by nobody's


def gpudash(*args: str, config: str | None = None, tmp: Path,
            timeout: float = 60) -> subprocess.CompletedProcess[str]:
    env = os.environ | {"XDG_CONFIG_HOME": str(tmp / "config"),
                        "XDG_STATE_HOME": str(tmp / "state")}
    if config is not None:
        (tmp / "config" / "gpudash").mkdir(parents=True, exist_ok=True)
        (tmp / "config" / "gpudash" / "config.toml").write_text(config)
    return subprocess.run([sys.executable, "-m", "gpudash", *args], capture_output=True,
                          text=True, timeout=timeout, env=env, cwd=ROOT)


@contextlib.contextmanager
def fleet(tmp: Path, rules: list[Path] | None = None
          ) -> Iterator[tuple[Prometheus, dict[str, str], Exporter]]:
    """A real Prometheus scraping the exporter over 5 demo hosts (job gpudash) and four
    dcgm-exporters: job "dcgm" maps GPUs to Slurm jobs (dgx-old, Hostname as before May
    2026; dgx-new, hostname), job "dcgm-plain" maps nothing (dgx-plain, and demo-gpu02,
    which gpudash's exporter watches too)."""
    pages = {
        "old": dcgm_exposition("dgx-old", OLD_USED, spelling="Hostname", jobs={0: "4242"}),
        "new": dcgm_exposition("dgx-new", [1000, 0]),
        "plain": dcgm_exposition("dgx-plain", [5000, 0]),
        "both": dcgm_exposition("demo-gpu02", [70000] * 8),
    }
    exporter = Exporter(tmp / "exporter.log", "--demo-hosts", "5", "--interval", "0.5")
    with contextlib.ExitStack() as stack:
        stack.callback(exporter.stop)
        urls = {k: stack.enter_context(serving(exposition_handler({"/metrics": v})))
                for k, v in pages.items()}
        targets = {k: u.removeprefix("http://") for k, u in urls.items()}
        prom = start(tmp / "prometheus", [exporter.target], rules=rules or ALERT_RULES, jobs={
            "dcgm": [targets["old"], targets["new"]],
            "dcgm-plain": [targets["plain"], targets["both"]]})
        stack.callback(stop, prom)
        prom.wait("gpudash_link_up", lambda r: len(r) == 5)
        prom.wait("DCGM_FI_DEV_FB_USED", lambda r: len(r) == 4 + 2 + 2 + 8)
        yield prom, targets, exporter


# a real Prometheus server, in real time: not in the fast tier (as the real sshd)
REAL_PROMETHEUS = pytest.mark.prometheus


def rows(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {h["host"]: h for h in doc["hosts"]}


@REAL_PROMETHEUS
def test_the_fleet_table_from_a_real_prometheus_gpudash_and_dcgm_hosts(tmp_path: Path
                                                                       ) -> None:
    with fleet(tmp_path) as (prom, targets, _exporter):
        prom.wait("gpudash_unit_crash_looping == 1", lambda r: len(r) >= 1, timeout=60)
        cp = gpudash("snapshot", "--prometheus", prom.base, "--json", tmp=tmp_path)
        assert cp.returncode == 0, cp.stderr
        doc = json.loads(cp.stdout)
    assert doc["prometheus"] == prom.base
    by = rows(doc)
    assert sorted(by) == ["demo-gpu01", "demo-gpu02", "demo-gpu03", "demo-gpu04",
                          "demo-gpu05", "dgx-new", "dgx-old", "dgx-plain"]
    # gpudash's exporter: every column
    incident = by["demo-gpu01"]
    assert incident["sources"] == ["gpudash"] and incident["link_up"] is True
    assert incident["orphans"] == 8 and incident["orphaned_mib"] > 0
    assert incident["reclaimable_mib"] >= incident["orphaned_mib"]
    assert incident["gpus"] == 8 and incident["gpus_held"] == 8
    assert {"orphans", "reclaim"} <= set(incident["states"])
    assert incident["scrape_age_s"] is not None and incident["scrape_age_s"] < 30
    assert by["demo-gpu03"]["link_up"] is False and by["demo-gpu03"]["used_mib"] is None
    assert "down" in by["demo-gpu03"]["states"]
    assert by["demo-gpu05"]["crash_looping"] == ["vllm-deepseek-v3.service"]
    assert "crashloop" in by["demo-gpu05"]["states"]
    assert by["demo-gpu02"]["sources"] == ["gpudash", "dcgm"]  # one host, one row
    assert by["demo-gpu02"]["orphans"] == 0 and by["demo-gpu02"]["crash_looping"] == []
    # dcgm-exporter only: memory per GPU, MiB as it says; orphans not known (not 0)
    old = by["dgx-old"]
    assert old["sources"] == ["dcgm"] and old["labels"]["Hostname"] == "dgx-old"
    assert old["gpus"] == 4 and old["gpus_held"] == 2
    assert old["used_mib"] == sum(OLD_USED) and old["total_mib"] == 4 * TOTAL_MIB
    assert old["orphans"] is None and old["orphaned_mib"] is None
    assert old["crash_looping"] is None and old["reclaimable_mib"] is None
    assert old["unowned_mib"] == 20000  # held on GPU 2, which no job has
    assert by["dgx-new"]["labels"]["hostname"] == "dgx-new"
    assert by["dgx-new"]["unowned_mib"] == 1000
    assert by["dgx-plain"]["unowned_mib"] is None  # its job maps no GPU: cannot tell
    # Enter's SSH name: the scrape target without its port (the default template)
    assert old["ssh_name"] == targets["old"].rsplit(":", 1)[0]


@REAL_PROMETHEUS
def test_with_the_recording_rules_the_table_reads_them_and_says_the_same(tmp_path: Path
                                                                         ) -> None:
    """docs/prometheus/gpudash-records.yml loaded: the table reads the recorded series
    (``source``), and every host's figures are what the raw queries say."""
    with fleet(tmp_path, [ALERT_RULES, RECORDING_RULES]) as (prom, _targets, _exporter):
        prom.wait("gpudash_unit_crash_looping == 1", lambda r: len(r) >= 1, timeout=60)
        # evaluated after every target was scraped: every host recorded
        prom.wait('count(gpudash:host_figures{stat="link_up"})', lambda r: 5.0 in r.values())
        prom.wait('count(gpudash:dcgm_host_figures{stat="gpus"})', lambda r: 4.0 in r.values())
        cp = gpudash("snapshot", "--prometheus", prom.base, "--json", tmp=tmp_path)
        assert cp.returncode == 0, cp.stderr
        recorded = json.loads(cp.stdout)
        client = PromClient(PromSettings(url=prom.base))
        try:
            raw = asyncio.run(read_fleet(client, "raw"))
        finally:
            client.close()
    assert recorded["source"] == "recorded" and raw.source == "raw"
    timeless = ("scrape_age_s", "sample_age_s", "ssh_name", "ssh_name_error")
    got = {h["host"]: {k: v for k, v in h.items() if k not in timeless}
           for h in recorded["hosts"]}
    want = {h["host"]: {k: v for k, v in h.items() if k not in timeless}
            for h in fleet_json(raw, prom.base, None)["hosts"]}
    assert sorted(got) == sorted(want) and len(got) == 8
    assert got == want


@REAL_PROMETHEUS
def test_a_dcgm_host_whose_target_goes_down_is_marked_so(tmp_path: Path) -> None:
    """A refresh keeps what it knew of a host whose target stopped answering."""
    with fleet(tmp_path) as (prom, targets, exporter):
        client = PromClient(PromSettings(url=prom.base))
        try:
            first = asyncio.run(read_fleet(client))
            assert "dgx-old" in {h.name for h in first.hosts}
            code, _err = exporter.stop()
            assert code == 0
            prom.wait('up{job="gpudash"}', lambda r: set(r.values()) == {0.0})
            from gpudash.fleetprom.rows import carried

            later = carried(first, asyncio.run(read_fleet(client)))
        finally:
            client.close()
    by = {h.name: h for h in later.hosts}
    assert set(DEMO) <= set(by)  # its hosts are not dropped ...
    for name in DEMO:  # ... they are marked down and stale, with the figures they had
        assert {"down", "stale"} <= by[name].states(later.at), name
    assert by["demo-gpu01"].orphans == 8 and by["demo-gpu01"].sources == ("gpudash",)
    assert by["demo-gpu02"].sources == ("dcgm",)  # dcgm-exporter still says its memory
    assert "stale" not in by["dgx-old"].states(later.at)


def test_the_queries_are_few_and_aggregated_on_the_server() -> None:
    assert len(QUERIES) == 3
    for _name, expr in QUERIES:
        assert "host=" not in expr and "instance=" not in expr  # never one per host


# --- a Prometheus that fails ----------------------------------------------------------


def failed(cp: subprocess.CompletedProcess[str], kind: str) -> str:
    assert cp.returncode == 3, (cp.returncode, cp.stderr)
    assert cp.stdout == ""
    assert "Traceback" not in cp.stderr
    [line] = cp.stderr.splitlines()
    assert f": {kind}: " in line, line
    return line


def test_prometheus_down_is_exit_3_with_the_reason(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    line = failed(gpudash("snapshot", "--prometheus", url, "--json", tmp=tmp_path), "down")
    assert "refused" in line.lower()


def test_a_hung_prometheus_is_given_up_on_after_the_timeout(tmp_path: Path) -> None:
    with silent_server() as url:
        started = time.monotonic()
        cp = gpudash("snapshot", "--prometheus", "--json", tmp=tmp_path,
                     config=f'[prometheus]\nurl = "{url}"\ntimeout = 1\n')
        took = time.monotonic() - started
    failed(cp, "slow")
    assert took < 15, took


def test_401_says_refused_and_the_token_file_was_sent(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("s3cret-token\n")
    seen: list[dict[str, str]] = []
    with serving(answering(401, b"Unauthorized\n", seen=seen,
                           content_type="text/plain")) as url:
        cp = gpudash("snapshot", "--prometheus", tmp=tmp_path, config=(
            f'[prometheus]\nurl = "{url}"\nbearer_token_file = "{token}"\n'))
    line = failed(cp, "refused")
    assert "401" in line and "s3cret" not in cp.stderr
    assert seen and {h.get("Authorization") for h in seen} == {"Bearer s3cret-token"}


def test_basic_auth_is_sent_and_403_is_refused(tmp_path: Path) -> None:
    password = tmp_path / "password"
    password.write_text("pw\n")
    seen: list[dict[str, str]] = []
    with serving(answering(403, b"", seen=seen)) as url:
        cp = gpudash("snapshot", "--prometheus", tmp=tmp_path, config=(
            f'[prometheus]\nurl = "{url}"\n[prometheus.basic_auth]\nusername = "ops"\n'
            f'password_file = "{password}"\n'))
    assert "403" in failed(cp, "refused")
    assert {h.get("Authorization") for h in seen} == {"Basic b3BzOnB3"}  # ops:pw


def test_tls_nobody_trusts_is_refused_and_its_ca_file_is_trusted(tmp_path: Path) -> None:
    cert, key = make_certificate(tmp_path)
    with serving(answering(200, empty_vector()), tls=(cert, key)) as url:
        failed(gpudash("snapshot", "--prometheus", url, tmp=tmp_path), "tls")
        cp = gpudash("snapshot", "--prometheus", "--json", tmp=tmp_path, config=(
            f'[prometheus]\nurl = "{url}"\n[prometheus.tls_config]\nca_file = "{cert}"\n'))
    assert cp.returncode == 0, cp.stderr
    assert json.loads(cp.stdout)["hosts"] == []


@pytest.mark.parametrize(("status", "body", "kind"), [
    (200, b"<html>not prometheus</html>", "bad answer"),
    (200, b'{"status": "success", "data": {"resultType": "matrix", "result": []}}',
     "bad answer"),
    (400, b'{"status":"error","errorType":"bad_data","error":"parse error \\u001b[31m"}',
     "query"),
    (502, b"Bad Gateway", "bad answer"),
])
def test_garbage_and_query_errors_are_said_cleanly(tmp_path: Path, status: int, body: bytes,
                                                   kind: str) -> None:
    with serving(answering(status, body)) as url:
        line = failed(gpudash("snapshot", "--prometheus", url, tmp=tmp_path), kind)
    assert "\x1b" not in line  # the server's text is shown, never obeyed


def test_an_answer_too_big_is_refused_while_it_is_read() -> None:
    huge = b'{"status":"success","data":{"resultType":"vector","result":[' + b" " * 8192
    with serving(answering(200, huge)) as url:
        client = PromClient(PromSettings(url=url), max_answer=4096)
        try:
            with pytest.raises(PromError) as caught:
                asyncio.run(client.query("up"))
        finally:
            client.close()
    assert caught.value.kind == "too big"


def test_a_redirect_is_not_followed_with_the_credentials(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("s3cret")
    seen: list[dict[str, str]] = []
    with serving(answering(200, empty_vector(), seen=seen)) as elsewhere:

        class Redirect(answering(302, b"")):  # type: ignore[misc]
            def end_headers(self) -> None:
                self.send_header("Location", f"{elsewhere}/api/v1/query")
                super().end_headers()

        with serving(Redirect) as url:
            cp = gpudash("snapshot", "--prometheus", tmp=tmp_path, config=(
                f'[prometheus]\nurl = "{url}"\nbearer_token_file = "{token}"\n'))
    assert "redirect" in failed(cp, "bad answer")
    assert seen == []  # the token never went where the redirect pointed
