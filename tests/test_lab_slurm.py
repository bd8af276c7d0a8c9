"""A real Slurm 22.05 in a lab host (tests/lab/slurm.py): what gpudash's host side reads of
its jobs (gpudash/collector/host/slurm.py) on the real thing. One boot for the module.

(a) a batch job holding stand-in memory on the two GPUs Slurm gave it: every process of
    the job is the job's by its cgroup, and the reader, run inside by the host's python3
    with no PATH, says alice, the partition, RUNNING and those two GPU indexes;
(b) a process alice starts over ssh during a job, on the job's GPU, is in no job's cgroup
    and outlives the job: the job COMPLETED, Slurm counts the GPU free, and the stand-in's
    nvidia-smi still lists the process's memory there.

Then gpudash itself on it, (a)-(e) as issue 31 lists them, and (f): the node drained with
a hostile reason by ``gpudash drain`` over ssh, proven by ``scontrol show node``, its
running job left to finish, then resumed and idle again.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from lab import slurm as slurmlab
from lab.probes import wait_host

from gpudash.collector.host.slurm import job_of_cgroup

pytestmark = pytest.mark.lab
labmod = slurmlab.labmod

MIB = 30000


def end_and_wait_freed(sh: Any, job: int) -> None:
    """Cancel ``job`` and wait until its processes are gone and its memory is back (the
    stand-in releases it about a second after the kill)."""
    sh.host.exec(["scancel", str(job)], check=False)
    wait_host(lambda: sh.job_state(job) in ("", "CANCELLED", "COMPLETED", "TIMEOUT"),
              timeout=30, what=f"job {job} to end")
    wait_host(lambda: not sh.pids_of_user("alice"), timeout=30,
              what=f"job {job}'s processes to be gone")
    wait_host(lambda: not any(sh.host.gpu_used_mib()), timeout=30,
              what="the stand-in GPUs' memory back")


@pytest.fixture
def clean(slurm_host: Any) -> Iterator[Any]:
    """The module's Slurm host, idle with every GPU empty before and after each test; a
    node a failed test left drained is resumed, so that one failure does not fail the
    module's next tests too."""
    assert not any(slurm_host.host.gpu_used_mib())
    # the epilog runs gpudash from this checkout inside the lab host: each lab host mounts
    # a /tmp of its own, so a checkout under /tmp is not there
    seen = slurm_host.host.exec(["test", "-x", sys.executable], check=False).returncode == 0
    assert seen, f"{sys.executable} is not visible inside the lab host (a checkout under /tmp?)"
    yield slurm_host
    for pid in slurm_host.pids_of_user("alice"):  # what a test left: its escapee, ...
        slurm_host.host.exec(["kill", "-9", str(pid)], check=False)
    wait_host(lambda: not any(slurm_host.host.gpu_used_mib()), timeout=30,
              what="the stand-in GPUs' memory back after the test")
    if "DRAIN" in slurm_host.node_state():
        slurm_host.scontrol("update", f"nodename={slurm_host.node}", "state=resume",
                            check=False)
    slurm_host.wait_idle(timeout=30)


def test_a_batch_jobs_processes_and_facts_name_the_job(clean: Any) -> None:
    sh = clean
    t0 = time.monotonic()
    job, holders = sh.submit_train(gpus=2, mib=MIB)
    try:
        gpus = sorted(holders.values())
        assert len(set(gpus)) == 2 and all(0 <= g < slurmlab.GPUS for g in gpus)
        used = sh.host.gpu_used_mib()
        assert [used[g] for g in gpus] == [MIB, MIB]

        # every process of the job names it: its tasks (alice's) and its slurmstepd (root)
        pids = sh.pids_of_user("alice")
        stepd = sh.host.pids_of(rf"^slurmstepd: \[{job}\.batch\]")
        assert set(holders) <= set(pids) and len(stepd) == 1
        for pid in [*pids, *stepd]:
            text = sh.cgroup_text(pid)
            if not text and pid not in holders and pid not in stepd:
                continue  # a passing child of the batch script (its sleep), gone since pgrep
            owner = job_of_cgroup(text)
            assert owner is not None, f"pid {pid}: {text!r}"
            assert (owner["job_id"], owner["step"], owner["layout"]) == (job, "batch", "v2")
            assert owner["stepd"] is (pid in stepd)

        facts = sh.read_facts()
        assert facts["jobs"]["error"] is None and facts["node"]["error"] is None
        [mine] = [j for j in facts["jobs"]["jobs"] if j["job_id"] == job]
        assert (mine["user"], mine["uid"], mine["partition"], mine["state"]) == (
            "alice", 1001, slurmlab.PARTITION, "RUNNING")
        assert mine["name"] == "train" and mine["nodes"] == sh.node
        assert mine["gpus"] == gpus  # the indexes Slurm gave it: where its memory is
        node = facts["node"]["node"]
        assert node["node"] == sh.node and node["drain"] is False and node["reason"] is None
        print(f"job {job} holding on GPUs {gpus}, checked in {time.monotonic() - t0:.1f}s")
    finally:
        end_and_wait_freed(sh, job)


