"""Every model server's leftovers on a real systemd host, through gpudash's CLI over SSH
(issue 34's "Done when"): SGLang, TGI, Ollama, TensorRT-LLM and llama.cpp under a wrapper
as their faithful stand-ins (tests/standins/), each (a) as a systemd unit
(Restart=always, KillMode=process, as the incident's) and (b) as a job of alice's login
session; and the real vLLM with a custom ``VLLM_PROCESS_NAME_PREFIX`` as a unit, and
(with another prefix) from a login shell that is a subreaper, where its engine is adopted
by that shell rather than PID 1.

Each test starts the server, waits until its holders hold their memory and it logged its
ready line, checks that ``gpudash snapshot --json`` and ``gpudash reap --dry-run`` flag
nothing, SIGKILLs its top process (as the OOM killer does), checks on the host what is
left, then that gpudash calls exactly those ORPHAN and ``gpudash reap HOST --yes --json``
frees them with proof (exit 0, every GPU confirmed, the memory back as the host's own
nvidia-smi reads it), leaving a live incarnation and everything else alone.

One host for the module (a boot is the slow part); each test puts back what it changed.
The real vLLM's unit starts at boot and its login server right after, so that they load
while the stand-ins' tests run; without the real vLLM (tests/realvllm/install.py) those
two tests skip as tests/test_lab_realvllm.py does, the others run.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from lab import servers as L
from lab.fixtures import HostSpec, labmod
from lab.servers import SERVERS, Server, wait_for
from realvllm import scenarios as S
from realvllm.install import layout
from test_lab_realvllm import gpudash, gpudash_snapshot, orphans, reap

pytestmark = [pytest.mark.lab]

PREFIX = "acme"  # VLLM_PROCESS_NAME_PREFIX of the real vLLM's unit
LOGIN_PREFIX = "ml-team"  # and of alice's (any word an operator sets)
STANDIN_GPUS = 4  # the stand-ins hold GPUs 0-1 (rank = GPU); the real vLLM 4 and 5
VLLM_UNIT_GPU, VLLM_LOGIN_GPU = 4, 5


@dataclass(frozen=True)
class VllmLogin:
    """The real ``vllm serve`` alice started from a login shell that is a subreaper."""

    api: int
    port: int
    log: str


@dataclass(frozen=True)
class ServersHost:
    host: Any  # LabHost
    vllm_unit: S.VllmUnit | None  # None: the real vLLM is not installed
    vllm_login: VllmLogin | None


@pytest.fixture(scope="module")
def servers_host(lab: Any) -> Iterator[ServersHost]:
    real = layout().complete()
    unit = S.tiny_unit("vllm-acme.service", gpus=(VLLM_UNIT_GPU,),
                       env=(f"VLLM_PROCESS_NAME_PREFIX={PREFIX}",)) if real else None
    spec = HostSpec(units=(*(L.StandinUnit(s) for s in SERVERS), *([unit] if unit else [])),
                    session_procs=())
    [host] = lab.start([spec])
    try:
        L.install(host)
        login = None
        if real:
            port = labmod._free_port()
            env = {**S.server_env(S.DEFAULT_MIB, (VLLM_LOGIN_GPU,)),
                   "VLLM_PROCESS_NAME_PREFIX": LOGIN_PREFIX}
            api, log = L.login_start(host, f"vllm-{port}", S.server_argv(port), env,
                                     prefix=L.subreaper_prefix())
            login = VllmLogin(api, port, log)
        yield ServersHost(host, unit, login)
    finally:
        lab.remove(host)


# ------------------------------------------------------------------------ steps


def standin_gpus(h: Any) -> list[int]:
    return h.gpu_used_mib()[:STANDIN_GPUS]  # type: ignore[no-any-return]


def serving(h: Any, server: Server, top: int, log: Callable[[], str]
            ) -> tuple[set[int], set[int]]:
    """Wait until ``top``'s holders hold their memory and its ready line is logged;
    returns (its processes below ``top``, those holding)."""
    def held() -> set[int] | None:
        below = L.descendants(L.processes(h), top)
        mib = L.holding(h, below)
        ok = len(mib) == server.holders and all(m == L.MIB for m in mib.values())
        return set(mib) if ok else None

    holders = wait_for(held, 60, lambda: f"{server.holders} holders under {top}: "
                       f"{L.holding(h, L.descendants(L.processes(h), top))}")
    wait_for(lambda: server.ready in log(), 30, lambda: f"{server.ready!r} in:\n{log()[-2000:]}")
    return L.descendants(L.processes(h), top), holders


def flags_nothing(h: Any, held: set[int], owner: str, mib: int = L.MIB) -> None:
    """gpudash over SSH: the server's holders are its owner's, nothing is ORPHAN, and reap
    has nothing to do."""
    snap = gpudash_snapshot(h)
    assert orphans(snap) == {}, orphans(snap)
    by_pid = {p["pid"]: p for p in snap["processes"]}
    for pid in held:
        assert by_pid[pid]["unit"] == owner, by_pid.get(pid)
        assert sum(by_pid[pid]["gpu_memory_mib"].values()) == mib, by_pid[pid]
    cp = gpudash(h, "reap", "--dry-run", "--json")
    assert cp.returncode == 0, cp.stderr[-3000:]
    [one] = json.loads(cp.stdout)["hosts"]
    assert one["report"] is None and "no orphaned processes" in one["error"], one


def left_behind(h: Any, server: Server, tree: set[int]) -> set[int]:
    """What of ``tree`` outlives its top (once PR_SET_PDEATHSIG took what it takes): the
    server's leftovers, re-parented to PID 1 (the MPI ranks stay under their daemon)."""
    def left() -> set[int] | None:
        procs = L.processes(h)
        alive = {p for p in tree if p in procs and not procs[p].stat.startswith("Z")}
        return alive if L.matches(server, procs, alive) else None

    found = wait_for(left, 30, lambda: f"{server.leftovers} left of {tree}: " + "; ".join(
        f"{p} {q.ppid} {q.stat} {q.args}" for p, q in L.processes(h).items() if p in tree))
    procs = L.processes(h)
    assert all(procs[p].ppid == 1 for p in found if procs[p].ppid not in found), {
        p: (procs[p].ppid, procs[p].args) for p in found}
    return found  # type: ignore[no-any-return]


