"""The recording rules ``gpudash --prometheus`` reads (docs/prometheus/gpudash-records.yml):
the file is what gpudash's queries say it is, a real ``promtool test rules`` shows that its
series hold what the raw queries compute, and a refresh with nothing newer than its last
read asks Prometheus nothing more than the probe."""

from __future__ import annotations

import asyncio
import http.server
import json
import os
import shutil
import subprocess
import urllib.parse
from pathlib import Path

import pytest
import yaml
from promfakes import serving

from gpudash.fleetprom.client import PromClient
from gpudash.fleetprom.fleet import PromFeed
from gpudash.fleetprom.queries import (
    DCGM_PARTS,
    GPUDASH_PARTS,
    PROBE,
    RECORDED,
    RECORDED_CLOCK,
    RECORDED_DCGM,
    RECORDED_GPUDASH,
    recording_rules,
)
from gpudash.state.promconfig import PromSettings

ROOT = Path(__file__).resolve().parent.parent
RECORDS = ROOT / "docs" / "prometheus" / "gpudash-records.yml"
GIB = 2**30


def promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail("promtool required under CI=true (tests/run.sh installs prometheus)")
        pytest.skip("no promtool (apt-get install prometheus)")
    return path


def test_the_records_file_is_what_gpudash_reads() -> None:
    assert yaml.safe_load(RECORDS.read_text()) == recording_rules()
    cp = subprocess.run([promtool(), "check", "rules", str(RECORDS)], capture_output=True,
                        text=True, timeout=60)
    assert cp.returncode == 0, cp.stdout + cp.stderr
    assert "SUCCESS: 19 rules found" in cp.stdout


def _ident(host: str) -> str:
    return f'instance="{host}:9835",job="gpudash",host="{host}"'


# Two hosts of gpudash's exporter (gpu-b: a holder whose memory is unknown, so GPU 1 has
# no unattributed series) and two of dcgm-exporter, in both label spellings.
def _series() -> list[tuple[str, float]]:
    a, b = _ident("gpu-a"), _ident("gpu-b")
    out: list[tuple[str, float]] = []
    for ident, gpu, used, unattributed in ((a, 0, 10 * GIB, 1 * GIB), (a, 1, 0, 0),
                                           (b, 0, 0, 0), (b, 1, 3 * GIB, None)):
        out.append((f'gpudash_gpu_memory_used_bytes{{{ident},gpu="{gpu}"}}', used))
        out.append((f'gpudash_gpu_memory_total_bytes{{{ident},gpu="{gpu}"}}', 80 * GIB))
        if unattributed is not None:
            out.append((f'gpudash_gpu_memory_unattributed_bytes{{{ident},gpu="{gpu}"}}',
                        unattributed))
    out += [(f'gpudash_gpu_orphaned_bytes{{{a},gpu="0",unit="vllm.service"}}', 5 * GIB),
            (f'gpudash_orphaned_processes{{{a},unit="vllm.service"}}', 2),
            (f'gpudash_reclaimable_bytes{{{a},unit="vllm.service"}}', 6 * GIB),
            (f'gpudash_gpu_stray_bytes{{{b},gpu="1",reason="no job"}}', 3 * GIB),
            (f"gpudash_link_up{{{a}}}", 1), (f"gpudash_link_up{{{b}}}", 0),
            (f"gpudash_sample_timestamp_seconds{{{a}}}", 100),
            (f"gpudash_sample_timestamp_seconds{{{b}}}", 100)]
    old = 'instance="d1:9400",job="dcgm",Hostname="dgx-old"'
    for gpu, used, job in ((0, 40000, ',hpc_job="4242"'), (1, 20000, ""), (2, 3, "")):
        out.append((f'DCGM_FI_DEV_FB_USED{{{old},gpu="{gpu}"{job}}}', used))
        out.append((f'DCGM_FI_DEV_FB_FREE{{{old},gpu="{gpu}"{job}}}', 81559 - used))
    new = 'instance="d2:9400",job="dcgm",hostname="dgx-new",gpu="0"'
    out += [(f"DCGM_FI_DEV_FB_USED{{{new}}}", 1000), (f"DCGM_FI_DEV_FB_FREE{{{new}}}", 80559)]
    return out


# Two hosts of gpudash's exporter (gpu-b: a holder whose memory is unknown, so its GPU 1
# has no unattributed series) and two of dcgm-exporter, in both label spellings.
SERIES = _series()
# what some figures are, worked out by hand (the rest: as the raw query says)
EXPECTED = [
    (RECORDED_GPUDASH, "used_bytes", _ident("gpu-a"), 10 * GIB),
    (RECORDED_GPUDASH, "gpus_held", _ident("gpu-a"), 1),  # 10 GiB used, 1 GiB nobody's
    (RECORDED_GPUDASH, "gpus_held", _ident("gpu-b"), 1),  # GPU 1: unattributed unknown
    (RECORDED_GPUDASH, "reclaimable_bytes", _ident("gpu-a"), 6 * GIB),
    (RECORDED_GPUDASH, "stray_bytes", _ident("gpu-b"), 3 * GIB),
    (RECORDED_GPUDASH, "link_up", _ident("gpu-b"), 0),
    (RECORDED_GPUDASH, "scraped_at", _ident("gpu-a"), 120),  # the sample at 2m
    (RECORDED_DCGM, "unowned_mib", 'instance="d1:9400",job="dcgm",Hostname="dgx-old"', 20000),
    (RECORDED_DCGM, "gpus", 'instance="d2:9400",job="dcgm",hostname="dgx-new"', 1),
]
HOSTS = {RECORDED_GPUDASH: 2, RECORDED_DCGM: 2}


