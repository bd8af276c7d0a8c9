"""The demo host's world: processes, systemd units and Docker containers on simulated time.

``HostSimulation`` does the kernel's part (pids, parents, signals, GPU memory released a
short delay after its holder dies) and systemd's (``Restart=``, ``KillMode=``, unit
files); its ``Dockerd`` (``gpudash.demo.dockerd``) keeps the containers. The host it
builds is the incident's (``gpudash.demo.incident``). It knows nothing of the host
protocol but the answers it gives and the snapshot its collector would write (``wire``).
``DemoHost`` serves it.
"""

from __future__ import annotations

import random
import signal as _signal
import time

from gpudash.demo.dockerd import EMBED_ID, EMBED_IMAGE, EMBED_NAME, EMBED_PORT, Dockerd
from gpudash.demo.incident import (
    DEEPSEEK,
    DEEPSEEK_SERVER,
    GPU_TOTAL_MIB,
    HOST_BASE_MIB,
    HOST_CPUS,
    HOST_MEM_MIB,
    KIMI,
    KIMI_SERVER,
    MINIMAX,
    MINIMAX_SERVER,
    MODEL_MIB,
    NOTEBOOK_MIB,
    RERANK,
    RERANK_SERVER,
    RESPAWN_MIB,
    SERVER_CMD,
)
from gpudash.demo.models import SimLoad
from gpudash.demo.records import (
    HZ,
    Json,
    SimContainer,
    SimProcess,
    SimUnit,
    containers_wire,
    process_wire,
    sim_gpu,
    sm_util,
    unit_state,
    unit_wire,
)
from gpudash.domain.clock import Clock, ScaledClock
from gpudash.domain.model import SourceKind, unit_name
from gpudash.engine.signals import PICKABLE
from gpudash.protocol.shell_listener import ShellListener
from gpudash.protocol.source import CommandResult, ModelUnit, SignalOutcome
from gpudash.protocol.wire import PROTOCOL

