"""The incident on the demo host, driven through the engine as the dashboard and CLI do."""

from __future__ import annotations

import signal
from dataclasses import replace

import pytest
from support import clock_of, stepped

from gpudash.demo.host import GPU_TOTAL_MIB, MINIMAX, MODEL_MIB, NOTEBOOK_MIB, DemoHost
from gpudash.domain.clock import SteppedClock
from gpudash.domain.model import HostSnapshot, Process
from gpudash.domain.triage import Flag, triage
from gpudash.engine import ActionKind, ExecOptions, PlanError, execute, plan_action, reverify
from gpudash.protocol.source import CommandResult, LinkLost, SignalOutcome

FAST = ExecOptions(term_timeout=3.0, verify_timeout=30.0, poll=0.5, settle=3)
NOTEBOOK = 90211


@pytest.fixture
def demo() -> DemoHost:
    return DemoHost(clock=SteppedClock(), release_delay=2.0)


def workers(s: HostSnapshot) -> list[int]:
    return [p.pid for p in s.processes if p.cmdline.startswith("VLLM::Worker_TP")]


async def kill_main(demo: DemoHost) -> tuple[HostSnapshot, HostSnapshot]:
    before = await demo.sample()
    u = before.unit(MINIMAX)
    assert u is not None and u.main_pid is not None
    main = before.process(u.main_pid)
    assert main is not None
    assert await demo.signal(main.pid, main.start_ticks, signal.SIGKILL) is SignalOutcome.SENT
    await clock_of(demo).advance(3.0)  # RestartSec=1, release delay 2
    return before, await demo.sample()


async def test_demo_starts_as_the_incident(demo: DemoHost) -> None:
    s = await demo.sample()
    assert len(s.gpus) == 8
    assert {g.name for g in s.gpus} == {"NVIDIA RTX PRO 6000 Blackwell"}
    assert {g.memory_total_mib for g in s.gpus} == {GPU_TOTAL_MIB}
    assert {g.memory_used_mib for g in s.gpus} == {MODEL_MIB}
    u = s.unit(MINIMAX)
    assert u is not None
    assert (u.restart, u.kill_mode, u.unit_file_state, u.active_state) == (
        "always", "process", "enabled", "active")
    assert len(workers(s)) == 8
    nb = s.process(NOTEBOOK)
    assert nb is not None and nb.user == "alice" and dict(nb.gpu_memory_mib) == {0: NOTEBOOK_MIB}


async def test_kill_9_main_respawns_and_orphans_old_workers(demo: DemoHost) -> None:
    before, after = await kill_main(demo)
    u0, u1 = before.unit(MINIMAX), after.unit(MINIMAX)
    assert u0 is not None and u1 is not None
    assert u1.n_restarts == 1 and u1.main_pid not in (None, u0.main_pid)
    assert len(workers(after)) == 16  # old and new sets side by side
    t = triage(after, before)
    old = set(workers(before))
    assert {p.pid for p in t.orphans()} == old
    assert all(after.process(pid).ppid == 1 for pid in old)  # type: ignore[union-attr]
    assert Flag.RESPAWNED in t.flags[u1.main_pid]
    # memory pressure: the new workers squeeze in beside the old ones
    assert all((g.memory_used_mib or 0) > MODEL_MIB for g in after.gpus)


async def test_stop_leaves_workers_under_pid_1_and_memory_held(demo: DemoHost) -> None:
    assert (await demo.systemctl("stop", MINIMAX)).ok
    await clock_of(demo).advance(5.0)
    s = await demo.sample()
    u = s.unit(MINIMAX)
    assert u is not None and u.active_state == "inactive" and u.main_pid is None
    ws = workers(s)
    assert len(ws) == 8 and all(s.process(p).ppid == 1 for p in ws)  # type: ignore[union-attr]
    assert {g.memory_used_mib for g in s.gpus} == {MODEL_MIB}
    assert len(triage(s).orphans()) == 8


