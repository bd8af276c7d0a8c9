"""Planning an action: exactly what will be sent, to whom, and what should come back.

A plan names the commands, the PIDs with their start times and the GiB expected back per
GPU, so the operator confirms facts, not intentions. It is built from one snapshot; before
it runs it is built again from a fresh one (``replan``) and any difference is shown.
"""

from __future__ import annotations

import signal as _signal
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum

from gpudash.model import HostSnapshot, Process, SourceKind, Unit, unit_name
from gpudash.triage import Flag, OwnerKind, label, owner_kind, process_flags
from gpudash.units import gib, gib_number


class ActionKind(StrEnum):
    STOP = "stop"
    DISABLE = "disable"
    STOP_DISABLE = "stop+disable"
    TERMINATE = "terminate"
    KILL = "kill"
    REAP = "reap"
    RECLAIM = "reclaim"


ACTION_TITLES: Mapping[ActionKind, str] = {
    ActionKind.STOP: "Stop unit",
    ActionKind.DISABLE: "Disable unit",
    ActionKind.STOP_DISABLE: "Stop + disable unit",
    ActionKind.TERMINATE: "Terminate process (TERM, then KILL)",
    ActionKind.KILL: "Kill process (KILL)",
    ActionKind.REAP: "Reap orphans",
    ActionKind.RECLAIM: "Reclaim unit (stop + disable + reap + wait)",
}

UNIT_ACTIONS = frozenset(
    {ActionKind.STOP, ActionKind.DISABLE, ActionKind.STOP_DISABLE, ActionKind.RECLAIM}
)
PROCESS_ACTIONS = frozenset({ActionKind.TERMINATE, ActionKind.KILL})
STOPPING = frozenset({ActionKind.STOP, ActionKind.STOP_DISABLE, ActionKind.RECLAIM})
DISABLING = frozenset({ActionKind.DISABLE, ActionKind.STOP_DISABLE, ActionKind.RECLAIM})


class PlanError(ValueError):
    """The action makes no sense for this selection; the message says why."""


@dataclass(frozen=True, slots=True)
class Target:
    """A process the plan will signal, pinned by (pid, start time)."""

    pid: int
    start_ticks: int | None
    user: str | None
    label: str
    cmdline: str
    gpu_memory_mib: Mapping[int, int | None]

    @classmethod
    def of(cls, p: Process) -> Target:
        return cls(
            p.pid,
            p.start_ticks,
            p.user,
            label(p) or p.name or "?",
            p.cmdline,
            dict(p.gpu_memory_mib),
        )

    @property
    def identity(self) -> tuple[int, int | None]:
        return (self.pid, self.start_ticks)


@dataclass(frozen=True, slots=True)
class Step:
    """One command of a plan: a ``systemctl`` verb, or a signal to a pinned target."""

    verb: str  # stop | disable | signal
    unit: str | None = None
    target: Target | None = None
    sig: int = _signal.SIGTERM
    escalate: bool = False  # TERM first, KILL after the timeout if still alive

    def describe(self, term_timeout: float) -> str:
        if self.target is None:
            return f"systemctl {self.verb} {self.unit}"
        t = self.target
        sig = _signal.Signals(self.sig).name.removeprefix("SIG")
        text = f"kill -{sig} {t.pid}  (start {t.start_ticks}, {t.user or '?'}, {t.label})"
        if self.escalate:
            text += f"; -KILL after {term_timeout:g} s if alive"
        return text


@dataclass(frozen=True, slots=True)
class ActionPlan:
    kind: ActionKind
    host: str
    subject: str  # the unit name or "pid N"
    steps: tuple[Step, ...]
    targets: tuple[Target, ...]
    expected_free_mib: Mapping[int, int]  # per GPU
    used_before_mib: Mapping[int, int | None]
    notes: tuple[str, ...] = ()
    untouched: tuple[Target, ...] = ()  # other holders the plan leaves alone, for the record
    unit_before: Unit | None = None
    unit: str | None = None  # the selection it was planned for, to plan it again
    pid: int | None = None
    simulated: bool = False  # planned on the demo host: nothing real is touched

    @property
    def title(self) -> str:
        return f"{ACTION_TITLES[self.kind]}: {self.subject}"

    @property
    def expected_free_total_mib(self) -> int:
        return sum(self.expected_free_mib.values())

    @property
    def commands(self) -> tuple[Step, ...]:
        return tuple(s for s in self.steps if s.target is None)

    def target_used_mib(self) -> dict[int, int]:
        """The used memory per GPU that proves the action worked."""
        out: dict[int, int] = {}
        for gpu, before in self.used_before_mib.items():
            if before is not None and self.expected_free_mib.get(gpu):
                out[gpu] = max(0, before - self.expected_free_mib[gpu])
        return out

    def describe(self, term_timeout: float = 10.0) -> list[str]:
        """The plan as lines of plain text, for a confirmation dialog or a terminal."""
        lines = [f"{self.title}  on {self.host}"]
        lines += [f"  $ {s.describe(term_timeout)}" for s in self.steps]
        if self.expected_free_mib:
            per = ", ".join(
                f"GPU{g} {gib_number(m)}"
                for g, m in sorted(self.expected_free_mib.items()) if m
            )
            lines.append(f"  Expected back: {gib(self.expected_free_total_mib)} ({per} GiB)")
        else:
            lines.append("  Expected back: no GPU memory")
        lines += [f"  ! {n}" for n in self.notes]
        if self.untouched:
            shown = self.untouched[:4]
            people = ", ".join(f"{t.pid} ({t.user or '?'}, {t.label})" for t in shown)
            more = len(self.untouched) - len(shown)
            lines.append(f"  Left alone: {people}" + (f" and {more} more" if more else ""))
        return lines


