"""ORPHAN as a real vLLM (V1) leaves them, on snapshots shaped as the lab's real vLLM shows
them (shared/REAL-VLLM.md): API server -> VLLM::EngineCore -> VLLM::Worker, one process
group, the API server the unit's MainPID.

Seen before these rules (issue 17): after kill -9 of a unit's API server the old
engine's worker was not ORPHAN (its parent, the old engine, is alive and in the unit);
a login session's server whose API server was SIGKILLed showed no flag at all; alice's
rootless podman container was ORPHAN and reaped.
"""

from __future__ import annotations

import json

import pytest

from gpudash.collector.host.parsing import cgroup_facts, unit_of_cgroup
from gpudash.collector.host.protocol import PROTOCOL
from gpudash.domain.model import Gpu, HostSnapshot, Process, Unit
from gpudash.domain.owners import OwnerCapability, OwnerKind
from gpudash.domain.triage import Flag, triage, unattributed_mib
from gpudash.engine import SPECS, ActionKind, PlanError, Selection, unit_ref
from gpudash.protocol.wire import SnapshotDecoder

UNIT = "vllm-tiny.service"
SVC = f"/system.slice/{UNIT}"
SESSION = "/user.slice/user-1000.slice/session-7.scope"
WORKER_MIB = 60006  # 58.6 GiB


def p(pid: int, ppid: int, start: int, cmd: str, cgroup: str | None = SVC, *,
      pgid: int | None = None, mem: int = 0, user: str = "root") -> Process:
    return Process(pid=pid, ppid=ppid, start_ticks=start, state="S", user=user,
                   name=cmd.split()[0][:15], cmdline=cmd, cgroup=cgroup,
                   unit=unit_of_cgroup(cgroup), pgid=pgid,
                   gpu_memory_mib={0: mem} if mem else {}, **cgroup_facts(cgroup))


def snap(procs: list[Process], units: tuple[Unit, ...] = ()) -> HostSnapshot:
    return HostSnapshot("lab1", 100.0, (Gpu(0, memory_total_mib=97887,
                                            memory_used_mib=2 * WORKER_MIB),),
                        tuple(procs), units)


def vllm_unit(main: int, restarts: int) -> Unit:
    return Unit(UNIT, "active", "running", "enabled", "always", "process", restarts, main)


def server(api: int, start: int, cgroup: str | None = SVC, mem: int = WORKER_MIB,
           api_alive: bool = True, user: str = "root") -> list[Process]:
    """A vLLM server as it runs: API server, its engine core, the engine's worker."""
    out = [p(api, 1, start, f"/opt/v/bin/python3 /opt/v/bin/vllm serve /m --port {api}",
             cgroup, pgid=api, user=user)] if api_alive else []
    engine_parent = api if api_alive else 1
    out += [p(api + 3, engine_parent, start + 5, "VLLM::EngineCore", cgroup, pgid=api,
              user=user),
            p(api + 9, api + 3, start + 9, "VLLM::Worker", cgroup, pgid=api, mem=mem,
              user=user)]
    return out


def test_kill_9_of_the_units_api_server_orphans_the_old_engine_and_its_worker() -> None:
    old = server(3700, 1000, api_alive=False)  # its API server was SIGKILLed
    new = server(3900, 5000)  # systemd's new incarnation
    t = triage(snap(old + new, (vllm_unit(3900, 1),)))
    assert {q.pid for q in t.orphans()} == {3703, 3709}  # the engine (parents) and worker
    assert not any(Flag.ORPHAN in t.flags[q.pid] for q in new)
    assert Flag.RESPAWNED in t.flags[3900]
    assert "VLLM::EngineCore 3703" in t.orphan_why(3703)
    assert "earlier run of vllm-tiny.service" in t.orphan_why(3709)
    g = t.group(UNIT)
    assert g is not None and Flag.ORPHAN in g.flags
    assert any("VLLM::EngineCore 3703" in w and "it and 1 more hold 58.6 GiB" in w
               for w in g.warnings), g.warnings
    # and `o` (reap) takes exactly the leftovers
    plan = SPECS[ActionKind.REAP].plan(t.snapshot, Selection(owner=unit_ref(UNIT)))
    assert sorted(s.target.pid for s in plan.steps) == [3703, 3709]


def test_a_live_unit_and_its_tree_are_never_orphans() -> None:
    t = triage(snap(server(3900, 5000), (vllm_unit(3900, 0),)))
    assert t.orphans() == ()


def test_an_engine_detached_after_the_current_main_started_is_not_an_orphan() -> None:
    # younger than the main: the current incarnation put it there (SGLang's setsid)
    procs = server(3900, 5000) + [p(4000, 1, 6000, "sglang::scheduler_TP0", mem=100)]
    assert triage(snap(procs, (vllm_unit(3900, 0),))).orphans() == ()


