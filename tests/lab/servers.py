"""The model servers' stand-ins (tests/standins/) on a lab host: as systemd units and as
login-session jobs, and what the host itself shows of their process trees.

``install`` copies the stand-ins into a booted host (``/opt/gpulab/py/standins``, run by
the host's own ``/usr/bin/python3``; programs under their real names in ``BIN``), so that
a unit and a login user run the same programs. Every helper reads the host with ``ps``
and the stand-in driver's ``nvidia-smi``; pids are the host's.
"""

from __future__ import annotations

import shlex
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from standins import install as install_programs

from lab.fixtures import labmod

BIN = "/opt/gpulab/servers"  # the stand-ins' programs, as the host sees them
LIB = labmod.PYPATH  # /opt/gpulab/py: the package ``standins`` goes there
MIB = 2000  # GPU memory each holder takes
LOGIN_USER = "alice"
STANDINS = Path(__file__).resolve().parent.parent / "standins"


@dataclass(frozen=True)
class Server:
    """One server's stand-in: how it is started, when it is ready, what it leaves."""

    key: str
    argv: tuple[str, ...]  # program (on PATH: BIN) and its words
    ready: str  # the line it logs once serving, after its holders took their memory
    holders: int  # processes holding GPU memory while it serves (MIB each, GPU = rank)
    # what SIGKILL of the top process leaves: a word of each leftover's command line
    # (the parts PR_SET_PDEATHSIG takes with it are not among them)
    leftovers: tuple[str, ...]
    env: tuple[tuple[str, str], ...] = ()

    @property
    def unit(self) -> str:
        return f"{self.key}-standin.service"

    def environment(self) -> dict[str, str]:
        return {**labmod.FAKEGPU_ENV, "PATH": f"{BIN}:{labmod.CONTAINER_PATH}",
                "FAKE_MIB": str(MIB), **dict(self.env)}

    def words(self, uds: str) -> list[str]:
        return [a.replace("{uds}", uds) for a in self.argv]


SERVERS = (
    Server("sglang", ("sglang", "serve", "--model-path", "/models/llama", "--dp", "2",
                      "--mib", str(MIB)),
           "The server is fired up and ready to roll!", 2,
           ("sglang::scheduler_DP0", "sglang::scheduler_DP1")),
    Server("tgi", ("text-generation-launcher", "--model-id", "/models/llama", "--num-shard",
                   "2", "--mib", str(MIB), "--uds-path", "{uds}"),
           "Starting Webserver", 2,
           ("text-generation-server serve", "text-generation-server serve")),
    Server("ollama", ("ollama", "serve"), "llama runner started in", 1, ("ollama runner",),
           env=(("OLLAMA_FAKE_MODEL", "/usr/share/ollama/.ollama/models/blobs/sha256-1"),)),
    Server("trtllm", ("trtllm-serve", "/models/llama", "--tp_size", "2"),
           "[RANK 1] [I] worker ready", 2,
           ("orted", "-m mpi4py.futures.server", "-m mpi4py.futures.server")),
    Server("llamacpp", ("llama-swap", "--port", "0"),
           "main: server is listening on http://127.0.0.1:", 1, ("llama-server",)),
)


@dataclass(frozen=True)
class StandinUnit:
    """A server's stand-in as the incident's units run servers: Restart=always,
    KillMode=process; not started at boot (a test starts it)."""

    server: Server
    enabled: bool = False
    wanted_by: str = "multi-user.target"

    @property
    def name(self) -> str:
        return self.server.unit

    def unit_file(self) -> str:
        uds = f"/tmp/{self.server.key}-unit"
        env = self.server.environment()
        return "\n".join([
            "[Unit]", f"Description={self.server.key} (stand-in)",
            "After=fakegpu-init.service", "",
            "[Service]", "Type=simple",
            # a shard's socket from the run before would stop the next one binding
            *([f"ExecStartPre=/bin/rm -f {uds}-0 {uds}-1"] if "{uds}" in self.server.argv
              else []),
            "ExecStart=" + shlex.join([f"{BIN}/{self.server.argv[0]}",
                                       *self.server.words(uds)[1:]]),
            *(f"Environment={shlex.quote(f'{k}={v}')}" for k, v in env.items()),
            "Restart=always", "RestartSec=1", "KillMode=process", "",
            "[Install]", f"WantedBy={self.wanted_by}", "",
        ])


def install(host: Any) -> None:
    """The stand-ins into a booted host, readable and runnable by every user."""
    root = host.root_dir
    shutil.copytree(STANDINS, root / LIB.lstrip("/") / "standins", dirs_exist_ok=True,
                    ignore=shutil.ignore_patterns("__pycache__"))
    install_programs(root / BIN.lstrip("/"), python="/usr/bin/python3", lib=LIB)


