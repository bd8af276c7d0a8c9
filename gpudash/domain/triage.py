"""Triage rules: why is GPU memory held, by whom, and what would stopping it take.

Pure functions of one snapshot (or of the current and the previous one). No I/O.
Names of processes give friendly labels only; no rule depends on them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from enum import StrEnum

from gpudash.domain.model import Container, HostSnapshot, Process, Unit
from gpudash.domain.owners import (
    NO_UNIT,
    Owner,
    OwnerKind,
    container_key,
    container_orphan,
    container_respawned,
    container_warnings,
    owners,
    unit_kind,
)

__all__ = ["NO_UNIT", "Owner", "OwnerKind"]  # re-exported: the owner kind lives in owners


class Flag(StrEnum):
    ORPHAN = "ORPHAN"
    RESPAWNED = "RESPAWNED"
    ZOMBIE = "ZOMBIE"
    D_STATE = "D-STATE"
    UNIT_INACTIVE = "UNIT INACTIVE"
    # holds a GPU's device files without NVML listing it (memory there unknown)
    DEVICE_HOLDER = "DEVICE HOLDER"




@dataclass(frozen=True, slots=True)
class ProcessNode:
    """A process in the holders tree, with its flags and children."""

    process: Process
    flags: frozenset[Flag]
    label: str | None
    children: tuple[ProcessNode, ...] = ()

    def walk(self) -> Iterable[ProcessNode]:
        yield self
        for child in self.children:
            yield from child.walk()


@dataclass(frozen=True, slots=True)
class OwnerGroup:
    """All GPU-relevant processes of one owner (a unit, a session, or nobody)."""

    key: str  # unit name, ``docker:NAME``, ``pod:NS/NAME``, or NO_UNIT
    kind: OwnerKind
    unit: Unit | None
    flags: frozenset[Flag]
    roots: tuple[ProcessNode, ...]
    gpu_memory_mib: Mapping[int, int]
    warnings: tuple[str, ...]
    owner: Owner | None = None  # what it is and what it can do (None: a unit, as before)

    @property
    def total_gpu_memory_mib(self) -> int:
        return sum(self.gpu_memory_mib.values())

    def nodes(self) -> Iterable[ProcessNode]:
        for root in self.roots:
            yield from root.walk()


@dataclass(frozen=True, slots=True)
class HostTriage:
    """The triaged view of one snapshot."""

    snapshot: HostSnapshot
    groups: tuple[OwnerGroup, ...]
    flags: Mapping[int, frozenset[Flag]]  # pid -> flags
    holders_by_gpu: Mapping[int, tuple[tuple[Process, int | None], ...]]

    def group(self, key: str) -> OwnerGroup | None:
        for g in self.groups:
            if g.key == key:
                return g
        return None

    def group_of(self, pid: int) -> OwnerGroup | None:
        for g in self.groups:
            if any(n.process.pid == pid for n in g.nodes()):
                return g
        return None

    def orphans(self) -> tuple[Process, ...]:
        return tuple(
            p for p in self.snapshot.processes if Flag.ORPHAN in self.flags.get(p.pid, ())
        )


# --- owner classification -------------------------------------------------------------

def owner_kind(unit: str | None) -> OwnerKind:
    """The owner kind a unit name alone says (``gpudash.domain.owners.unit_kind``)."""
    return unit_kind(unit)


# --- labels (friendly only) -----------------------------------------------------------

_LABELS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"VLLM::Worker_TP(\d+)|VllmWorker TP(\d+)"), "vLLM TP{0} worker"),
    (re.compile(r"VLLM::EngineCore"), "vLLM engine core"),
    (re.compile(r"sglang::scheduler(?:_DP(\d+))?(?:_TP(\d+))?"), "SGLang scheduler"),
    (re.compile(r"ray::RayWorkerWrapper"), "Ray worker"),
    (re.compile(r"multiprocessing\.spawn import spawn_main|from multiprocessing"), "mp child"),
    (re.compile(r"vllm(\.entrypoints|\s+serve)"), "vLLM server"),
    (re.compile(r"sglang\.launch_server"), "SGLang server"),
    (re.compile(r"ipykernel_launcher"), "Jupyter kernel"),
)


def label(process: Process) -> str | None:
    """A short human label for well-known serving processes, or None."""
    text = process.cmdline or process.name
    for pattern, template in _LABELS:
        m = pattern.search(text)
        if m:
            if "{0}" in template:
                number = next((g for g in m.groups() if g is not None), "?")
                return template.format(number)
            if template == "SGLang scheduler":
                tp = re.search(r"TP(\d+)", text)
                return f"SGLang TP{tp.group(1)} scheduler" if tp else template
            return template
    return None


# --- flags ----------------------------------------------------------------------------


def holds(p: Process) -> bool:
    """Holds GPU memory as NVML says, or may through device files NVML does not list."""
    return p.holds_gpu_memory or bool(p.device_gpus)


def unit_respawned(unit: Unit, previous: Unit | None) -> bool:
    """True when systemd restarted the unit by itself.

    NRestarts counts automatic restarts since the unit was last started by hand, so it
    stays a fact while the operator looks; a MainPID change with NRestarts growing
    between two samples is the moment it happened.
    """
    if previous is not None and previous.main_pid != unit.main_pid:
        if (unit.n_restarts or 0) > (previous.n_restarts or 0):
            return True
    return (unit.n_restarts or 0) > 0


def _descendants(pid: int, children: Mapping[int, list[Process]]) -> set[int]:
    seen: set[int] = set()
    stack = [pid]
    while stack:
        for child in children.get(stack.pop(), ()):
            if child.pid not in seen:
                seen.add(child.pid)
                stack.append(child.pid)
    return seen


def process_flags(snapshot: HostSnapshot) -> dict[int, frozenset[Flag]]:
    """Flags of every process in the snapshot.

    ORPHAN means "holds GPU memory although the service it belongs to is gone or has been
    restarted without it": the unit is inactive/failed, or the process was re-parented
    (to PID 1 or a subreaper) and is older than the unit's current main process. Processes
    of login sessions and of no unit are never ORPHAN: a re-parented notebook kernel or a
    nohup'd job is somebody's live work, and reaping must not touch it.

    DEVICE_HOLDER means "holds a GPU's device files although the driver does not list it"
    (a forked child that keeps a dead CUDA process's memory); such a process is a holder
    for every other rule, ORPHAN included.
    """
    units = {u.name: u for u in snapshot.units}
    by_pid = {p.pid: p for p in snapshot.processes}
    children: dict[int, list[Process]] = {}
    for p in snapshot.processes:
        if p.ppid is not None:
            children.setdefault(p.ppid, []).append(p)

    live_trees: dict[str, set[int]] = {}
    for u in snapshot.units:
        if u.main_pid:
            live_trees[u.name] = {u.main_pid} | _descendants(u.main_pid, children)

    owner_by_pid = owners(snapshot)
    flags: dict[int, frozenset[Flag]] = {}
    for p in snapshot.processes:
        f: set[Flag] = set()
        if p.state == "Z":
            f.add(Flag.ZOMBIE)
        elif p.state == "D":
            f.add(Flag.D_STATE)
        if p.device_gpus:
            f.add(Flag.DEVICE_HOLDER)
        owner = owner_by_pid[p.pid]
        if owner.kind in (OwnerKind.CONTAINER, OwnerKind.POD):
            # A container's processes answer to its runtime, not to the scope unit.
            if holds(p) and container_orphan(p, owner):
                f.add(Flag.ORPHAN)
            c = owner.container
            if c is not None and c.main_pid == p.pid and container_respawned(owner):
                f.add(Flag.RESPAWNED)
            flags[p.pid] = frozenset(f)
            continue
        unit = units.get(p.unit or "")
        if unit is not None and owner_kind(unit.name) is OwnerKind.SERVICE:
            if unit.is_down:
                f.add(Flag.UNIT_INACTIVE)
            if holds(p) and _is_orphan(p, unit, by_pid, live_trees):
                f.add(Flag.ORPHAN)
            if unit.main_pid == p.pid and unit_respawned(unit, None):
                f.add(Flag.RESPAWNED)
        flags[p.pid] = frozenset(f)
    return flags


def _is_orphan(
    p: Process, unit: Unit, by_pid: Mapping[int, Process], live_trees: Mapping[str, set[int]]
) -> bool:
    if unit.is_down:
        return True
    if p.pid in live_trees.get(unit.name, ()):
        return False
    parent = by_pid.get(p.ppid) if p.ppid is not None else None
    reparented = p.ppid == 1 or (parent is not None and parent.unit != p.unit)
    if not reparented:
        return False
    main = by_pid.get(unit.main_pid) if unit.main_pid else None
    if main is None or main.start_ticks is None or p.start_ticks is None:
        # No live main to compare with: a re-parented holder of a unit without a main
        # process is left over from a previous incarnation.
        return unit.main_pid is None
    return p.start_ticks < main.start_ticks


# --- warnings -------------------------------------------------------------------------


def unit_warnings(unit: Unit, group_flags: frozenset[Flag], orphan_count: int) -> tuple[str, ...]:
    """Plain-words advice for the operator about this unit."""
    w: list[str] = []
    restart = (unit.restart or "").lower()
    if restart in ("always", "on-failure", "on-abnormal", "on-abort", "on-watchdog"):
        if not unit.is_down:
            w.append(
                f"Restart={unit.restart}: killing the main PID respawns it; stop the unit instead."
            )
    if unit.unit_file_state == "enabled" and unit.is_down and orphan_count:
        w.append("Unit is stopped but still enabled: it will start again at boot; disable it.")
    if (unit.kill_mode or "") in ("process", "none") and not unit.is_down:
        w.append(
            f"KillMode={unit.kill_mode}: stopping the unit leaves its workers running; "
            "reap them after stopping (reclaim does both)."
        )
    if orphan_count:
        w.append(
            f"{orphan_count} orphaned process(es) of this unit still hold GPU memory: reap them."
        )
    if Flag.RESPAWNED in group_flags:
        w.append(
            f"systemd restarted this unit {unit.n_restarts} time(s): "
            "a new main process took the old one's place."
        )
    return tuple(w)


# --- the whole triage -----------------------------------------------------------------


def holders_by_gpu(snapshot: HostSnapshot) -> dict[int, tuple[tuple[Process, int | None], ...]]:
    """For each GPU, the processes holding memory on it, biggest first (device holders,
    whose memory is unknown, last)."""
    out: dict[int, list[tuple[Process, int | None]]] = {g.index: [] for g in snapshot.gpus}
    for p in snapshot.processes:
        for gpu, mib in p.gpu_memory_mib.items():
            if mib is None or mib > 0:
                out.setdefault(gpu, []).append((p, mib))
        for gpu in p.device_gpus:
            if gpu not in p.gpu_memory_mib:
                out.setdefault(gpu, []).append((p, None))
    return {
        gpu: tuple(sorted(items, key=lambda pm: -(pm[1] or 0))) for gpu, items in out.items()
    }


def _tree(
    members: list[Process], flags: Mapping[int, frozenset[Flag]], main_pid: int | None
) -> tuple[ProcessNode, ...]:
    pids = {p.pid for p in members}
    kids: dict[int, list[Process]] = {}
    roots: list[Process] = []
    for p in members:
        if p.ppid in pids and p.ppid != p.pid:
            kids.setdefault(p.ppid, []).append(p)
        else:
            roots.append(p)

    def build(p: Process) -> ProcessNode:
        children = sorted(kids.get(p.pid, []), key=lambda c: (c.start_ticks or 0, c.pid))
        return ProcessNode(p, flags.get(p.pid, frozenset()), label(p), tuple(map(build, children)))

    # The unit's main process first, then the rest oldest first: orphans of an earlier
    # incarnation sort before the respawned main's new tree only by age, which is the truth.
    roots.sort(key=lambda p: (p.pid != main_pid, p.start_ticks or 0, p.pid))
    return tuple(build(r) for r in roots)


def triage(snapshot: HostSnapshot, previous: HostSnapshot | None = None) -> HostTriage:
    """Group the snapshot's processes by owner, flag them, and explain each unit."""
    flags = process_flags(snapshot)
    units = {u.name: u for u in snapshot.units}
    prev_units = {u.name: u for u in previous.units} if previous else {}

    owner_by_pid = owners(snapshot)
    members: dict[str, list[Process]] = {}
    owner_of_key: dict[str, Owner] = {}
    for p in snapshot.processes:
        owner = owner_by_pid[p.pid]
        members.setdefault(owner.key, []).append(p)
        owner_of_key.setdefault(owner.key, owner)

    groups: list[OwnerGroup] = []
    for key, procs in members.items():
        owner = owner_of_key[key]
        # A service holding nothing is still shown (its main process, its state); other
        # owners appear only while they hold memory.
        if not any(holds(p) for p in procs) and owner.kind is not OwnerKind.SERVICE:
            continue
        if owner.kind in (OwnerKind.CONTAINER, OwnerKind.POD):
            groups.append(_container_group(owner, procs, flags))
            continue
        unit = units.get(key)
        kind = owner.kind
        gflags: set[Flag] = set()
        if unit is not None and kind is OwnerKind.SERVICE:
            if unit.is_down:
                gflags.add(Flag.UNIT_INACTIVE)
            if unit_respawned(unit, prev_units.get(key)):
                gflags.add(Flag.RESPAWNED)
        orphan_count = sum(1 for p in procs if Flag.ORPHAN in flags[p.pid])
        if orphan_count:
            gflags.add(Flag.ORPHAN)
        mem: dict[int, int] = {}
        for p in procs:
            for gpu, mib in p.gpu_memory_mib.items():
                mem[gpu] = mem.get(gpu, 0) + (mib or 0)
            for gpu in p.device_gpus:
                mem.setdefault(gpu, 0)
        warnings = unit_warnings(unit, frozenset(gflags), orphan_count) if unit else ()
        groups.append(
            OwnerGroup(
                key=key,
                kind=kind,
                unit=unit,
                flags=frozenset(gflags),
                roots=_tree(procs, flags, unit.main_pid if unit else None),
                gpu_memory_mib=mem,
                warnings=warnings,
                owner=owner,
            )
        )
    # Units the host reports without any process left (a reclaimed service) stay visible:
    # "inactive, disabled, 0 GiB" is the proof the operator is looking for.
    for unit in snapshot.units:
        if unit.name not in members and owner_kind(unit.name) is OwnerKind.SERVICE:
            gflags = {Flag.UNIT_INACTIVE} if unit.is_down else set()
            if unit_respawned(unit, prev_units.get(unit.name)):
                gflags.add(Flag.RESPAWNED)
            groups.append(OwnerGroup(unit.name, OwnerKind.SERVICE, unit, frozenset(gflags), (),
                                     {}, unit_warnings(unit, frozenset(gflags), 0),
                                     Owner(OwnerKind.SERVICE, unit.name, unit)))
    # A stopped container stays visible too ("exited, restart policy no, 0 GiB").
    for c in snapshot.containers:
        from_container = _container_left(c, owner_of_key)
        if from_container is not None:
            groups.append(from_container)
    groups.sort(key=lambda g: (g.kind is OwnerKind.NONE, -g.total_gpu_memory_mib, g.key))
    return HostTriage(snapshot, tuple(groups), flags, holders_by_gpu(snapshot))


def _memory(procs: Iterable[Process]) -> dict[int, int]:
    mem: dict[int, int] = {}
    for p in procs:
        for gpu, mib in p.gpu_memory_mib.items():
            mem[gpu] = mem.get(gpu, 0) + (mib or 0)
        for gpu in p.device_gpus:
            mem.setdefault(gpu, 0)
    return mem


def _container_group(owner: Owner, procs: list[Process], flags: Mapping[int, frozenset[Flag]]
                     ) -> OwnerGroup:
    """The group of a container's or a pod's processes, warned per its runtime's rules."""
    gflags: set[Flag] = set()
    if container_respawned(owner):
        gflags.add(Flag.RESPAWNED)
    orphan_count = sum(1 for p in procs if Flag.ORPHAN in flags[p.pid])
    if orphan_count:
        gflags.add(Flag.ORPHAN)
    main = owner.container.main_pid if owner.container is not None else None
    return OwnerGroup(owner.key, owner.kind, owner.unit, frozenset(gflags),
                      _tree(procs, flags, main), _memory(procs),
                      container_warnings(owner, orphan_count), owner)


def _container_left(c: Container, seen: Mapping[str, Owner]) -> OwnerGroup | None:
    """A container the host reports without any process (stopped), as an empty group."""
    if c.state == "removed" or any(o.container_id == c.id for o in seen.values()):
        return None
    owner = Owner(OwnerKind.CONTAINER, container_key(c.runtime, c.label), None, c, c.id,
                  c.runtime)
    gflags = {Flag.RESPAWNED} if container_respawned(owner) else set()
    return OwnerGroup(owner.key, owner.kind, None, frozenset(gflags), (), {},
                      container_warnings(owner, 0), owner)


def _same_objects(a: tuple[object, ...], b: tuple[object, ...]) -> bool:
    return len(a) == len(b) and all(x is y for x, y in zip(a, b, strict=True))


def retriage(
    snapshot: HostSnapshot, previous: HostSnapshot | None, last: HostTriage | None
) -> HostTriage:
    """``triage(snapshot, previous)``, reusing ``last`` (the triage of ``previous``) when
    nothing it rests on changed: the very same process and unit objects (the wire
    decoder keeps the object of one that did not change), the same GPUs, and no unit
    flagged as respawned (that flag compares a unit with the sample before, so it goes
    away by itself). Only the snapshot (its time, the host's CPU) is the new one."""
    if (
        last is not None
        and previous is not None
        and last.snapshot is previous
        and _same_objects(snapshot.processes, previous.processes)
        and _same_objects(snapshot.units, previous.units)
        and _same_objects(snapshot.containers, previous.containers)
        and _same_objects(snapshot.pods, previous.pods)
        and [g.index for g in snapshot.gpus] == [g.index for g in previous.gpus]
        and not any(Flag.RESPAWNED in g.flags for g in last.groups)
    ):
        return replace(last, snapshot=snapshot)
    return triage(snapshot, previous)