def test_a_process_started_over_ssh_during_a_job_outlives_it(clean: Any) -> None:
    sh = clean
    job, holders = sh.submit_train(gpus=1, mib=MIB)
    [gpu] = holders.values()
    try:
        escapee = sh.escape_over_ssh(gpu, 20000)
        assert job_of_cgroup(sh.cgroup_text(escapee)) is None  # a login session's, no job's
        assert sh.compute_apps()[escapee] == gpu

        sh.finish(job)  # the batch script returns: Slurm ends the rest of the job
        assert sh.wait_job(job, "COMPLETED", timeout=30) == "COMPLETED"
        wait_host(lambda: not set(holders) & set(sh.compute_apps()), timeout=30,
                  what=f"job {job}'s holders gone")
        wait_host(lambda: sh.host.gpu_used_mib()[gpu] == 20000, timeout=30,
                  what=f"GPU {gpu} down to the escapee's memory")

        # the job is over and its GPU free in Slurm's eyes, the memory is still held
        assert sh.host.alive(escapee)
        assert sh.compute_apps() == {escapee: gpu}
        assert job_of_cgroup(sh.cgroup_text(escapee)) is None
        facts = sh.read_facts()
        assert facts["jobs"]["error"] is None
        states = {j["job_id"]: j["state"] for j in facts["jobs"]["jobs"]}
        assert states[job] == "COMPLETED"
        assert not [j for j in facts["jobs"]["jobs"]
                    if j["state"] in ("RUNNING", "COMPLETING") and gpu in (j["gpus"] or [])]
        sh.wait_idle(timeout=30)  # the node is idle: the next job may get GPU `gpu`
    finally:
        if sh.job_state(job) == "RUNNING":  # the test failed before the job ended
            end_and_wait_freed(sh, job)


# --- gpudash itself on the real Slurm: the snapshot over ssh, the epilog under slurmd ------

EPILOG_LOG = "/var/log/slurm/gpudash-epilog.{job}.log"
AUDIT = "/root/.local/state/gpudash/audit.jsonl"


def gpudash(sh: Any, *args: str, timeout: float = 90) -> subprocess.CompletedProcess[str]:
    h = sh.host
    return subprocess.run(
        [sys.executable, "-m", "gpudash", *args, "--ssh-config", str(h.ssh_config_path),
         "--known-hosts", str(h.known_hosts_path)],
        capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)


def snapshot(sh: Any) -> dict[str, Any]:
    cp = gpudash(sh, "snapshot", sh.host.alias, "--json")
    assert cp.returncode == 0, cp.stderr
    [host] = json.loads(cp.stdout)["hosts"]
    return dict(host)


def gpudash_epilog(*extra: str) -> str:
    """The README's Epilog= (gpudash from this checkout's environment, which the lab host
    sees through its overlay of /); the stand-in driver's variables are below the layer
    tested. What it said and its exit go to a log per job."""
    log = EPILOG_LOG.format(job="$SLURM_JOB_ID")
    env = " ".join(f"{k}={v}" for k, v in labmod.FAKEGPU_ENV.items())
    return (f"#!/bin/sh\nexport {env}\n"
            f"{sys.executable} -m gpudash reap --slurm-epilog --timeout 15 --term-timeout 2 "
            f"{' '.join(extra)} >>{log} 2>&1\nrc=$?\necho \"exit $rc\" >>{log}\nexit $rc\n")


