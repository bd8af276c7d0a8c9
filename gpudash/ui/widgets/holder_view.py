"""How the operator has the holders table arranged: the sort column and its direction,
the user and GPU filters, and which owners and process trees are collapsed.

Sorting keeps each owner's rows together, under its owner row (groups by their total,
the rows inside, at each level of the tree, by their own value): every action acts on
an owner or one of its processes, so the owner row above a process is what the operator
reads before pressing a key; a flat list sorted across owners would put a TP worker of
one server between two of another's. ``htop``'s tree view sorts the same way.

The default (GPU memory, largest first) is the triage's own order: owners by their
memory, and in a tree the main process, then its workers by start, which is their rank
(TP0, TP1, ...) as a tensor-parallel group is read. Choosing a sort sorts every level.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import field, replace

from gpudash.domain.model import Process
from gpudash.domain.triage import OwnerGroup, ProcessNode
from gpudash.record import record

# (column key, header) in the order the sort key cycles through them
SORTS = (("mem", "GPU memory"), ("sm", "SM%"), ("cpu", "CPU"), ("rss", "RSS"),
         ("age", "Age"), ("pid", "PID"), ("user", "User"))
ASCENDING_FIRST = frozenset({"pid", "user"})  # the others: the biggest, the oldest first
SORT_COLUMN = {"pid": "who"}  # the column whose header shows the indicator, if not its key


@record
class HolderView:
    """The table's arrangement; the default is the triage's own order (GPU memory)."""

    sort: str = "mem"
    descending: bool = True
    user: str | None = None  # only this user's processes
    gpu: int | None = None  # only the processes holding memory on this GPU
    collapsed: frozenset[str] = field(default_factory=frozenset)  # row keys
    opened: frozenset[str] = field(default_factory=frozenset)  # folds shown open (idle units)
    flat: bool = False  # every process in one list, sorted across owners (htop's F5 off)
    tagged: frozenset[int] = field(default_factory=frozenset)  # pids: k, t, S act on them all

    @property
    def default_order(self) -> bool:
        return self.sort == "mem" and self.descending

    def next_sort(self) -> HolderView:
        keys = [k for k, _ in SORTS]
        key = keys[(keys.index(self.sort) + 1) % len(keys)]
        return replace(self, sort=key, descending=key not in ASCENDING_FIRST)

    def reversed(self) -> HolderView:
        return replace(self, descending=not self.descending)

    def indicator(self) -> tuple[str, str]:
        """(column key, header) of the column sorted by: ``GPU memory ▼``."""
        label = dict(SORTS)[self.sort]
        return SORT_COLUMN.get(self.sort, self.sort), f"{label} {'▼' if self.descending else '▲'}"

    def keeps(self, p: Process) -> bool:
        """Whether the user and GPU filters keep this process."""
        if self.user is not None and p.user != self.user:
            return False
        if self.gpu is not None:
            mib = p.gpu_memory_mib.get(self.gpu, 0)
            return mib is None or mib > 0 or self.gpu in p.device_gpus
        return True


def _value(key: str, now: float) -> Callable[[Process], float | str]:
    if key == "mem":
        return lambda p: p.total_gpu_memory_mib
    if key == "cpu":
        return lambda p: -1.0 if p.cpu_pct is None else p.cpu_pct
    if key == "sm":
        return lambda p: -1 if p.sm_util_pct is None else p.sm_util_pct
    if key == "rss":
        return lambda p: -1 if p.rss_mib is None else p.rss_mib
    if key == "age":
        return lambda p: -1.0 if p.started_at is None else now - p.started_at
    if key == "pid":
        return lambda p: p.pid
    return lambda p: p.user or ""


def sort_nodes(nodes: tuple[ProcessNode, ...], view: HolderView,
               now: float) -> list[ProcessNode]:
    """Siblings in the tree, by their own value (ties keep the tree's order: the main
    process first, then by start)."""
    if view.default_order:
        return list(nodes)
    value = _value(view.sort, now)
    return sorted(nodes, key=lambda n: value(n.process), reverse=view.descending)


def sort_flat(nodes: list[ProcessNode], view: HolderView, now: float) -> list[ProcessNode]:
    """Every process in one list, by the sort column (GPU memory by default, largest
    first): here a TP worker of one server may come between two of another's."""
    value = _value(view.sort, now)
    return sorted(nodes, key=lambda n: value(n.process), reverse=view.descending)


def sort_groups(groups: tuple[OwnerGroup, ...], view: HolderView,
                now: float) -> list[OwnerGroup]:
    """Owners by their total (the sum of memory, CPU, RSS; the oldest process, the lowest
    pid, the first user); processes of no owner stay last, as the triage has them."""
    if view.default_order:
        return list(groups)
    value = _value(view.sort, now)

    def total(g: OwnerGroup) -> float | str:
        if view.sort == "mem":
            return g.total_gpu_memory_mib
        values = [value(n.process) for n in g.nodes()]
        if not values:
            return "" if view.sort == "user" else -1
        if view.sort in ("cpu", "rss", "sm"):
            return sum(v for v in values if isinstance(v, (int, float)) and v > 0)
        if view.sort == "age":
            return max(values)
        return min(values)

    ordered = sorted(groups, key=total, reverse=view.descending)
    return sorted(ordered, key=lambda g: g.nobody)
