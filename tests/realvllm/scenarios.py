"""A real vLLM (CPU build, tests/realvllm/install.py) on lab hosts, and helpers that bring a
host into the situations gpudash must read right (see README.md).

Units are objects a :class:`HostSpec` carries in ``units`` like the lab's own
``UnitSpec`` (name, enabled, wanted_by, unit_file()). Every helper takes a booted
``LabHost`` and checks what it did on the host itself; pids are the host's (the
container's PID namespace, as ``nvidia-smi`` and gpudash over SSH see them).

Mind the 2-core machine: a server answers ``/health`` 30-35 s after start when the
machine is quiet, ~100 s under load (SERVE_TIMEOUT allows for more).
"""

from __future__ import annotations

import re
import shlex
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from lab.fixtures import HostSpec, labmod

from realvllm.install import Layout, layout

T = TypeVar("T")

SERVE_TIMEOUT = 420.0  # seconds for /health to answer 200 after a start
SERVED_NAME = "tiny"
DEFAULT_MIB = 20480  # stand-in GPU memory each worker holds
LOGIN_USER = "alice"
API_MARK = " serve "  # in the API server's cmdline: .../bin/vllm serve MODEL ...
ENGINE_TITLE = "VLLM::EngineCore"
WORKER_TITLE = "VLLM::Worker"  # VLLM::Worker (world size 1) or VLLM::Worker_TP<n>
MAX_LEN_ERROR = "Value error, User-specified max_model_len (100000) is greater than the derived"
PYDANTIC_FOOTER = "For further information visit https://errors.pydantic.dev/"


def wait_for(pred: Callable[[], T], timeout: float, what: str, step: float = 0.5) -> T:
    deadline = time.monotonic() + timeout
    while True:
        value = pred()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(step)


# ------------------------------------------------------------------------- units


def server_env(mib: int, gpus: tuple[int, ...], lay: Layout | None = None) -> dict[str, str]:
    """What a real vLLM server needs in a lab host (the stand-in's env included)."""
    lay = lay or layout()
    env = {
        "VLLM_CPU_KVCACHE_SPACE": "1",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "VLLM_NO_USAGE_STATS": "1",
        "DO_NOT_TRACK": "1",
        "PYTHONPATH": str(lay.plugin),
        "GPUDASH_VLLM_FAKEGPU_MIB": str(mib),
        "GPUDASH_VLLM_FAKEGPU_GPUS": ",".join(map(str, gpus)),
        **labmod.FAKEGPU_ENV,
    }
    if len(gpus) > 1:  # the automatic binding refuses on a 2-core machine (REAL-VLLM.md)
        env["VLLM_CPU_OMP_THREADS_BIND"] = "|".join(str(i % 2) for i in range(len(gpus)))
    return env


def server_argv(port: int, max_model_len: int = 256, tp: int = 1,
                extra: tuple[str, ...] = (), lay: Layout | None = None) -> list[str]:
    lay = lay or layout()
    argv = [str(lay.vllm), "serve", str(lay.model), "--host", labmod.LOOPBACK,
            "--port", str(port), "--max-model-len", str(max_model_len), "--dtype", "float32",
            "--served-model-name", SERVED_NAME]
    if tp > 1:
        argv += ["--tensor-parallel-size", str(tp)]
    return [*argv, *extra]


@dataclass(frozen=True)
class VllmUnit:
    """A systemd unit running the real ``vllm serve`` of the tiny model."""

    name: str = "vllm-tiny.service"
    port: int = 0  # 0: a free port of this machine (the lab hosts share its network)
    gpus: tuple[int, ...] = (0,)  # worker rank r holds gpus[r]; len > 1: tensor parallel
    mib: int = DEFAULT_MIB
    max_model_len: int = 256
    description: str = "vLLM OpenAI server - tiny (real vLLM, CPU)"
    restart: str = "always"
    restart_sec: float = 1.0
    kill_mode: str = "process"
    enabled: bool = True  # started at boot
    wanted_by: str = "multi-user.target"
    extra_args: tuple[str, ...] = ()
    env: tuple[str, ...] = ()  # more KEY=VALUE

    def __post_init__(self) -> None:
        if not self.port:
            object.__setattr__(self, "port", labmod._free_port())

    @property
    def argv(self) -> list[str]:
        return server_argv(self.port, self.max_model_len, len(self.gpus), self.extra_args)

    def unit_file(self) -> str:
        env = [f"{k}={v}" for k, v in server_env(self.mib, self.gpus).items()] + list(self.env)
        return "\n".join([
            "[Unit]",
            f"Description={self.description}",
            "After=network.target fakegpu-init.service",
            "Wants=fakegpu-init.service",
            "",
            "[Service]",
            "Type=simple",
            "ExecStart=" + shlex.join(self.argv),
            *(f"Environment={shlex.quote(e)}" for e in env),
            f"Restart={self.restart}",
            f"RestartSec={self.restart_sec:g}",
            f"KillMode={self.kill_mode}",
            "",
            "[Install]",
            f"WantedBy={self.wanted_by}",
            "",
        ])