# the signals whose default action ends a process that does not catch them
ENDING = frozenset(p.sig for p in PICKABLE if p.ends)


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
        clock: Clock | None = None,
    ) -> None:
        self.name = name
        # one clock for the world, its stream and whoever follows it (a test steps it)
        self.clock: Clock = clock if clock is not None else ScaledClock(speed)
        self.release_delay = release_delay
        self._rng = random.Random(seed)
        self._clock0 = self.clock.now()
        self.boot_epoch = time.time() - 3 * 86400  # booted three days ago
        self._t0_sim = 3 * 86400.0  # simulated seconds since boot at start
        self._next_pid = 215000
        self.processes: dict[int, SimProcess] = {}
        self.units: dict[str, SimUnit] = {}
        self.dockerd = Dockerd(self)
        self.containers = self.dockerd.containers
        # port -> the process (pid, comm, cgroup text) that bound it while its server
        # was down: a borrowed ready URL, refused for anyone else
        self.squatters: dict[int, ShellListener] = {}
        self._releases: list[tuple[float, int, int]] = []  # (at, gpu, mib)
        self.owners: Json = {}  # the wire's "owners": a Slurm node's jobs (demo.slurm)
        self.boot_id = f"5e1f0c2a-8d3a-4b71-9f0e-{random.Random(-seed).getrandbits(48):012x}"
        self._build_incident()
        if containers:
            self.dockerd.add(SimContainer(EMBED_ID, EMBED_NAME, EMBED_IMAGE, port=EMBED_PORT),
                             age=5400)
            self.units[RERANK] = SimUnit(
                RERANK, "vLLM bge-reranker-v2-m3 (GPU 7): fits where vllm-embed is",
                kill_mode="control-group", unit_file_state="disabled", active=False,
                server=RERANK_SERVER)

    # --- simulated clock ------------------------------------------------------------

    def now(self) -> float:
        """Simulated seconds since boot."""
        return self._t0_sim + self.clock.now() - self._clock0

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
            self.die(self.processes[unit.main_pid])
        unit.restart_at = self.now()
        self.advance()  # systemd's respawn
        self._stop(unit)
        unit.unit_file_state = "disabled"

    def advance(self) -> None:
        now = self.now()
        self.dockerd.advance(now)
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
                self.die(p)  # exit 1: Restart=always brings it back, to crash again
            return
        mib = int(load.need_mib * load.loaded_fraction(now))
        for p in self.processes.values():
            if p.unit == unit.name and p.gpu_memory_mib:
                gpu = next(iter(p.gpu_memory_mib))
                p.gpu_memory_mib[gpu] = mib

    def _used(self) -> dict[int, int]:
        used = dict.fromkeys(range(8), 0)
        for p in self.processes.values():
            for gpu, mib in [*p.gpu_memory_mib.items(), *p.device_mib.items()]:
                used[gpu] += mib
        for _, gpu, mib in self._releases:
            used[gpu] += mib
        return used

    def release_later(self, gpu: int, mib: int, now: float) -> None:
        """``mib`` of ``gpu`` come back ``release_delay`` after ``now`` (the driver's pace)."""
        self._releases.append((now + self.release_delay, gpu, mib))

    def die(self, p: SimProcess) -> None:
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
                self.release_later(gpu, mib, now)
        for child in self.processes.values():
            if child.ppid == p.pid:
                child.ppid = 1  # re-parented, still holding its CUDA context
        self.dockerd.died(p.pid, now)
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
                self.die(q)

    def wire(self, cannot_act_reason: str | None = None) -> Json:
        """The host now, as its collector writes a snapshot (keys whose value is None
        left out): what ``DemoHost`` sends down its wire."""
        self.advance()
        now = self.now()
        used = self._used()
        sm = dict.fromkeys(range(8), 0)  # the GPU is as busy as its processes together
        for p in self.processes.values():
            p.sm_util_pct = sm_util(p, self.units.get(p.unit or ""), now)
            for gpu in p.gpu_memory_mib:
                sm[gpu] = min(100, sm[gpu] + (p.sm_util_pct or 0))
        sims = list(self.processes.values())
        snap: Json = {
            "v": PROTOCOL,
            "host": self.name,
            "taken_at": self.boot_epoch + now,
            "boot_id": self.boot_id,
            "source": SourceKind.DEMO.value,
            "errors": [],
            "can_act": cannot_act_reason is None,
            "cpu_pct": round(min(100.0, sum(p.cpu_pct for p in sims) / HOST_CPUS + 0.4), 1),
            "mem_used_mib": HOST_BASE_MIB + sum(p.rss_mib for p in sims),
            "mem_total_mib": HOST_MEM_MIB,
            "gpus": {str(i): sim_gpu(i, used[i], sm[i], self._rng) for i in range(8)},
            "procs": {str(p.pid): process_wire(p, self.boot_epoch) for p in sims},
            "units": {u.name: unit_wire(u) for u in self.units.values()},
            "owners": {**self.owners, **containers_wire(self.containers.values())},
        }
        if cannot_act_reason is not None:
            snap["cannot_act_reason"] = cannot_act_reason
        return snap

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
                self.die(p)
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
        self.advance()
        return self.dockerd.command(runtime, verb, container, stop_timeout, policy)

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
            self.die(p)
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
            active, _sub = unit_state(u)
            out.append(ModelUnit(u.name, u.description, active, u.unit_file_state,
                                 u.server.cmdline(), "vllm", u.server.port, u.restart))
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
        return self.dockerd.answers(port)

    def container_logged(self, ref: str) -> list[tuple[float, str]] | None:
        """What ``docker logs --timestamps`` of the container shows so far (epoch seconds,
        line); None: no container."""
        if self.dockerd.find(ref) is None:
            return None
        self.advance()
        lines = self.dockerd.logged(ref, self.now())
        return None if lines is None else [(self.boot_epoch + t, text) for t, text in lines]

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

