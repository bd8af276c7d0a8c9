"""Tagged processes in one plan (issue 33, item 10): each pinned by pid and start time,
all still in the sample or nothing planned, the untagged left alone."""

from __future__ import annotations

import signal

import pytest

from gpudash.demo.host import MINIMAX, DemoHost
from gpudash.engine import SPECS_BY_NAME as ACTIONS
from gpudash.engine import PlanError, Selection


def workers() -> tuple[DemoHost, list[int]]:
    demo = DemoHost()
    snap = demo.snapshot()
    main = snap.unit(MINIMAX).main_pid  # type: ignore[union-attr]
    return demo, sorted(p.pid for p in snap.processes
                        if p.unit == MINIMAX and p.pid != main and p.holds_gpu_memory)


def test_a_plan_pins_each_tagged_process_and_leaves_the_rest() -> None:
    demo, pids = workers()
    snap = demo.snapshot()
    plan = ACTIONS["terminate"].plan(snap, Selection(pid=pids[5], pids=(pids[1], pids[0])))
    assert plan.subject == f"2 tagged processes (pid {pids[0]}, {pids[1]})"
    assert [(s.target.pid, s.target.start_ticks) for s in plan.steps] == [
        (pid, snap.process(pid).start_ticks) for pid in pids[:2]]  # type: ignore[union-attr]
    assert all(s.sig == signal.SIGTERM and s.escalate for s in plan.steps)
    assert pids[5] not in {s.target.pid for s in plan.steps}  # the cursor's row: not tagged
    assert {t.pid for t in plan.untouched} >= set(pids[2:])
    # one worker of a running tensor-parallel group: the plan says what it does
    assert any("tensor-parallel" in n for n in plan.notes), plan.notes
    assert sum(plan.expected_free_mib.values()) > 0


def test_a_tagged_process_gone_plans_nothing() -> None:
    demo, pids = workers()
    snap = demo.snapshot()
    with pytest.raises(PlanError, match="999999 is not in the latest sample"):
        ACTIONS["kill"].plan(snap, Selection(pids=(pids[0], 999999)))


def test_a_picked_signal_goes_to_each_tagged_process() -> None:
    demo, pids = workers()
    plan = ACTIONS["send_signal"].plan(demo.snapshot(), Selection(
        pids=tuple(pids[:3]), signal=int(signal.SIGSTOP)))
    assert [s.sig for s in plan.steps] == [signal.SIGSTOP] * 3
    assert plan.expected_free_mib == {} and "SIGSTOP" in plan.subject