def tiny_unit(name: str = "vllm-tiny.service", **kw: Any) -> VllmUnit:
    """The serving unit: Restart=always, KillMode=process, started at boot."""
    return VllmUnit(name=name, **kw)


def standby_unit(name: str = "vllm-tiny-next.service", **kw: Any) -> VllmUnit:
    """(c) A stopped, disabled unit that serves once started (``gpudash start`` into it)."""
    kw.setdefault("gpus", (3,))
    return VllmUnit(name=name, enabled=False,
                    description="vLLM OpenAI server - tiny, next (real vLLM, CPU)", **kw)


def misconfigured_unit(name: str = "vllm-tiny-bad.service", **kw: Any) -> VllmUnit:
    """(d) ``--max-model-len 100000`` on a 512-position model: exit 1, crash loop.
    Not started at boot: start_crash_loop() starts it (each attempt costs a core ~10 s)."""
    kw.setdefault("gpus", (4,))
    return VllmUnit(name=name, max_model_len=100000, enabled=False,
                    description="vLLM OpenAI server - tiny, misconfigured (real vLLM, CPU)", **kw)


def host_spec(*units: VllmUnit, **kw: Any) -> HostSpec:
    """A lab host with these units and no stand-in model servers or session procs."""
    kw.setdefault("session_procs", ())
    return HostSpec(units=tuple(units), **kw)


# ------------------------------------------------------------------------- what the host shows


def health(port: int, timeout: float = 5.0) -> int | None:
    """HTTP status of /health on 127.0.0.1:port (the lab shares this machine's network)."""
    try:
        with urllib.request.urlopen(f"http://{labmod.LOOPBACK}:{port}/health",
                                    timeout=timeout) as r:
            return int(r.status)
    except urllib.error.HTTPError as e:
        return int(e.code)
    except (OSError, ValueError):
        return None


def wait_serving(host: Any, port: int, timeout: float = SERVE_TIMEOUT,
                 api: int | None = None) -> float:
    """Wait for /health 200; returns seconds waited. Fails early if the host is gone or
    the API server ``api`` (when given) died."""
    t0 = time.monotonic()

    def ok() -> bool:
        if not host.running:
            raise AssertionError(f"{host.name} is not running")
        if api is not None and not host.alive(api):
            raise AssertionError(f"API server {api} (port {port}) died before serving")
        return health(port) == 200

    wait_for(ok, timeout, f"/health 200 on port {port}", step=1.0)
    return time.monotonic() - t0


def processes(host: Any) -> dict[int, tuple[int, str]]:
    """pid -> (ppid, args) of every process in the host."""
    out = host.exec(["ps", "-e", "-o", "pid=,ppid=,args="]).stdout
    procs = {}
    for line in out.splitlines():
        parts = line.split(None, 2)
        if len(parts) >= 2:
            procs[int(parts[0])] = (int(parts[1]), parts[2] if len(parts) > 2 else "")
    return procs


def gpu_holders(host: Any) -> dict[int, tuple[str, int]]:
    """pid -> (process name, MiB summed over GPUs) as the stand-in's nvidia-smi lists them."""
    out = host.exec(["nvidia-smi", "--query-compute-apps=pid,process_name,used_memory",
                     "--format=csv,noheader,nounits"]).stdout
    held: dict[int, tuple[str, int]] = {}
    for line in out.splitlines():
        pid, name, mib = (x.strip() for x in line.split(","))
        prev = held.get(int(pid), (name, 0))[1]
        held[int(pid)] = (name, prev + int(mib))
    return held


