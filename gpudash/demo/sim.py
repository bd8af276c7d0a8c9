"""The demo host's world: processes, systemd units and Docker containers on simulated time.

``HostSimulation`` does the kernel's part (pids, parents, signals, GPU memory released a
short delay after its holder dies), systemd's (``Restart=``, ``KillMode=``, unit files)
and dockerd's (restart policies, ``stop``, ``update --restart=no``, ``rm``); it knows
nothing of the host protocol but the answers it gives. ``DemoHost`` serves it.
"""

from __future__ import annotations

import random
import signal as _signal
import time

from gpudash.demo.models import SimLoad, SimServer
from gpudash.demo.records import (
    HZ,
    SimContainer,
    SimProcess,
    SimUnit,
    container_view,
    docker_argv,
    process_view,
    unit_view,
)
from gpudash.domain.model import Gpu, HostSnapshot, SourceKind, unit_name
from gpudash.engine.signals import PICKABLE
from gpudash.protocol.shell_listener import ShellListener
from gpudash.protocol.source import CommandResult, ModelUnit, SignalOutcome

GPU_NAME = "NVIDIA RTX PRO 6000 Blackwell"
GPU_TOTAL_MIB = 97887
MODEL_MIB = 96801  # per GPU, as nvidia-smi showed in the incident
NOTEBOOK_MIB = 2048
# the signals whose default action ends a process that does not catch them
ENDING = frozenset(p.sig for p in PICKABLE if p.ends)
RESPAWN_MIB = 612  # a respawned worker's CUDA context, before it fails to load the model
MINIMAX = "vllm-minimax-m25.service"
KIMI = "vllm-kimi-k25.service"
DEEPSEEK = "vllm-deepseek-v3.service"
MINIMAX_SERVER = SimServer("MiniMaxAI/MiniMax-M2.5", 8000)
KIMI_SERVER = SimServer("moonshotai/Kimi-K2.5-INT4", 8001, load_s=20.0)
DEEPSEEK_SERVER = SimServer("deepseek-ai/DeepSeek-V3", 8002, gpu_memory_utilization=0.99)
HOST_CPUS = 128
HOST_MEM_MIB = 2063 * 1024  # 2 TiB of RAM, as a host of eight 96 GiB GPUs has
HOST_BASE_MIB = 41 * 1024  # the OS, page tables, the driver
EMBED_MIB = 1000  # the container's model on GPU 7, beside MiniMax's worker there
EMBED_ID = "c0ffee5e" + "9d2b4a71" * 7
EMBED_NAME = "vllm-embed"
EMBED_PORT = 8100  # docker run -p 127.0.0.1:8100:8100
EMBED_IMAGE = "vllm/vllm-openai:v0.11.0"
EMBED_CMD = ("python3 -m vllm.entrypoints.openai.api_server --model BAAI/bge-m3 "
             "--task embed --gpu-memory-utilization 0.011 --port 8100")
# The container's successor, with ``containers``: a small reranker installed as a unit,
# one GPU, that fits in what the embedding container holds on GPU 7 (a swap from it).
RERANK = "vllm-rerank.service"
RERANK_SERVER = SimServer("BAAI/bge-reranker-v2-m3", 8003, tp=1, first_gpu=7,
                          gpu_memory_utilization=0.0106, load_s=6.0, shards=8)
SHIM_PID = 4711  # containerd-shim-runc-v2: the container's main's parent on the host
SERVER_CMD = (
    "python3 -m vllm.entrypoints.openai.api_server --model MiniMaxAI/MiniMax-M2.5 "
    "--tensor-parallel-size 8 --enable-expert-parallel --port 8000"
)