def test_a_login_sessions_server_that_lost_its_api_server_is_orphan_the_live_work_is_not() -> None:
    lost = server(3700, 1000, SESSION, api_alive=False, user="alice")
    live = server(5100, 2000, SESSION, mem=2000, user="alice")  # another server, alive
    job = p(6000, 1, 3000, "python3 train.py", SESSION, pgid=6000, mem=3000, user="alice")
    kernel = p(6100, 1, 3100, "python3 -m ipykernel_launcher -f k.json", SESSION,
               pgid=6100, mem=1000, user="alice")
    t = triage(snap(lost + live + [job, kernel]))
    assert {q.pid for q in t.orphans()} == {3703, 3709}
    why = t.orphan_why(3703)
    assert "VLLM::EngineCore 3703 lost its API server" in why and "pid 3700 gone" in why
    g = t.group("session-7.scope")
    assert g is not None and g.kind is OwnerKind.SESSION
    assert any("VLLM::EngineCore 3703 lost its API server" in w and "58.6 GiB" in w
               for w in g.warnings), g.warnings
    plan = SPECS[ActionKind.REAP].plan(t.snapshot, Selection())
    assert sorted(s.target.pid for s in plan.steps) == [3703, 3709]


def test_a_worker_whose_engine_died_too_is_orphan_by_its_lost_group_leader() -> None:
    # no process of the server is re-parented to PID 1 but the worker (engine killed)
    worker = p(3709, 1, 1009, "VLLM::Worker_TP0", None, pgid=3700, mem=WORKER_MIB)
    t = triage(snap([worker]))
    assert [q.pid for q in t.orphans()] == [3709]
    assert "pid 3700 gone" in t.orphan_why(3709)


def test_solo_jobs_without_a_server_title_are_never_orphans() -> None:
    t = triage(snap([p(7000, 1, 10, "python3 -u serve.py --port 9000", None, pgid=6990,
                       mem=500)]))
    assert t.orphans() == ()


def test_a_user_service_is_never_an_orphan_and_not_acted_on() -> None:
    cgroup = "/user.slice/user-1000.slice/user@1000.service/app.slice/vllm.service"
    procs = server(3700, 1000, cgroup, api_alive=False, user="alice")
    t = triage(snap(procs))
    assert t.orphans() == ()
    g = t.group("user@1000.service/vllm.service")
    assert g is not None and g.kind is OwnerKind.USER_SERVICE
    assert g.owner is not None and g.owner.capabilities == frozenset()
    assert "alice's own systemd" in g.owner.unable(OwnerCapability.STOP)


ALICE_PODMAN = ("/user.slice/user-1000.slice/user@1000.service/user.slice/"
                "libpod-" + "ab" * 32 + ".scope/container")


def test_alices_rootless_podman_container_is_not_inspected_not_orphan_and_not_reaped() -> None:
    # The review's reproduction, through the decoder and SPECS[REAP].plan: it planned
    # `kill -TERM 4242 (alice, python)`.
    facts = cgroup_facts(ALICE_PODMAN)
    assert facts == {"claim": "container:podman/" + "ab" * 32,
                     "user_uid": 1000, "user_unit": f"libpod-{'ab' * 32}.scope"}
    wire = {"v": PROTOCOL, "host": "h", "taken_at": 1.7e9, "source": "nvml",
            "can_act": True,
            "gpus": {"0": {"index": 0, "memory_total_mib": 81559, "memory_used_mib": 8000}},
            "procs": {"4242": {"pid": 4242, "ppid": 1, "start_ticks": 50, "user": "alice",
                               "name": "python", "cmdline": "python", "cgroup": ALICE_PODMAN,
                               "unit": "user@1000.service", "gpu_memory_mib": {"0": 8000},
                               **facts}},
            # what root's podman used to answer for it: no such container
            "owners": {"container": {"podman/" + "ab" * 32: {"state": "removed"}}}}
    s = SnapshotDecoder("h").feed(json.dumps({"k": "full", "s": wire}).encode())
    t = triage(s)
    assert t.orphans() == ()
    g = t.group_of(4242)
    assert g is not None and g.kind is OwnerKind.CONTAINER and g.owner is not None
    assert "alice's rootless podman container" in g.owner.describe()
    assert any("not inspected" in w for w in g.warnings)
    assert g.owner.capabilities == frozenset()
    with pytest.raises(PlanError, match="no orphaned processes"):
        SPECS[ActionKind.REAP].plan(s, Selection())


def test_a_server_that_escaped_its_container_is_orphan_engine_and_worker() -> None:
    cid = "cd" * 32
    cgroup = f"/system.slice/docker-{cid}.scope"
    init = p(800, 790, 5, "tini -- vllm serve", cgroup, pgid=800)
    engine = p(803, 1, 9, "VLLM::EngineCore", cgroup, pgid=801)
    worker = p(809, 803, 10, "VLLM::Worker", cgroup, pgid=801, mem=WORKER_MIB)
    t = triage(snap([init, engine, worker]))
    assert {q.pid for q in t.orphans()} == {803, 809}
    assert "escaped docker container" in t.orphan_why(803)


def test_memory_no_listed_process_accounts_for_is_unattributed() -> None:
    s = snap(server(3900, 5000))  # used: 2 workers' worth; listed: one
    assert unattributed_mib(s) == {0: WORKER_MIB}


def test_a_holders_ancestors_in_other_units_do_not_make_groups_of_their_own() -> None:
    # the collector lists a GPU holder's live parents: the sshd above alice's login job
    sshd = p(700, 1, 5, "sshd: /usr/sbin/sshd -D", "/system.slice/ssh.service", pgid=700)
    shell = p(710, 700, 6, "-bash", SESSION, pgid=710, user="alice")
    job = p(720, 710, 7, "python3 train.py", SESSION, pgid=720, mem=4000, user="alice")
    t = triage(snap([sshd, shell, job]))
    assert [g.key for g in t.groups] == ["session-7.scope"] and t.orphans() == ()