def reaped(h: Any, left: set[int], gpus: Callable[[], list[int]], want: list[int]) -> None:
    """``gpudash reap HOST --yes --json`` takes exactly ``left`` and proves it: exit 0,
    every GPU confirmed; the host shows them gone and the memory at ``want``."""
    report = reap(h)
    assert {t["pid"] for t in report["targets"]} == left, report["targets"]
    assert report["gpus"] and all(g["confirmed"] for g in report["gpus"]), report["gpus"]
    assert not any(h.alive(p) for p in left)
    wait_for(lambda: gpus() == want, 10, lambda: f"GPU memory {gpus()} back to {want}")


def stop_now(h: Any, unit: str) -> None:
    """Stop ``unit`` without waiting on its SIGTERM: a vLLM still loading takes longer
    than a test should to stop (systemctl stop timed out after 30 s): the stop job is
    queued, so systemd does not restart what SIGKILL then ends."""
    h.systemctl("stop", "--no-block", unit)
    S.kill_pids(h, S.unit_pids(h, unit))
    wait_for(lambda: h.unit_show(unit, ["ActiveState"])["ActiveState"] in ("inactive", "failed"),
             30, f"{unit} stopped")


def kill_9(h: Any, pid: int) -> None:
    h.exec(["kill", "-9", str(pid)])
    wait_for(lambda: not h.alive(pid), 30, f"pid {pid} gone")


# ------------------------------------------------------------------------ stand-ins


