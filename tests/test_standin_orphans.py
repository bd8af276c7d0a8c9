"""Each model server's stand-in (tests/standins/) as real processes on this machine, read
by the real collector over the stand-in driver: alive, nothing is ORPHAN; after SIGKILL
of its top process, exactly what it left holding GPU memory (and the parents between) is
ORPHAN, wherever the kernel re-parented it; ``reap``'s plan takes exactly those, and their
memory comes back once they are signalled.

Seen before issue 34's rule: none of TGI's shards, Ollama's runner, TensorRT-LLM's ranks
or llama-server was ORPHAN after its launcher's SIGKILL (their titles were unknown), and
TGI's shards adopted by a subreaper were not either.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from standins import env as standin_env
from standins import install
from test_device_holders import Stream

from gpudash.domain.triage import triage
from gpudash.engine import SPECS, ActionKind, Selection

MIB = 2000
# the launching shell, a subreaper: its title (``-zsh``) says nothing of the server
SUBREAPER = ("import sys, subprocess; sys.path.insert(0, sys.argv[1]); "
             "from standins.base import become_subreaper, forever, set_title; "
             "become_subreaper(); subprocess.Popen(sys.argv[2:]); set_title('-zsh'); forever()")


class Server:
    """A stand-in started as a job of its own (its own session and group, as a shell
    with job control starts one), optionally under a subreaper; killed at the end."""

    def __init__(self, st: Any, tmp: Path, argv: list[str], holders: int, ready: str,
                 subreaper: bool = False, **extra: str) -> None:
        bin_dir = install(tmp / "bin")
        self.env = {**standin_env(bin_dir, st.env), "FAKE_MIB": str(MIB), **extra}
        self.log = (tmp / "server.log").open("w")
        tests = str(Path(__file__).resolve().parent)
        cmd = [sys.executable, "-c", SUBREAPER, tests, *argv] if subreaper else argv
        self.proc = subprocess.Popen(cmd, env=self.env, stderr=self.log,
                                     start_new_session=True, cwd=tmp)
        self.stream = Stream(st.env)
        self.holders = holders
        self.state = self.stream.until(self._all_holding, timeout=30)
        self.top = self._top()
        # ready as the server says it in its log (after its holders took their memory)
        deadline = time.monotonic() + 15
        while ready not in (tmp / "server.log").read_text():
            assert time.monotonic() < deadline, f"never logged {ready!r}"
            time.sleep(0.05)
        self.started = self.tree()  # ours, to end whatever happens

    def _holding(self, s: dict[str, Any]) -> list[str]:
        return [pid for pid, p in s["procs"].items() if p.get("gpu_memory_mib")]

    def _all_holding(self, s: dict[str, Any]) -> bool:
        return len(self._holding(s)) == self.holders

    def _top(self) -> int:
        """The server's top process: ours, or the one our subreaper started."""
        if self.proc.args[:2] != [sys.executable, "-c"]:
            return self.proc.pid
        kids = Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children").read_text()
        return int(kids.split()[0])

    def tree(self) -> set[int]:
        """The pids of the server's processes the snapshot lists, top and subreaper out."""
        return {int(pid) for pid, p in self.state["procs"].items()
                if p.get("pgid") is not None and int(pid) not in (self.top, self.proc.pid)
                and _below(int(pid), self.top, self.state)}

    def kill_top(self, gone: set[int]) -> None:
        """SIGKILL the top (ours); wait until it and ``gone`` (what dies with it) are gone."""
        os.kill(self.top, signal.SIGKILL)
        if self.top == self.proc.pid:
            self.proc.wait(timeout=10)
        self.state = self.stream.until(
            lambda s: all(str(pid) not in s["procs"] for pid in {self.top, *gone}))

    def close(self) -> None:
        for pid in self.started | self.tree() | {self.top, self.proc.pid}:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.proc.wait(timeout=10)
        self.stream.close()
        self.log.close()


def _below(pid: int, top: int, state: dict[str, Any]) -> bool:
    """``pid`` descends from ``top`` as the snapshot lists it, or was started by it (its
    group is ``top``'s, or one ``top`` made for it: the pids here are all ours)."""
    seen = 0
    while pid and seen < 64:
        if pid == top:
            return True
        p = state["procs"].get(str(pid))
        if p is None:
            return False
        pid, seen = p.get("ppid", 0), seen + 1
    return False


@pytest.fixture
def gpus(fakegpu_state: Any) -> Iterator[Any]:
    yield fakegpu_state.init(gpus=4, total_mib=80000, teardown_ms=0)