def _rules_test() -> dict[str, object]:
    tests: list[dict[str, object]] = []
    for name, parts in ((RECORDED_GPUDASH, GPUDASH_PARTS), (RECORDED_DCGM, DCGM_PARTS)):
        for stat, raw in parts:
            recorded = f'sum without () ({name}{{stat="{stat}"}})'
            tagged = f'label_replace({raw}, "stat", "{stat}", "", "")'
            # where the raw sums have a host, the recorded series has the same value
            tests.append({"expr": f"{tagged} unless ({recorded} == {tagged})",
                          "eval_time": "2m", "exp_samples": []})
            tests.append({"expr": f"count({tagged} == {recorded})", "eval_time": "2m",
                          "exp_samples": [{"labels": "{}",
                                           "value": _count(stat, name)}]})
    for name, stat, labels, value in EXPECTED:
        tests.append({"expr": f'{name}{{{labels},stat="{stat}"}}', "eval_time": "2m",
                      "exp_samples": [{"labels": f'{name}{{{labels},stat="{stat}"}}',
                                       "value": value}]})
    # the probe's clock: one series, whatever the hosts (here two of each exporter)
    tests.append({"expr": RECORDED_CLOCK, "eval_time": "2m",
                  "exp_samples": [{"labels": RECORDED_CLOCK, "value": 4}]})
    return {"rule_files": [str(RECORDS)], "evaluation_interval": "1m",
            "tests": [{"interval": "1m",
                       "input_series": [{"series": s, "values": f"{v}x3"} for s, v in SERIES],
                       "promql_expr_test": tests}]}


def _count(stat: str, name: str) -> int:
    """How many hosts have figure ``stat``: both, but where one host alone has a series
    that feeds it (gpu-a's orphans and reclaim, gpu-b's stray memory)."""
    one = name == RECORDED_GPUDASH and stat in (
        "orphaned_bytes", "orphans", "reclaimable_bytes", "stray_bytes")
    return 1 if one else HOSTS[name]


def test_promtool_shows_the_recorded_figures_are_the_raw_sums(tmp_path: Path) -> None:
    test = tmp_path / "records-test.yml"
    test.write_text(json.dumps(_rules_test()))  # JSON is YAML
    cp = subprocess.run([promtool(), "test", "rules", str(test)], capture_output=True,
                        text=True, timeout=120)
    assert cp.returncode == 0, cp.stdout[-4000:] + cp.stderr[-4000:]
    assert "SUCCESS" in cp.stdout


# the recorded figure the fake has: gpu-a's GPUs (one query per figure)
GPUS = next(expr for name, stat, expr in RECORDED if (name, stat) == ("gpudash", "gpus"))


class Counting:
    """A Prometheus with the recording rules, evaluated at ``evaluated`` (the probe's
    answer): counts what it is asked, by query."""

    def __init__(self) -> None:
        self.evaluated = 1000.0
        self.asked: dict[str, int] = {}

    def handler(self) -> type[http.server.BaseHTTPRequestHandler]:
        counting = self
        answers = {PROBE: lambda: [({}, counting.evaluated)],
                   GPUS: lambda: [({"instance": "gpu-a:9835", "job": "gpudash",
                                    "host": "gpu-a"}, 8.0)]}

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802
                expr = urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query)["query"][0]
                counting.asked[expr] = counting.asked.get(expr, 0) + 1
                result = [{"metric": labels, "value": [counting.evaluated, str(value)]}
                          for labels, value in answers.get(expr, list)()]
                body = json.dumps({"status": "success", "data": {
                    "resultType": "vector", "result": result}}).encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        return Handler


def test_a_refresh_reads_the_fleet_only_when_prometheus_has_evaluated_it_again() -> None:
    counting = Counting()
    states: list[object] = []

    async def refreshes() -> None:
        with serving(counting.handler()) as url:
            client = PromClient(PromSettings(url=url))
            feed = PromFeed(client, 1.0, states.append)
            try:
                await feed.refresh()
                assert feed.state.fleet is not None and feed.state.fleet.source == "recorded"
                assert [h.name for h in feed.state.fleet.hosts] == ["gpu-a"]
                assert feed.state.fleet.hosts[0].gpus == 8  # tagged with its figure
                await feed.refresh()  # the rules were not evaluated since: the probe only
                assert counting.asked[PROBE] == 2
                assert counting.asked[GPUS] == 1 and len(states) == 1
                counting.evaluated += 15  # evaluated again: read again
                await feed.refresh()
                assert counting.asked[GPUS] == 2 and len(states) == 2
            finally:
                client.close()

    asyncio.run(refreshes())