@pytest.mark.parametrize("server", SERVERS, ids=lambda s: s.key)
def test_unit_leftovers_after_kill_9_are_orphan_and_reaped(servers_host: ServersHost,
                                                           server: Server) -> None:
    h = servers_host.host
    base = standin_gpus(h)
    h.systemctl("start", server.unit)
    try:
        top = S.main_pid(h, server.unit)
        tree, held = serving(h, server, top, lambda: S.journal(h, server.unit))
        for pid in held:
            assert h.proc(pid)["cgroup"].endswith(f"/{server.unit}"), h.proc(pid)
        before = standin_gpus(h)
        flags_nothing(h, held, server.unit)

        kill_9(h, top)
        new = int(wait_for(
            lambda: (s := h.unit_show(server.unit, ["MainPID", "NRestarts"]))["NRestarts"] == "1"
            and s["MainPID"] not in ("0", str(top)) and s["MainPID"], 30,
            f"{server.unit} restarted"))
        left = left_behind(h, server, tree)
        # (its ready line is the journal's second)
        _, new_held = serving(h, server, new,
                              lambda: S.journal(h, server.unit).split(server.ready, 1)[-1])
        found = orphans(gpudash_snapshot(h))
        assert set(found) == left, found
        assert all(f"earlier run of {server.unit}" in why for why in found.values()), found
        # the new incarnation keeps serving: its memory is what stays
        reaped(h, left, lambda: standin_gpus(h), before)
        assert h.alive(new) and all(h.alive(p) for p in new_held)
    finally:
        S.stop_unit(h, server.unit)
        h.systemctl("reset-failed", server.unit, check=False)
    wait_for(lambda: standin_gpus(h) == base, 30, "the stand-in GPUs freed")


@pytest.mark.parametrize("server", SERVERS, ids=lambda s: s.key)
def test_login_job_leftovers_after_kill_9_are_orphan_and_reaped(servers_host: ServersHost,
                                                                server: Server) -> None:
    h = servers_host.host
    base = standin_gpus(h)
    top, log = L.login_start(h, server.key, server.words(f"/tmp/{server.key}-login"),
                             server.environment())
    tree: set[int] = set()
    try:
        info = h.proc(top)
        scope = info["cgroup"]
        assert "/session-" in scope and scope.endswith(".scope"), info
        tree, held = serving(h, server, top, lambda: h.exec(["cat", log]).stdout)
        for pid in held:
            assert h.proc(pid)["cgroup"] == scope and h.proc(pid)["user"] == L.LOGIN_USER
        flags_nothing(h, held, scope.rsplit("/", 1)[1])

        kill_9(h, top)
        left = left_behind(h, server, tree)
        found = orphans(gpudash_snapshot(h))
        assert set(found) == left, found
        why = "lost its wrapper" if server.key == "llamacpp" else "lost its API server"
        assert all(why in w for w in found.values()), found
        reaped(h, left, lambda: standin_gpus(h), base)
    finally:
        S.kill_pids(h, [p for p in {top, *tree} if h.alive(p)])
    wait_for(lambda: standin_gpus(h) == base, 30, "the stand-in GPUs freed")


# ------------------------------------------------------------------------ the real vLLM


def vllm_tree(h: Any, api: int, prefix: str) -> tuple[int, int]:
    """(EngineCore, its worker) under the API server ``api``, titled with ``prefix``."""
    def find() -> tuple[int, int] | None:
        procs = L.processes(h)
        engines = [p for p, q in procs.items()
                   if q.ppid == api and q.args.startswith(f"{prefix}::EngineCore")]
        workers = [p for p, q in procs.items() if engines and q.ppid == engines[0]
                   and q.args.startswith(f"{prefix}::Worker")]
        return (engines[0], workers[0]) if len(engines) == len(workers) == 1 else None

    return wait_for(find, S.SERVE_TIMEOUT, f"{prefix}::EngineCore and worker under {api}")  # type: ignore[no-any-return]