class HostSimulation:
    """One simulated host: ``speed`` simulated seconds pass per real second."""

    def __init__(
        self,
        name: str,
        *,
        speed: float = 1.0,
        release_delay: float = 2.0,
        seed: int = 7,
        containers: bool = False,
    ) -> None:
        self.name = name
        self.speed = speed
        self.release_delay = release_delay
        self._rng = random.Random(seed)
        self._t0_real = time.monotonic()
        self.boot_epoch = time.time() - 3 * 86400  # booted three days ago
        self._t0_sim = 3 * 86400.0  # simulated seconds since boot at start
        self._next_pid = 215000
        self.processes: dict[int, SimProcess] = {}
        self.units: dict[str, SimUnit] = {}
        self.containers: dict[str, SimContainer] = {}
        # port -> the process (pid, comm, cgroup text) that bound it while its server
        # was down: a borrowed ready URL, refused for anyone else
        self.squatters: dict[int, ShellListener] = {}
        self._releases: list[tuple[float, int, int]] = []  # (at, gpu, mib)
        self.boot_id = f"5e1f0c2a-8d3a-4b71-9f0e-{random.Random(-seed).getrandbits(48):012x}"
        self._build_incident()
        if containers:
            c = SimContainer(EMBED_ID, EMBED_NAME, EMBED_IMAGE, port=EMBED_PORT)
            self.containers[c.id] = c
            self._run_container(c, age=5400)
            self.units[RERANK] = SimUnit(
                RERANK, "vLLM bge-reranker-v2-m3 (GPU 7): fits where vllm-embed is",
                kill_mode="control-group", unit_file_state="disabled", active=False,
                server=RERANK_SERVER)

    # --- simulated clock ------------------------------------------------------------

    def now(self) -> float:
        """Simulated seconds since boot."""
        return self._t0_sim + (time.monotonic() - self._t0_real) * self.speed

    def _ticks(self, at: float | None = None) -> int:
        return int((self.now() if at is None else at) * HZ)

    # --- the incident -----------------------------------------------------------------

    def _pid(self) -> int:
        self._next_pid += self._rng.randint(3, 40)
        return self._next_pid

    def spawn(
        self,
        *,
        ppid: int,
        user: str,
        name: str,
        cmdline: str,
        unit: str | None,
        gpu_memory_mib: dict[int, int] | None = None,
        age: float = 0.0,
        ignores_term: bool = False,
        handles: frozenset[int] = frozenset(),
        pid: int | None = None,
        inherits_device: bool = False,
        cpu_pct: float = 0.0,
        rss_mib: int = 300,
    ) -> SimProcess:
        """Start a simulated process (tests use this to add odd ones)."""
        p = SimProcess(
            pid=pid if pid is not None else self._pid(),
            ppid=ppid,
            start_ticks=self._ticks(self.now() - age),
            user=user,
            name=name[:15],
            cmdline=cmdline,
            unit=unit,
            gpu_memory_mib=dict(gpu_memory_mib or {}),
            ignores_term=ignores_term,
            handles=handles,
            inherits_device=inherits_device,
            cpu_pct=cpu_pct,
            rss_mib=rss_mib,
        )
        self.processes[p.pid] = p
        return p

    def _start_server(self, unit: SimUnit, *, age: float, worker_mib: int) -> None:
        main = self.spawn(
            ppid=1, user="root", name="python3", cmdline=SERVER_CMD, unit=unit.name, age=age,
            cpu_pct=3.0, rss_mib=6 * 1024,
        )
        unit.main_pid = main.pid
        used = self._used()
        for tp in range(8):
            mib = worker_mib - (NOTEBOOK_MIB if tp == 0 and worker_mib == MODEL_MIB else 0)
            # a context takes what is free, no more: GPU7 showed 96.1/95.6 GiB
            mib = max(0, min(mib, GPU_TOTAL_MIB - used[tp]))
            self.spawn(
                ppid=main.pid,
                user="root",
                name=f"VLLM::Worker_TP{tp}",
                cmdline=f"VLLM::Worker_TP{tp}",
                unit=unit.name,
                gpu_memory_mib={tp: mib},
                age=max(0.0, age - 20),
                ignores_term=tp == 5,  # stuck in a NCCL barrier: only KILL ends it
                cpu_pct=99.0,  # busy-polling, whether anyone still talks to it or not
                rss_mib=9 * 1024,
            )

    def _build_incident(self) -> None:
        unit = SimUnit(MINIMAX, "vLLM MiniMax-M2.5 (TP=8, EP)", server=MINIMAX_SERVER)
        self.units[unit.name] = unit
        # The next model, installed but never started here, and one that cannot load.
        for name, description, server in (
            (KIMI, "vLLM Kimi-K2.5 INT4 (TP=8)", KIMI_SERVER),
            (DEEPSEEK, "vLLM DeepSeek-V3 (TP=8): too big for these GPUs", DEEPSEEK_SERVER),
        ):
            self.units[name] = SimUnit(name, description, kill_mode="control-group",
                                       unit_file_state="disabled", active=False, server=server)
        lab = self.spawn(
            ppid=1, user="alice", name="jupyter-lab",
            cmdline="/home/alice/.venv/bin/python /home/alice/.venv/bin/jupyter-lab --no-browser",
            unit="session-4.scope", age=26000, pid=90100, cpu_pct=0.7, rss_mib=310,
        )
        self.spawn(
            ppid=lab.pid, user="alice", name="python",
            cmdline="/home/alice/.venv/bin/python -m ipykernel_launcher -f "
            "/home/alice/.local/share/jupyter/runtime/kernel-3f2a.json",
            unit="session-4.scope", gpu_memory_mib={0: NOTEBOOK_MIB}, age=25000, pid=90211,
            cpu_pct=0.3, rss_mib=2400,
            handles=frozenset({_signal.SIGINT}),  # ipykernel: interrupts the cell, lives on
        )
        self._start_server(unit, age=7200, worker_mib=MODEL_MIB)
        unit.events.append((self.now() - 7200, f"Started {unit.name} - {unit.description}."))
        serving = SimLoad(MINIMAX_SERVER, self.now() - 7200, 0, 0)
        serving.script(GPU_TOTAL_MIB)
        unit.loads.append(serving)  # it has served for two hours

    def _run_container(self, c: SimContainer, *, age: float = 0.0) -> None:
        """dockerd (re)starts the container: its main process under the shim."""
        main = self.spawn(ppid=SHIM_PID, user="root", name="python3", cmdline=EMBED_CMD,
                          unit=c.scope, gpu_memory_mib={7: EMBED_MIB}, age=age, cpu_pct=1.5,
                          rss_mib=3 * 1024)
        c.main_pid, c.state = main.pid, "running"
        c.runs.append([self.now() - age, None])

    def _systemd(self, unit: SimUnit, text: str) -> None:
        """A line systemd logs of ``unit`` (in its words, as journalctl -u shows them)."""
        unit.events.append((self.now(), text))

    def _launch(self, unit: SimUnit) -> None:
        """systemd starts the unit's main process (by hand or automatically)."""
        for p in [p for p in self.processes.values() if p.unit == unit.name]:
            self._systemd(unit, f"{unit.name}: Found left-over process {p.pid} ({p.name}) in "
                          "control group while starting unit. Ignoring.")
        self._systemd(unit, f"Started {unit.name} - {unit.description}.")
        used = self._used()
        free = min(GPU_TOTAL_MIB - used[g] for g in unit.server.gpus) if unit.server else 0
        if unit.server is None or (unit.name == MINIMAX and free < unit.server.need_mib(
                GPU_TOTAL_MIB)):  # the incident's server, respawned beside its old workers:
            self._start_server(unit, age=0.0, worker_mib=RESPAWN_MIB)  # squeezes in, fails
            return
        server, now = unit.server, self.now()
        main = self.spawn(ppid=1, user="root", name="python3", cmdline=server.cmdline(),
                          unit=unit.name, cpu_pct=40.0, rss_mib=4 * 1024)
        unit.main_pid = main.pid
        load = SimLoad(server, now, server.need_mib(GPU_TOTAL_MIB), free)
        load.script(GPU_TOTAL_MIB)
        unit.loads.append(load)
        for tp, gpu in enumerate(server.gpus):
            self.spawn(ppid=main.pid, user="root", name=f"VLLM::Worker_TP{tp}",
                       cmdline=f"VLLM::Worker_TP{tp}", unit=unit.name, gpu_memory_mib={gpu: 0},
                       cpu_pct=99.0, rss_mib=9 * 1024)

    def leave_orphans(self) -> None:
        """The seed's first two steps, done already: ``kill -9`` of MiniMax's main process
        (systemd respawned it), then ``systemctl stop`` + ``disable`` (the dashboard's
        ``D``): its workers, the old and the respawned, hold the GPUs under PID 1."""
        unit = self.units[MINIMAX]
        if unit.main_pid is not None:
            self._die(self.processes[unit.main_pid])
        unit.restart_at = self.now()
        self.advance()  # systemd's respawn
        self._stop(unit)
        unit.unit_file_state = "disabled"

    def advance(self) -> None:
        now = self.now()
        for c in self.containers.values():
            if c.restart_at is not None and now >= c.restart_at:
                c.restart_at = None
                c.restart_count += 1
                self._run_container(c)
        for unit in self.units.values():
            if unit.restart_at is not None and now >= unit.restart_at:
                unit.restart_at = None
                unit.n_restarts += 1
                self._systemd(unit, f"{unit.name}: Scheduled restart job, restart counter is "
                              f"at {unit.n_restarts}.")
                self._launch(unit)
            self._load(unit, now)
        self._releases = [r for r in self._releases if r[0] > now]

    def _load(self, unit: SimUnit, now: float) -> None:
        """A started server's workers take their memory as the shards load, or it crashes."""
        load = unit.load
        if unit.server is None or load is None or load.need_mib == 0 or unit.main_pid is None:
            return  # (need 0: the incident's server as it has served for hours)
        crash = load.crash_at
        if crash is not None and now >= crash:
            for p in [p for p in self.processes.values() if p.unit == unit.name]:
                self._die(p)  # exit 1: Restart=always brings it back, to crash again
            return
        mib = int(load.need_mib * load.loaded_fraction(now))
        for p in self.processes.values():
            if p.unit == unit.name and p.gpu_memory_mib:
                gpu = next(iter(p.gpu_memory_mib))
                p.gpu_memory_mib[gpu] = mib

    def _sm_util(self, p: SimProcess, now: float) -> int | None:
        """What NVML's per-process samples would say: a serving worker computes, an orphan
        (its server gone, nobody sends it requests) spins on the CPU with idle SMs. Drawn
        from the pid and the time, not the seeded random stream the rest of the demo uses."""
        if not p.gpu_memory_mib:
            return None  # not listed by the driver: no samples
        unit = self.units.get(p.unit or "")
        load = unit.load if unit is not None else None
        # a worker with no more than a bare CUDA context (the incident's respawn, stuck
        # on memory the orphans hold) has no model to compute with
        context_only = sum(p.gpu_memory_mib.values()) <= RESPAWN_MIB
        serving = (unit is not None and unit.active and unit.main_pid == p.ppid
                   and not context_only
                   and (load is None or load.need_mib == 0 or load.loaded_fraction(now) >= 1.0))
        if serving:
            return 55 + (p.pid * 7 + int(now // 5) * 13) % 36
        if p.unit is not None and p.unit.startswith("docker-"):
            return 12 + (p.pid + int(now // 5) * 3) % 9  # the embedding container, light
        return 0  # an orphan, a loading or crashing worker, an idle notebook kernel

    def _used(self) -> dict[int, int]:
        used = dict.fromkeys(range(8), 0)
        for p in self.processes.values():
            for gpu, mib in [*p.gpu_memory_mib.items(), *p.device_mib.items()]:
                used[gpu] += mib
        for _, gpu, mib in self._releases:
            used[gpu] += mib
        return used

    def _die(self, p: SimProcess) -> None:
        now = self.now()
        self.processes.pop(p.pid, None)
        heirs = [c for c in self.processes.values() if c.ppid == p.pid and c.inherits_device]
        held = {**p.gpu_memory_mib}
        for gpu, mib in p.device_mib.items():
            held[gpu] = held.get(gpu, 0) + mib
        if heirs:  # the device files are still open in a child: nothing is released
            for gpu, mib in held.items():
                heirs[0].device_mib[gpu] = heirs[0].device_mib.get(gpu, 0) + mib
        else:
            for gpu, mib in held.items():
                self._releases.append((now + self.release_delay, gpu, mib))
        for child in self.processes.values():
            if child.ppid == p.pid:
                child.ppid = 1  # re-parented, still holding its CUDA context
        for c in self.containers.values():
            if c.main_pid == p.pid:
                self._init_died(c, now)
        for unit in [u for u in self.units.values() if u.main_pid == p.pid]:
            self._main_died(unit, now)

    def _main_died(self, unit: SimUnit, now: float) -> None:
        unit.main_pid = None
        if not unit.active:
            return  # stopped: _stop says what systemd logs
        load = unit.load
        crashed = load is not None and load.crash_at is not None and now >= load.crash_at
        code, result = (("exited, status=1/FAILURE", "exit-code") if crashed else
                        ("killed, status=9/KILL", "signal"))
        self._systemd(unit, f"{unit.name}: Main process exited, code={code}")
        self._systemd(unit, f"{unit.name}: Failed with result '{result}'.")
        if unit.restart not in ("always", "on-failure"):
            unit.active = False
            return
        unit.restart_at = now + unit.restart_sec
        if unit.kill_mode in ("control-group", "mixed"):
            # the unit stops (its whole cgroup) before it is started again
            for q in [q for q in self.processes.values() if q.unit == unit.name]:
                self._die(q)

    def _init_died(self, c: SimContainer, now: float) -> None:
        """The PID namespace ends with its init; dockerd restarts it as its policy says."""
        c.main_pid = None
        if c.runs and c.runs[-1][1] is None:
            c.runs[-1][1] = now
        # (what escaped it to PID 1 is not in its PID namespace: it lives on)
        for q in [q for q in self.processes.values() if q.unit == c.scope and q.ppid != 1]:
            self.processes.pop(q.pid, None)
            for gpu, mib in q.gpu_memory_mib.items():
                self._releases.append((now + self.release_delay, gpu, mib))
        if not c.manually_stopped and c.restart_policy in (
                "always", "unless-stopped", "on-failure"):
            c.state, c.restart_at = "restarting", now + 0.1
        else:
            c.state = "exited"

    def snapshot(self, cannot_act_reason: str | None = None) -> HostSnapshot:
        """The host now, as its collector would report it."""
        self.advance()
        now = self.now()
        used = self._used()
        sm = dict.fromkeys(range(8), 0)  # the GPU is as busy as its processes together
        for p in self.processes.values():
            p.sm_util_pct = self._sm_util(p, now)
            for gpu in p.gpu_memory_mib:
                sm[gpu] = min(100, sm[gpu] + (p.sm_util_pct or 0))
        gpus = []
        for i in range(8):
            busy = used[i] > 10000
            gpus.append(
                Gpu(
                    index=i,
                    uuid=f"GPU-5e1f{i:02d}c2-8d3a-4b71-9f0e-{0xa1b2c3d40000 + i:012x}",
                    name=GPU_NAME,
                    memory_total_mib=GPU_TOTAL_MIB,
                    memory_used_mib=used[i],
                    memory_reserved_mib=0,
                    utilization_pct=max(sm[i], self._rng.randint(0, 3) if busy else 0),
                    temperature_c=(44 if busy else 33) + self._rng.randint(0, 3),
                    power_w=round((118.0 if busy else 36.0) + self._rng.uniform(0, 6), 1),
                    power_limit_w=600.0,
                )
            )
        sims = list(self.processes.values())
        procs = tuple(process_view(p, self.boot_epoch)
                      for p in sorted(self.processes.values(), key=lambda p: p.pid))
        units = tuple(unit_view(u) for u in self.units.values())
        return HostSnapshot(
            host=self.name,
            taken_at=self.boot_epoch + now,
            gpus=tuple(gpus),
            processes=procs,
            units=units,
            containers=tuple(container_view(c) for c in self.containers.values()
                             if c.state != "removed"),
            source=SourceKind.DEMO,
            boot_id=self.boot_id,
            cpu_pct=round(min(100.0, sum(p.cpu_pct for p in sims) / HOST_CPUS + 0.4), 1),
            mem_used_mib=HOST_BASE_MIB + sum(p.rss_mib for p in sims),
            mem_total_mib=HOST_MEM_MIB,
            can_act=cannot_act_reason is None,
            cannot_act_reason=cannot_act_reason,
        )

    # --- systemd and dockerd --------------------------------------------------------

    def systemctl(self, verb: str, unit: str) -> CommandResult:
        """``systemctl VERB UNIT`` as systemd does it."""
        argv = ("systemctl", verb, unit)
        self.advance()
        u = self.units.get(unit_name(unit))
        if u is None:
            return CommandResult(argv, 5, f"Failed to {verb} {unit}: Unit {unit} not loaded.")
        if verb == "stop":
            self._stop(u)
            return CommandResult(argv, 0, "")
        if verb == "disable":
            if u.unit_file_state == "enabled":
                u.unit_file_state = "disabled"
                return CommandResult(
                    argv, 0,
                    f'Removed "/etc/systemd/system/multi-user.target.wants/{u.name}".',
                )
            return CommandResult(argv, 0, "")
        if verb in ("start", "restart"):
            if verb == "restart" and u.active:
                self._stop(u)
            if not u.active:
                u.active = True
                u.n_restarts = 0  # a start by hand flushes the restart counter
                self._launch(u)
            return CommandResult(argv, 0, "")
        if verb == "enable":
            if u.unit_file_state != "enabled":
                u.unit_file_state = "enabled"
                return CommandResult(argv, 0, f"Created symlink /etc/systemd/system/"
                                     f"multi-user.target.wants/{u.name} → "
                                     f"/etc/systemd/system/{u.name}.")
            return CommandResult(argv, 0, "")
        return CommandResult(argv, 1, f"unsupported verb {verb}")

    def _stop(self, u: SimUnit) -> None:
        # Inactive first: a main process that dies because of stop is not restarted.
        was_active = u.active
        u.active = False
        u.restart_at = None
        main = self.processes.get(u.main_pid) if u.main_pid else None
        victims = [main] if main else []
        if u.kill_mode in ("control-group", "mixed"):
            victims = [p for p in self.processes.values() if p.unit == u.name]
        if was_active:
            self._systemd(u, f"Stopping {u.name} - {u.description}...")
        for p in victims:
            if p is not None:
                self._die(p)
        u.main_pid = None
        if not was_active:
            return
        for p in [p for p in self.processes.values() if p.unit == u.name]:
            self._systemd(u, f"{u.name}: Unit process {p.pid} ({p.name}) remains running after "
                          "unit stopped.")
        self._systemd(u, f"Stopped {u.name} - {u.description}.")

    def container(
        self, runtime: str, verb: str, container: str, stop_timeout: int = 10,
        policy: str | None = None,
    ) -> CommandResult:
        """``docker VERB CONTAINER`` as dockerd does it (no podman here)."""
        argv = docker_argv(runtime, verb, container, stop_timeout, policy)
        self.advance()
        c = self.containers.get(container)
        if c is None or c.state == "removed" or runtime != "docker":
            return CommandResult(argv, 1, f"Error response from daemon: No such container: "
                                 f"{container}")
        if verb == "stop":
            c.manually_stopped, c.restart_at = True, None
            main = self.processes.get(c.main_pid) if c.main_pid else None
            if main is not None:
                self._die(main)
            c.state = "exited"
            return CommandResult(argv, 0, container + "\n")
        if verb == "no-restart":
            c.restart_policy = "no"
            return CommandResult(argv, 0, container + "\n")
        if verb == "rm":
            if c.state != "exited":
                return CommandResult(argv, 1, "Error response from daemon: cannot remove a "
                                     "running container: stop the container before removing")
            c.state = "removed"
            return CommandResult(argv, 0, container + "\n")
        if verb == "restart-policy" and policy:
            c.restart_policy = policy
            return CommandResult(argv, 0, container + "\n")
        if verb in ("start", "restart"):
            if verb == "restart" and c.state == "running":
                main = self.processes.get(c.main_pid) if c.main_pid else None
                if main is not None:
                    c.manually_stopped = True  # docker restart's stop is not a crash
                    self._die(main)
            c.manually_stopped, c.restart_at = False, None
            if c.state != "running":
                self._run_container(c)
            return CommandResult(argv, 0, container + "\n")
        return CommandResult(argv, 1, f"unsupported verb {verb}")

    def signal(self, pid: int, start_ticks: int | None, sig: int) -> SignalOutcome:
        """The kernel's part of ``kill``: to ``pid`` only if it still started then."""
        self.advance()
        p = self.processes.get(pid)
        if p is None:
            return SignalOutcome.GONE
        if p.start_ticks != start_ticks:
            return SignalOutcome.MISMATCH
        if p.state == "D":
            # Uninterruptible sleep: the signal stays pending until the driver call
            # returns, which in this simulation is never.
            return SignalOutcome.SENT
        if sig == _signal.SIGKILL or (sig in ENDING and not p.ignores_term
                                      and sig not in p.handles):
            self._die(p)
        elif sig == _signal.SIGSTOP:
            p.state = "T"
        elif sig == _signal.SIGCONT:
            p.state = "S"
        return SignalOutcome.SENT

    # --- what the model servers say ---------------------------------------------------

    def model_units(self) -> tuple[ModelUnit, ...]:
        """Every unit here that runs a model server, running or not."""
        self.advance()
        out = []
        for u in self.units.values():
            if u.server is None:
                continue
            view = unit_view(u)
            out.append(ModelUnit(u.name, u.description, view.active_state or "",
                                 u.unit_file_state, u.server.cmdline(), "vllm",
                                 u.server.port, view.restart))
        return tuple(sorted(out, key=lambda m: m.name))

    def answers(self, port: int | None) -> bool:
        """Whether a server listens on ``port`` with its engine built."""
        self.advance()
        now = self.now()
        for unit in self.units.values():
            load = unit.load
            if (unit.server is None or unit.server.port != port or load is None
                    or unit.main_pid is None):
                continue
            if now >= load.ready_at and load.fits:
                return True
        return any(c.port == port and c.state == "running" and c.restart_at is None
                   and c.main_pid is not None for c in self.containers.values())

    def container_logged(self, ref: str) -> list[tuple[float, str]] | None:
        """What ``docker logs --timestamps`` of the container shows so far (epoch seconds,
        line): each run's vLLM start-up, its requests, its shutdown; None: no container."""
        c = self.containers.get(ref) or next(
            (c for c in self.containers.values() if c.name == ref), None)
        if c is None or c.state == "removed":
            return None
        self.advance()
        now = self.now()
        lines: list[tuple[float, str]] = []
        for began, ended in c.runs:
            assert began is not None
            end = now if ended is None else min(ended, now)
            startup = [
                (0.0, "INFO: vLLM API server version 0.11.0"),
                (0.4, "INFO: non-default args: {'model': 'BAAI/bge-m3', 'task': 'embed', "
                 "'gpu_memory_utilization': 0.01, 'port': 8001}"),
                (3.0, "INFO: Loading weights took 2.41 seconds"),
                (5.0, "INFO: Model loading took 1.0 GiB and 4.87 seconds"),
                (6.0, "INFO: Started server process [1]"),
                (6.1, "INFO: Uvicorn running on http://0.0.0.0:8001 (Press CTRL+C to quit)"),
            ]
            lines += [(began + dt, text) for dt, text in startup if began + dt <= end]
            t = began + 15.0
            n = 0
            while t <= end:
                n += 1
                lines.append((t, f'INFO: 172.17.0.1:{40000 + n % 9000} - "POST /v1/embeddings '
                              'HTTP/1.1" 200 OK'))
                t += 9.0
            if ended is not None and ended <= now:
                lines.append((ended, "INFO: Shutting down"))
        lines.sort(key=lambda e: e[0])
        return [(self.boot_epoch + t, text) for t, text in lines]

    def logged(self, unit: str) -> list[tuple[float, str, str | None]] | None:
        """Every line ``unit`` and systemd have logged of it so far (epoch seconds, line,
        who logged it: ``systemd[1]``, or None for the server's own); None: no unit."""
        u = self.units.get(unit_name(unit))
        if u is None:
            return None
        self.advance()
        now = self.now()
        lines: list[tuple[float, str, str | None]] = [
            (t, line, None) for load in u.loads for t, line in load.lines_until(now)]
        lines += [(t, line, "systemd[1]") for t, line in u.events if t <= now]
        return [(self.boot_epoch + t, line, origin)
                for t, line, origin in sorted(lines, key=lambda e: e[0])]

