"""End to end: a real Prometheus server scrapes ``gpudash exporter``; what arrived is read
back through Prometheus's HTTP API (``/api/v1/query``, ``/api/v1/alerts``).

The exporter watches the demo host (no lab needed), and real systemd hosts of the lab
over real SSH, where orphans are made the incident's way (``systemctl stop`` of a
KillMode=process unit) and reaped by hand: their series must arrive with the host's own
numbers, raise the documented alert, and vanish once reaped.
"""

from __future__ import annotations

import asyncio
import subprocess
import urllib.request
from pathlib import Path

import pytest
from lab.probes import wait_host, workers
from promserver import ALERT_RULES, Exporter, free_port, prometheus_server  # noqa: F401

from gpudash.demo.host import GPU_TOTAL_MIB, MINIMAX, MODEL_MIB, DemoHost
from gpudash.render.metrics import MIB

VLLM = "vllm-minimax-m25.service"
SGLANG = "sglang-kimi.service"
WORKER_MIB = 96801
LAB_TOTAL_MIB = 97887


def labels(**kw: str) -> frozenset[tuple[str, str]]:
    return frozenset(kw.items())


def by(result: dict[frozenset[tuple[str, str]], float], key: str) -> dict[str, float]:
    """A query's result keyed by one label's value."""
    return {dict(k)[key]: v for k, v in result.items()}


@pytest.mark.prometheus
def test_prometheus_scrapes_the_exporter_over_the_demo(prometheus_server, tmp_path: Path
                                                       ) -> None:  # type: ignore[no-untyped-def]
    exporter = Exporter(tmp_path / "exporter.log", "--demo", "--interval", "0.5")
    try:
        prom = prometheus_server([exporter.target])
        target = {"instance": exporter.target, "job": "gpudash"}
        prom.wait('up{job="gpudash"}', lambda r: r == {labels(**target): 1.0})
        prom.wait("gpudash_link_up", lambda r: r == {labels(host="demo-gpu01", **target): 1.0})
        total = prom.wait("gpudash_gpu_memory_total_bytes", lambda r: len(r) == 8)
        assert sorted(by(total, "gpu")) == [str(i) for i in range(8)]
        assert set(total.values()) == {GPU_TOTAL_MIB * MIB}
        assert all(dict(k)["uuid"].startswith("GPU-") for k in total)
        # serving for two hours: every GPU holds the model (GPU 7 the embedding container
        # too), as the demo host itself says; nothing is orphaned
        used = prom.query("gpudash_gpu_memory_used_bytes")
        demo = asyncio.run(DemoHost(containers=True).sample())
        assert by(used, "gpu") == {
            str(g.index): float((g.memory_used_mib or 0) * MIB) for g in demo.gpus}
        assert min(used.values()) == MODEL_MIB * MIB
        assert prom.query("gpudash_orphaned_bytes") == {}
        assert prom.query(f'gpudash_orphaned_processes{{unit="{MINIMAX}"}}') == {
            labels(host="demo-gpu01", unit=MINIMAX, **target): 0.0}
        looping = by(prom.query("gpudash_unit_crash_looping"), "unit")
        assert {MINIMAX, "vllm-kimi-k25.service", "vllm-deepseek-v3.service"} <= set(looping)
        assert set(looping.values()) == {0.0}
        # the documented alert rules loaded and evaluate
        [group] = prom.api("/api/v1/rules")["groups"]
        assert group["file"] == str(ALERT_RULES)
        assert {r["name"]: r["health"] for r in group["rules"]} == {
            "GPUMemoryOrphaned": "ok", "GPUUnitCrashLooping": "ok", "GPUHostUnwatched": "ok",
            "GPUMemoryStray": "ok"}
        assert prom.api("/api/v1/alerts")["alerts"] == []
        # docs/EXPORTER.md's Grafana-free ways to look: the expression browser and promtool
        with urllib.request.urlopen(f"{prom.base}/graph", timeout=10) as page:
            assert page.status == 200
        cp = subprocess.run(["promtool", "query", "instant", prom.base,
                             'gpudash_gpu_memory_total_bytes{gpu="3"}'],
                            capture_output=True, text=True, timeout=30)
        assert cp.returncode == 0, cp.stderr
        assert 'host="demo-gpu01"' in cp.stdout and str(GPU_TOTAL_MIB * MIB) in cp.stdout
    finally:
        code, err = exporter.stop()
    assert code == 0, err
    assert "Traceback" not in err


