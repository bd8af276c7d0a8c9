"""A systemd system service: it can be stopped, disabled, started; systemd respawns it.

Its orphans are what an earlier *incarnation* of the service left: when the unit is
stopped, everything of it that holds GPU memory; while it runs, every process outside the
current main process's tree that descends from a process re-parented away from the unit
(to PID 1, or a subreaper) older than the current main process. vLLM's normal shape after
``kill -9`` of its API server is such a subtree: the old ``VLLM::EngineCore`` (re-parented)
and its ``VLLM::Worker`` children (whose parent, the old engine, is alive). The current
incarnation's tree is never an orphan, and neither is a helper the current server
detached after it started (SGLang's setsid'd schedulers are younger than their main).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from gpudash.domain.lint import RESTARTING, Finding, Learned, lint_unit
from gpudash.domain.model import HostSnapshot, Process, Unit
from gpudash.domain.owners.kinds import (
    BaseRules,
    CliSelector,
    Orphan,
    Owner,
    OwnerCapability,
    OwnerKind,
    OwnerRef,
)
from gpudash.domain.tree import ProcessTree
from gpudash.serving.processes import server_process

# NRestarts from which a service counts as crash-looping even between two restarts.
CRASH_LOOP_RESTARTS = 3


def unit_crash_looping(unit: Unit) -> bool:
    """What one snapshot says of a unit: systemd keeps restarting it."""
    restarts = unit.n_restarts or 0
    return (unit.sub_state == "auto-restart" and restarts >= 1) or (
        restarts >= CRASH_LOOP_RESTARTS
    )


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


def what(p: Process) -> str:
    """A process as the operator knows it: ``VLLM::EngineCore 3703``."""
    known = server_process(p.cmdline, p.name)
    title = (p.cmdline or p.name).split(" ", 1)[0] if known is not None else (p.name or "?")
    return f"{title} {p.pid}"


def user_manager(name: str) -> bool:
    """``user@UID.service``: a user's own systemd, not a service of the host's."""
    return name.startswith("user@") and name.endswith(".service")


class ServiceRules(BaseRules):
    """A unit no other kind claims: the host's systemd's service."""

    kind = OwnerKind.SERVICE
    manages_unit = True
    cli: tuple[CliSelector, ...] = (CliSelector("--unit", "UNIT", {
        "reclaim": "the systemd unit (.service optional)",
        "start": "the systemd unit (.service optional)",
        "reap": "only the orphans of this systemd unit",
    }),)

    def recognize(self, p: Process, snapshot: HostSnapshot, units: Mapping[str, Unit]
                  ) -> Owner | None:
        if not p.unit or not self.claims_unit(p.unit):
            return None
        return Owner(self.kind, p.unit, self, unit=units.get(p.unit))

    def claims_unit(self, name: str) -> bool:
        return bool(name) and not name.endswith(".scope") and not user_manager(name)

    def idle(self, snapshot: HostSnapshot, seen: Sequence[Owner]) -> Iterable[Owner]:
        keys = {o.key for o in seen}
        return [Owner(self.kind, u.name, self, u) for u in snapshot.units
                if u.name not in keys and self.claims_unit(u.name)]

    def lint(self, owner: Owner, holds_gpu_memory: bool, learned: Learned | None
             ) -> tuple[Finding, ...]:
        if owner.unit is None:
            return ()
        return lint_unit(owner.unit, holds_gpu_memory=holds_gpu_memory, learned=learned)

    def selector(self, owner: Owner) -> OwnerRef | None:
        return None if owner.unit is None else OwnerRef(self.kind.value, owner.key)

    def capabilities(self, owner: Owner) -> frozenset[OwnerCapability]:
        if owner.unit is None:
            return frozenset()
        return frozenset({OwnerCapability.STOP, OwnerCapability.DISABLE, OwnerCapability.START,
                          OwnerCapability.RECLAIM})

    def unable(self, owner: Owner, capability: OwnerCapability) -> str:
        if owner.unit is None:
            return f"{owner.key} is not known to systemd on this host"
        return f"{owner.key} cannot {capability.value}: signal its processes"

    def describe(self, owner: Owner) -> str:
        return owner.key

    def respawner(self, owner: Owner) -> str | None:
        u = owner.unit
        if u is None or (u.restart or "no").lower() == "no" or u.is_down:
            return None
        return f"systemd (Restart={u.restart})"

    def main_pid(self, owner: Owner) -> int | None:
        return owner.unit.main_pid if owner.unit is not None else None

    def inactive(self, owner: Owner) -> bool:
        return owner.unit is not None and owner.unit.is_down

    def respawned(self, owner: Owner, previous: Unit | None) -> bool:
        return owner.unit is not None and unit_respawned(owner.unit, previous)

    def shown_empty(self, owner: Owner) -> bool:
        # its state is the proof the operator looks for; a unit the host did not report
        # (the sshd above a login's job, listed as a holder's ancestor) is not shown
        return owner.unit is not None

    def orphans(self, owner: Owner, members: Sequence[Process], tree: ProcessTree
                ) -> Mapping[int, Orphan]:
        unit = owner.unit
        if unit is None:
            return {}
        held = [p for p in members if p.pid in tree.holding]
        if not held:
            return {}
        if unit.is_down:
            cause = f"is left behind: {unit.name} is {unit.active_state}"
            brief = f"left behind: unit {unit.active_state}"
            return {p.pid: Orphan(p.pid, cause, brief) for p in held}
        main = tree.by_pid.get(unit.main_pid) if unit.main_pid else None
        if unit.main_pid is not None and (main is None or main.start_ticks is None):
            return {}  # no live main to compare with: nothing can be said
        current = {main.pid} | tree.descendants(main.pid) if main is not None else set()
        mine = {p.pid for p in members}
        out: dict[int, Orphan] = {}
        for p in held:
            if p.pid in current:
                continue
            root = _incarnation_root(p, tree, mine, current)
            if root.ppid in mine and root.ppid not in current:
                continue  # not re-parented: a cycle or a hole in the host's ppids
            if main is not None and (root.start_ticks is None
                                     or root.start_ticks >= (main.start_ticks or 0)):
                continue  # detached by the current incarnation after it started
            out[p.pid] = Orphan(root.pid, _cause(unit, main), "earlier run, " + (
                f"main now {main.pid}" if main is not None else "no main now"))
        return out

    def warnings(self, owner: Owner, orphan_count: int, respawned: bool) -> tuple[str, ...]:
        unit = owner.unit
        if unit is None:
            return ()
        w: list[str] = []
        restart = (unit.restart or "").lower()
        if restart in RESTARTING and not unit.is_down:
            w.append(f"Restart={unit.restart}: killing the main PID respawns it; "
                     "stop the unit instead.")
        if unit.unit_file_state == "enabled" and unit.is_down and orphan_count:
            w.append("Unit is stopped but still enabled: it will start again at boot; "
                     "disable it.")
        if (unit.kill_mode or "") in ("process", "none") and not unit.is_down:
            w.append(f"KillMode={unit.kill_mode}: stopping the unit leaves its workers "
                     "running; reap them after stopping (reclaim does both).")
        if orphan_count:
            w.append(f"{orphan_count} orphaned process(es) of this unit still hold GPU "
                     "memory: reap them.")
        if respawned:
            w.append(f"systemd restarted this unit by itself (NRestarts={unit.n_restarts}): "
                     "a new main process took the old one's place.")
        return tuple(w)


def _incarnation_root(p: Process, tree: ProcessTree, mine: set[int], current: set[int]
                      ) -> Process:
    """The topmost ancestor of ``p`` that is in the unit and outside its current tree."""
    root = p
    for parent in tree.ancestors(p):
        if parent.pid not in mine or parent.pid in current:
            break
        root = parent
    return root


def _cause(unit: Unit, main: Process | None) -> str:
    now = f"main pid now {main.pid}" if main is not None else "no main process now"
    restarts = f", NRestarts={unit.n_restarts}" if unit.n_restarts else ""
    return f"is left from an earlier run of {unit.name} ({now}{restarts})"
