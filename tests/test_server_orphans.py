"""The orphan rule by evidence, per model server (issue 34), on snapshots shaped as each
server builds its tree (``gpudash.serving.processes`` cites the sources; the stand-ins in
tests/standins/ run them as real processes).

Seen before: only vLLM's and SGLang's titles were known, and a loss was only seen as a
re-parenting to PID 1 or a gone group leader. A vLLM engine adopted by ``systemd --user``
while the script that started the server still led its group, TGI shards (each in its own
group) adopted by tmux, a custom ``VLLM_PROCESS_NAME_PREFIX``, a comm cut at 15 bytes, an
Ollama runner, TensorRT-LLM's MPI ranks and a llama-server whose wrapper died were never
ORPHAN.
"""

from __future__ import annotations

import dataclasses

from test_orphans import SESSION, p, snap

from gpudash.domain.model import Process
from gpudash.domain.triage import triage
from gpudash.engine import SPECS, ActionKind, Selection

MIB = 30000
USER_MANAGER = "/user.slice/user-1000.slice/user@1000.service/init.scope"


def job(pid: int, ppid: int, start: int, cmd: str, *, pgid: int, mem: int = 0) -> Process:
    return p(pid, ppid, start, cmd, SESSION, pgid=pgid, mem=mem, user="alice")


def orphans(procs: list[Process]) -> set[int]:
    return {q.pid for q in triage(snap(procs)).orphans()}


def labels(procs: list[Process]) -> dict[int, str | None]:
    t = triage(snap(procs))
    return {n.process.pid: n.label for g in t.groups for n in g.nodes()}


# --- vLLM -----------------------------------------------------------------------------

def vllm(api_alive: bool, *, prefix: str = "VLLM", engine_parent: int = 1,
         leader: int = 100) -> list[Process]:
    """``bash run.sh`` (pid 100, leads the group) -> vllm serve 110 -> engine 120 ->
    workers 130, 131."""
    out = [job(100, 90, 10, "bash run.sh", pgid=100)]
    if api_alive:
        out.append(job(110, 100, 11, "/v/bin/python3 /v/bin/vllm serve /m", pgid=leader))
    out += [job(120, 110 if api_alive else engine_parent, 12, f"{prefix}::EngineCore",
                pgid=leader),
            job(130, 120, 13, f"{prefix}::Worker_TP0", pgid=leader, mem=MIB),
            job(131, 120, 13, f"{prefix}::Worker_TP1", pgid=leader, mem=MIB)]
    return out


def test_vllm_adopted_by_systemd_user_while_its_script_leads_the_group_is_orphan() -> None:
    manager = dataclasses.replace(p(900, 1, 1, "/lib/systemd/systemd --user", USER_MANAGER,
                                    pgid=900, user="alice"), name="systemd")
    t = triage(snap([manager, *vllm(False, engine_parent=900)]))
    assert {q.pid for q in t.orphans()} == {120, 130, 131}
    why = t.orphan_why(120)
    assert why is not None and "re-parented to systemd 900" in why, why
    plan = SPECS[ActionKind.REAP].plan(t.snapshot, Selection())
    assert sorted(s.target.pid for s in plan.steps) == [120, 130, 131]


def test_vllm_adopted_by_a_subreaper_outside_its_group_is_orphan() -> None:
    # the launching shell made itself a subreaper: no title says so, its group does
    shell = job(95, 1, 5, "-zsh", pgid=95)
    t = triage(snap([shell, *vllm(False, engine_parent=95)]))
    assert {q.pid for q in t.orphans()} == {120, 130, 131}
    assert "outside its group 100" in (t.orphan_why(120) or "")


def test_a_live_vllm_with_a_custom_prefix_is_labelled_and_not_flagged() -> None:
    live = vllm(True, prefix="LAB7")
    assert orphans(live) == set()
    assert labels(live)[130] == "vLLM TP0 worker" and labels(live)[120] == "vLLM engine core"


def test_vllm_with_a_custom_prefix_that_lost_its_api_server_is_orphan() -> None:
    assert orphans(vllm(False, prefix="LAB7")) == {120, 130, 131}


def test_a_comm_cut_at_15_bytes_is_recognised() -> None:
    # only comm is known (cmdline unreadable): the kernel cut the titles
    def cut(q: Process) -> Process:
        return dataclasses.replace(q, cmdline="", name=q.cmdline[:15]) \
            if "::" in q.cmdline else q

    procs = [cut(q) for q in vllm(False)]
    assert procs[1].name == "VLLM::EngineCor"
    assert orphans(procs) == {120, 130, 131}
    assert labels(procs)[120] == "vLLM engine core"


def test_an_offline_llm_inside_a_users_script_is_not_flagged() -> None:
    script = job(110, 100, 11, "python3 batch_infer.py", pgid=100)
    procs = [job(100, 90, 10, "-bash", pgid=100), script,
             job(120, 110, 12, "VLLM::EngineCore", pgid=100),
             job(130, 120, 13, "VLLM::Worker", pgid=100, mem=MIB)]
    assert orphans(procs) == set()


# --- SGLang ---------------------------------------------------------------------------

def sglang(alive: bool, adopter: int = 1) -> list[Process]:
    """launcher 200 (leads its group) -> DP controller 210 -> schedulers 220, 221;
    detokenizer 230. Without the launcher, the controller and detokenizer died of
    PR_SET_PDEATHSIG; the schedulers (no PDEATHSIG with --dp) were adopted."""
    if alive:
        return [job(200, 150, 20, "python3 -m sglang.launch_server --dp 2", pgid=200),
                job(210, 200, 21, "sglang::data_parallel_controller", pgid=200),
                job(220, 210, 22, "sglang::scheduler_DP0_TP0", pgid=200, mem=MIB),
                job(221, 210, 22, "sglang::scheduler_DP1_TP0", pgid=200, mem=MIB),
                job(230, 200, 21, "sglang::detokenizer", pgid=200)]
    return [job(220, adopter, 22, "sglang::scheduler_DP0_TP0", pgid=200, mem=MIB),
            job(221, adopter, 22, "sglang::scheduler_DP1_TP0", pgid=200, mem=MIB)]


