"""End to end: the real CLI and engine, over real SSH, against real systemd hosts (tests/lab).

``gpudash reclaim`` / ``gpudash snapshot`` run as subprocesses (``python -m gpudash``)
with the lab's ssh_config and known_hosts; the engine is driven directly where the test
needs the report object. Every outcome is checked on the host itself.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
from lab.probes import alice_pid, wait_host, workers

from gpudash.engine import ActionKind, ExecOptions, execute, plan_action
from gpudash.transport import open_source

pytestmark = pytest.mark.lab

VLLM = "vllm-minimax-m25.service"
SGLANG = "sglang-kimi.service"
EMBED = "embed-server.service"
WORKER_MIB = 96801
ALICE_MIB = 1024
BASELINE_WITHOUT_VLLM = [ALICE_MIB, 0, 0, 0, 0, 512, 512, 512]
OPTIONS = ExecOptions(term_timeout=2.0, verify_timeout=30.0, poll=0.25)


def gpudash(host, *args: str, timeout: float = 90) -> subprocess.CompletedProcess[str]:  # type: ignore[no-untyped-def]
    cp = subprocess.run(
        [sys.executable, "-m", "gpudash", *args,
         "--ssh-config", str(host.ssh_config_path), "--known-hosts", str(host.known_hosts_path)],
        capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL,
    )
    return cp


def snapshot_json(host, target: str | None = None) -> dict:  # type: ignore[no-untyped-def]
    cp = gpudash(host, "snapshot", target or host.alias, "--json")
    assert cp.returncode == 0, cp.stderr
    doc = json.loads(cp.stdout)
    [snap] = doc["hosts"]
    return snap


# --- (d) one command does the whole incident -------------------------------------------


def test_reclaim_cli_frees_every_gpu(lab_host) -> None:
    h = lab_host
    alice = alice_pid(h)
    main0 = int(h.unit_show(VLLM, ["MainPID"])["MainPID"])
    old = wait_host(lambda: len(w := workers(h)) == 8 and w, what="8 workers")
    assert all(u >= WORKER_MIB for u in h.gpu_used_mib())
    t0 = time.monotonic()
    cp = gpudash(h, "reclaim", h.alias, "--unit", "vllm-minimax-m25", "--yes",
                 "--timeout", "60", "--term-timeout", "3")
    took = time.monotonic() - t0
    assert cp.returncode == 0, cp.stdout + cp.stderr
    out = cp.stdout
    assert "confirmed" in out
    for g in range(8):
        line = next((ln for ln in out.splitlines() if ln.strip().startswith(f"GPU{g}: freed")),
                    None)
        assert line is not None and line.rstrip().endswith("ok"), out
    assert "NOT FREED" not in out
    # the plan named alice's kernel as left alone
    assert f"{alice} (alice" in cp.stderr  # in the plan, shown to the operator on stderr
    # the host agrees
    s = h.unit_show(VLLM, ["ActiveState", "UnitFileState"])
    assert s == {"ActiveState": "inactive", "UnitFileState": "disabled"}
    assert not h.alive(main0) and not any(h.alive(p) for p in old) and workers(h) == []
    assert h.gpu_used_mib() == BASELINE_WITHOUT_VLLM
    assert h.alive(alice)
    assert took < 45, f"reclaim took {took:.1f}s"


# --- (e) the worker that ignores SIGTERM is escalated to SIGKILL ----------------------


async def test_term_ignoring_worker_is_escalated(lab_host) -> None:
    h = lab_host
    alice = alice_pid(h)
    [worker] = wait_host(lambda: h.pids_of(r"embed-worker hold"), what="embed worker")
    used0 = h.gpu_used_mib()
    source = open_source(h.alias, interval=0.3, ssh_config=h.ssh_config_path,
                         known_hosts=h.known_hosts_path)
    try:
        snap = await source.control.sample()
        plan = plan_action(snap, ActionKind.TERMINATE, pid=worker)
        assert [t.pid for t in plan.targets] == [worker]
        assert plan.expected_free_mib == {5: 512}
        t0 = time.monotonic()
        report = await execute(plan, source.control, OPTIONS, lambda p: None)
        took = time.monotonic() - t0
    finally:
        await source.close()
    assert report.escalated == [worker], report.describe()
    assert [(p, s) for p, s, _o in report.signals] == [(worker, "SIGTERM"), (worker, "SIGKILL")]
    assert report.confirmed, report.describe()
    assert any("escalated to SIGKILL" in ln for ln in report.describe())
    assert took >= OPTIONS.term_timeout  # it really waited for TERM first
    assert not h.alive(worker) or h.pids_of(r"embed-worker hold") != [worker]
    # GPU 5 lost exactly the worker's 512 MiB; nothing else moved
    used = h.gpu_used_mib()
    assert used[5] == used0[5] - 512
    assert [u for i, u in enumerate(used) if i != 5] == [u for i, u in enumerate(used0) if i != 5]
    assert h.alive(alice)


# --- (i) the SGLang schedulers escaped the tree, but not the cgroup -------------------


def test_sglang_schedulers_found_by_cgroup_and_reclaimed(lab_host) -> None:
    h = lab_host
    alice = alice_pid(h)
    main = int(h.unit_show(SGLANG, ["MainPID"])["MainPID"])
    scheds = wait_host(lambda: len(p := h.pids_of(r"sglang::scheduler_DP")) == 2 and p,
                       what="2 schedulers")
    used0 = h.gpu_used_mib()
    snap = snapshot_json(h)
    procs = {p["pid"]: p for p in snap["processes"]}
    for pid in scheds:
        p = procs[pid]
        assert p["ppid"] == 1 and p["ppid"] != main, p
        assert p["unit"] == SGLANG and p["cgroup"].endswith(f"/system.slice/{SGLANG}"), p
    assert sorted(next(iter(procs[p]["gpu_memory_mib"])) for p in scheds) == ["6", "7"]
    cp = gpudash(h, "reclaim", h.alias, "--unit", "sglang-kimi", "--yes", "--json",
                 "--timeout", "60", "--term-timeout", "3")
    assert cp.returncode == 0, cp.stdout + cp.stderr
    rec = json.loads(cp.stdout)
    assert rec["confirmed"] is True and rec["action"] == "reclaim"
    assert set(scheds) <= {t["pid"] for t in rec["targets"]}
    assert sorted(g["index"] for g in rec["gpus"]) == [6, 7]
    assert all(g["confirmed"] for g in rec["gpus"])
    assert not any(h.alive(p) for p in scheds)
    assert h.pids_of(r"sglang::scheduler_DP") == []
    used = h.gpu_used_mib()
    assert used[6] == used0[6] - 512 and used[7] == used0[7] - 512
    assert used[:6] == used0[:6]  # vLLM, embed and alice untouched
    assert len(workers(h)) == 8
    assert h.unit_show(SGLANG, ["ActiveState"])["ActiveState"] == "inactive"
    assert h.alive(alice)


# --- (g) non-root: no actions without sudo, all of them with --sudo + NOPASSWD ---------


def test_operator_needs_sudo_and_works_with_it(lab_host) -> None:
    h = lab_host
    alice = alice_pid(h)
    target = f"operator@{h.alias}"
    snap = snapshot_json(h, target)
    assert snap["can_act"] is False
    # the snapshot still sees everything the operator needs to decide
    assert any(u["name"] == VLLM for u in snap["units"])
    assert sum(1 for p in snap["processes"] if p["unit"] == VLLM and p["gpu_memory_mib"]) == 8
    # without --sudo: refused with the reason, nothing done
    cp = gpudash(h, "reclaim", target, "--unit", "vllm-minimax-m25", "--yes",
                 "--timeout", "30", "--term-timeout", "2")
    assert cp.returncode == 2, cp.stdout + cp.stderr
    assert "not root" in cp.stderr and "--sudo" in cp.stderr, cp.stderr
    # --sudo without a NOPASSWD rule: the collector itself cannot start under `sudo -n`;
    # refused (2) or unreachable (3), saying why, nothing done
    cp = gpudash(h, "reclaim", target, "--sudo", "--unit", "vllm-minimax-m25", "--yes",
                 "--timeout", "30", "--term-timeout", "2")
    assert cp.returncode in (2, 3), cp.stdout + cp.stderr
    assert "sudo" in cp.stderr and "password" in cp.stderr, cp.stderr
    s = h.unit_show(VLLM, ["ActiveState", "UnitFileState"])
    assert s == {"ActiveState": "active", "UnitFileState": "enabled"}
    assert len(workers(h)) == 8
    # with the rule: the same command frees everything
    h.grant_sudo()
    cp = gpudash(h, "reclaim", target, "--sudo", "--unit", "vllm-minimax-m25", "--yes",
                 "--timeout", "60", "--term-timeout", "3")
    assert cp.returncode == 0, cp.stdout + cp.stderr
    s = h.unit_show(VLLM, ["ActiveState", "UnitFileState"])
    assert s == {"ActiveState": "inactive", "UnitFileState": "disabled"}
    assert workers(h) == []
    assert h.gpu_used_mib() == BASELINE_WITHOUT_VLLM
    assert h.alive(alice)
