"""End to end: the model swap over real SSH against real systemd hosts (tests/lab).

The next model is the lab's model-server stand-in (payload.model_main): it checks free
GPU memory as vLLM does, takes its memory step by step through the stand-in driver while
logging shard progress to its journal, and answers /health on its port only once loaded.
``gpudash swap`` runs as a subprocess; every outcome is checked on the host itself.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from lab.fixtures import HostSpec, labmod
from lab.probes import alice_pid, wait_host, workers

pytestmark = pytest.mark.lab

MINIMAX = "vllm-minimax-m25.service"
KIMI = "vllm-kimi-k25.service"
DEEPSEEK = "vllm-deepseek-v3.service"
SWAP_HOST = HostSpec(units=labmod.SWAP_UNITS)


def gpudash(host, state: Path, *args: str, timeout: float = 180,  # type: ignore[no-untyped-def]
            ) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "XDG_STATE_HOME": str(state / "state"),
           "XDG_CONFIG_HOME": str(state / "config")}
    return subprocess.run(
        [sys.executable, "-m", "gpudash", *args,
         "--ssh-config", str(host.ssh_config_path), "--known-hosts", str(host.known_hosts_path)],
        capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL, env=env,
    )


def health(host, port: int) -> str:  # type: ignore[no-untyped-def]
    cp = host.exec(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}",
                    f"http://127.0.0.1:{port}/health"], check=False)
    return cp.stdout.strip()


@pytest.mark.parametrize("lab_host", [SWAP_HOST], indirect=True)
def test_swap_cli_reclaims_starts_and_proves_serving(lab_host, tmp_path: Path) -> None:
    h = lab_host
    alice = alice_pid(h)
    wait_host(lambda: len(workers(h)) == 8, what="8 MiniMax workers")
    cp = gpudash(h, tmp_path, "swap", h.alias, "--from", "vllm-minimax-m25",
                 "--to", "vllm-kimi-k25", "--enable", "--yes", "--json", "--timeout", "120")
    assert cp.returncode == 0, cp.stdout + cp.stderr
    rec = json.loads(cp.stdout)
    assert rec["confirmed"] is True, rec
    # the plan took the ready URL from the unit's --port, read on the host
    assert "http://127.0.0.1:8001/health" in cp.stderr, cp.stderr
    assert "8001/health" in json.dumps(rec)
    # the host agrees: old gone and disabled, new active, enabled, answering, loaded
    assert h.unit_show(MINIMAX, ["ActiveState", "UnitFileState"]) == {
        "ActiveState": "inactive", "UnitFileState": "disabled"}
    assert h.unit_show(KIMI, ["ActiveState", "UnitFileState", "NRestarts"]) == {
        "ActiveState": "active", "UnitFileState": "enabled", "NRestarts": "0"}
    assert health(h, 8001) == "200"
    used = h.gpu_used_mib()
    assert used == [1024 + 88064, 88064, 88064, 88064, 88064, 512 + 88064, 512 + 88064,
                    512 + 88064], used
    assert workers(h) == [] and h.alive(alice)
    # learned: the next swap to it checks the fit against this
    fp = json.loads((tmp_path / "state/gpudash/footprints.json").read_text())
    [entry] = [v for host in fp.values() for k, v in host.items() if k == KIMI]
    assert entry["mib_per_gpu"] == {str(g): 88064 for g in range(8)}, entry


@pytest.mark.parametrize("lab_host", [SWAP_HOST], indirect=True)
def test_swap_into_a_crash_loop_is_stopped_and_explained(lab_host, tmp_path: Path) -> None:
    h = lab_host
    alice = alice_pid(h)
    wait_host(lambda: len(workers(h)) == 8, what="8 MiniMax workers")
    cp = gpudash(h, tmp_path, "swap", h.alias, "--from", "vllm-minimax-m25",
                 "--to", "vllm-deepseek-v3", "--yes", "--timeout", "120")
    out = cp.stdout + cp.stderr
    assert cp.returncode == 1, out
    assert "Free memory on device cuda:0" in out, out  # the failure line, from its journal
    assert f"{alice}" in out or "alice" in out, out  # who still holds GPU0's memory
    s = h.unit_show(DEEPSEEK, ["ActiveState"])
    assert s["ActiveState"] in ("inactive", "failed"), s  # stopped: no crash loop left
    # the reclaim itself was done and proven
    assert h.unit_show(MINIMAX, ["ActiveState"])["ActiveState"] == "inactive"
    assert h.gpu_used_mib() == [1024, 0, 0, 0, 0, 512, 512, 512]
    assert h.alive(alice)


@pytest.mark.parametrize("lab_host", [SWAP_HOST], indirect=True)
def test_swap_that_cannot_fit_beside_alice_does_nothing(lab_host, tmp_path: Path) -> None:
    h = lab_host
    alice = alice_pid(h)
    old = wait_host(lambda: len(w := workers(h)) == 8 and w, what="8 MiniMax workers")
    store = tmp_path / "state/gpudash"
    store.mkdir(parents=True)
    # what DeepSeek took when it last served here (on a day alice had no kernel)
    (store / "footprints.json").write_text(json.dumps({h.alias: {DEEPSEEK: {
        "mib_per_gpu": {str(g): 97000 for g in range(8)}, "ready_s": 600.0,
        "seen_at": 1.0}}}))
    cp = gpudash(h, tmp_path, "swap", h.alias, "--from", "vllm-minimax-m25",
                 "--to", "vllm-deepseek-v3", "--yes", "--timeout", "120")
    out = cp.stdout + cp.stderr
    assert cp.returncode in (1, 2), out
    assert "GPU0: needs 94.7 GiB, 94.6 GiB will be free" in out, out
    assert "alice's" in out and f"pid {alice}" in out, out
    # nothing done
    assert h.unit_show(MINIMAX, ["ActiveState", "UnitFileState"]) == {
        "ActiveState": "active", "UnitFileState": "enabled"}
    assert workers(h) == old
    assert h.unit_show(DEEPSEEK, ["ActiveState"])["ActiveState"] == "inactive"