def orphaned_then_reaped(server: Server, expect: set[int]) -> None:
    """What triage calls ORPHAN is ``expect``; reap plans exactly it; once those are
    signalled (ours, by pid and start time), the GPUs' memory is back."""
    snap = server.stream.snapshot()
    t = triage(snap)
    assert {p.pid for p in t.orphans()} == expect, [
        (p.pid, p.ppid, p.pgid, p.cmdline, t.orphan_why(p.pid)) for p in snap.processes]
    plan = SPECS[ActionKind.REAP].plan(snap, Selection())
    targets = {s.target.pid: s.target.start_ticks for s in plan.steps}
    assert set(targets) == expect
    for pid, start in targets.items():
        stat = Path(f"/proc/{pid}/stat").read_text()
        assert int(stat[stat.rindex(")") + 2:].split()[19]) == start  # the same process
        os.kill(pid, signal.SIGKILL)
    server.stream.until(lambda s: all(g["memory_used_mib"] == 0 for g in s["gpus"].values()))


def live_is_never_orphan(server: Server) -> None:
    assert triage(server.stream.snapshot()).orphans() == ()


def test_sglang_with_dp_leaves_its_schedulers_when_the_launcher_is_killed(gpus, tmp_path):
    server = Server(gpus, tmp_path, ["sglang", "serve", "--model-path", "/m", "--dp", "2",
                                     "--mib", str(MIB)], holders=2,
                    ready="The server is fired up and ready to roll!")
    try:
        live_is_never_orphan(server)
        titles = {int(pid): p["cmdline"] for pid, p in server.state["procs"].items()}
        assert sorted(t for t in titles.values() if t.startswith("sglang::")) == [
            "sglang::data_parallel_controller", "sglang::scheduler_DP0",
            "sglang::scheduler_DP1"]
        schedulers = {pid for pid, t in titles.items() if t.startswith("sglang::scheduler")}
        controller = {pid for pid, t in titles.items() if "controller" in t}
        # PR_SET_PDEATHSIG takes the controller (and the detokenizer) with the launcher
        server.kill_top(gone=controller)
        orphaned_then_reaped(server, schedulers)
    finally:
        server.close()


def test_tgi_shards_adopted_by_a_subreaper_are_orphan(gpus, tmp_path):
    uds = str(tmp_path / "tgi")
    server = Server(gpus, tmp_path, ["text-generation-launcher", "--model-id", "m",
                                     "--num-shard", "2", "--mib", str(MIB), "--uds-path", uds],
                    holders=2, ready="Starting Webserver", subreaper=True)
    try:
        live_is_never_orphan(server)
        shards = server.tree()
        assert all(server.state["procs"][str(s)]["pgid"] == s for s in shards)  # own groups
        server.kill_top(gone=set())
        assert {server.state["procs"][str(s)]["ppid"] for s in shards} == {server.proc.pid}
        orphaned_then_reaped(server, shards)
    finally:
        server.close()


def test_ollama_runner_outlives_ollama_serve(gpus, tmp_path):
    server = Server(gpus, tmp_path, ["ollama", "serve"], holders=1,
                    ready="llama runner started in",
                    OLLAMA_FAKE_MODEL="/root/.ollama/models/blobs/sha256-1")
    try:
        live_is_never_orphan(server)
        runner = server.tree()
        server.kill_top(gone=set())
        orphaned_then_reaped(server, runner)
    finally:
        server.close()


def test_trtllm_ranks_under_orted_outlive_trtllm_serve(gpus, tmp_path):
    server = Server(gpus, tmp_path, ["trtllm-serve", "/m", "--tp_size", "2"], holders=2,
                    ready="[RANK 1] [I] worker ready")
    try:
        live_is_never_orphan(server)
        labels = {n.label for g in triage(server.stream.snapshot()).groups for n in g.nodes()}
        assert {"TRT-LLM rank 0", "TRT-LLM rank 1", "MPI daemon"} <= labels
        leftovers = server.tree()  # orted and its two ranks
        assert len(leftovers) == 3
        server.kill_top(gone=set())
        orphaned_then_reaped(server, leftovers)
    finally:
        server.close()


def test_llama_server_outlives_its_wrapper(gpus, tmp_path):
    server = Server(gpus, tmp_path, ["llama-swap", "--port", "0"], holders=1,
                    ready="main: server is listening on http://127.0.0.1:")
    try:
        live_is_never_orphan(server)
        llama = server.tree()
        server.kill_top(gone=set())
        orphaned_then_reaped(server, llama)
    finally:
        server.close()
