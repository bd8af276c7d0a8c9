"""The exporter's count of memory held outside what Slurm allocated, and its alert rule
through a real ``promtool test rules`` (series fed in, the alert expected to fire)."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from test_exporter import scrape, series, value
from test_slurm_owner import job, node, proc, snap

from gpudash.demo.host import DemoHost
from gpudash.feed.follow import HostFollower
from gpudash.feed.reconnect import LinkState
from gpudash.render.metrics import MIB

ROOT = Path(__file__).resolve().parent.parent
RULES = ROOT / "docs" / "prometheus" / "gpudash-alerts.yml"


def test_memory_outside_slurms_allocation_is_counted_by_gpu_and_reason() -> None:
    left = proc(20, {1: 3000}, user="alice", unit="session-3.scope")  # no job has GPU 1
    other = proc(21, {2: 500}, user="bob", unit="session-4.scope")  # job 8's GPU
    own = proc(22, {2: 7000}, "8", user="bob")
    w = HostFollower(DemoHost(), 1.0)  # a source for its name only: fed by hand
    w.link_changed(LinkState("connected", time.time()))
    w.sampled(snap(left, other, own, owners=node(**{"8": job(gpus=(2,), user="bob"),
                                                    "7": job("COMPLETED")})))
    got = scrape(w)
    assert value(got, "gpudash_gpu_stray_bytes", gpu="1", reason="no job") == 3000 * MIB
    assert value(got, "gpudash_gpu_stray_bytes", gpu="2",
                 reason="another job's GPU") == 500 * MIB
    assert len(series(got, "gpudash_gpu_stray_bytes")) == 2  # only where > 0


TEST = """\
rule_files: [{rules}]
evaluation_interval: 1m
tests:
  - interval: 1m
    input_series:
      - series: 'gpudash_gpu_stray_bytes{{host="n1",gpu="1",uuid="",reason="no job"}}'
        values: '3145728000x10'
      - series: 'gpudash_gpu_stray_bytes{{host="n2",gpu="0",uuid="",reason="no job"}}'
        values: '1x2 stale'
    alert_rule_test:
      - eval_time: 6m
        alertname: GPUMemoryStray
        exp_alerts:
          - exp_labels: {{severity: warning, host: n1, gpu: "1", reason: no job}}
            exp_annotations:
              summary: "n1 GPU 1: 2.93GiB held outside what Slurm allocated (no job)"
              description: "Who holds it: `gpudash n1` (flag STRAY). The epilog
                `gpudash reap --slurm-epilog` reaps a job's leftovers as the job ends."
      - eval_time: 3m
        alertname: GPUMemoryStray
        exp_alerts: []
"""


def test_the_stray_alert_fires_after_five_minutes_through_promtool(tmp_path: Path) -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail("promtool required under CI=true (tests/run.sh installs prometheus)")
        pytest.skip("no promtool (apt-get install prometheus)")
    test = tmp_path / "stray-test.yml"
    test.write_text(TEST.format(rules=RULES))
    cp = subprocess.run([promtool, "test", "rules", str(test)], capture_output=True,
                        text=True, timeout=60)
    assert cp.returncode == 0, cp.stdout + cp.stderr
    assert "SUCCESS" in cp.stdout