def test_sglang_schedulers_of_a_dead_launcher_are_orphan_a_live_one_is_not() -> None:
    assert orphans(sglang(True)) == set()
    assert labels(sglang(True))[221] == "SGLang DP1 TP0 scheduler"
    tmux = job(150, 1, 2, "tmux: server", pgid=150)
    assert orphans([tmux, *sglang(False, adopter=150)]) == {220, 221}
    assert orphans(sglang(False)) == {220, 221}


# --- TGI ------------------------------------------------------------------------------

def tgi(alive: bool, adopter: int) -> list[Process]:
    """launcher 300 -> one shard per rank, each leading its own group (process_group(0))."""
    out = [job(300, adopter, 30, "text-generation-launcher --model-id m --num-shard 2",
               pgid=300)] if alive else []
    return out + [job(pid, 300 if alive else adopter, 31,
                      "/opt/conda/bin/python3 /opt/conda/bin/text-generation-server serve m "
                      "--uds-path /tmp/text-generation-server --sharded", pgid=pid, mem=MIB)
                  for pid in (310, 311)]


def test_tgi_shards_each_in_its_own_group_are_found_where_they_were_adopted() -> None:
    shell = job(290, 280, 29, "bash", pgid=290)
    assert orphans([shell, *tgi(True, 290)]) == set()
    # the launcher SIGKILLed: the shards (their own group leaders) adopted by the shell
    # that is a subreaper: no title, no group says it; only the launcher starts them
    t = triage(snap([shell, *tgi(False, 290)]))
    assert {q.pid for q in t.orphans()} == {310, 311}
    assert "not its TGI server" in (t.orphan_why(310) or "")
    assert orphans(tgi(False, 1)) == {310, 311}
    assert labels(tgi(True, 290))[310] == "TGI shard"


# --- Ollama ---------------------------------------------------------------------------

def test_ollama_runner_of_a_dead_serve_is_orphan_a_live_one_is_not() -> None:
    serve = job(400, 1, 40, "/usr/local/bin/ollama serve", pgid=400)
    for runner_cmd in ("/usr/local/bin/ollama runner --ollama-engine --model /b/sha256-1 "
                       "--port 41233",
                       "/usr/local/lib/ollama/llama-server --model /b/sha256-1 --port 41233"):
        live = [serve, job(410, 400, 41, runner_cmd, pgid=400, mem=MIB)]
        assert orphans(live) == set() and labels(live)[410] == "Ollama runner"
        assert orphans([job(410, 1, 41, runner_cmd, pgid=400, mem=MIB)]) == {410}


# --- TensorRT-LLM ---------------------------------------------------------------------

def trtllm(alive: bool) -> list[Process]:
    """trtllm-serve 500 -> orted 510 (its own group) -> mpi4py ranks 520, 521."""
    out = [job(500, 150, 50, "/usr/local/bin/trtllm-serve /m --tp_size 2", pgid=500)] \
        if alive else []
    return out + [
        job(510, 500 if alive else 1, 51, "/opt/hpcx/ompi/bin/orted --hnp-uri 1.0;tcp://x",
            pgid=510),
        job(521, 510, 53, "/usr/bin/python3 -m mpi4py.futures.server", pgid=510, mem=MIB),
        job(520, 510, 52, "/usr/bin/python3 -m mpi4py.futures.server", pgid=510, mem=MIB)]


def test_trtllm_ranks_under_orted_in_its_own_group_are_orphan_once_serve_is_gone() -> None:
    assert orphans(trtllm(True)) == set()
    shown = labels(trtllm(True))
    assert (shown[520], shown[521]) == ("TRT-LLM rank 0", "TRT-LLM rank 1")
    assert orphans(trtllm(False)) == {510, 520, 521}
    assert labels(trtllm(False))[521] == "MPI rank 1"  # nothing says TRT-LLM any more


# --- llama.cpp under a wrapper --------------------------------------------------------

def test_llama_server_is_orphan_only_once_its_wrapper_is_gone() -> None:
    cmd = "/opt/llama.cpp/llama-server -m /m/q4.gguf --port 8081"
    wrapper = job(600, 1, 60, "/usr/local/bin/llama-swap --config c.yaml", pgid=600)
    assert orphans([wrapper, job(610, 600, 61, cmd, pgid=600, mem=MIB)]) == set()
    t = triage(snap([job(610, 1, 61, cmd, pgid=600, mem=MIB)]))
    assert [q.pid for q in t.orphans()] == [610]
    assert "lost its wrapper (pid 600 gone, re-parented to PID 1)" in (t.orphan_why(610) or "")
    # nohup'd by hand, its shell gone: its own group's leader, its own server: live
    assert orphans([job(620, 1, 62, cmd, pgid=620, mem=MIB)]) == set()


def test_an_adopter_whose_command_line_names_the_server_is_not_its_api_server() -> None:
    # ``tini -s -- vllm serve``: tini (a subreaper) adopted the engine of the API server
    # it ran; its command line names vLLM, it is not vLLM
    tini = job(100, 90, 10, "/usr/bin/tini -s -- vllm serve /m", pgid=100)
    t = triage(snap([tini, *vllm(False, engine_parent=100)[1:]]))
    assert {q.pid for q in t.orphans()} == {120, 130, 131}
    assert "re-parented to" in (t.orphan_why(120) or "")