@dataclass(frozen=True)
class ServerTree:
    api: int  # the API server (`vllm serve ...`)
    engine: int  # VLLM::EngineCore
    workers: tuple[int, ...]  # VLLM::Worker[_TP<n>]


def server_tree(host: Any, api: int, n_workers: int = 1,
                timeout: float = SERVE_TIMEOUT) -> ServerTree:
    """Wait until ``api`` has its EngineCore child and that its ``n_workers`` workers."""

    def find() -> ServerTree | None:
        procs = processes(host)
        engines = [p for p, (pp, a) in procs.items() if pp == api and a.startswith(ENGINE_TITLE)]
        if len(engines) != 1:
            return None
        workers = sorted(p for p, (pp, a) in procs.items()
                         if pp == engines[0] and a.startswith(WORKER_TITLE))
        return ServerTree(api, engines[0], tuple(workers)) if len(workers) == n_workers else None

    return wait_for(find, timeout, f"EngineCore and {n_workers} worker(s) under {api}")


def tree_of_engine(host: Any, engine: int) -> ServerTree:
    """The tree as it is now, from its EngineCore; ``api`` is the EngineCore's parent now
    (1 once the API server is gone)."""
    procs = processes(host)
    workers = tuple(sorted(p for p, (pp, a) in procs.items()
                           if pp == engine and a.startswith(WORKER_TITLE)))
    return ServerTree(procs[engine][0] if engine in procs else 0, engine, workers)


def main_pid(host: Any, unit: str) -> int:
    return int(host.unit_show(unit, ["MainPID"])["MainPID"])


def unit_pids(host: Any, unit: str) -> list[int]:
    """Every process in the unit's cgroup (orphans of a stopped unit too)."""
    cp = host.sh(f"grep -l -E {shlex.quote('/' + re.escape(unit) + '$')} /proc/[0-9]*/cgroup "
                 "2>/dev/null || true")
    return sorted(int(p.split("/")[2]) for p in cp.stdout.split() if p.split("/")[2].isdigit())


def wait_held(host: Any, pids: tuple[int, ...] | list[int], mib: int,
              timeout: float = 60) -> dict[int, tuple[str, int]]:
    """Wait until each pid holds at least ``mib`` by the stand-in's nvidia-smi."""

    def ok() -> dict[int, tuple[str, int]] | None:
        held = gpu_holders(host)
        return held if all(held.get(p, ("", 0))[1] >= mib for p in pids) else None

    return wait_for(ok, timeout, f"pids {list(pids)} holding {mib} MiB")


def journal(host: Any, unit: str) -> str:
    return host.exec(["journalctl", "-u", unit, "-o", "cat", "--no-pager"], check=False).stdout


# ------------------------------------------------------------------------- situations


def serve_unit(host: Any, unit: VllmUnit, timeout: float = SERVE_TIMEOUT) -> ServerTree:
    """Start ``unit`` (if it is not running) and wait until it serves and its worker holds
    its memory; returns its tree. What ``gpudash start`` must achieve for (c)."""
    if host.unit_show(unit.name, ["ActiveState"])["ActiveState"] != "active":
        host.systemctl("start", unit.name)
    wait_serving(host, unit.port, timeout)
    tree = server_tree(host, main_pid(host, unit.name), len(unit.gpus))
    wait_held(host, tree.workers, unit.mib)
    return tree


@dataclass(frozen=True)
class MainKilled:
    """(a) after ``kill -9`` of a unit's MainPID."""

    old: ServerTree  # old.api is dead; old.engine has PPID 1, old.workers its children
    new_main: int  # the API server systemd started instead
    n_restarts: int


