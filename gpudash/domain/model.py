"""Immutable snapshots of one GPU host: GPUs, the processes that matter, their units.

A value the host does not report is ``None`` (shown as N/A, written as JSON ``null``),
never 0 and never an exception: a driver that cannot tell power draw must not make the
dashboard claim 0 W.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import field
from enum import StrEnum
from typing import TypeAlias

from gpudash.record import record

# One fact a host reports of an owner (``HostSnapshot.owners``): text, a number, a yes/no,
# or a list of numbers (GPU indexes).
Fact: TypeAlias = str | int | bool | tuple[int, ...]


@record
class Gpu:
    """One GPU as the driver reported it at sample time."""

    index: int
    uuid: str | None = None
    name: str | None = None
    memory_total_mib: int | None = None
    memory_used_mib: int | None = None
    memory_reserved_mib: int | None = None
    utilization_pct: int | None = None
    temperature_c: int | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    error: str | None = None  # e.g. "GPU is lost": the row stays, its values are N/A
    # What was checked of memory no process holds (None: not said). NVML's list of its
    # compute processes: "read", or why not ("denied", "unsupported", "error"); the scan
    # of every process's /dev/nvidia* files while memory on it is unexplained: "clear"
    # (nobody else has them), "held" (someone NVML does not list has), "partial" (some
    # processes' files could not be read); None: not scanned (too little unexplained)
    process_list: str | None = None
    device_scan: str | None = None
    mig_mode: str | None = None  # "on" / "off"
    display_active: str | None = None  # "on": a display (the console) is on this GPU
    persistence_mode: str | None = None  # "on" / "off"

    @property
    def memory_free_mib(self) -> int | None:
        if self.memory_total_mib is None or self.memory_used_mib is None:
            return None
        return self.memory_total_mib - self.memory_used_mib


@record
class Process:
    """A process that holds GPU memory or belongs to a unit that does.

    ``(pid, start_ticks)`` is the identity of a process: pids are recycled, the start time
    (``/proc/PID/stat`` field 22, clock ticks since boot) is not. Every signal the engine
    sends is checked against it on the host.
    """

    pid: int
    ppid: int | None = None
    start_ticks: int | None = None
    started_at: float | None = None  # epoch seconds, for "age"
    state: str | None = None  # R S D Z T I as in /proc/PID/stat
    user: str | None = None
    name: str = ""  # comm
    cmdline: str = ""  # untrusted text from the host: shown literally, never interpreted
    cgroup: str | None = None  # e.g. /system.slice/vllm-minimax-m25.service
    unit: str | None = None  # e.g. vllm-minimax-m25.service, session-4.scope
    gpu_memory_mib: Mapping[int, int | None] = field(default_factory=dict)
    cpu_pct: float | None = None  # % of one CPU since the collector last read it (or lifetime)
    rss_mib: int | None = None  # resident memory
    # % of the SM time it used since the last sample (nvmlDeviceGetProcessUtilization), the
    # most on any of its GPUs; None: the driver cannot tell (nvidia-smi, older drivers)
    sm_util_pct: int | None = None
    # GPUs whose device files (/dev/nvidia<N>) it holds open or mapped while NVML does not
    # list it: a forked child keeping a dead CUDA process's memory. Its memory there is
    # unknown (None in gpu_memory_mib), not attributed by the driver.
    device_gpus: tuple[int, ...] = ()
    pgid: int | None = None  # its process group (a model server's processes share one)
    # What the host parsed of its cgroup under a user's own systemd (``user@UID.service``):
    # that user's uid and the unit there (their rootless containers too).
    user_uid: int | None = None
    user_unit: str | None = None
    # The driver lists it but the collector could not read it (``UNREADABLE``): why.
    unreadable: str | None = None
    # ``KIND:KEY``: the owner its cgroup names (a container, a pod, a Slurm job), whose
    # facts the snapshot holds by kind and key; its kind's adapter reads it
    claim: str | None = None

    @property
    def claimed(self) -> tuple[str, str] | None:
        """``(kind, key)`` of ``claim``."""
        if self.claim is None:
            return None
        kind, _, key = self.claim.partition(":")
        return kind, key

    @property
    def in_user_subtree(self) -> bool:
        """Under a user's own systemd (``user@UID.service``): systemd hands that subtree to
        the user, who names cgroups there at will, so it is theirs at any depth; no name
        there makes it a Kubernetes pod or one of the host's containers."""
        return self.user_uid is not None

    @property
    def holds_gpu_memory(self) -> bool:
        return any(v is None or v > 0 for v in self.gpu_memory_mib.values())

    @property
    def total_gpu_memory_mib(self) -> int:
        return sum(v for v in self.gpu_memory_mib.values() if v is not None)

    @property
    def identity(self) -> tuple[int, int | None]:
        return (self.pid, self.start_ticks)