async def test_memory_released_only_after_the_delay(demo: DemoHost) -> None:
    s = await demo.sample()
    w = s.process(workers(s)[3])
    assert w is not None
    await demo.signal(w.pid, w.start_ticks, signal.SIGKILL)
    mid = await demo.sample()
    assert mid.process(w.pid) is None
    assert mid.gpus[3].memory_used_mib == MODEL_MIB  # the driver has not let go yet
    await clock_of(demo).advance(2.5)
    assert (await demo.sample()).gpus[3].memory_used_mib == 0


async def test_plan_pins_identities_and_leaves_the_notebook_alone(demo: DemoHost) -> None:
    s = await demo.sample()
    plan = plan_action(s, ActionKind.RECLAIM, unit="vllm-minimax-m25")
    assert [st.verb for st in plan.steps[:2]] == ["stop", "disable"]
    pinned = {(t.pid, t.start_ticks) for t in plan.targets}
    assert pinned == {(p.pid, p.start_ticks) for p in s.processes if p.unit == MINIMAX}
    assert NOTEBOOK not in {t.pid for t in plan.targets}
    assert NOTEBOOK in {t.pid for t in plan.untouched}
    assert plan.expected_free_mib == {0: MODEL_MIB - NOTEBOOK_MIB, **{i: MODEL_MIB
                                                                       for i in range(1, 8)}}
    text = "\n".join(plan.describe())
    assert "systemctl stop vllm-minimax-m25.service" in text
    assert "Left alone: 90211 (alice, Jupyter kernel)" in text


async def test_reclaim_confirms_every_gpu_and_escalates_the_term_ignorer(demo: DemoHost) -> None:
    s = await demo.sample()
    tp5 = next(p for p in s.processes if p.cmdline == "VLLM::Worker_TP5")
    seen = []
    report = await stepped(demo, execute(plan_action(s, ActionKind.RECLAIM, unit=MINIMAX), demo,
                                         FAST, seen.append))
    assert report.confirmed, report.describe()
    assert [g.index for g in report.gpus] == list(range(8))
    assert all(g.confirmed for g in report.gpus)
    assert report.gpus[0].after_mib == NOTEBOOK_MIB and report.gpus[1].after_mib == 0
    assert report.escalated == [tp5.pid]
    assert (tp5.pid, "SIGKILL", SignalOutcome.SENT) in report.signals
    assert NOTEBOOK in demo.processes
    assert [c.argv for c in report.commands] == [("systemctl", "stop", MINIMAX),
                                                 ("systemctl", "disable", MINIMAX)]
    assert demo.units[MINIMAX].unit_file_state == "disabled"
    assert seen and seen[-1].phase == "done"
    assert any(p.phase == "verifying" for p in seen)


async def test_reap_after_respawn_and_stop_brings_gpus_to_baseline(demo: DemoHost) -> None:
    await kill_main(demo)
    s = await demo.sample()
    stop_disable = plan_action(s, ActionKind.STOP_DISABLE, unit=MINIMAX)
    stop = await stepped(demo, execute(stop_disable, demo, FAST))
    # KillMode=process: stop kills only the main; the plan said so and expected ~nothing.
    assert stop.plan.notes and "KillMode=process" in stop.plan.notes[0]
    s = await demo.sample()
    assert len(triage(s).orphans()) == 16
    reap = await stepped(demo, execute(plan_action(s, ActionKind.REAP), demo, FAST))
    assert reap.confirmed, reap.describe()
    final = await demo.sample()
    assert [g.memory_used_mib for g in final.gpus] == [NOTEBOOK_MIB] + [0] * 7
    assert NOTEBOOK in demo.processes


async def test_recycled_pid_is_not_signalled(demo: DemoHost) -> None:
    s = await demo.sample()
    plan = plan_action(s, ActionKind.KILL, pid=workers(s)[2])
    victim = demo.processes[plan.targets[0].pid]
    victim.start_ticks += 1  # the pid now names a different process
    report = await stepped(demo, execute(plan, demo, ExecOptions(verify_timeout=1.0, poll=0.5)))
    assert report.signals == [(victim.pid, "SIGKILL", SignalOutcome.MISMATCH)]
    assert victim.pid in demo.processes
    assert not report.confirmed
    assert any(lo.reason == "pid reused" and lo.pid == victim.pid for lo in report.leftovers)