@pytest.mark.realvllm
def test_vllm_unit_with_a_custom_process_name_prefix(realvllm: Any,
                                                     servers_host: ServersHost) -> None:
    h, unit = servers_host.host, servers_host.vllm_unit
    assert unit is not None
    gpu = lambda: h.gpu_used_mib()[VLLM_UNIT_GPU]  # noqa: E731
    try:
        S.wait_serving(h, unit.port)
        api = S.main_pid(h, unit.name)
        engine, worker = vllm_tree(h, api, PREFIX)
        assert h.proc(engine)["comm"] == f"{PREFIX}::EngineCore"[:15]  # the kernel's cut
        S.wait_held(h, [worker], unit.mib)
        flags_nothing(h, {worker}, unit.name, unit.mib)

        kill_9(h, api)
        new = int(wait_for(
            lambda: (s := h.unit_show(unit.name, ["MainPID", "NRestarts"]))["NRestarts"] == "1"
            and s["MainPID"] not in ("0", str(api)) and s["MainPID"], 60,
            f"{unit.name} restarted"))
        wait_for(lambda: L.processes(h)[engine].ppid == 1, 30, f"{engine} re-parented to 1")
        found = orphans(gpudash_snapshot(h))
        assert set(found) == {engine, worker}, found
        assert f"earlier run of {unit.name}" in found[engine], found
        # the next incarnation takes its memory first: the reap's proof is not raced
        wait_for(lambda: gpu() == 2 * unit.mib, S.SERVE_TIMEOUT, "the new worker holding")
        reaped(h, {engine, worker}, lambda: [gpu()], [unit.mib])
        assert h.alive(new)
    finally:
        stop_now(h, unit.name)
    wait_for(lambda: gpu() == 0, 30, f"GPU{VLLM_UNIT_GPU} freed")


@pytest.mark.realvllm
def test_vllm_leftovers_adopted_by_a_subreaper_shell(realvllm: Any,
                                                     servers_host: ServersHost) -> None:
    h, srv = servers_host.host, servers_host.vllm_login
    assert srv is not None
    gpu = lambda: [h.gpu_used_mib()[VLLM_LOGIN_GPU]]  # noqa: E731
    procs = L.processes(h)
    shell = procs[srv.api].ppid if srv.api in procs else 0
    engine = worker = 0
    try:
        try:
            S.wait_serving(h, srv.port, api=srv.api)
        except AssertionError as e:
            tail = h.exec(["tail", "-n", "40", srv.log], check=False).stdout
            raise AssertionError(f"{e}\n--- {srv.log}:\n{tail}") from None
        assert L.processes(h)[shell].args == "-zsh"
        engine, worker = vllm_tree(h, srv.api, LOGIN_PREFIX)
        assert h.proc(engine)["comm"] == f"{LOGIN_PREFIX}::EngineCore"[:15]
        S.wait_held(h, [worker], S.DEFAULT_MIB)
        scope = h.proc(worker)["cgroup"]
        assert "/session-" in scope, scope
        flags_nothing(h, {worker}, scope.rsplit("/", 1)[1], S.DEFAULT_MIB)

        kill_9(h, srv.api)
        # adopted by the shell (a subreaper), not PID 1; the worker still the engine's
        wait_for(lambda: L.processes(h)[engine].ppid == shell, 30, f"{engine} adopted")
        assert L.processes(h)[worker].ppid == engine
        found = orphans(gpudash_snapshot(h))
        assert set(found) == {engine, worker}, found
        assert "lost its API server" in found[engine] and f"pid {srv.api} gone" in found[
            engine], found
        reaped(h, {engine, worker}, gpu, [0])
        assert h.alive(shell)  # the shell is somebody's: never reaped
    finally:
        S.kill_pids(h, [p for p in (engine, worker, srv.api, shell) if p > 1 and h.alive(p)])


def test_no_stand_in_is_left_running(servers_host: ServersHost) -> None:
    """Each test put the shared host back: nothing of a stand-in runs, no GPU is held."""
    procs = L.processes(servers_host.host)
    ours = [q.args for q in procs.values()
            if any(w in q.args for w in (L.BIN, "sglang::", "mpi4py"))]
    assert ours == [] and standin_gpus(servers_host.host) == [0] * STANDIN_GPUS
