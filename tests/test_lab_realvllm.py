"""Self-test of the real vLLM in the lab (tests/realvllm): the scenario facts, as the lab
host itself shows them (ps, /proc, systemctl, journalctl, the stand-in's nvidia-smi) and as
``gpudash snapshot --json`` reads them over the host's sshd.

One host per module (``realvllm_host``), its ``vllm-tiny.service`` already serving; the
tests run in file order and the destructive one (kill -9 of the unit's MainPID) is last.
On a 2-core machine a server needs 30-100 s to serve: the module takes minutes.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from realvllm import scenarios as S

pytestmark = [pytest.mark.lab, pytest.mark.realvllm]


def gpudash_snapshot(host) -> dict:  # type: ignore[no-untyped-def]
    argv = [sys.executable, "-m", "gpudash", "snapshot", host.alias, "--json",
            "--ssh-config", str(host.ssh_config_path), "--known-hosts", str(host.known_hosts_path)]
    cp = subprocess.run(argv, capture_output=True, text=True, timeout=120,
                        stdin=subprocess.DEVNULL)
    if cp.returncode == 3 and "no answer within" in cp.stderr:  # a loaded 2-core machine
        cp = subprocess.run(argv, capture_output=True, text=True, timeout=120,
                            stdin=subprocess.DEVNULL)
    assert cp.returncode == 0, cp.stderr
    [snap] = json.loads(cp.stdout)["hosts"]
    return snap


def in_cgroup(host, pid: int, suffix: str) -> bool:  # type: ignore[no-untyped-def]
    info = host.proc(pid)
    return info is not None and info["cgroup"].endswith(suffix)


def test_unit_serves_and_its_worker_holds_the_memory(realvllm_host) -> None:  # type: ignore[no-untyped-def]
    rv = realvllm_host
    h, unit = rv.host, rv.tiny
    assert S.health(unit.port) == 200
    show = h.unit_show(unit.name, ["MainPID", "ActiveState", "NRestarts", "Restart", "KillMode"])
    assert show["ActiveState"] == "active" and show["NRestarts"] == "0"
    assert show["Restart"] == "always" and show["KillMode"] == "process"
    tree = S.server_tree(h, int(show["MainPID"]))
    assert tree == rv.tree
    procs = S.processes(h)
    api_args = procs[tree.api][1]
    assert " serve " in api_args and f"--port {unit.port}" in api_args, api_args
    assert procs[tree.engine] == (tree.api, "VLLM::EngineCore")
    [worker] = tree.workers
    assert procs[worker] == (tree.engine, "VLLM::Worker")
    for pid in (tree.api, tree.engine, worker):
        assert in_cgroup(h, pid, f"/system.slice/{unit.name}"), h.proc(pid)
    assert S.gpu_holders(h) == {worker: ("VLLM::Worker", unit.mib)}
    assert h.gpu_used_mib()[0] == unit.mib

    snap = gpudash_snapshot(h)
    by_pid = {p["pid"]: p for p in snap["processes"]}
    assert by_pid[worker]["gpu_memory_mib"] == {"0": unit.mib}, by_pid.get(worker)
    assert by_pid[worker]["unit"] == unit.name
    assert snap["gpus"][0]["memory_used_mib"] == unit.mib


def test_misconfigured_unit_crash_loops_with_the_pydantic_error(realvllm_host) -> None:  # type: ignore[no-untyped-def]
    rv = realvllm_host
    h, bad = rv.host, rv.bad
    try:
        loop = S.start_crash_loop(h, bad, restarts=1)
        assert loop.n_restarts >= 1
        lines = loop.journal.splitlines()
        i = next(i for i, ln in enumerate(lines) if S.MAX_LEN_ERROR in ln)
        assert "max_position_embeddings=512" in lines[i], lines[i]
        assert any(S.PYDANTIC_FOOTER in ln for ln in lines[i + 1:i + 4]), lines[i:i + 4]
        assert h.unit_show(bad.name, ["Restart"])["Restart"] == "always"
        assert h.gpu_used_mib()[4] == 0  # it dies before any worker holds memory
        assert S.health(bad.port) is None
    finally:
        S.stop_unit(h, bad.name)
    assert S.health(rv.tiny.port) == 200


def test_login_server_survivors_keep_memory_in_the_session_scope(realvllm_host) -> None:  # type: ignore[no-untyped-def]
    rv = realvllm_host
    h = rv.host
    o = None
    try:
        # served from alice's login, its API server SIGKILLed; beside it alice's train.py
        o = S.login_orphans(h, gpus=(1,), job_gpu=2, job_mib=4096)
        srv, left, job = o.server, o.survivors, o.job
        assert "/session-" in srv.scope and srv.scope.endswith(".scope"), srv.scope
        tree = srv.tree  # as it was while serving, under the API server
        [worker] = tree.workers
        assert not h.alive(srv.api)
        assert S.health(srv.port) is None  # the port is freed at once
        assert left.engine == tree.engine and left.workers == tree.workers
        assert left.api == 1  # EngineCore re-parented to PID 1, the worker still its child
        procs = S.processes(h)
        assert procs[tree.engine] == (1, "VLLM::EngineCore")
        assert procs[worker] == (tree.engine, "VLLM::Worker")
        for pid in (tree.engine, worker):
            info = h.proc(pid)
            assert info["cgroup"] == srv.scope and info["user"] == S.LOGIN_USER, info
        # (b) the live login job: no model server, its own session, holding its memory
        assert "/session-" in job.scope and job.scope != srv.scope
        assert job.args == "python3 train.py --gpu 2 --mib 4096"
        assert h.proc(job.pid)["cgroup"] == job.scope
        held = S.gpu_holders(h)
        assert held[worker] == ("VLLM::Worker", S.DEFAULT_MIB)
        assert held[job.pid] == ("python3", 4096)
        assert h.gpu_used_mib()[1:3] == [S.DEFAULT_MIB, 4096]
    finally:
        if o is not None:
            S.kill_tree(h, o.survivors)
            S.kill_pids(h, [o.job.pid])
    S.wait_for(lambda: h.gpu_used_mib()[1:3] == [0, 0], 30, "GPU1 and GPU2 freed")


def test_standby_unit_serves_once_started(realvllm_host) -> None:  # type: ignore[no-untyped-def]
    rv = realvllm_host
    h, unit = rv.host, rv.standby
    show = h.unit_show(unit.name, ["ActiveState", "UnitFileState"])
    assert show == {"ActiveState": "inactive", "UnitFileState": "disabled"}
    assert h.gpu_used_mib()[3] == 0
    try:
        tree = S.serve_unit(h, unit)  # what `gpudash start` must achieve
        assert S.health(unit.port) == 200
        assert S.gpu_holders(h)[tree.workers[0]] == ("VLLM::Worker", unit.mib)
        assert h.gpu_used_mib()[3] == unit.mib
    finally:
        S.stop_unit(h, unit.name)
    S.wait_for(lambda: h.gpu_used_mib()[3] == 0, 30, "GPU3 freed")


def test_kill_9_of_the_main_pid_leaves_engine_and_worker_holding(realvllm_host) -> None:  # type: ignore[no-untyped-def]
    rv = realvllm_host
    h, unit = rv.host, rv.tiny
    try:
        k = S.kill_main(h, unit)
        assert k.old == rv.tree and k.n_restarts == 1
        assert not h.alive(k.old.api)
        show = h.unit_show(unit.name, ["ActiveState", "NRestarts", "MainPID"])
        assert show["ActiveState"] == "active" and show["NRestarts"] == "1"
        new = h.proc(k.new_main)
        assert new is not None and " serve " in new["args"], new
        [worker] = k.old.workers
        procs = S.processes(h)
        assert procs[k.old.engine] == (1, "VLLM::EngineCore")
        assert procs[worker] == (k.old.engine, "VLLM::Worker")
        for pid in (k.new_main, k.old.engine, worker):
            assert in_cgroup(h, pid, f"/system.slice/{unit.name}"), h.proc(pid)
        assert S.gpu_holders(h)[worker] == ("VLLM::Worker", unit.mib)
        assert S.unit_pids(h, unit.name)  # what stop_unit() will end
    finally:
        S.stop_unit(h, unit.name)
    S.wait_for(lambda: h.gpu_used_mib()[0] == 0, 30, "GPU0 freed")