async def test_d_state_holder_is_explained_when_memory_does_not_come_back(demo: DemoHost) -> None:
    s = await demo.sample()
    pid = workers(s)[4]
    demo.processes[pid].state = "D"
    plan = plan_action(await demo.sample(), ActionKind.KILL, pid=pid)
    report = await stepped(demo, execute(plan, demo, ExecOptions(verify_timeout=2.0, poll=0.5)))
    assert not report.confirmed
    assert [(lo.pid, lo.gpu, lo.reason.split(" ")[0]) for lo in report.leftovers] == [
        (pid, 4, "D")]
    assert "NOT confirmed" in report.summary


async def test_killing_the_main_pid_warns_and_reports_the_respawn(demo: DemoHost) -> None:
    s = await demo.sample()
    u = s.unit(MINIMAX)
    assert u is not None
    plan = plan_action(s, ActionKind.KILL, pid=u.main_pid)
    assert any("systemd will respawn it" in n for n in plan.notes)
    report = await stepped(demo, execute(plan, demo, FAST))
    assert not report.confirmed
    assert f"systemd respawned {MINIMAX}: new MainPID" in report.summary
    assert demo.units[MINIMAX].main_pid not in (None, u.main_pid)


async def test_read_only_and_bad_selection_refuse_to_plan() -> None:
    ro = DemoHost(read_only=True)
    with pytest.raises(PlanError, match="read-only"):
        plan_action(await ro.sample(), ActionKind.KILL, pid=NOTEBOOK)
    s = await DemoHost().sample()
    with pytest.raises(PlanError, match="not known"):
        plan_action(s, ActionKind.STOP, unit="nope")
    with pytest.raises(PlanError, match="not a system service"):
        plan_action(s, ActionKind.STOP, unit="session-4.scope")
    with pytest.raises(PlanError, match="no orphaned"):
        plan_action(s, ActionKind.REAP)
    with_init = replace(s, processes=(*s.processes, Process(pid=1, ppid=0, start_ticks=1)))
    with pytest.raises(PlanError, match="PID 1"):
        plan_action(with_init, ActionKind.KILL, pid=1)


class DroppingControl:
    """The demo, with a link that drops on the first signal."""

    def __init__(self, demo: DemoHost) -> None:
        self.demo = demo

    async def systemctl(self, verb: str, unit: str) -> CommandResult:
        return await self.demo.systemctl(verb, unit)

    async def signal(
        self, pid: int, start_ticks: int | None, sig: int, *, boot_id: str | None = None
    ) -> SignalOutcome:
        raise LinkLost("connection to demo lost")

    async def sample(self) -> HostSnapshot:
        return await self.demo.sample()

    async def sleep(self, seconds: float) -> None:
        await self.demo.sleep(seconds)

    def clock(self) -> float:
        return self.demo.clock()


async def test_link_lost_mid_action_is_reported_as_unknown(demo: DemoHost) -> None:
    s = await demo.sample()
    plan = plan_action(s, ActionKind.TERMINATE, pid=workers(s)[0])
    report = await stepped(demo, execute(plan, DroppingControl(demo), FAST))
    assert report.unknown and not report.confirmed
    assert "outcome unknown" in report.summary


async def test_reverify_after_link_loss_sends_nothing_and_reports_the_truth(
    demo: DemoHost,
) -> None:
    s = await demo.sample()
    pid = workers(s)[1]
    plan = plan_action(s, ActionKind.TERMINATE, pid=pid)
    lost = await stepped(demo, execute(plan, DroppingControl(demo), FAST))
    assert lost.unknown
    # The TERM never arrived (the link dropped first): re-verifying must say so, not send it.
    again = await stepped(demo, reverify(plan, demo, ExecOptions(verify_timeout=1.0, poll=0.5)))
    assert again.reverified and not again.unknown and not again.confirmed
    assert again.signals == [] and again.commands == []
    assert pid in demo.processes
    assert [(lo.pid, lo.reason) for lo in again.leftovers] == [(pid, "alive")]
    assert again.summary.startswith("re-verified after reconnecting: NOT confirmed")


