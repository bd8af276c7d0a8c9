"""A signal picked for one process: planned pinned, sent only to that process, and what
the process did with it told from the host's own samples."""

from __future__ import annotations

import signal

import pytest
from support import stepped

from gpudash.demo.host import NOTEBOOK_MIB, DemoHost
from gpudash.domain.clock import SteppedClock
from gpudash.domain.model import HostSnapshot
from gpudash.engine import SPECS, ActionKind, ExecOptions, PlanError, Selection, execute, replan
from gpudash.engine.signals import PICKABLE
from gpudash.protocol.source import SignalOutcome

FAST = ExecOptions(term_timeout=3.0, verify_timeout=30.0, poll=0.5, settle=3,
                   respawn_watch=3.0)
NOTEBOOK = 90211
SPEC = SPECS[ActionKind.SIGNAL]


@pytest.fixture
def demo() -> DemoHost:
    return DemoHost(clock=SteppedClock(), release_delay=2.0)


def workers(s: HostSnapshot) -> list[int]:
    return [p.pid for p in s.processes if p.cmdline.startswith("VLLM::Worker_TP")]


def plan(s: HostSnapshot, pid: int, sig: int):  # type: ignore[no-untyped-def]
    return SPEC.plan(s, Selection(pid=pid, signal=sig))


async def test_hup_to_a_worker_is_planned_pinned_and_its_exit_proven(demo: DemoHost) -> None:
    s = await demo.sample()
    pid = workers(s)[3]
    p = plan(s, pid, signal.SIGHUP)
    text = "\n".join(p.describe())
    assert f"kill -HUP {pid}  (start {s.process(pid).start_ticks}" in text  # type: ignore[union-attr]
    assert "-KILL after" not in text  # a picked signal never escalates
    assert "Expected: delivered" in text and "comes back only if it exits" in text
    assert any("tensor-parallel" in n for n in p.notes)  # HUP ends a worker that has no handler
    report = await stepped(demo, execute(p, demo, FAST))
    assert report.signals == [(pid, "SIGHUP", SignalOutcome.SENT)]
    assert report.confirmed, report.summary
    assert report.summary.startswith(f"delivered: HUP to pid {pid}")
    assert "it exited" in report.summary and pid not in demo.processes
    assert [g.index for g in report.gpus] == [3] and report.gpus[0].confirmed


async def test_int_to_a_notebook_kernel_is_delivered_and_it_runs_on(demo: DemoHost) -> None:
    s = await demo.sample()
    report = await stepped(demo, execute(plan(s, NOTEBOOK, signal.SIGINT), demo, FAST))
    assert report.confirmed and report.signals == [(NOTEBOOK, "SIGINT", SignalOutcome.SENT)]
    assert "still runs (state S), holding 2.0 GiB" in report.summary, report.summary
    assert NOTEBOOK in demo.processes
    assert demo.processes[NOTEBOOK].gpu_memory_mib == {0: NOTEBOOK_MIB}
    assert report.gpus == []  # nothing was promised back, nothing is claimed


async def test_stop_pauses_and_cont_resumes(demo: DemoHost) -> None:
    s = await demo.sample()
    pid = workers(s)[1]
    stopped = plan(s, pid, signal.SIGSTOP)
    assert not any("tensor-parallel" in n or "respawn" in n for n in stopped.notes)
    report = await stepped(demo, execute(stopped, demo, FAST))
    assert report.confirmed and "paused (state T)" in report.summary, report.summary
    assert demo.processes[pid].state == "T"
    again = await stepped(demo, execute(plan(await demo.sample(), pid, signal.SIGCONT), demo, FAST))
    assert again.confirmed and "still runs (state S)" in again.summary, again.summary
    assert demo.processes[pid].state == "S"
    # the two are told apart wherever they are listed (history showed "signal pid N"
    # twice, issue 33 item 7): the subject names the signal
    assert (stopped.subject, again.plan.subject) == (f"SIGSTOP to pid {pid}",
                                                     f"SIGCONT to pid {pid}")


async def test_a_reused_pid_is_not_signalled(demo: DemoHost) -> None:
    s = await demo.sample()
    p = plan(s, workers(s)[2], signal.SIGUSR1)
    victim = demo.processes[p.targets[0].pid]
    victim.start_ticks += 1  # the pid now names a different process
    report = await stepped(demo, execute(p, demo, FAST))
    assert report.signals == [(victim.pid, "SIGUSR1", SignalOutcome.MISMATCH)]
    assert not report.confirmed and report.summary.startswith("NOT sent: USR1")
    assert victim.pid in demo.processes


async def test_a_signal_must_be_picked_and_be_one_of_the_list(demo: DemoHost) -> None:
    s = await demo.sample()
    pid = workers(s)[0]
    with pytest.raises(PlanError, match="pick a signal"):
        SPEC.plan(s, Selection(pid=pid))
    with pytest.raises(PlanError, match="not one gpudash sends"):
        plan(s, pid, signal.SIGSEGV)
    assert {p.short for p in PICKABLE} >= {"HUP", "INT", "USR1", "TERM", "KILL", "STOP"}


async def test_replanning_keeps_the_picked_signal(demo: DemoHost) -> None:
    s = await demo.sample()
    p = plan(s, NOTEBOOK, signal.SIGQUIT)
    fresh, changes = replan(p, await demo.sample())
    assert fresh.signals[0].sig == signal.SIGQUIT and changes == []
