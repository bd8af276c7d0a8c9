"""Triage rules on hand-built snapshots: each rule, and the cases it must not catch."""

from __future__ import annotations

from dataclasses import replace

from support import clock_of

from gpudash.domain.clock import SteppedClock
from gpudash.domain.model import Gpu, HostSnapshot, Process, Unit
from gpudash.domain.triage import (
    Flag,
    OwnerKind,
    holders_by_gpu,
    label,
    owner_kind,
    retriage,
    triage,
)

SVC = "vllm.service"


def proc(pid: int, ppid: int, start: int, unit: str | None = SVC, mem: dict[int, int] | None = None,
         state: str = "S", cmd: str = "python3") -> Process:
    return Process(pid=pid, ppid=ppid, start_ticks=start, state=state, user="root", name="p",
                   cmdline=cmd, unit=unit, gpu_memory_mib=mem or {})


def snap(procs: list[Process], units: list[Unit]) -> HostSnapshot:
    gpus = tuple(Gpu(index=i, memory_total_mib=1000, memory_used_mib=500) for i in range(2))
    return HostSnapshot("h", 0.0, gpus, tuple(procs), tuple(units))


def unit(**kw: object) -> Unit:
    base = dict(name=SVC, active_state="active", sub_state="running", unit_file_state="enabled",
                restart="always", kill_mode="process", n_restarts=0, main_pid=100)
    base.update(kw)
    return Unit(**base)  # type: ignore[arg-type]


def test_healthy_service_has_no_flags_and_warns_about_restart_policy() -> None:
    s = snap([proc(100, 1, 10), proc(101, 100, 11, mem={0: 400}), proc(102, 100, 11, mem={1: 400})],
             [unit()])
    t = triage(s)
    assert all(not f for f in t.flags.values())
    g = t.group(SVC)
    assert g is not None and g.kind is OwnerKind.SERVICE
    assert [n.process.pid for n in g.roots] == [100]
    assert [c.process.pid for c in g.roots[0].children] == [101, 102]
    assert dict(g.gpu_memory_mib) == {0: 400, 1: 400}
    assert any("Restart=always: killing the main PID respawns it" in w for w in g.warnings)
    assert any("KillMode=process" in w for w in g.warnings)


def test_workers_of_a_stopped_unit_are_orphans_and_unit_inactive() -> None:
    u = unit(active_state="inactive", sub_state="dead", main_pid=None)
    s = snap([proc(101, 1, 11, mem={0: 400}), proc(102, 1, 11, mem={1: 400}),
              proc(103, 1, 11)], [u])
    t = triage(s)
    assert t.flags[101] == {Flag.ORPHAN, Flag.UNIT_INACTIVE}
    assert Flag.ORPHAN not in t.flags[103]  # holds nothing
    assert [p.pid for p in t.orphans()] == [101, 102]
    g = t.group(SVC)
    assert g is not None and Flag.UNIT_INACTIVE in g.flags and Flag.ORPHAN in g.flags
    assert any("still enabled" in w for w in g.warnings)


def test_respawn_orphans_old_workers_but_not_the_new_tree() -> None:
    before = snap([proc(100, 1, 10), proc(101, 100, 11, mem={0: 400})], [unit()])
    after = snap(
        [proc(101, 1, 11, mem={0: 400}), proc(200, 1, 50), proc(201, 200, 51, mem={0: 50})],
        [unit(main_pid=200, n_restarts=1)],
    )
    t = triage(after, before)
    assert Flag.ORPHAN in t.flags[101]
    assert Flag.ORPHAN not in t.flags[201]
    assert Flag.RESPAWNED in t.flags[200]
    g = t.group(SVC)
    assert g is not None and Flag.RESPAWNED in g.flags
    assert any("restarted this unit by itself (NRestarts=1)" in w for w in g.warnings)


def test_scheduler_that_escaped_with_setsid_after_main_started_is_not_orphan() -> None:
    # SGLang-style: re-parented to PID 1 but younger than the live main process.
    s = snap([proc(100, 1, 10), proc(150, 1, 20, mem={0: 300})], [unit()])
    assert Flag.ORPHAN not in triage(s).flags[150]


def test_session_and_no_unit_holders_are_never_orphans() -> None:
    s = snap([proc(300, 1, 5, unit="session-4.scope", mem={0: 100}),
              proc(301, 1, 5, unit=None, mem={1: 100})], [])
    t = triage(s)
    assert not t.flags[300] and not t.flags[301]
    kinds = {g.key: g.kind for g in t.groups}
    assert kinds == {"session-4.scope": OwnerKind.SESSION, "no unit": OwnerKind.NONE}
    assert t.groups[-1].key == "no unit"  # nobody's processes last


def test_zombie_and_d_state_flags() -> None:
    s = snap([proc(100, 1, 10), proc(101, 100, 11, state="Z"), proc(102, 100, 11, state="D",
                                                                       mem={0: 1})], [unit()])
    t = triage(s)
    assert Flag.ZOMBIE in t.flags[101] and Flag.D_STATE in t.flags[102]


def test_flags_do_not_depend_on_process_names() -> None:
    u = unit(active_state="failed", main_pid=None)
    a = snap([proc(101, 1, 11, mem={0: 400}, cmd="VLLM::Worker_TP0")], [u])
    b = snap([proc(101, 1, 11, mem={0: 400}, cmd="totally-unrelated")], [u])
    assert triage(a).flags == triage(b).flags