# --- planning ----------------------------------------------------------------------------


def mem_sum(targets: Iterable[Target]) -> dict[int, int]:
    """GPU memory per GPU that ``targets`` hold (N/A counts as nothing)."""
    out: dict[int, int] = {}
    for t in targets:
        for gpu, mib in t.gpu_memory_mib.items():
            if mib:
                out[gpu] = out.get(gpu, 0) + mib
    return out


def _holders_left_alone(snapshot: HostSnapshot, targets: Iterable[Target]) -> tuple[Target, ...]:
    pinned = {t.pid for t in targets}
    return tuple(
        Target.of(p) for p in snapshot.processes if p.holds_gpu_memory and p.pid not in pinned
    )


def _require_unit(snapshot: HostSnapshot, name: str | None) -> Unit:
    if not name:
        raise PlanError("select a unit first")
    full = unit_name(name)
    if owner_kind(full) is not OwnerKind.SERVICE:
        raise PlanError(f"{full} is not a system service; signal its processes instead")
    unit = snapshot.unit(full)
    if unit is None:
        raise PlanError(f"unit {full} is not known on {snapshot.host}")
    return unit


def _require_process(snapshot: HostSnapshot, pid: int | None) -> Process:
    if pid is None:
        raise PlanError("select a process first")
    p = snapshot.process(pid)
    if p is None:
        raise PlanError(f"pid {pid} is not in the latest sample of {snapshot.host}")
    if p.start_ticks is None:
        raise PlanError(f"pid {pid}: start time unknown, cannot pin its identity")
    return p


def _unit_members(snapshot: HostSnapshot, unit: Unit) -> list[Process]:
    return [p for p in snapshot.processes if p.unit == unit.name]


def _process_notes(snapshot: HostSnapshot, p: Process, owner: Unit | None) -> list[str]:
    """What signalling one process will do beyond it: respawn, a person's work, a TP group."""
    notes: list[str] = []
    if owner is not None and owner.main_pid == p.pid and not owner.is_down:
        if (owner.restart or "no").lower() != "no":
            notes.append(
                f"pid {p.pid} is the main process of {owner.name} "
                f"(Restart={owner.restart}): systemd will respawn it. Stop the unit instead."
            )
    kind = owner_kind(p.unit)
    if kind is OwnerKind.SESSION:
        notes.append(
            f"pid {p.pid} belongs to {p.user or '?'}'s login session ({p.unit}): "
            "this is a person's live work, not a service. Make sure they know."
        )
    elif kind is OwnerKind.SERVICE and owner is not None and not owner.is_down:
        flags = process_flags(snapshot)
        peers = [
            q for q in _unit_members(snapshot, owner)
            if q.pid != p.pid and q.holds_gpu_memory and Flag.ORPHAN not in flags[q.pid]
        ]
        if p.holds_gpu_memory and peers and Flag.ORPHAN not in flags[p.pid]:
            notes.append(
                f"pid {p.pid} is one of {len(peers) + 1} GPU processes of the running "
                f"{owner.name}: killing one worker of a tensor-parallel group makes the others "
                "hang or crash. Stop or reclaim the unit instead."
            )
    return notes