def epilog_said(sh: Any, job: int, timeout: float = 60) -> str:
    """The gpudash epilog's log of ``job``, once it has exited."""
    path = EPILOG_LOG.format(job=job)

    def done() -> str | None:
        cp = sh.host.exec(["cat", path], check=False)
        return cp.stdout if cp.returncode == 0 and "\nexit " in "\n" + cp.stdout else None

    said: str = wait_host(done, timeout=timeout, what=f"job {job}'s gpudash epilog")
    return said


def owner_of(doc: dict[str, Any], pid: int) -> dict[str, Any]:
    [p] = [p for p in doc["processes"] if p["pid"] == pid]
    [o] = [o for o in doc["owners"] if o["key"] == p["owner"]]
    return {"process": p, **o}


@contextlib.contextmanager
def frozen(sh: Any, pid: int) -> Iterator[None]:
    """``pid`` (of the lab host) frozen in this machine's cgroup v1 freezer: in D state,
    SIGKILL pending until thawed: the stand-in for a process stuck in the kernel."""
    base = Path("/sys/fs/cgroup/freezer")
    if not (base / "freezer.state").exists() and not (base / "tasks").exists():
        pytest.skip("no cgroup v1 freezer on this machine (the D-state stand-in)")
    tag = sh.host.cgroup_tag  # the lab host's cgroups, as this machine names them
    [mine] = [int(d.name) for d in Path("/proc").iterdir() if d.name.isdigit()
              and _ns_pid(d) == pid and tag in _cgroups_of(d)]
    group = base / f"gpudash-dstate-{mine}"
    group.mkdir()
    try:
        (group / "tasks").write_text(str(mine))
        (group / "freezer.state").write_text("FROZEN")
        wait_host(lambda: sh.host.proc(pid) and sh.host.proc(pid)["stat"].startswith("D"),
                  timeout=10, what=f"pid {pid} frozen (D)")
        yield
    finally:
        (group / "freezer.state").write_text("THAWED")
        for left in (group / "tasks").read_text().split():
            # thawed, a process whose SIGKILL was pending exits: it may be gone by now
            with contextlib.suppress(ProcessLookupError):
                (base / "tasks").write_text(left)
        group.rmdir()


def _ns_pid(d: Path) -> int | None:
    try:
        for line in (d / "status").read_text().splitlines():
            if line.startswith("NSpid:"):
                return int(line.split()[-1])
    except (OSError, ValueError):
        pass
    return None


def _cgroups_of(d: Path) -> str:
    try:
        return (d / "cgroup").read_text()
    except OSError:
        return ""


def test_gpudash_names_the_job_that_holds_each_gpu(clean: Any) -> None:
    """(a) a batch job holding memory on its two GPUs is attributed to it, nothing flagged."""
    sh = clean
    job, holders = sh.submit_train(gpus=2, mib=MIB)
    try:
        doc = snapshot(sh)
        for pid, gpu in holders.items():
            mine = owner_of(doc, pid)
            assert (mine["kind"], mine["key"]) == ("slurm job", f"slurm:{job}")
            assert mine["process"]["claim"] == f"slurm job:{job}"
            assert mine["process"]["gpu_memory_mib"] == {str(gpu): MIB}
        facts = mine["facts"]
        assert (facts["user"], facts["state"], facts["partition"]) == (
            "alice", "RUNNING", slurmlab.PARTITION)
        assert sorted(facts["gpus"]) == sorted(holders.values())
        flagged = [(p["pid"], p["flags"]) for p in doc["processes"] if p["flags"]]
        assert flagged == []
    finally:
        end_and_wait_freed(sh, job)