# Why a process the driver lists could not be read on the host, and what to do about it.
UNREADABLE = {
    "gone": "gone from /proc while the driver still counts its memory (it is exiting, or "
            "the driver has not let go yet)",
    "hidden": "hidden by /proc's hidepid: run with --sudo (or as root) to see it",
    "denied": "not readable by this login: run with --sudo (or as root) to see it",
    "namespace": "in another PID namespace than the collector: run gpudash on the host "
                 "itself, not inside a container",
}


@record
class Unit:
    """The systemd properties that decide what stopping or killing will do."""

    name: str
    active_state: str | None = None  # active, inactive, failed, activating, deactivating
    sub_state: str | None = None  # running, dead, auto-restart, ...
    unit_file_state: str | None = None  # enabled, disabled, masked, static
    restart: str | None = None  # no, always, on-failure, ...
    kill_mode: str | None = None  # control-group, process, mixed, none
    n_restarts: int | None = None
    main_pid: int | None = None  # None when systemd reports 0
    control_group: str | None = None
    description: str | None = None
    # how it stops and restarts, in seconds (None: infinity, or not reported)
    timeout_stop_s: float | None = None
    restart_s: float | None = None
    start_limit_interval_s: float | None = None  # 0: no start limit at all
    start_limit_burst: int | None = None
    exec_start: str | None = None  # its first ExecStart's argv, joined by spaces
    send_sigkill: str | None = None  # "yes"/"no": SIGKILL what outlives TimeoutStopSec
    cuda_visible_devices: str | None = None  # "0,1": the GPUs its Environment gives it

    @property
    def visible_gpus(self) -> tuple[int, ...] | None:
        """The GPU indices CUDA_VISIBLE_DEVICES gives the unit, or None: not said."""
        text = self.cuda_visible_devices or ""
        words = text.split(",")
        if not text or not all(w.isascii() and w.isdigit() and len(w) <= 2 for w in words):
            return None  # not said, or not indices (UUIDs; a host's garbage, cut)
        return tuple(int(w) for w in words)

    @property
    def is_down(self) -> bool:
        return self.active_state in ("inactive", "failed")


@record
class Container:
    """A Docker or Podman container that processes' cgroups name, as its runtime inspects it.

    ``state`` is the runtime's (running, exited, restarting, paused, created, dead), or
    ``removed`` when the runtime said no such container exists; None: not inspected (no
    CLI, or it did not answer)."""

    id: str  # the full id, as the cgroup path names it
    runtime: str  # docker | podman
    name: str | None = None
    image: str | None = None
    state: str | None = None
    restart_policy: str | None = None  # no, always, unless-stopped, on-failure
    restart_count: int | None = None  # restarts the runtime made by itself
    main_pid: int | None = None  # None when it is not running
    # what the container lint reads (None: not said): "none" or the health check's status;
    # "yes"/"no" for --init; the PID namespace ("host", "private", "container:ID")
    health: str | None = None
    init: str | None = None
    pid_mode: str | None = None
    port: int | None = None  # the host TCP port it publishes (its lowest one's)

    @property
    def short_id(self) -> str:
        return self.id[:12]

    @property
    def label(self) -> str:
        return self.name or self.short_id

    @property
    def is_down(self) -> bool:
        return self.state in ("exited", "dead", "created", "removed")


@record
class Pod:
    """A Kubernetes pod: its UID from the cgroup path; namespace and name where crictl
    answers."""

    uid: str
    namespace: str | None = None
    name: str | None = None


