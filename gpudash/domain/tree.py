"""The process tree of one snapshot, built once per triage: parents, children, subtrees,
and which processes hold GPU memory or parent a process that does."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import field

from gpudash.domain.model import HostSnapshot, Process
from gpudash.record import record

MAX_DEPTH = 64  # a parent chain longer than this is a host lying about ppids


def holds(p: Process) -> bool:
    """Holds GPU memory as NVML says, or may through device files NVML does not list."""
    return p.holds_gpu_memory or bool(p.device_gpus)


@record
class ProcessTree:
    by_pid: Mapping[int, Process]
    children: Mapping[int, tuple[Process, ...]]
    # pids that hold GPU memory or have a descendant (in the snapshot) that does
    holding: frozenset[int] = field(default=frozenset())

    @classmethod
    def of(cls, snapshot: HostSnapshot) -> ProcessTree:
        by_pid = {p.pid: p for p in snapshot.processes}
        kids: dict[int, list[Process]] = {}
        for p in snapshot.processes:
            if p.ppid is not None and p.ppid != p.pid:
                kids.setdefault(p.ppid, []).append(p)
        holding: set[int] = set()
        for p in snapshot.processes:
            if holds(p):
                for q in _chain(p, by_pid):
                    if q.pid in holding:
                        break
                    holding.add(q.pid)
        return cls(by_pid, {k: tuple(v) for k, v in kids.items()}, frozenset(holding))

    def parent(self, p: Process) -> Process | None:
        return self.by_pid.get(p.ppid) if p.ppid is not None else None

    def ancestors(self, p: Process) -> Iterator[Process]:
        """``p``'s parent, its parent, ... as far as the snapshot lists them."""
        chain = _chain(p, self.by_pid)
        next(chain)
        yield from chain

    def descendants(self, pid: int) -> set[int]:
        seen: set[int] = set()
        stack = [pid]
        while stack:
            for child in self.children.get(stack.pop(), ()):
                if child.pid not in seen:
                    seen.add(child.pid)
                    stack.append(child.pid)
        return seen

    def alive(self, pid: int | None) -> bool:
        """Whether the snapshot lists ``pid`` (the collector lists the parents and the
        process-group leader of every GPU holder that are alive)."""
        return pid is not None and pid in self.by_pid


def _chain(p: Process, by_pid: Mapping[int, Process]) -> Iterator[Process]:
    seen = {p.pid}
    yield p
    for _ in range(MAX_DEPTH):
        parent = by_pid.get(p.ppid) if p.ppid is not None else None
        if parent is None or parent.pid in seen:
            return
        seen.add(parent.pid)
        yield parent
        p = parent