def test_an_escapee_strays_and_the_next_jobs_epilog_reaps_it_with_proof(clean: Any) -> None:
    """(b) started over ssh during job J on J's GPU, it outlives J: held by no job; once job
    M gets that GPU, on a GPU allocated to M; M's epilog reaps it, memory back, exit 0."""
    sh = clean
    sh.set_epilog(slurmlab.DEFAULT_EPILOG)
    job, holders = sh.submit_train(gpus=1, mib=MIB)
    [gpu] = holders.values()
    escapee = sh.escape_over_ssh(gpu, 20000)
    sh.finish(job)
    assert sh.wait_job(job, "COMPLETED", timeout=30) == "COMPLETED"
    wait_host(lambda: not set(holders) & set(sh.compute_apps()), timeout=30,
              what=f"job {job}'s holders gone")
    left = owner_of(snapshot(sh), escapee)
    assert "STRAY" in left["process"]["flags"]
    assert any(f"holds GPU {gpu}, which no running job has" in w for w in left["warnings"])

    sh.set_epilog(gpudash_epilog())
    nxt, theirs = sh.submit_train(gpus=slurmlab.GPUS, mib=MIB)  # every GPU: `gpu` too
    try:
        left = owner_of(snapshot(sh), escapee)
        assert any(f"holds GPU {gpu}, allocated to job {nxt}" in w for w in left["warnings"])
        assert not [p for p in theirs if "STRAY" in owner_of(snapshot(sh), p)["process"]["flags"]]
    finally:
        sh.finish(nxt)
    said = epilog_said(sh, nxt)
    assert said.rstrip().endswith("exit 0"), said
    assert not sh.host.alive(escapee)
    wait_host(lambda: not any(sh.host.gpu_used_mib()), timeout=30, what="every GPU empty")
    records = [json.loads(ln) for ln in sh.host.exec(["cat", AUDIT]).stdout.splitlines()]
    assert any(r.get("action") == "reap" and f"slurm job {nxt}" in json.dumps(r)
               for r in records), records[-3:]


def test_the_epilog_drains_the_node_when_the_memory_is_not_back(clean: Any) -> None:
    """(c) a leftover the epilog cannot free (frozen: D state, SIGKILL pending): the epilog
    drains the node with gpudash's reason and exits non-zero."""
    sh = clean
    sh.set_epilog(gpudash_epilog())
    job, holders = sh.submit_train(gpus=1, mib=MIB)
    [gpu] = holders.values()
    escapee = sh.escape_over_ssh(gpu, 20000)
    try:
        with frozen(sh, escapee):
            sh.finish(job)
            said = epilog_said(sh, job)
            assert said.rstrip().endswith("exit 1"), said
            assert f"drained {sh.node}: gpudash: job {job} left GPU memory" in said
            node = sh.scontrol("show", "node", "-o", sh.node).stdout
            assert "DRAIN" in sh.node_state(), node
            assert f"Reason=gpudash: job {job} left GPU memory" in node, node
            assert sh.host.alive(escapee)  # still there: the node keeps it from the next job
    finally:
        sh.host.exec(["kill", "-9", str(escapee)], check=False)
        wait_host(lambda: not sh.host.alive(escapee), timeout=30, what="the escapee gone")
        sh.scontrol("update", f"NodeName={sh.node}", "State=RESUME", check=False)


def test_a_running_jobs_processes_are_never_planned(clean: Any) -> None:
    """(d) not by a reap of that job, nor by the epilog of another job on the same node."""
    sh = clean
    sh.set_epilog(gpudash_epilog())
    running, mine = sh.submit_train(gpus=2, mib=MIB)
    other, theirs = sh.submit_train(gpus=1, mib=MIB)
    try:
        cp = gpudash(sh, "reap", sh.host.alias, "--job", str(running), "--yes")
        assert cp.returncode == 0 and "nothing to reap" in cp.stderr, cp.stderr
        sh.finish(other)
        said = epilog_said(sh, other)
        assert said.rstrip().endswith("exit 0") and "nothing to reap" in said, said
        assert sh.job_state(running) == "RUNNING"
        assert all(sh.host.alive(pid) for pid in mine)
        used = sh.host.gpu_used_mib()
        assert [used[g] for g in sorted(mine.values())] == [MIB, MIB]
    finally:
        end_and_wait_freed(sh, running)