# ------------------------------------------------------------------------ what the host shows


@dataclass(frozen=True)
class Proc:
    ppid: int
    pgid: int
    stat: str
    args: str


def processes(host: Any) -> dict[int, Proc]:
    out = host.exec(["ps", "-e", "-o", "pid=,ppid=,pgid=,stat=,args="]).stdout
    procs = {}
    for line in out.splitlines():
        parts = line.split(None, 4)
        if len(parts) >= 4:
            procs[int(parts[0])] = Proc(int(parts[1]), int(parts[2]), parts[3],
                                        parts[4] if len(parts) > 4 else "")
    return procs


def descendants(procs: dict[int, Proc], top: int) -> set[int]:
    """Every process below ``top`` (not ``top``), as ``procs`` lists them now."""
    kids: dict[int, list[int]] = {}
    for pid, p in procs.items():
        kids.setdefault(p.ppid, []).append(pid)
    out: set[int] = set()
    todo = list(kids.get(top, ()))
    while todo:
        pid = todo.pop()
        if pid not in out:
            out.add(pid)
            todo.extend(kids.get(pid, ()))
    return out


def holding(host: Any, pids: set[int]) -> dict[int, int]:
    """pid -> MiB, of those of ``pids`` the stand-in's nvidia-smi lists."""
    out = host.exec(["nvidia-smi", "--query-compute-apps=pid,used_memory",
                     "--format=csv,noheader,nounits"]).stdout
    held: dict[int, int] = {}
    for line in out.splitlines():
        pid, mib = (int(x.strip()) for x in line.split(","))
        if pid in pids:
            held[pid] = held.get(pid, 0) + mib
    return held


def matches(server: Server, procs: dict[int, Proc], pids: set[int]) -> bool:
    """``pids`` are exactly the leftovers ``server`` should leave: one per word."""
    words = sorted(server.leftovers)
    args = sorted(procs[p].args for p in pids if p in procs)
    if len(args) != len(words):
        return False
    left = list(args)
    for w in words:
        hit = next((a for a in left if w in a), None)
        if hit is None:
            return False
        left.remove(hit)
    return True


# ------------------------------------------------------------------------ login sessions


def login_start(host: Any, name: str, argv: list[str], env: dict[str, str],
                user: str = LOGIN_USER, prefix: str = "") -> tuple[int, str]:
    """``ssh user@host 'setsid -f nohup sh -c "... exec PROGRAM"'``: a job of a login
    session, detached (it outlives the ssh connection, in its ``session-N.scope``), its
    own session and process group. ``prefix``: a command it is started under (before
    ``sh -c``). Returns (the program's pid, its log in the host)."""
    home = "/root" if user == "root" else f"/home/{user}"
    log, pidfile = f"{home}/{name}.log", f"{home}/{name}.pid"
    envs = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
    inner = f"echo $$ > {pidfile}; exec env {envs} {shlex.join(argv)}"
    script = (f"cd ~ && rm -f {pidfile} && setsid -f nohup {prefix} sh -c "
              f"{shlex.quote(inner)} >{log} 2>&1 </dev/null")
    cp = host.ssh(script, user=user, timeout=60)
    assert cp.returncode == 0, f"ssh {user}@{host.alias}: rc={cp.returncode}\n{cp.stderr}"
    pid = wait_for(lambda: host.exec(["cat", pidfile], check=False).stdout.strip(), 30,
                   pidfile)
    return int(pid), log


def wait_for(pred: Callable[[], Any], timeout: float, what: Any, step: float = 0.2) -> Any:
    """``pred()`` once it is true; past ``timeout`` an AssertionError naming ``what``
    (called for the message if it is callable: the state that was waited on)."""
    deadline = time.monotonic() + timeout
    while True:
        value = pred()
        if value:
            return value
        if time.monotonic() > deadline:
            said = what() if callable(what) else what
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {said}")
        time.sleep(step)


# A login shell that adopts what its jobs leave (PR_SET_CHILD_SUBREAPER) and starts each
# job in a process group of its own, as a shell with job control does.
SUBREAPER = ("import sys, subprocess; sys.path.insert(0, sys.argv[1]); "
             "from standins.base import become_subreaper, forever, set_title; "
             "become_subreaper(); subprocess.Popen(sys.argv[2:], process_group=0); "
             "set_title('-zsh'); forever()")


def subreaper_prefix() -> str:
    return f"/usr/bin/python3 -c {shlex.quote(SUBREAPER)} {LIB}"
