"""Triage rules: why is GPU memory held, by whom, and what would stopping it take.

Pure functions of one snapshot (or of the current and the previous one). No I/O. One
pass: the process tree and every process's owner are computed once; each owner's rules
(``gpudash.domain.owners``) say which of its processes are orphans and why; triage reads
owners, never the reverse. What changed since the previous sample (``snapshot.changes``)
decides whether the previous triage still holds.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import field, replace
from enum import StrEnum

from gpudash.domain.crashloop import looping_now
from gpudash.domain.lint import Finding, Learned
from gpudash.domain.model import EVERYTHING, HostSnapshot, Process, Unit
from gpudash.domain.orphan_words import orphan_summaries
from gpudash.domain.owners import (
    NO_UNIT,
    Orphan,
    Owner,
    OwnerKind,
    Stray,
    idle_owners,
    owners,
    strays,
    unit_kind,
    unit_respawned,
)
from gpudash.domain.owners.service import what
from gpudash.domain.tree import ProcessTree, holds
from gpudash.record import record
from gpudash.serving import processes as serving

__all__ = ["NO_UNIT", "Owner", "OwnerKind", "holds", "unit_respawned"]  # re-exported


class Flag(StrEnum):
    ORPHAN = "ORPHAN"
    RESPAWNED = "RESPAWNED"
    CRASH_LOOP = "CRASH LOOP"  # systemd keeps restarting the unit (it dies again and again)
    ZOMBIE = "ZOMBIE"
    D_STATE = "D-STATE"
    UNIT_INACTIVE = "UNIT INACTIVE"
    # holds a GPU's device files without NVML listing it (memory there unknown)
    DEVICE_HOLDER = "DEVICE HOLDER"
    # the driver lists it, the collector could not read it (``Process.unreadable``)
    UNREADABLE = "UNREADABLE"
    # holds GPU memory its scheduler did not allocate to it (``Stray``: a Slurm node's GPU
    # no running job has, or another job's)
    STRAY = "STRAY"


@record
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


@record
class OwnerGroup:
    """All GPU-relevant processes of one owner (a unit, a session, or nobody)."""

    key: str  # unit name, ``docker:NAME``, ``pod:NS/NAME``, or NO_UNIT
    kind: OwnerKind
    unit: Unit | None
    flags: frozenset[Flag]
    roots: tuple[ProcessNode, ...]
    gpu_memory_mib: Mapping[int, int]
    warnings: tuple[str, ...]
    owner: Owner | None = None  # what it is and what it can do
    lint: tuple[Finding, ...] = ()  # what in a service's (container's) configuration sets
    # the trap

    @property
    def total_gpu_memory_mib(self) -> int:
        return sum(self.gpu_memory_mib.values())

    @property
    def service(self) -> Unit | None:  # its systemd unit when that unit is the owner
        return None if self.owner is None else self.owner.service

    @property
    def nobody(self) -> bool:
        """No owner: each process stands for itself (listed last)."""
        return self.owner is None or self.owner.nobody

    def nodes(self) -> Iterable[ProcessNode]:
        for root in self.roots:
            yield from root.walk()


@record
class HostTriage:
    """The triaged view of one snapshot."""

    snapshot: HostSnapshot
    groups: tuple[OwnerGroup, ...]
    flags: Mapping[int, frozenset[Flag]]  # pid -> flags
    holders_by_gpu: Mapping[int, tuple[tuple[Process, int | None], ...]]
    # pid -> why it is an orphan (the top of its orphaned subtree, and what happened to it)
    orphans_of: Mapping[int, Orphan] = field(default_factory=dict)
    # pid -> what it holds that its scheduler did not allocate to it, and why
    strays: Mapping[int, Stray] = field(default_factory=dict)
    # unit -> what gpudash saw of its stops on this host, as the caller passed it to the lint
    learned: Mapping[str, Learned] = field(default_factory=dict)
    # the services systemd keeps restarting: the host's follower's verdict (its history of
    # samples), else what this one sample says (``crashloop.looping_now``)
    crash_looping: frozenset[str] = frozenset()
    _by_key: Mapping[str, OwnerGroup] = field(default_factory=dict, compare=False, repr=False)
    _by_pid: Mapping[int, OwnerGroup] = field(default_factory=dict, compare=False, repr=False)

    def group(self, key: str) -> OwnerGroup | None:
        return self._by_key.get(key)

    def group_of(self, pid: int) -> OwnerGroup | None:
        return self._by_pid.get(pid)

    def orphans(self) -> tuple[Process, ...]:
        return tuple(p for p in self.snapshot.processes if p.pid in self.orphans_of)

    def orphan_why(self, pid: int) -> str | None:
        """Why ``pid`` is an orphan, in words ("VLLM::EngineCore 3703 lost its API server
        (pid 3700 gone)"), or None."""
        p = self.snapshot.process(pid)
        said = self.orphan_cause(pid)
        return None if p is None or said is None else f"{what(p)} {said}"

    def orphan_cause(self, pid: int) -> str | None:
        """What ``orphan_why`` says of ``pid``, without naming it ("lost its API server
        (pid 3700 gone)", "is under VLLM::EngineCore 3703, which …"): for a row that
        names the process already."""
        o = self.orphans_of.get(pid)
        p = self.snapshot.process(pid)
        if o is None or p is None:
            return None
        root = self.snapshot.process(o.root) if o.root != pid else p
        if root is p or root is None:
            return o.cause
        return f"is under {what(root)}, which {o.cause}"

    def orphan_brief(self, pid: int) -> str | None:
        """``orphan_cause`` in a few words ("earlier run, main now 215207", "under 3703:
        lost its API server"): for a row beside its owner's, which names the owner."""
        o = self.orphans_of.get(pid)
        if o is None:
            return None
        brief = o.brief or o.cause
        return brief if o.root == pid else f"under {o.root}: {brief}"


def _indexed(t: HostTriage, members: Mapping[str, Sequence[Process]] | None = None
             ) -> HostTriage:
    by_key = {g.key: g for g in t.groups}
    if members is None:
        by_pid = {n.process.pid: g for g in t.groups for n in g.nodes()}
    else:
        by_pid = {p.pid: by_key[k] for k, procs in members.items() if k in by_key
                  for p in procs}
    return replace(t, _by_key=by_key, _by_pid=by_pid)


# --- owner classification and labels -------------------------------------------------------

def owner_kind(unit: str | None) -> OwnerKind:
    """The owner kind a unit name alone says (``gpudash.domain.owners.unit_kind``)."""
    return unit_kind(unit)


@functools.lru_cache(maxsize=4096)
def _label(cmdline: str, name: str) -> str | None:
    return serving.label(cmdline, name)


def label(process: Process) -> str | None:
    """A short human label for well-known serving processes, or None."""
    return _label(process.cmdline, process.name)


# --- flags -------------------------------------------------------------------------------

def _state_flags(p: Process) -> set[Flag]:
    f: set[Flag] = set()
    if p.state == "Z":
        f.add(Flag.ZOMBIE)
    elif p.state == "D":
        f.add(Flag.D_STATE)
    if p.device_gpus:
        f.add(Flag.DEVICE_HOLDER)
    if p.unreadable:
        f.add(Flag.UNREADABLE)
    return f


@record(frozen=False)
class _Pass:
    """One triage pass over a snapshot: the tree and the owners, computed once."""

    snapshot: HostSnapshot
    tree: ProcessTree
    owner_by_pid: Mapping[int, Owner]
    members: dict[str, list[Process]]
    owner_of_key: dict[str, Owner]
    orphans_of: dict[int, Orphan]
    flags: dict[int, frozenset[Flag]]
    strays: dict[int, Stray]

    @classmethod
    def of(cls, snapshot: HostSnapshot) -> _Pass:
        tree = ProcessTree.of(snapshot)
        owner_by_pid = owners(snapshot)
        members: dict[str, list[Process]] = {}
        owner_of_key: dict[str, Owner] = {}
        for p in snapshot.processes:
            owner = owner_by_pid[p.pid]
            members.setdefault(owner.key, []).append(p)
            owner_of_key.setdefault(owner.key, owner)
        orphans_of: dict[int, Orphan] = {}
        for key, procs in members.items():
            owner = owner_of_key[key]
            orphans_of.update(owner.rules.orphans(owner, procs, tree))
        stray = strays(snapshot, owner_by_pid)
        # what an owner says of its processes, asked once per owner
        facts = {
            key: (o.rules.inactive(o), o.rules.main_pid(o) if o.rules.respawned(o, None)
                  else None)
            for key, o in owner_of_key.items()
        }
        flags: dict[int, frozenset[Flag]] = {}
        plain: frozenset[Flag] = frozenset()
        for p in snapshot.processes:
            inactive, respawned_main = facts[owner_by_pid[p.pid].key]
            if not (inactive or p.pid in orphans_of or p.pid == respawned_main
                    or p.state in ("Z", "D") or p.device_gpus or p.unreadable
                    or p.pid in stray):
                flags[p.pid] = plain
                continue
            f = _state_flags(p)
            if inactive:
                f.add(Flag.UNIT_INACTIVE)
            if p.pid in orphans_of:
                f.add(Flag.ORPHAN)
            if p.pid == respawned_main:
                f.add(Flag.RESPAWNED)
            if p.pid in stray:
                f.add(Flag.STRAY)
            flags[p.pid] = frozenset(f)
        return cls(snapshot, tree, owner_by_pid, members, owner_of_key, orphans_of, flags,
                   stray)


def process_flags(snapshot: HostSnapshot) -> dict[int, frozenset[Flag]]:
    """Flags of every process in the snapshot.

    ORPHAN means "holds (or parents a process that holds) GPU memory nobody will ever
    free but a signal": left from an earlier incarnation of a service (its unit stopped,
    or respawned without it), escaped from a container, or a model server's engine and
    workers that lost their API server. Each owner kind's rules decide; a service's rule
    reads only the process tree and the unit, never process names; the rule for sessions
    and no unit reads the titles model servers give their processes, and never calls a
    solo job, a notebook kernel or anything of another user's own systemd an orphan.

    DEVICE_HOLDER means "holds a GPU's device files although the driver does not list it"
    (a forked child that keeps a dead CUDA process's memory); such a process is a holder
    for every other rule, ORPHAN included.
    """
    return dict(_Pass.of(snapshot).flags)


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


def unattributed_mib(snapshot: HostSnapshot) -> dict[int, int]:
    """Per GPU, memory the driver reports used that no listed process accounts for
    (0 where it is all accounted for; left out where a figure is unknown)."""
    listed: dict[int, int] = {}
    unknown: set[int] = set()
    for p in snapshot.processes:
        for gpu, mib in p.gpu_memory_mib.items():
            if mib is None:
                unknown.add(gpu)
            else:
                listed[gpu] = listed.get(gpu, 0) + mib
        unknown.update(p.device_gpus)
    return {g.index: max(0, g.memory_used_mib - listed.get(g.index, 0))
            for g in snapshot.gpus if g.memory_used_mib is not None and g.index not in unknown}


def _memory(procs: Iterable[Process]) -> dict[int, int]:
    mem: dict[int, int] = {}
    for p in procs:
        for gpu, mib in p.gpu_memory_mib.items():
            mem[gpu] = mem.get(gpu, 0) + (mib or 0)
        for gpu in p.device_gpus:
            mem.setdefault(gpu, 0)
    return mem


def _tree(
    members: list[Process], flags: Mapping[int, frozenset[Flag]], main_pid: int | None
) -> tuple[ProcessNode, ...]:
    pids = {p.pid for p in members}
    labels = serving.tree_labels(members)  # MPI ranks: their number is their order
    kids: dict[int, list[Process]] = {}
    roots: list[Process] = []
    for p in members:
        if p.ppid in pids and p.ppid != p.pid:
            kids.setdefault(p.ppid, []).append(p)
        else:
            roots.append(p)

    def build(p: Process) -> ProcessNode:
        children = sorted(kids.get(p.pid, []), key=lambda c: (c.start_ticks or 0, c.pid))
        return ProcessNode(p, flags.get(p.pid, frozenset()), labels.get(p.pid) or label(p),
                           tuple(map(build, children)))

    # The main process first, then the rest oldest first: orphans of an earlier
    # incarnation sort before the respawned main's new tree only by age, which is the truth.
    roots.sort(key=lambda p: (p.pid != main_pid, p.start_ticks or 0, p.pid))
    return tuple(build(r) for r in roots)


def _group(key: str, procs: list[Process], tp: _Pass, prev_units: Mapping[str, Unit],
           learned: Mapping[str, Learned], looping: frozenset[str]) -> OwnerGroup:
    owner = tp.owner_of_key[key]
    rules = owner.rules
    gflags: set[Flag] = set()
    inactive = rules.inactive(owner)
    if inactive:
        gflags.add(Flag.UNIT_INACTIVE)
    # NRestarts is reset only by the next start by hand: a stopped unit that respawned once
    # is stopped now, not respawning (it kept RESPAWNED after stop + disable)
    respawned = not inactive and rules.respawned(
        owner, prev_units.get(owner.unit.name) if owner.unit else None)
    if respawned:
        gflags.add(Flag.RESPAWNED)
    if owner.unit is not None and owner.unit.name in looping:
        gflags.add(Flag.CRASH_LOOP)
    orphan_count = sum(1 for p in procs if p.pid in tp.orphans_of)
    if orphan_count:
        gflags.add(Flag.ORPHAN)
    warnings = rules.warnings(owner, orphan_count, respawned)
    if orphan_count:
        warnings += tuple(orphan_summaries(procs, tp.orphans_of, tp.tree))
    strayed = [tp.strays[p.pid].why for p in procs if p.pid in tp.strays]
    if strayed:
        gflags.add(Flag.STRAY)
        warnings += tuple(strayed[:3]) + ((f"... and {len(strayed) - 3} more",)
                                          if len(strayed) > 3 else ())
    unit = owner.unit
    memory = _memory(procs)
    lint: tuple[Finding, ...] = rules.lint(owner, any(memory.values()),
                                           learned.get(unit.name) if unit else None)
    return OwnerGroup(key, owner.kind, unit, frozenset(gflags),
                      _tree(procs, tp.flags, rules.main_pid(owner)), memory, warnings,
                      owner, lint)


def triage(snapshot: HostSnapshot, previous: HostSnapshot | None = None, *,
           learned: Mapping[str, Learned] | None = None,
           crash_looping: frozenset[str] | None = None) -> HostTriage:
    """Group the snapshot's processes by owner, flag them, and explain each owner.

    ``learned``: unit -> what gpudash saw of its last stops on this host (how long until
    its memory was back, processes that ignored SIGTERM: the unit lint reads them); the
    caller reads it, the triage reads no file. ``crash_looping``: the units a follower of
    the host found crash-looping (``crashloop.RestartWatch``); None: what this sample says.
    """
    learned = dict(learned or {})
    looping = looping_now(snapshot.units) if crash_looping is None else crash_looping
    tp = _Pass.of(snapshot)
    prev_units = {u.name: u for u in previous.units} if previous else {}
    groups: list[OwnerGroup] = []
    for key, procs in tp.members.items():
        owner = tp.owner_of_key[key]
        # A service holding nothing is still shown (its main process, its state); other
        # owners appear only while they hold memory.
        if not any(holds(p) for p in procs) and not owner.rules.shown_empty(owner):
            continue
        groups.append(_group(key, procs, tp, prev_units, learned, looping))
    # Owners the host reports without any process left (a reclaimed service, an exited
    # container) stay visible: "inactive, disabled, 0 GiB" is the proof the operator is
    # looking for.
    for owner in idle_owners(snapshot, list(tp.owner_of_key.values())):
        tp.owner_of_key[owner.key] = owner
        groups.append(_group(owner.key, [], tp, prev_units, learned, looping))
    groups.sort(key=lambda g: (g.nobody, -g.total_gpu_memory_mib, g.key))
    return _indexed(HostTriage(snapshot, tuple(groups), tp.flags, holders_by_gpu(snapshot),
                               tp.orphans_of, tp.strays, learned, looping), tp.members)


def _same_objects(a: tuple[object, ...], b: tuple[object, ...]) -> bool:
    return len(a) == len(b) and all(x is y for x, y in zip(a, b, strict=True))


def _unchanged(snapshot: HostSnapshot, previous: HostSnapshot) -> bool:
    """Nothing the triage rests on changed: the snapshot's own account of what changed,
    or (a source that does not tell) the very same objects as before."""
    changes = snapshot.changes
    if changes is not EVERYTHING:
        return not changes.structure and changes.processes == frozenset()
    return (
        _same_objects(snapshot.processes, previous.processes)
        and _same_objects(snapshot.units, previous.units)
        and _same_objects(snapshot.containers, previous.containers)
        and _same_objects(snapshot.pods, previous.pods)
    )


def retriage(
    snapshot: HostSnapshot, previous: HostSnapshot | None, last: HostTriage | None, *,
    learned: Mapping[str, Learned] | None = None, crash_looping: frozenset[str] | None = None,
) -> HostTriage:
    """``triage(snapshot, previous)``, reusing ``last`` (the triage of ``previous``) when
    nothing it rests on changed (RESPAWNED is NRestarts > 0 of the very same unit object:
    it holds as long as the unit does). Only the snapshot (its time, the host's CPU) is
    the new one. Where only the processes' measurements changed (CPU, RSS), the groups
    are kept and the changed processes put in their nodes."""
    learned = dict(learned or {})
    looping = looping_now(snapshot.units) if crash_looping is None else crash_looping
    if (
        last is None
        or previous is None
        or last.snapshot is not previous
        or [g.index for g in snapshot.gpus] != [g.index for g in previous.gpus]
        or last.learned != learned  # an action just timed a stop: lint again
        or last.crash_looping != looping
    ):
        return triage(snapshot, previous, learned=learned, crash_looping=looping)
    if _unchanged(snapshot, previous):
        return replace(last, snapshot=snapshot)
    changes = snapshot.changes
    if changes is not EVERYTHING and not changes.structure and changes.processes:
        return _rebind(last, snapshot, changes.processes)
    return triage(snapshot, previous, learned=learned, crash_looping=looping)


def _rebind(last: HostTriage, snapshot: HostSnapshot, pids: frozenset[int]) -> HostTriage:
    """``last`` with the processes of ``pids`` replaced by this snapshot's (their
    measurements changed, nothing the rules read did)."""
    fresh = {p.pid: p for p in snapshot.processes if p.pid in pids}

    def node(n: ProcessNode) -> ProcessNode:
        p = fresh.get(n.process.pid, n.process)
        kids = tuple(node(c) for c in n.children)
        if p is n.process and all(a is b for a, b in zip(kids, n.children, strict=True)):
            return n
        return ProcessNode(p, n.flags, n.label, kids)

    groups = tuple(
        g if not any(n.process.pid in fresh for n in g.nodes())
        else replace(g, roots=tuple(node(r) for r in g.roots))
        for g in last.groups
    )
    holders = {gpu: tuple((fresh.get(p.pid, p), mib) for p, mib in items)
               for gpu, items in last.holders_by_gpu.items()}
    return _indexed(replace(last, snapshot=snapshot, groups=groups, holders_by_gpu=holders))
