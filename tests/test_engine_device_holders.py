"""Memory kept alive through /dev/nvidia* by a process the driver does not list.

A compile or dataloader worker forked from a CUDA process inherits its device files; when
the parent dies the memory stays and NVML lists nobody (nvitop #134). The engine names
that process instead of "unknown holder", and reap / reclaim take it with the same PID
guard and proof as any other holder.
"""

from __future__ import annotations

from support import clock_of, stepped

from gpudash.demo.host import MINIMAX, MODEL_MIB, DemoHost, SimProcess
from gpudash.domain.clock import SteppedClock
from gpudash.domain.triage import Flag, triage
from gpudash.engine import ActionKind, ExecOptions, execute, plan_action

FAST = ExecOptions(term_timeout=2.0, verify_timeout=10.0, poll=0.5, settle=3)


def tp(demo: DemoHost, n: int) -> SimProcess:
    return next(p for p in demo.processes.values() if p.cmdline == f"VLLM::Worker_TP{n}")


def compile_worker(demo: DemoHost, parent: SimProcess) -> SimProcess:
    return demo.spawn(ppid=parent.pid, user="root", name="compile_worker",
                      cmdline="python -m torch._inductor.compile_worker", unit=parent.unit,
                      inherits_device=True)


async def test_a_forked_child_keeping_the_memory_is_named_not_unknown() -> None:
    demo = DemoHost(clock=SteppedClock(), release_delay=1.0)
    child = compile_worker(demo, tp(demo, 3))
    plan = plan_action(await demo.sample(), ActionKind.KILL, pid=tp(demo, 3).pid)
    report = await stepped(demo, execute(plan, demo, FAST))
    assert not report.confirmed
    snap = await demo.sample()
    assert snap.gpu(3).memory_used_mib == MODEL_MIB  # type: ignore[union-attr]
    held = snap.process(child.pid)
    assert held is not None and held.device_gpus == (3,) and held.gpu_memory_mib == {3: None}
    assert Flag.DEVICE_HOLDER in triage(snap).flags[child.pid]
    [lo] = [lo for lo in report.leftovers if lo.gpu == 3]
    assert (lo.pid, lo.reason) == (child.pid, "holds /dev/nvidia3")
    assert "unknown holder" not in "\n".join(report.describe())


async def test_reap_takes_the_device_holder_and_proves_the_memory_came_back() -> None:
    demo = DemoHost(clock=SteppedClock(), release_delay=1.0)
    child = compile_worker(demo, tp(demo, 3))
    await demo.systemctl("stop", MINIMAX)  # KillMode=process: the workers stay
    await demo.signal(tp(demo, 3).pid, tp(demo, 3).start_ticks, 9)  # TP3 dies, child keeps it
    await clock_of(demo).advance(2.0)
    snap = await demo.sample()
    assert child.pid in {p.pid for p in triage(snap).orphans()}
    plan = plan_action(snap, ActionKind.REAP, unit=MINIMAX)
    assert child.pid in {t.pid for t in plan.targets}
    assert any(f"kill -TERM {child.pid}" in line and "holds /dev/nvidia3" in line
               for line in plan.describe())
    # the driver lists no memory for it, yet the plan expects GPU 3's unlisted memory back
    assert plan.expected_free_mib[3] == MODEL_MIB - 1024
    report = await stepped(demo, execute(plan, demo, FAST))
    assert report.confirmed, report.describe()
    assert (await demo.sample()).gpu(3).memory_used_mib == 0  # type: ignore[union-attr]
