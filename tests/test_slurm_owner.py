"""The Slurm job as an owner: its processes grouped under the job, what Slurm allocated
compared with what the driver sees (STRAY), an ended job's leftovers (ORPHAN). Pure: the
snapshots are as the wire decodes them (tests/test_lab_slurm.py has the real Slurm)."""

from __future__ import annotations

from typing import Any

import pytest

from gpudash.domain.model import Fact, HostSnapshot, Process
from gpudash.domain.owners import OwnerKind, OwnerRef, owners
from gpudash.domain.owners.slurm import NO_JOB, OTHERS, OUTSIDE
from gpudash.domain.triage import Flag, triage
from gpudash.engine import SPECS, ActionKind, PlanError, Selection

JOB = "slurm job"
NOW = 1_800_000_000.0


def job(state: str = "RUNNING", gpus: tuple[int, ...] | None = (0, 1), **more: Fact
        ) -> dict[str, Fact]:
    facts: dict[str, Fact] = {"user": "alice", "uid": 1001, "name": "train", "state": state,
                              "partition": "gpu", **more}
    if gpus is not None:
        facts["gpus"] = gpus
    return facts


def node(**jobs: dict[str, Fact]) -> dict[str, Any]:
    return {JOB: {"": {"node": "slurmlab1", "node_state": "MIXED"}, **jobs}}


def proc(pid: int, gpus: dict[int, int | None], job_id: str | None = None,
         user: str = "alice", unit: str = "slurmlab1_slurmstepd.scope") -> Process:
    return Process(pid=pid, ppid=1, user=user, name="python", cmdline="python train.py",
                   unit=unit, gpu_memory_mib=gpus,
                   claim=None if job_id is None else f"{JOB}:{job_id}")


def snap(*procs: Process, owners: dict[str, Any] | None = None) -> HostSnapshot:
    return HostSnapshot("slurmlab1", NOW, processes=procs,
                        owners=owners if owners is not None else {})


def test_a_jobs_processes_on_its_gpus_are_its_own_and_nothing_is_flagged() -> None:
    result = triage(snap(proc(10, {0: 4000}, "7"), proc(11, {1: 4000}, "7"),
                         owners=node(**{"7": job()})))
    (group,) = result.groups
    assert (group.kind, group.key) == (OwnerKind.SLURM_JOB, "slurm:7")
    assert group.flags == frozenset() and group.warnings == ()
    assert group.owner is not None
    assert group.owner.describe() == "Slurm job 7 (train, alice's)"
    rows = dict(group.owner.rules.rows(group.owner))
    assert rows["GPUs"] == "0,1" and rows["State"] == "RUNNING" and rows["User"] == "alice"
    assert group.owner.selector == OwnerRef(JOB, "7")  # stop: scancel 7


def test_memory_on_a_gpu_no_running_job_has_strays_and_names_the_likely_job() -> None:
    """An ssh login during job 7 kept GPU 1 after the job ended (no pam_slurm_adopt)."""
    left = proc(20, {1: 3000}, user="alice", unit="session-3.scope")
    result = triage(snap(left, owners=node(
        **{"7": job("COMPLETED", end_time=int(NOW) - 125)})))
    stray = result.strays[20]
    assert stray.reason == NO_JOB
    assert "holds GPU 1, which no running job has" in stray.why
    assert "most likely left by job 7 (alice's, ended 2 min 5 s ago)" in stray.why
    assert Flag.STRAY in result.flags[20]


def test_memory_on_another_jobs_gpu_strays_whoever_owns_it() -> None:
    left = proc(21, {1: 3000}, user="alice", unit="session-3.scope")
    mine = proc(22, {2: 3000}, "8", user="bob")  # job 8 has GPUs 0, 1; its process holds GPU 2
    result = triage(snap(left, mine, owners=node(
        **{"8": job(gpus=(0, 1), user="bob")})))
    assert result.strays[21].reason == OTHERS
    assert "allocated to job 8" in result.strays[21].why
    assert result.strays[22].reason == OUTSIDE
    assert "GPU 2, which Slurm did not allocate to it" in result.strays[22].why


def test_an_ended_jobs_leftovers_are_orphans_and_a_completing_job_says_so() -> None:
    result = triage(snap(proc(30, {0: 5000}, "9"), owners=node(
        **{"9": job("COMPLETING")})))
    (group,) = result.groups
    assert Flag.ORPHAN in result.flags[30] and Flag.STRAY not in result.flags[30]
    assert result.orphan_why(30) is not None
    assert "left behind: job 9 is COMPLETING" in (result.orphan_why(30) or "")
    assert any("completing" in w for w in group.warnings)
    gone = triage(snap(proc(31, {0: 5000}, "10"), owners=node()))
    assert "job 10 is no longer known to Slurm" in (gone.orphan_why(31) or "")