@pytest.mark.prometheus
def test_prometheus_tells_the_demo_fleets_hosts_apart(prometheus_server, tmp_path: Path
                                                      ) -> None:  # type: ignore[no-untyped-def]
    """gpudash --demo-hosts 5: the incident, healthy, unreachable, stopped, crash loop."""
    exporter = Exporter(tmp_path / "exporter.log", "--demo-hosts", "5", "--interval", "0.5")
    try:
        prom = prometheus_server([exporter.target])
        up = prom.wait("gpudash_link_up", lambda r: len(r) == 5)
        assert by(up, "host") == {"demo-gpu01": 1.0, "demo-gpu02": 1.0, "demo-gpu03": 0.0,
                                  "demo-gpu04": 1.0, "demo-gpu05": 1.0}
        orphans = prom.wait(f'gpudash_orphaned_processes{{unit="{MINIMAX}"}}',
                            lambda r: len(r) == 4)
        assert by(orphans, "host") == {"demo-gpu01": 8.0, "demo-gpu02": 0.0,
                                       "demo-gpu04": 8.0, "demo-gpu05": 0.0}
        assert by(prom.query(f'gpudash_unit_restarts_total{{unit="{MINIMAX}"}}'), "host")[
            "demo-gpu01"] == 1.0  # the kill -9: respawned once
        assert by(prom.query(f'sum by (host) (gpudash_orphaned_bytes{{unit="{MINIMAX}"}})'),
                  "host").keys() == {"demo-gpu01", "demo-gpu04"}
        looping = prom.wait("gpudash_unit_crash_looping == 1", lambda r: len(r) >= 1,
                            timeout=60)
        assert {(dict(k)["host"], dict(k)["unit"]) for k in looping} == {
            ("demo-gpu05", "vllm-deepseek-v3.service")}
        [info] = prom.query('gpudash_link_info{host="demo-gpu03"}')
        assert "unreachable" in dict(info)["error"]
    finally:
        code, err = exporter.stop()
    assert code == 0, err
    assert err.count("demo-gpu03: no answer") == 1  # said once, not once per retry