async def test_reclaim_of_a_static_unit_is_confirmed_without_disabling(demo: DemoHost) -> None:
    demo.units[MINIMAX].unit_file_state = "static"  # no [Install] section: nothing to disable
    plan = plan_action(await demo.sample(), ActionKind.RECLAIM, unit=MINIMAX)
    report = await stepped(demo, execute(plan, demo, FAST))
    assert report.confirmed, report.describe()
    assert "after disable" not in report.summary


async def test_a_unit_still_enabled_after_disable_is_not_confirmed(demo: DemoHost) -> None:
    class DisableFails(DroppingControl):
        async def systemctl(self, verb: str, unit: str) -> CommandResult:
            if verb == "disable":
                return CommandResult(("systemctl", verb, unit), 0, "")  # says ok, did nothing
            return await self.demo.systemctl(verb, unit)

        async def signal(
            self, pid: int, start_ticks: int | None, sig: int, *, boot_id: str | None = None
        ) -> SignalOutcome:
            return await self.demo.signal(pid, start_ticks, sig, boot_id=boot_id)

    plan = plan_action(await demo.sample(), ActionKind.STOP_DISABLE, unit=MINIMAX)
    report = await stepped(demo, execute(plan, DisableFails(demo), FAST))
    assert not report.confirmed
    assert f"{MINIMAX} is still enabled after disable" in report.summary


async def test_memory_alone_is_not_proof_a_surviving_target_is_named(demo: DemoHost) -> None:
    # A holder whose per-process memory the driver cannot attribute (N/A) is stuck in D:
    # no GPU's numbers move, yet the action must not claim success.
    s = await demo.sample()
    pid = workers(s)[6]
    demo.processes[pid].state = "D"
    snap = await demo.sample()
    proc = snap.process(pid)
    assert proc is not None
    blind = replace(snap, processes=tuple(
        replace(p, gpu_memory_mib={6: None}) if p.pid == pid else p for p in snap.processes))
    plan = plan_action(blind, ActionKind.KILL, pid=pid)
    assert plan.expected_free_mib == {}
    report = await stepped(demo, execute(plan, demo, ExecOptions(verify_timeout=1.0, poll=0.5)))
    assert not report.confirmed
    assert [(lo.pid, lo.gpu, lo.reason.split()[0]) for lo in report.leftovers] == [(pid, None, "D")]
    assert "1 planned process(es) still alive" in report.summary


async def test_systemctl_without_an_answer_is_an_unknown_outcome_that_says_why(
    demo: DemoHost,
) -> None:
    class SlowStop(DroppingControl):
        async def systemctl(self, verb: str, unit: str) -> CommandResult:
            return CommandResult(("systemctl", verb, unit), None, "no answer within 150 s")

    plan = plan_action(await demo.sample(), ActionKind.STOP, unit=MINIMAX)
    report = await stepped(demo, execute(plan, SlowStop(demo), FAST))
    assert report.unknown and not report.confirmed
    assert report.summary == (f"systemctl stop {MINIMAX}: no answer within 150 s; "
                              "outcome unknown")


async def test_respawned_workers_with_only_a_context_compute_nothing(demo: DemoHost) -> None:
    # The demo gave the respawned incarnation's workers (612 MiB each, stuck on memory
    # the orphans hold) a serving worker's SM%: on the real incident they have no model.
    before, after = await kill_main(demo)
    old = set(workers(before))
    new = [p for p in after.processes if p.cmdline.startswith("VLLM::Worker_TP")
           and p.pid not in old]
    assert len(new) == 8 and all(p.total_gpu_memory_mib <= 612 for p in new)
    assert {p.sm_util_pct for p in new} == {0}
    assert {p.sm_util_pct for p in before.processes if p.pid in old} != {0}  # they served