def plan_action(
    snapshot: HostSnapshot,
    kind: ActionKind,
    *,
    unit: str | None = None,
    pid: int | None = None,
) -> ActionPlan:
    """Build the exact plan for ``kind`` on the given unit or pid, from one snapshot."""
    if not snapshot.can_act:
        raise PlanError(snapshot.cannot_act_reason or f"cannot act on {snapshot.host}")
    before = snapshot.used_by_gpu()
    simulated = snapshot.source is SourceKind.DEMO
    notes: list[str] = []

    if kind in UNIT_ACTIONS:
        u = _require_unit(snapshot, unit)
        members = _unit_members(snapshot, u)
        steps: list[Step] = []
        targets: list[Target] = []
        if kind in STOPPING:
            steps.append(Step("stop", unit=u.name))
        if kind in DISABLING:
            steps.append(Step("disable", unit=u.name))
        expected: dict[int, int] = {}
        if kind is ActionKind.RECLAIM:
            # Everything of the unit's cgroup that is alive now is pinned; stop takes the
            # main, the signals take what KillMode or re-parenting left behind.
            targets = [Target.of(p) for p in members if p.start_ticks is not None and p.pid != 1]
            steps += [Step("signal", target=t, escalate=True) for t in targets]
            expected = mem_sum(targets)
        elif kind in STOPPING:
            killed = members if u.kill_mode in (None, "control-group", "mixed") else [
                p for p in members if p.pid == u.main_pid
            ]
            expected = mem_sum(Target.of(p) for p in killed)
            left = [p for p in members if p not in killed and p.holds_gpu_memory]
            if left:
                notes.append(
                    f"KillMode={u.kill_mode}: stop signals only the main process; "
                    f"{len(left)} worker(s) holding "
                    f"{gib(sum(p.total_gpu_memory_mib for p in left))} will stay. "
                    "Use reclaim, or reap orphans afterwards."
                )
        if u.is_down and kind is not ActionKind.DISABLE and kind is not ActionKind.RECLAIM:
            notes.append(f"{u.name} is already {u.active_state}.")
        if kind is ActionKind.DISABLE:
            notes.append("Disable changes only what happens at boot; nothing stops now.")
        plan_targets = tuple(targets)
        return ActionPlan(
            kind,
            snapshot.host,
            u.name,
            tuple(steps),
            plan_targets,
            expected,
            before,
            tuple(notes),
            _holders_left_alone(snapshot, plan_targets or [Target.of(p) for p in members]),
            u,
            unit=u.name,
            simulated=simulated,
        )

    if kind in PROCESS_ACTIONS:
        p = _require_process(snapshot, pid)
        if p.pid == 1:
            raise PlanError("refusing to signal PID 1")
        t = Target.of(p)
        sig = _signal.SIGKILL if kind is ActionKind.KILL else _signal.SIGTERM
        owner = snapshot.unit(p.unit) if p.unit else None
        return ActionPlan(
            kind,
            snapshot.host,
            f"pid {p.pid}",
            (Step("signal", target=t, sig=sig, escalate=kind is ActionKind.TERMINATE),),
            (t,),
            mem_sum([t]),
            before,
            tuple(_process_notes(snapshot, p, owner)),
            _holders_left_alone(snapshot, [t]),
            owner,
            pid=p.pid,
            simulated=simulated,
        )

    if kind is ActionKind.REAP:
        flags = process_flags(snapshot)
        orphans = [
            p
            for p in snapshot.processes
            if Flag.ORPHAN in flags[p.pid]
            and p.start_ticks is not None
            and (unit is None or p.unit == unit_name(unit))
        ]
        if not orphans:
            where = f" of {unit_name(unit)}" if unit else ""
            raise PlanError(f"no orphaned processes{where} hold GPU memory on {snapshot.host}")
        targets = [Target.of(p) for p in orphans]
        return ActionPlan(
            kind,
            snapshot.host,
            f"{len(targets)} orphan(s)" + (f" of {unit_name(unit)}" if unit else ""),
            tuple(Step("signal", target=t, escalate=True) for t in targets),
            tuple(targets),
            mem_sum(targets),
            before,
            (),
            _holders_left_alone(snapshot, targets),
            snapshot.unit(unit_name(unit)) if unit else None,
            unit=unit_name(unit) if unit else None,
            simulated=simulated,
        )
    raise PlanError(f"unknown action {kind}")


# --- planning again before running -------------------------------------------------------

CHANGE_SLACK_MIB = 512  # expected-back differences below this are driver noise, not news


def replan(plan: ActionPlan, snapshot: HostSnapshot) -> tuple[ActionPlan, list[str]]:
    """``plan`` built again from a fresh ``snapshot``, and what changed that matters.

    A plan confirmed in a dialog left open for a while must not run on a stale baseline
    (memory that moved meanwhile would read as "NOT confirmed"), nor signal a set of
    processes the operator did not see. Raises ``PlanError`` when the action no longer
    makes sense (the process is gone, nothing left to reap).
    """
    fresh = plan_action(snapshot, plan.kind, unit=plan.unit, pid=plan.pid)
    return fresh, plan_changes(plan, fresh)


def plan_changes(old: ActionPlan, new: ActionPlan) -> list[str]:
    """The differences between two plans of one action that the operator must see."""
    out: list[str] = []
    old_t = {t.identity: t for t in old.targets}
    new_t = {t.identity: t for t in new.targets}
    gone = [t for key, t in old_t.items() if key not in new_t]
    added = [t for key, t in new_t.items() if key not in old_t]
    if gone:
        out.append("no longer signalled (exited or changed): "
                   + ", ".join(f"{t.pid} ({t.label})" for t in gone))
    if added:
        out.append("newly signalled: " + ", ".join(f"{t.pid} ({t.label})" for t in added))
    if [s.describe(0) for s in old.commands] != [s.describe(0) for s in new.commands]:
        out.append("commands changed: "
                   + "; ".join(s.describe(0) for s in new.commands) or "none")
    if abs(new.expected_free_total_mib - old.expected_free_total_mib) > CHANGE_SLACK_MIB:
        out.append(f"expected back: {gib(old.expected_free_total_mib)} -> "
                   f"{gib(new.expected_free_total_mib)}")
    out += [f"new warning: {n}" for n in new.notes if n not in old.notes]
    return out
