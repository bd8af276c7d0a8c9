"""A real Slurm 22.05 in a lab host (tests/lab/slurm.py): what gpudash's host side reads of
its jobs (gpudash/collector/host/slurm.py) on the real thing. One boot for the module.

(a) a batch job holding stand-in memory on the two GPUs Slurm gave it: every process of
    the job is the job's by its cgroup, and the reader, run inside by the host's python3
    with no PATH, says alice, the partition, RUNNING and those two GPU indexes;
(b) a process alice starts over ssh during a job, on the job's GPU, is in no job's cgroup
    and outlives the job: the job COMPLETED, Slurm counts the GPU free, and the stand-in's
    nvidia-smi still lists the process's memory there.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from lab import slurm as slurmlab
from lab.probes import wait_host

from gpudash.collector.host.slurm import job_of_cgroup

pytestmark = pytest.mark.lab

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
    """The module's Slurm host, idle with every GPU empty before and after each test."""
    assert not any(slurm_host.host.gpu_used_mib())
    yield slurm_host
    for pid in slurm_host.pids_of_user("alice"):  # what a test left: its escapee, ...
        slurm_host.host.exec(["kill", "-9", str(pid)], check=False)
    wait_host(lambda: not any(slurm_host.host.gpu_used_mib()), timeout=30,
              what="the stand-in GPUs' memory back after the test")
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
