"""Cancelling a Slurm job from gpudash: the stop action on a job is its kind's own command
(``scancel JOBID``), planned, confirmed, run and proven like any stop: the job's memory
back. On the demo's Slurm node (its slurmd ends the job's processes); the real Slurm's in
tests/test_lab_slurm.py."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from gpudash.demo.fleet import ScenarioHost
from gpudash.demo.slurm import LOADING_MIB
from gpudash.domain.clock import SteppedClock
from gpudash.domain.owners import OwnerRef
from gpudash.domain.triage import triage
from gpudash.engine import SPECS, ActionKind, ExecOptions, PlanError, Selection, execute, replan
from gpudash.engine.actions import selection_for
from gpudash.transport.commands import owner_argv

FAST = ExecOptions(term_timeout=3.0, verify_timeout=30.0, poll=0.5, settle=3)
BOBS = OwnerRef("slurm job", "4118")


async def stepped(clock: SteppedClock, work: Any) -> Any:
    task = asyncio.ensure_future(work)
    for _ in range(4000):
        if task.done():
            break
        await clock.advance(0.25)
        await asyncio.sleep(0)
    return task.result()


async def test_stop_on_a_job_is_scancel_and_its_memory_comes_back() -> None:
    clock = SteppedClock()
    host = ScenarioHost("demo-gpu07", "slurm", clock=clock)
    before = await host.sample()
    result = triage(before)
    sel = selection_for(result, "slurm:4118", None)
    assert sel == Selection(owner=BOBS)
    stop = SPECS[ActionKind.STOP]
    assert stop.precheck(result, sel) is None
    assert stop.title_for(sel) == "Cancel job (scancel)"
    plan = stop.plan(before, sel)
    assert plan.title == "Cancel job (scancel): Slurm job 4118 (llama-ft, bob's)"
    assert "scancel 4118" in "\n".join(plan.describe())
    assert dict(plan.expected_free_mib) == {g: LOADING_MIB for g in range(4)}
    report = await stepped(clock, execute(plan, host, FAST))
    assert report.confirmed, report.summary
    assert [c.argv for c in report.commands] == [("scancel", "4118")]
    after = await host.sample()
    assert after.facts("slurm job", "4118")["state"] == "CANCELLED"
    assert not [p for p in after.processes if p.claim == str(BOBS)]


async def test_an_ended_job_cannot_be_cancelled_and_says_what_to_do() -> None:
    host = ScenarioHost("demo-gpu07", "slurm", clock=SteppedClock())
    before = await host.sample()
    sel = Selection(owner=OwnerRef("slurm job", "4117"))  # alice's, COMPLETED: no process claims it
    with pytest.raises(PlanError, match="none of its processes"):
        SPECS[ActionKind.STOP].plan(before, sel)
    # the other actions on a job say who decides
    result = triage(before)
    why = SPECS[ActionKind.DISABLE].precheck(result, Selection(owner=BOBS))
    assert why is not None and "Slurm decides" in why


@pytest.mark.parametrize(("kind", "verb", "key"), [
    ("slurm job", "stop", "4118;reboot"), ("slurm job", "stop", "-1"),
    ("slurm job", "remove", "4118"), ("slurm job", "bogus", "4118"), ("cron", "stop", "1"),
])
def test_only_a_kinds_own_validated_command_is_built(kind: str, verb: str, key: str) -> None:
    assert owner_argv(kind, verb, key) is None
    assert owner_argv("slurm job", "stop", "4118_3") == ("scancel", "4118_3")


async def test_a_job_script_s_short_lived_children_do_not_make_the_confirm_ask_again() -> None:
    """A batch script that polls (``until …; do sleep 0.2; done``) has a ``sleep`` in the
    job most of the time, and none between two of them. The plan confirmed must not read
    as changed because a sample fell in between: scancel ends whatever the job runs, the
    memory expected back is the holders'. (Seen on the real Slurm: the dialog came back
    after ``y`` and the test waited for a report that never came.)"""
    import dataclasses

    host = ScenarioHost("demo-gpu07", "slurm", clock=SteppedClock())
    before = await host.sample()
    member = next(p for p in before.processes if p.claim == str(BOBS))
    sleep = dataclasses.replace(member, pid=member.pid + 5000, start_ticks=(member.start_ticks
                                or 0) + 7, name="sleep", cmdline="sleep 0.2",
                                gpu_memory_mib={}, device_gpus=())
    with_sleep = dataclasses.replace(before, processes=(*before.processes, sleep))
    stop = SPECS[ActionKind.STOP]
    plan = stop.plan(with_sleep, Selection(owner=BOBS))
    fresh, changes = replan(plan, before)
    assert changes == [], changes
    fresh, changes = replan(fresh, with_sleep)
    assert changes == [], changes
    # what does matter still reads as a change: the memory its holders keep
    holder = next(p for p in before.processes if p.claim == str(BOBS) and p.holds_gpu_memory)
    smaller = dataclasses.replace(holder, gpu_memory_mib={
        g: (m or 0) // 4 for g, m in holder.gpu_memory_mib.items()})
    less = dataclasses.replace(before, processes=tuple(
        smaller if p.pid == holder.pid else p for p in before.processes))
    _, changes = replan(plan, less)
    assert any("expected back" in c for c in changes), changes