@pytest.mark.lab
def test_prometheus_sees_lab_orphans_arrive_with_the_hosts_numbers_and_go(
    lab_hosts, prometheus_server, tmp_path: Path,  # type: ignore[no-untyped-def]
) -> None:
    h, calm = lab_hosts(2)  # the incident plays on h; calm is watched beside it
    for host in (h, calm):
        wait_host(lambda host=host: len(workers(host)) == 8, what="8 workers")
    nobody = f"root@127.0.0.1:{free_port()}"  # refused on loopback: a host that fails
    exporter = Exporter(tmp_path / "exporter.log", h.alias, f"ssh://{nobody}", calm.alias,
                        "--interval", "0.5", "--ssh-config", str(h.ssh_config_path),
                        "--known-hosts", str(h.known_hosts_path))
    try:
        prom = prometheus_server([exporter.target])
        up = prom.wait("gpudash_link_up", lambda r: sorted(r.values()) == [0.0, 1.0, 1.0])
        hosts = by(up, "host")
        assert hosts[h.alias] == hosts[calm.alias] == 1.0
        [down] = [name for name in hosts if name not in (h.alias, calm.alias)]
        assert hosts[down] == 0.0  # it fails; the lab hosts are watched all the same
        [info] = prom.query(f'gpudash_link_info{{host="{down}"}}')
        assert dict(info)["error"] and dict(info)["state"] in ("error", "reconnecting")
        assert prom.query(f'gpudash_gpu_memory_used_bytes{{host="{down}"}}') == {}
        host = f'host="{h.alias}"'

        # before: each host's own numbers, per GPU; nothing orphaned
        for lab_host in (h, calm):
            truth = [u * MIB for u in lab_host.gpu_used_mib()]
            used = prom.wait(f'gpudash_gpu_memory_used_bytes{{host="{lab_host.alias}"}}',
                             lambda r, truth=truth: [by(r, "gpu").get(str(i))
                                                     for i in range(8)] == truth)
            assert len(used) == 8
            total = prom.query(f'gpudash_gpu_memory_total_bytes{{host="{lab_host.alias}"}}')
            assert set(total.values()) == {LAB_TOTAL_MIB * MIB} and len(total) == 8
        used = prom.query(f"gpudash_gpu_memory_used_bytes{{{host}}}")
        assert prom.query("gpudash_orphaned_bytes") == {}
        # the collector's cost on each host arrives too (CPU seconds it has used)
        cost = prom.query("gpudash_collector_cpu_seconds_total")
        assert set(by(cost, "host")) == {h.alias, calm.alias}
        assert all(0 < v < 60 for v in cost.values())
        assert set(prom.query(f'gpudash_unit_restarts_total{{{host},unit="{SGLANG}"}}')
                   .values()) == {0.0}

        # a respawn: kill -9 on SGLang's main process, systemd restarts it (on-failure)
        main = int(h.unit_show(SGLANG, ["MainPID"])["MainPID"])
        h.exec(["kill", "-9", str(main)])
        wait_host(lambda: h.unit_show(SGLANG, ["NRestarts"])["NRestarts"] == "1",
                  timeout=30, what="SGLang restarted")
        prom.wait(f'gpudash_unit_restarts_total{{{host},unit="{SGLANG}"}}',
                  lambda r: set(r.values()) == {1.0})
        assert set(prom.query(f'gpudash_unit_crash_looping{{{host},unit="{SGLANG}"}}')
                   .values()) == {0.0}  # once is a respawn, not a crash loop

        # the incident: stop the KillMode=process unit, its 8 workers keep their memory
        old = workers(h)
        h.systemctl("stop", VLLM)
        assert h.unit_show(VLLM, ["ActiveState"])["ActiveState"] == "inactive"
        assert sorted(workers(h)) == sorted(old)
        orphaned = prom.wait(f'gpudash_orphaned_bytes{{unit="{VLLM}"}}',
                             lambda r: len(r) == 8)
        assert {dict(k)["host"] for k in orphaned} == {h.alias}  # only where it happened
        assert by(orphaned, "gpu") == {str(i): WORKER_MIB * MIB for i in range(8)}
        uuids = {dict(k)["gpu"]: dict(k)["uuid"] for k in used}
        assert {dict(k)["gpu"]: dict(k)["uuid"] for k in orphaned} == uuids
        assert by(prom.query(f"gpudash_gpu_orphaned_bytes{{{host}}}"), "gpu") == {
            str(i): WORKER_MIB * MIB for i in range(8)}
        assert set(prom.query(f'gpudash_gpu_orphaned_bytes{{host="{calm.alias}"}}')
                   .values()) == {0.0}
        # reclaimable (the fleet view's figure): the workers, and on GPUs 6-7 also the
        # respawned SGLang's schedulers
        reclaimable = by(prom.query(f"gpudash_reclaimable_bytes{{{host}}}"), "gpu")
        assert all(reclaimable[str(i)] == WORKER_MIB * MIB for i in range(5))
        assert all(reclaimable[str(i)] >= WORKER_MIB * MIB for i in (6, 7))
        assert set(prom.query(f'gpudash_orphaned_processes{{{host},unit="{VLLM}"}}')
                   .values()) == {8.0}
        assert set(prom.query(f'gpudash_unit_info{{{host},unit="{VLLM}",'
                              'active_state="inactive",kill_mode="process"}').values()) == {1.0}
        # the documented alert is pending (it fires after 10 minutes)
        alerts = prom.wait('ALERTS{alertname="GPUMemoryOrphaned"}', lambda r: len(r) == 1)
        [alert] = alerts
        assert dict(alert)["alertstate"] == "pending"
        assert dict(alert)["host"] == h.alias and dict(alert)["unit"] == VLLM
        [api_alert] = [a for a in prom.api("/api/v1/alerts")["alerts"]
                       if a["labels"]["alertname"] == "GPUMemoryOrphaned"]
        assert float(api_alert["value"]) == 8 * WORKER_MIB * MIB

        # reaped by hand: the series go (no stale label set), the memory is back
        h.exec(["kill", "-9", *map(str, old)])
        prom.wait(f"gpudash_orphaned_bytes{{{host}}}", lambda r: r == {}, timeout=45)
        assert set(prom.query(f"gpudash_gpu_orphaned_bytes{{{host}}}").values()) == {0.0}
        back = wait_host(lambda: u if max(u := h.gpu_used_mib()) < WORKER_MIB else None,
                         what="memory back")
        truth = [u * MIB for u in back]
        prom.wait(f"gpudash_gpu_memory_used_bytes{{{host}}}",
                  lambda r: [by(r, "gpu").get(str(i)) for i in range(8)] == truth)
        prom.wait('ALERTS{alertname="GPUMemoryOrphaned"}', lambda r: r == {})
    finally:
        code, err = exporter.stop()
    assert code == 0, err
    assert "Traceback" not in err
    assert down in err  # the failing host was named on stderr