async def test_scancel_from_the_dashboard_with_proof(clean: Any) -> None:
    """(e) the stop key on a job's row is `scancel JOB`, confirmed, run over ssh by the
    real dashboard, and proven: Slurm says CANCELLED, the job's memory is back."""
    from test_e2e_app import make_app, open_lab, run_confirmed, select, wait_for

    sh = clean
    job, holders = sh.submit_train(gpus=2, mib=MIB)
    source = open_lab(sh.host)
    app = make_app([source])
    try:
        async with app.run_test(size=(160, 50)) as pilot:
            await select(pilot, app, f"u:slurm:{job}")
            await run_confirmed(pilot, app, "s", within=150)
            report = app.last_report
            assert report is not None and report.confirmed, report and report.summary
            assert report.plan.title.startswith(f"Cancel job (scancel): Slurm job {job}")
            assert [c.argv for c in report.commands] == [("scancel", str(job))]
            freed = {g.index: g.freed_mib for g in report.gpus}
            assert sorted(freed) == sorted(holders.values())
            assert all((mib or 0) >= MIB for mib in freed.values()), freed
            await wait_for(pilot, lambda: app.view.snapshot is not None
                           and not [p for p in app.view.snapshot.processes
                                    if p.claim == f"slurm job:{job}"], within=30,
                           what="the job's processes gone from the dashboard")
    finally:
        await source.close()
    assert sh.wait_job(job, "CANCELLED", timeout=30) == "CANCELLED"
    assert not any(sh.host.gpu_used_mib())


# a reason as an operator may type it: quotes (a trailing one too: scontrol takes one off),
# a shell's ; $() `` and ', Rich markup, a newline
HOSTILE = 'ECC "GPU 3"; $(touch /tmp/pwned) `touch /tmp/pwned2` [bold red]x[/] it\'s\nnext "q"'


def test_drain_with_a_hostile_reason_is_proven_by_scontrol_then_resume(clean: Any) -> None:
    """(f) gpudash drain over ssh: the reason reaches Slurm as one literal argument (the
    newline made a space), read back from scontrol show node; the running job is left to
    finish (DRAINING); resume: no DRAIN any more, the node idle once the job ended."""
    sh = clean
    job, holders = sh.submit_train(gpus=1, mib=MIB)
    try:
        dry = gpudash(sh, "drain", sh.host.alias, "--reason", HOSTILE, "--dry-run")
        assert dry.returncode == 0, dry.stderr
        assert f"job {job} (alice's train, RUNNING" in dry.stdout, dry.stdout
        assert "DRAIN" not in sh.node_state()  # a dry run sends nothing

        cp = gpudash(sh, "drain", sh.host.alias, "--reason", HOSTILE, "--yes", "--json")
        assert cp.returncode == 0, cp.stderr
        doc = json.loads(cp.stdout)
        assert doc["verdict"] == "confirmed" and doc["action"] == "drain", doc["summary"]
        [command] = doc["commands"]
        sent = command["argv"][-1]
        assert sent.startswith('Reason="gpudash: ') and sent.endswith('"')
        reason = sent[len('Reason="'):-1]
        assert reason.endswith(" drained: " + HOSTILE.replace("\n", " "))
        node = sh.scontrol("show", "node", "-o", sh.node).stdout
        assert f" Reason={reason} [" in node, node  # every character as typed, one line
        assert "DRAIN" in sh.node_state() and sh.job_state(job) == "RUNNING"
        assert all(sh.host.alive(pid) for pid in holders)  # a drain ends no job
        for pwned in ("/tmp/pwned", "/tmp/pwned2"):
            assert sh.host.exec(["test", "-e", pwned], check=False).returncode != 0
        assert f"scontrol show node {sh.node}: " in doc["summary"]
        assert "+DRAIN" in doc["summary"], doc["summary"]

        again = gpudash(sh, "drain", sh.host.alias, "--reason", "twice", "--yes")
        assert again.returncode == 2 and "drained already" in again.stderr, again.stderr
    finally:
        end_and_wait_freed(sh, job)
    cp = gpudash(sh, "resume", sh.host.alias, "--yes", "--json")
    assert cp.returncode == 0, cp.stderr
    doc = json.loads(cp.stdout)
    assert doc["verdict"] == "confirmed", doc["summary"]
    assert [c["argv"] for c in doc["commands"]] == [
        ["scontrol", "update", f"NodeName={sh.node}", "State=RESUME"]]
    assert "DRAIN" not in sh.node_state()
    sh.wait_idle(timeout=30)
