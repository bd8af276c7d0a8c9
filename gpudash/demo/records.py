"""What the demo's simulation keeps of each process, unit and container, and how a real
host's collector writes each on the wire (``PROC_KEYS``, ``UNIT_KEYS``, ``CONTAINER_KEYS``,
``GPU_KEYS`` of the host's protocol; keys whose value is None left out)."""

from __future__ import annotations

import random
from collections.abc import Iterable
from dataclasses import field
from typing import Any

from gpudash.demo.incident import GPU_NAME, GPU_TOTAL_MIB, RESPAWN_MIB
from gpudash.demo.models import SimLoad, SimServer
from gpudash.protocol.wire import CONTAINER, CONTAINER_KEY_FIELDS, kind_owners
from gpudash.record import record

HZ = 100  # clock ticks per second, as in /proc/PID/stat
Json = dict[str, Any]  # a JSON object, as the collector writes it


@record(frozen=False)
class SimProcess:
    pid: int
    ppid: int
    start_ticks: int
    user: str
    name: str
    cmdline: str
    unit: str | None
    gpu_memory_mib: dict[int, int] = field(default_factory=dict)
    ignores_term: bool = False  # stuck: every signal that can be caught waits, only KILL ends it
    handles: frozenset[int] = frozenset()  # caught and survived (a kernel's SIGINT)
    state: str = "S"
    # A child forked from a CUDA process (a compile or dataloader worker) that inherited
    # /dev/nvidia*: when its parent dies, the parent's memory stays, held through it,
    # and the driver lists neither.
    inherits_device: bool = False
    device_mib: dict[int, int] = field(default_factory=dict)
    cpu_pct: float = 0.0  # a TP worker spins (NCCL, shm broadcast); a notebook idles
    rss_mib: int = 300
    # its share of the SM time, as NVML samples it (None: the driver does not list it)
    sm_util_pct: int | None = None
    claim: str | None = None  # "slurm job:ID": a Slurm job's cgroup names it


@record(frozen=False)
class SimContainer:
    """A Docker container as ``docker inspect`` shows it."""

    id: str
    name: str
    image: str
    restart_policy: str = "always"
    restart_count: int = 0
    state: str = "running"  # running | restarting | exited | removed
    main_pid: int | None = None
    restart_at: float | None = None
    manually_stopped: bool = False
    # as `docker run --gpus all --restart always IMAGE` leaves them: what the lint reads
    health: str = "none"
    init: str = "no"
    pid_mode: str = "private"
    port: int | None = None  # the host port it publishes (`docker run -p PORT:8000`)
    # each run of its main process: [started, ended or None] in simulated seconds
    runs: list[list[float | None]] = field(default_factory=list)

    @property
    def scope(self) -> str:
        return f"docker-{self.id}.scope"


@record(frozen=False)
class SimUnit:
    name: str
    description: str
    restart: str = "always"
    kill_mode: str = "process"
    unit_file_state: str = "enabled"
    active: bool = True
    n_restarts: int = 0
    main_pid: int | None = None
    restart_at: float | None = None  # simulated time of a pending automatic restart
    restart_sec: float = 1.0
    # the guides' "retry for ever" (StartLimitIntervalSec=0): the simulation has no start
    # limit, and says so, as the unit lint reads it
    start_limit_interval_s: float = 0.0
    start_limit_burst: int = 5
    timeout_stop_s: float = 90.0
    send_sigkill: str = "yes"
    server: SimServer | None = None  # the model server it runs (None: the incident's own)
    drop_in: str | None = None  # gpudash's drop-in as on disk (read at daemon-reload)
    base_settings: dict[str, Any] | None = None  # the unit's own file's, once reloaded
    loads: list[SimLoad] = field(default_factory=list)  # every start, oldest first
    # what systemd itself logs of the unit (started, main process exited, restart counter,
    # processes left running after stop), as journalctl -u shows it beside the server's
    events: list[tuple[float, str]] = field(default_factory=list)

    @property
    def load(self) -> SimLoad | None:
        return self.loads[-1] if self.loads else None


def process_wire(p: SimProcess, boot_epoch: float) -> Json:
    """``p`` as a real host's collector writes a process (keys whose value is None left
    out)."""
    out: Json = {
        "pid": p.pid,
        "ppid": p.ppid,
        "start_ticks": p.start_ticks,
        "started_at": boot_epoch + p.start_ticks / HZ,
        "state": p.state,
        "user": p.user,
        "name": p.name,
        "cmdline": p.cmdline,
        # what the driver lists; a device holder's memory is N/A (-1), as on a real host
        "gpu_memory_mib": {**{str(g): mib for g, mib in p.gpu_memory_mib.items()},
                           **{str(g): -1 for g in p.device_mib}},
        "cpu_pct": p.cpu_pct,
        "rss_mib": p.rss_mib,
    }
    if p.unit is not None:
        out["cgroup"] = cgroup_of(p)
        out["unit"] = p.unit
        out.update(container_of(p))
    if p.device_mib:
        out["device_gpus"] = sorted(p.device_mib)
    if p.sm_util_pct is not None:
        out["sm_util_pct"] = p.sm_util_pct
    if p.claim is not None:
        out["claim"] = p.claim
    return out