def test_labels_for_known_serving_stacks() -> None:
    def lab(cmd: str) -> str | None:
        return label(proc(1, 0, 0, cmd=cmd))

    assert lab("VLLM::Worker_TP3") == "vLLM TP3 worker"
    assert lab("VllmWorker TP7") == "vLLM TP7 worker"
    assert lab("VLLM::EngineCore") == "vLLM engine core"
    assert lab("sglang::scheduler_DP0_TP2_EP0") == "SGLang TP2 scheduler"
    assert lab("ray::RayWorkerWrapper.execute_method") == "Ray worker"
    assert lab('python -c "from multiprocessing.spawn import spawn_main; spawn_main(12)"') \
        == "mp child"
    assert lab("bash") is None


def test_owner_kinds() -> None:
    assert owner_kind("docker-0123abcd.scope") is OwnerKind.CONTAINER
    assert owner_kind("user@1000.service") is OwnerKind.USER_SERVICE
    assert owner_kind("run-r1.scope") is OwnerKind.SCOPE
    assert owner_kind(None) is OwnerKind.NONE


def test_holders_by_gpu_biggest_first_and_unknown_amounts_kept() -> None:
    s = snap([proc(1, 0, 0, unit=None, mem={0: 10}), proc(2, 0, 0, unit=None, mem={0: 90}),
              replace(proc(3, 0, 0, unit=None), gpu_memory_mib={1: None})], [])
    h = holders_by_gpu(s)
    assert [p.pid for p, _ in h[0]] == [2, 1]
    assert [(p.pid, m) for p, m in h[1]] == [(3, None)]


def test_a_reclaimed_unit_without_processes_stays_visible_as_inactive() -> None:
    u = unit(active_state="inactive", sub_state="dead", unit_file_state="disabled",
             main_pid=None, n_restarts=1)
    g = triage(snap([], [u])).group(SVC)
    assert g is not None and g.roots == () and g.total_gpu_memory_mib == 0
    assert g.flags == {Flag.UNIT_INACTIVE}  # stopped: no longer respawning (issue 33)


def test_retriage_of_an_unchanged_sample_is_the_triage_with_the_new_snapshot() -> None:
    procs = [proc(100, 1, 10, mem={0: 400}), proc(101, 100, 11, mem={1: 300})]
    units = [unit()]
    first = snap(procs, units)
    t1 = retriage(first, None, None)
    assert t1 == triage(first)
    second = replace(first, taken_at=1.0)  # the same process and unit objects
    t2 = retriage(second, first, t1)
    assert t2 == triage(second, first) and t2.snapshot is second
    assert t2.groups is t1.groups  # reused, not computed again
    # a process that changed (a new object from the decoder) is triaged again
    third = replace(second, taken_at=2.0,
                    processes=(procs[0], proc(101, 1, 11, mem={1: 300})))
    t3 = retriage(third, second, t2)
    assert t3.groups is not t2.groups and t3 == triage(third, second)


def test_retriage_after_a_respawn_computes_again_as_triage_does() -> None:
    before = snap([proc(100, 1, 10), proc(101, 100, 11, mem={0: 400})], [unit()])
    after = snap([proc(101, 1, 11, mem={0: 400}), proc(200, 1, 50)],
                 [unit(main_pid=200, n_restarts=1)])
    t = retriage(after, before, retriage(before, None, None))
    g = t.group(SVC)
    assert g is not None and Flag.RESPAWNED in g.flags
    still = replace(after, taken_at=1.0)
    t_still = retriage(still, after, t)
    # RESPAWNED is NRestarts > 0 of the very same unit: the triage holds, and is reused
    # (it was computed again every sample of a host whose unit had ever respawned)
    assert t_still == triage(still, after) and t_still.groups is t.groups


async def test_a_stopped_disabled_unit_is_not_respawned_any_more() -> None:
    # issue 33, item 9: after kill -9 (RESPAWNED), then stop + disable, the unit kept its
    # RESPAWNED flag: NRestarts is reset only by the next start by hand
    from gpudash.demo.host import MINIMAX, DemoHost
    from gpudash.domain.triage import Flag, triage

    demo = DemoHost(clock=SteppedClock())
    main = demo.units[MINIMAX].main_pid
    assert main is not None
    snap = await demo.sample()
    await demo.signal(main, snap.process(main).start_ticks, 9)  # type: ignore[union-attr]
    for _ in range(200):
        snap = await demo.sample()
        unit = snap.unit(MINIMAX)
        if unit is not None and unit.n_restarts == 1 and unit.main_pid not in (None, main):
            break
        await clock_of(demo).advance(0.5)
    group = triage(snap).group(MINIMAX)
    assert group is not None and Flag.RESPAWNED in group.flags
    assert (await demo.systemctl("stop", MINIMAX)).ok
    assert (await demo.systemctl("disable", MINIMAX)).ok
    after = triage(await demo.sample()).group(MINIMAX)
    assert after is not None and Flag.UNIT_INACTIVE in after.flags
    assert Flag.RESPAWNED not in after.flags
    assert not any("restarted this unit by itself" in w for w in after.warnings)