@pytest.mark.parametrize("owners", [
    {},  # not a Slurm node: no scheduler, nothing is stray
    {JOB: {"": {"node": "n1", "error": "slurmctld did not answer"}}},  # cannot tell
])
def test_without_slurms_word_nothing_strays(owners: dict[str, Any]) -> None:
    result = triage(snap(proc(40, {0: 1000}, user="bob", unit="session-4.scope"),
                         owners=owners))
    assert result.strays == {} and Flag.STRAY not in result.flags[40]


def test_a_job_whose_gpus_slurm_did_not_say_is_not_called_outside_them() -> None:
    result = triage(snap(proc(50, {3: 1000}, "11"), owners=node(**{"11": job(gpus=None)})))
    assert result.strays == {}


def _epilog_host() -> HostSnapshot:
    """Job 7 (GPUs 0, 1) is completing: its own process 30 is left on GPU 0, an ssh login
    during it (31) holds GPU 1; job 8 runs on GPU 2 (32, its own)."""
    return snap(
        Process(pid=30, ppid=1, start_ticks=300, user="alice", name="python",
                unit="n_slurmstepd.scope", gpu_memory_mib={0: 5000}, claim=f"{JOB}:7"),
        Process(pid=31, ppid=1, start_ticks=310, user="alice", name="python",
                unit="session-3.scope", gpu_memory_mib={1: 3000}),
        Process(pid=32, ppid=1, start_ticks=320, user="bob", name="python",
                unit="n_slurmstepd.scope", gpu_memory_mib={2: 7000}, claim=f"{JOB}:8"),
        owners=node(**{"7": job("COMPLETING", gpus=None),
                       "8": job(gpus=(2,), user="bob")}))


def test_an_epilog_reaps_its_jobs_leftovers_and_never_a_running_jobs() -> None:
    reap = SPECS[ActionKind.REAP]
    plan = reap.plan(_epilog_host(), Selection(owner=OwnerRef(JOB, "7"), gpus=(0, 1)))
    assert sorted(t.pid for t in plan.targets) == [30, 31]
    assert plan.expected_free_mib == {0: 5000, 1: 3000}
    assert any("holds GPU 1 of job 7 outside any running job" in n for n in plan.notes)
    # the site's rule may be to report what holds the GPUs outside any job, not signal it
    only = reap.plan(_epilog_host(), Selection(owner=OwnerRef(JOB, "7"), gpus=(0, 1),
                                                strays=False))
    assert [t.pid for t in only.targets] == [30]
    assert [n for n in only.notes if n.startswith("left alone (reported only)")] == [
        "left alone (reported only): python 31 (alice) holds GPU 1, which no running job "
        "has: escaped from a job's cgroup or started outside any job"]
    # job 8's epilog would signal nothing of job 8 while it runs, nor of job 7's GPUs
    with pytest.raises(PlanError, match="leftovers of slurm job 8 hold"):
        reap.plan(_epilog_host(), Selection(owner=OwnerRef(JOB, "8"), gpus=(2,)))


def test_another_users_process_in_a_cgroup_named_like_the_jobs_is_not_the_jobs() -> None:
    """A job is alice's: bob's process claiming it (a cgroup path made to end like the
    job's) is not grouped under it, nor its root-run slurmstepd turned away."""
    bobs = proc(60, {0: 1000}, "7", user="bob")
    stepd = proc(61, {}, "7", user="root")
    result = triage(snap(bobs, stepd, owners=node(**{"7": job()})))
    found = owners(result.snapshot)
    assert found[60].key == "slurmlab1_slurmstepd.scope"  # its unit's, as any process's
    assert found[61].key == "slurm:7"


def test_a_drained_node_is_said_on_its_jobs_with_the_way_back() -> None:
    """slurmd drains a node whose job's processes outlive their kill ("Kill task
    failed"): nothing said it on the screen; the job's panel names the state, the
    reason and the command that resumes the node once it is clean."""
    drained = {JOB: {"": {"node": "slurmlab1", "node_state": "MIXED+DRAIN", "drain": True,
                          "reason": "Kill task failed"}, "7": job("COMPLETING")}}
    (group,) = triage(snap(proc(10, {0: 4000}, "7"), owners=drained)).groups
    assert group.owner is not None
    rows = dict(group.owner.rules.rows(group.owner))
    assert rows["Node"] == "slurmlab1 MIXED+DRAIN Kill task failed"
    said = " ".join(group.warnings)
    assert "slurmlab1 is drained (Kill task failed)" in said
    assert "scontrol update nodename=slurmlab1 state=resume" in said
    (idle,) = triage(snap(proc(10, {0: 4000}, "7"), owners=node(**{"7": job()}))).groups
    assert idle.owner is not None and "Node" not in dict(idle.owner.rules.rows(idle.owner))