@record
class Changes:
    """What differs from the previous snapshot of the same host, decided once where the
    data enters (the wire decoder knows it from the host's merge patch) and carried with
    the snapshot: triage, history and the screens act on it instead of comparing again.

    Each set holds the keys (pid, GPU index, unit name) added, changed or removed;
    ``None`` means not known (the first snapshot, a source that does not tell):
    everything may have changed. ``structure`` is False when no process changed but in
    its measurements (CPU, RSS) and no unit or owner (a container, a pod, a job)
    changed: the triage of the previous snapshot still holds.
    """

    gpus: frozenset[int] | None = None
    processes: frozenset[int] | None = None
    units: frozenset[str] | None = None
    structure: bool = True

    @property
    def nothing(self) -> bool:
        """Nothing at all changed (only the snapshot's time and the host's own figures)."""
        return not self.structure and self.gpus == frozenset() and \
            self.processes == frozenset()


EVERYTHING = Changes()


class SourceKind(StrEnum):
    NVML = "nvml"
    NVIDIA_SMI = "nvidia-smi"
    DEMO = "demo"
    SHELL = "shell"  # plain-shell fallback on a host without python3: degraded
    NONE = "none"  # neither NVML nor nvidia-smi: no GPU facts at all (degraded)


@record
class HostSnapshot:
    """Everything known about one host at one instant."""

    host: str
    taken_at: float  # epoch seconds on the collecting side's clock
    gpus: tuple[Gpu, ...] = ()
    processes: tuple[Process, ...] = ()
    units: tuple[Unit, ...] = ()
    source: SourceKind = SourceKind.NVML
    degraded: bool = False
    errors: tuple[str, ...] = ()  # problems the collector met but survived
    can_act: bool = True  # the login may run systemctl / signal processes
    cannot_act_reason: str | None = None
    # which processes the collector sees: "full", "hidepid" (other users' hidden: /proc
    # mounted so, not root), "namespace" (a child PID namespace sees only its own)
    pid_view: str | None = None
    boot_id: str | None = None  # the host's boot: a process identity holds within one boot
    cpu_pct: float | None = None  # host CPU busy, % of all CPUs, since the previous sample
    # CPU seconds the collector (and what it ran) used on the host since it started
    collector_cpu_s: float | None = None
    mem_used_mib: int | None = None  # host RAM in use: total less what is available
    mem_total_mib: int | None = None
    # the typed view of the containers and pods the host describes in ``owners``
    containers: tuple[Container, ...] = ()
    pods: tuple[Pod, ...] = ()
    # kind -> key -> fact -> value: what the host said of the owners its processes claim
    # (a container's, a pod's, a Slurm job's); the key "" holds the kind's facts about the
    # host (a Slurm node's state). Host text.
    owners: Mapping[str, Mapping[str, Mapping[str, Fact]]] = field(default_factory=dict)
    # what changed since this host's previous snapshot (not part of what the host said:
    # not compared, not written out)
    changes: Changes = field(default=EVERYTHING, compare=False, repr=False)

    def container(self, ref: str) -> Container | None:
        """The container with this id, id prefix (12+ characters) or name."""
        for c in self.containers:
            if c.id == ref or c.name == ref or (len(ref) >= 12 and c.id.startswith(ref)):
                return c
        return None

    def facts(self, kind: str, key: str) -> Mapping[str, Fact]:
        """What the host said of the owner ``key`` of ``kind`` ("": of the host); {}."""
        return self.owners.get(kind, {}).get(key, {})

    def pod(self, uid: str) -> Pod | None:
        for p in self.pods:
            if p.uid == uid:
                return p
        return None

    def process(self, pid: int) -> Process | None:
        for p in self.processes:
            if p.pid == pid:
                return p
        return None

    def unit(self, name: str) -> Unit | None:
        for u in self.units:
            if u.name == name:
                return u
        return None

    def gpu(self, index: int) -> Gpu | None:
        for g in self.gpus:
            if g.index == index:
                return g
        return None

    def used_by_gpu(self) -> dict[int, int | None]:
        return {g.index: g.memory_used_mib for g in self.gpus}


def unit_name(name: str) -> str:
    """Normalise a unit name given by a user: ``vllm`` -> ``vllm.service``."""
    if "." in name.rsplit("/", 1)[-1] and name.rsplit(".", 1)[-1] in UNIT_SUFFIXES:
        return name
    return name + ".service"


UNIT_SUFFIXES = frozenset(
    {"service", "scope", "slice", "socket", "target", "mount", "timer", "path", "swap"}
)