def kill_main(host: Any, unit: VllmUnit, timeout: float = 60) -> MainKilled:
    """(a) ``kill -9`` of the serving unit's MainPID: systemd starts a new API server; the
    old EngineCore is re-parented to PID 1 with its worker(s), still holding memory.
    Returns at once after the restart (the new server is not serving yet)."""
    show = ["MainPID", "NRestarts"]
    before = host.unit_show(unit.name, show)
    old = server_tree(host, int(before["MainPID"]), len(unit.gpus))
    wait_held(host, old.workers, unit.mib)
    host.exec(["kill", "-9", str(old.api)])
    after = wait_for(
        lambda: (s := host.unit_show(unit.name, show))["NRestarts"] != before["NRestarts"]
        and s["MainPID"] not in ("0", str(old.api)) and s,
        timeout, f"{unit.name} restarted",
    )
    wait_for(lambda: processes(host).get(old.engine, (0, ""))[0] == 1, timeout,
             f"EngineCore {old.engine} re-parented to PID 1")
    return MainKilled(old, int(after["MainPID"]), int(after["NRestarts"]))


@dataclass
class LoginServer:
    """A ``vllm serve`` started from a login session (ssh, detached as under nohup)."""

    user: str
    port: int
    api: int
    scope: str  # the cgroup path, .../session-N.scope
    log: str  # its output, in the host
    tree: ServerTree | None = None


def _login(host: Any, user: str, script: str, timeout: float = 60) -> str:
    """Run ``script`` through the host's sshd as ``user`` (a logind session)."""
    cp = host.ssh(script, user=user, timeout=timeout)
    if cp.returncode:
        raise AssertionError(f"ssh {user}@{host.alias}: rc={cp.returncode}\n{cp.stderr}")
    return cp.stdout


def _home(user: str) -> str:
    return "/root" if user == "root" else f"/home/{user}"


def start_login_server(host: Any, port: int = 0, user: str = LOGIN_USER,
                       gpus: tuple[int, ...] = (1,), mib: int = DEFAULT_MIB,
                       wait: bool = True) -> LoginServer:
    """``ssh user@host 'setsid nohup vllm serve ... &'``: the server lands in the login's
    ``session-N.scope`` and outlives the ssh session. With ``wait``: until it serves."""
    port = port or labmod._free_port()
    home = _home(user)
    log, pidfile = f"{home}/vllm-{port}.log", f"{home}/vllm-{port}.pid"
    env = " ".join(f"{k}={shlex.quote(v)}" for k, v in server_env(mib, gpus).items())
    inner = f"echo $$ > {pidfile}; exec env {env} {shlex.join(server_argv(port, tp=len(gpus)))}"
    _login(host, user, f"cd ~ && rm -f {pidfile} && setsid -f nohup sh -c {shlex.quote(inner)} "
                       f">{log} 2>&1 </dev/null")
    api = int(wait_for(lambda: host.exec(["cat", pidfile], check=False).stdout.strip(), 30,
                       f"{pidfile}"))
    info = wait_for(lambda: host.proc(api), 10, f"login server {api}")
    srv = LoginServer(user, port, api, info["cgroup"], log)
    if wait:
        try:
            wait_serving(host, port, api=api)
        except AssertionError as e:
            tail = host.exec(["tail", "-n", "40", log], check=False).stdout
            raise AssertionError(f"{e}\n--- {log}:\n{tail}") from None
        srv.tree = server_tree(host, api, len(gpus))
        wait_held(host, srv.tree.workers, mib)
    return srv


@dataclass(frozen=True)
class LoginJob:
    """A live login-session job holding GPU memory that is not a model server."""

    user: str
    pid: int
    gpu: int
    mib: int
    scope: str
    args: str


TRAIN_PY = """\
import ctypes, sys, time
lib = ctypes.CDLL("libnvidia-ml.so.1", use_errno=True)
if lib.fakegpu_hold(ctypes.c_uint(int(sys.argv[2])), ctypes.c_ulonglong(int(sys.argv[4]))):
    sys.exit("fakegpu_hold failed")
while True:
    time.sleep(3600)
"""