def cgroup_of(p: SimProcess) -> str | None:
    if p.unit is None:
        return None
    if p.claim is not None:  # slurmd's cgroup v2 layout
        return f"/system.slice/{p.unit}/job_{p.claim.partition(':')[2]}/step_batch/user/task_0"
    if p.unit.startswith("session-"):
        return f"/user.slice/user-1001.slice/{p.unit}"
    return f"/system.slice/{p.unit}"


def container_of(p: SimProcess) -> dict[str, Any]:
    """What a real host's collector parses from a container's cgroup, for the demo's."""
    unit = p.unit or ""
    if unit.startswith("docker-") and unit.endswith(".scope"):
        return {"claim": "container:docker/" + unit[len("docker-"):-6]}
    return {}


def container_wire(c: SimContainer) -> Json:
    """``c`` as a real host's collector writes a container."""
    out: Json = {
        "id": c.id, "runtime": "docker", "name": c.name, "image": c.image,
        "state": "restarting" if c.restart_at is not None else c.state,
        "restart_policy": c.restart_policy, "restart_count": c.restart_count,
        "health": c.health, "init": c.init, "pid_mode": c.pid_mode,
    }
    if c.main_pid is not None:
        out["main_pid"] = c.main_pid
    if c.port is not None:
        out["port"] = c.port
    return out


def containers_wire(containers: Iterable[SimContainer]) -> Json:
    """The containers (those not removed) as a real host's collector describes them in
    ``owners``: under their kind, keyed ``docker/ID`` as their processes claim them."""
    wire = [container_wire(c) for c in containers if c.state != "removed"]
    return {CONTAINER: kind_owners(wire, CONTAINER_KEY_FIELDS)} if wire else {}


def unit_state(u: SimUnit) -> tuple[str, str]:
    """The unit's ActiveState and SubState, as systemd says them."""
    if u.active and u.restart_at is not None:
        return "activating", "auto-restart"
    if u.active:
        return "active", "running"
    return "inactive", "dead"


def unit_wire(u: SimUnit) -> Json:
    """``u`` as a real host's collector writes a unit."""
    active, sub = unit_state(u)
    out: Json = {
        "name": u.name,
        "active_state": active,
        "sub_state": sub,
        "unit_file_state": u.unit_file_state,
        "restart": u.restart,
        "kill_mode": u.kill_mode,
        "n_restarts": u.n_restarts,
        "control_group": f"/system.slice/{u.name}",
        "description": u.description,
        "timeout_stop_s": u.timeout_stop_s,
        "restart_s": u.restart_sec,
        "start_limit_interval_s": u.start_limit_interval_s,
        "start_limit_burst": u.start_limit_burst,
        "send_sigkill": u.send_sigkill,
    }
    if u.main_pid is not None:
        out["main_pid"] = u.main_pid
    if u.server is not None:
        out["exec_start"] = f"/usr/bin/{u.server.cmdline()}"
        out["cuda_visible_devices"] = ",".join(map(str, u.server.gpus))
    return out


def docker_argv(runtime: str, verb: str, container: str, stop_timeout: int,
                policy: str | None = None) -> tuple[str, ...]:
    """What ``docker`` is run with for one of the container verbs."""
    words = {"stop": ["stop", "-t", str(stop_timeout)], "no-restart": ["update",
             "--restart=no"], "rm": ["rm"], "restart": ["restart", "-t", str(stop_timeout)],
             "restart-policy": ["update", f"--restart={policy}"]}.get(verb, [verb])
    return (runtime, *words, "--", container)


def sm_util(p: SimProcess, unit: SimUnit | None, now: float) -> int | None:
    """What NVML's per-process samples would say: a serving worker computes, an orphan
    (its server gone, nobody sends it requests) spins on the CPU with idle SMs. Drawn
    from the pid and the time, not the seeded random stream the rest of the demo uses."""
    if not p.gpu_memory_mib:
        return None  # not listed by the driver: no samples
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


def sim_gpu(index: int, used_mib: int, sm_pct: int, rng: random.Random) -> Json:
    """GPU ``index`` as NVML reports it (and the collector writes it): busy (warmer, more
    power) past 10 GB used."""
    busy = used_mib > 10000
    return {
        "index": index,
        "uuid": f"GPU-5e1f{index:02d}c2-8d3a-4b71-9f0e-{0xa1b2c3d40000 + index:012x}",
        "name": GPU_NAME,
        "memory_total_mib": GPU_TOTAL_MIB,
        "memory_used_mib": used_mib,
        "memory_reserved_mib": 0,
        "utilization_pct": max(sm_pct, rng.randint(0, 3) if busy else 0),
        "temperature_c": (44 if busy else 33) + rng.randint(0, 3),
        "power_w": round((118.0 if busy else 36.0) + rng.uniform(0, 6), 1),
        "power_limit_w": 600.0,
    }
