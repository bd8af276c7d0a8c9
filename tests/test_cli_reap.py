"""``gpudash reap`` as a cron job, a Slurm epilog or an alert's remediation runs it: real
subprocesses on the demo (its incident after ``kill -9`` and ``stop`` + ``disable``),
exit codes, JSON on stdout only, the audit."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time

import psutil
import pytest
from sshd.fixture import gpus, sshd_fakegpu, sshd_server  # noqa: F401
from test_cli import audit_records, gpudash, state

from gpudash.cli.contract import WORST_FIRST, Exit, worst


def test_dry_run_prints_the_plan_and_sends_nothing() -> None:
    r = gpudash("reap", "--demo", "--dry-run")
    assert r.returncode == 0, r.stderr
    # a dry run's plan is its result: stdout (issue 33, item 7: it was on stderr)
    assert "Reap orphans: 16 orphan(s)" in r.stdout and "--dry-run: nothing sent" in r.stderr
    assert "90211" in r.stdout.split("Left alone:")[1]  # alice's kernel is named, not taken
    assert audit_records() == []  # nothing planned to be sent: nothing audited
    j = gpudash("reap", "--demo", "--dry-run", "--json")
    doc = json.loads(j.stdout)
    (host,) = doc["hosts"]
    assert doc["exit"] == 0 and host["report"]["dry_run"] is True
    assert len(host["report"]["targets"]) == 16
    assert 90211 not in {t["pid"] for t in host["report"]["targets"]}


def test_reap_yes_frees_the_orphans_audits_and_exits_0() -> None:
    r = gpudash("reap", "--demo", "--yes", "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)  # stdout is one JSON document
    (host,) = doc["hosts"]
    report = host["report"]
    assert report["action"] == "reap" and all(g["confirmed"] for g in report["gpus"])
    assert {s["signal"] for s in report["signals"]} >= {"SIGTERM"}
    intent, outcome = audit_records()
    assert intent["action"] == outcome["action"] == "reap" and outcome["id"] == intent["id"]


def test_several_hosts_each_get_their_own_verdict_and_the_worst_is_the_exit() -> None:
    # the demo fleet: incident (kill -9 just done: orphans, and systemd about to respawn),
    # healthy (nothing to reap), unreachable, stopped (stop + disable: orphans)
    r = gpudash("reap", "--demo-hosts", "4", "--yes", "--json")
    doc = json.loads(r.stdout)
    by_host = {h["host"]: h for h in doc["hosts"]}
    assert list(by_host) == ["demo-gpu01", "demo-gpu02", "demo-gpu03", "demo-gpu04"]
    assert by_host["demo-gpu02"]["exit"] == 0 and by_host["demo-gpu02"]["report"] is None
    assert "no orphaned processes" in by_host["demo-gpu02"]["error"]
    assert by_host["demo-gpu03"]["exit"] == 3 and by_host["demo-gpu03"]["report"] is None
    stopped = by_host["demo-gpu04"]
    assert stopped["exit"] == 0 and all(g["confirmed"] for g in stopped["report"]["gpus"])
    # the respawn may come while it reaps: then the new workers are named, not taken
    incident = by_host["demo-gpu01"]
    assert incident["exit"] in (0, 1) and incident["report"]["action"] == "reap"
    if incident["exit"] == 1:
        assert all("new holder" in lo["reason"] for lo in incident["report"]["leftovers"])
    assert r.returncode == doc["exit"] == 3  # one host could not be reached


def test_nothing_to_reap_is_success_and_a_named_unit_narrows_it() -> None:
    r = gpudash("reap", "--demo", "--unit", "vllm-kimi-k25", "--yes")
    assert r.returncode == 0, r.stderr
    assert "nothing to reap" in r.stderr and audit_records() == []


def test_no_terminal_and_no_yes_asks_nobody_and_does_nothing() -> None:
    r = gpudash("reap", "--demo")
    assert r.returncode == 5 and "nothing done" in r.stderr
    assert audit_records() == []


def test_the_exit_code_of_several_hosts_is_the_worst() -> None:
    assert worst([0, 0]) == 0
    assert worst([0, 1, 3]) == 3 and worst([1, 2]) == 1 and worst([6, 3]) == 6
    assert worst([0, 7]) == 7 and worst([3, 7]) == 7  # a refusal is never a success
    assert worst([0, 99]) == 70  # a code gpudash does not have is a bug


def test_every_exit_code_has_a_rank() -> None:
    # seen: reap's own list lacked NOT_AUDITED, so a host refused for its audit read as 0
    assert sorted(WORST_FIRST) == sorted(Exit) and len(set(WORST_FIRST)) == len(WORST_FIRST)
    assert WORST_FIRST[-1] is Exit.OK


def test_reap_refused_for_its_audit_exits_7_and_sends_nothing() -> None:
    # the audit file a link to /dev/full: every write fails with ENOSPC, as on a full disk
    state().mkdir(parents=True, exist_ok=True)
    (state() / "audit-demo.jsonl").symlink_to("/dev/full")
    r = gpudash("reap", "--demo", "--yes", "--json")
    doc = json.loads(r.stdout)
    (host,) = doc["hosts"]
    assert host["exit"] == 7, r.stderr
    assert r.returncode == doc["exit"] == 7, r.stderr
    assert "nothing was sent" in r.stderr or "nothing sent" in r.stderr, r.stderr


@pytest.mark.ssh
def test_reap_over_ssh_frees_a_lost_servers_worker(sshd_server, gpus) -> None:  # type: ignore[no-untyped-def]
    """Over a real sshd: planning and acting share the host's connection (its event
    loop); a second loop made the reap fail with a lost link ("attached to a different
    loop") after planning."""
    # A VLLM::Worker whose parent (its engine, its API server) is gone: re-parented to PID 1
    fake = gpus.env["FAKEGPU_BIN"]
    subprocess.run(["setsid", "-f", "bash", "-c", f"exec -a VLLM::Worker {fake} hold --gpu 1 "
                    "--mib 3071 >/dev/null 2>&1"], env=gpus.env, check=True)
    deadline = time.monotonic() + 10
    while not (pids := worker_pids()) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert pids, "the worker did not start"
    try:
        r = gpudash("reap", sshd_server.target, "--known-hosts", str(sshd_server.known_hosts),
                    "--ssh-config", str(sshd_server.ssh_config), "--yes", "--json",
                    "--term-timeout", "2")
        assert r.returncode == 0, r.stderr[-2000:]
        (host,) = json.loads(r.stdout)["hosts"]
        assert [t["pid"] for t in host["report"]["targets"]] == pids
        assert all(g["confirmed"] for g in host["report"]["gpus"])
        assert worker_pids() == []
    finally:
        for pid in worker_pids():
            os.kill(pid, signal.SIGKILL)


def worker_pids() -> list[int]:
    """This test's worker (other VLLM::Workers may run here: the lab's real vLLM)."""
    return sorted(p.pid for p in psutil.process_iter(["cmdline"])
                  if (p.info["cmdline"] or [""])[0] == "VLLM::Worker"
                  and "3071" in (p.info["cmdline"] or []))