def start_login_job(host: Any, user: str = LOGIN_USER, gpu: int = 2,
                    mib: int = 4096) -> LoginJob:
    """``python3 train.py --gpu G --mib M`` from a login session, detached: holds ``mib`` of
    GPU ``gpu`` through the stand-in until killed."""
    home = _home(user)
    host._write(f"{home}/train.py", TRAIN_PY)
    pidfile = f"{home}/train.pid"
    env = " ".join(f"{k}={shlex.quote(v)}" for k, v in labmod.FAKEGPU_ENV.items())
    inner = f"echo $$ > {pidfile}; exec env {env} python3 train.py --gpu {gpu} --mib {mib}"
    _login(host, user, f"cd ~ && rm -f {pidfile} && setsid -f nohup sh -c {shlex.quote(inner)} "
                       ">train.log 2>&1 </dev/null")
    pid = int(wait_for(lambda: host.exec(["cat", pidfile], check=False).stdout.strip(), 30,
                       pidfile))
    wait_held(host, [pid], mib, timeout=30)
    info = host.proc(pid)
    return LoginJob(user, pid, gpu, mib, info["cgroup"], info["args"])


@dataclass(frozen=True)
class LoginOrphans:
    """(b) a login-session server whose API server was SIGKILLed, and beside it a live
    login-session job holding memory that is not a model server."""

    server: LoginServer  # server.api is dead
    survivors: ServerTree  # its EngineCore (PPID 1) and worker(s), still holding memory
    job: LoginJob


def kill_login_api(host: Any, srv: LoginServer, timeout: float = 60) -> ServerTree:
    """SIGKILL a login server's API server; returns the surviving EngineCore and workers."""
    assert srv.tree is not None, "start_login_server(wait=True) first"
    host.exec(["kill", "-9", str(srv.api)])
    wait_for(lambda: not host.alive(srv.api), timeout, f"API server {srv.api} gone")
    wait_for(lambda: processes(host).get(srv.tree.engine, (0, ""))[0] == 1, timeout,
             f"EngineCore {srv.tree.engine} re-parented to PID 1")
    return tree_of_engine(host, srv.tree.engine)


def login_orphans(host: Any, user: str = LOGIN_USER, gpus: tuple[int, ...] = (1,),
                  mib: int = DEFAULT_MIB, job_gpu: int = 2, job_mib: int = 4096) -> LoginOrphans:
    """(b) Bring ``host`` into: login server serving, its API server SIGKILLed (EngineCore
    and worker left in session-N.scope, holding memory), plus a live login job."""
    job = start_login_job(host, user, job_gpu, job_mib)
    srv = start_login_server(host, user=user, gpus=gpus, mib=mib)
    survivors = kill_login_api(host, srv)
    return LoginOrphans(srv, survivors, job)


@dataclass(frozen=True)
class CrashLoop:
    n_restarts: int
    journal: str = field(repr=False)


def start_crash_loop(host: Any, unit: VllmUnit, restarts: int = 1,
                     timeout: float = SERVE_TIMEOUT) -> CrashLoop:
    """(d) Start the misconfigured unit and wait until it has failed and been restarted
    ``restarts`` times with the pydantic error in its journal. It keeps crash-looping
    (a core busy): stop_unit() when done."""
    host.systemctl("start", unit.name)

    def looped() -> CrashLoop | None:
        n = int(host.unit_show(unit.name, ["NRestarts"])["NRestarts"])
        if n < restarts:
            return None
        text = journal(host, unit.name)
        return CrashLoop(n, text) if MAX_LEN_ERROR in text and PYDANTIC_FOOTER in text else None

    return wait_for(looped, timeout, f"{unit.name} crash-looping", step=1.0)


def kill_pids(host: Any, pids: list[int] | tuple[int, ...], timeout: float = 30) -> None:
    pids = [p for p in pids if p > 1]
    if pids:
        host.exec(["kill", "-9", *map(str, pids)], check=False)
        wait_for(lambda: not any(host.alive(p) for p in pids), timeout, f"{list(pids)} gone")


def stop_unit(host: Any, unit: str, timeout: float = 60) -> None:
    """Stop the unit and SIGKILL whatever is left in its cgroup (KillMode=process leaves
    the EngineCore and workers behind)."""
    host.systemctl("stop", unit, check=False)
    kill_pids(host, unit_pids(host, unit), timeout)


def kill_tree(host: Any, tree: ServerTree) -> None:
    """SIGKILL what is left of a server (never PID 1: a survivor's ``api`` is its PPID)."""
    kill_pids(host, [p for p in (tree.api, tree.engine, *tree.workers)
                     if p > 1 and host.alive(p)])
