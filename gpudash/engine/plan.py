"""A plan: exactly what will be sent, to whom, and what should come back.

A plan names the commands, the PIDs with their start times and the GiB expected back per
GPU, so the operator confirms facts, not intentions. It is built by an action's spec
(``gpudash.engine.actions``) from one snapshot; before it runs it is built again from a
fresh one and any difference is shown (``plan_changes``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from gpudash.engine.steps import Signal, Step, Systemctl
from gpudash.engine.target import Target
from gpudash.model import Unit
from gpudash.units import gib, gib_number


class ActionKind(StrEnum):
    STOP = "stop"
    DISABLE = "disable"
    STOP_DISABLE = "stop+disable"
    TERMINATE = "terminate"
    KILL = "kill"
    REAP = "reap"
    RECLAIM = "reclaim"


STOPPING = frozenset({ActionKind.STOP, ActionKind.STOP_DISABLE, ActionKind.RECLAIM})
DISABLING = frozenset({ActionKind.DISABLE, ActionKind.STOP_DISABLE, ActionKind.RECLAIM})


class PlanError(ValueError):
    """The action makes no sense for this selection; the message says why."""


@dataclass(frozen=True, slots=True)
class Selection:
    """What the operator pointed at: a unit, a process, or neither."""

    unit: str | None = None
    pid: int | None = None


@dataclass(frozen=True, slots=True)
class ActionPlan:
    kind: ActionKind
    title: str
    host: str
    subject: str  # the unit name or "pid N"
    selection: Selection  # what it was planned for, to plan it again
    steps: tuple[Step, ...] = ()
    expected_free_mib: Mapping[int, int] = field(default_factory=dict)  # per GPU
    used_before_mib: Mapping[int, int | None] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    untouched: tuple[Target, ...] = ()  # other holders the plan leaves alone, for the record
    unit_before: Unit | None = None
    simulated: bool = False  # planned on the demo host: nothing real is touched

    @property
    def commands(self) -> tuple[Systemctl, ...]:
        return tuple(s for s in self.steps if isinstance(s, Systemctl))

    @property
    def signals(self) -> tuple[Signal, ...]:
        return tuple(s for s in self.steps if isinstance(s, Signal))

    @property
    def targets(self) -> tuple[Target, ...]:
        return tuple(s.target for s in self.signals)

    @property
    def expected_free_total_mib(self) -> int:
        return sum(self.expected_free_mib.values())

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
                f"GPU{g} {gib_number(m)}" for g, m in sorted(self.expected_free_mib.items()) if m
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


CHANGE_SLACK_MIB = 512  # expected-back differences below this are driver noise, not news


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
    if old.commands != new.commands:
        out.append("commands changed: "
                   + ("; ".join(s.describe(0) for s in new.commands) or "none"))
    if abs(new.expected_free_total_mib - old.expected_free_total_mib) > CHANGE_SLACK_MIB:
        out.append(f"expected back: {gib(old.expected_free_total_mib)} -> "
                   f"{gib(new.expected_free_total_mib)}")
    out += [f"new warning: {n}" for n in new.notes if n not in old.notes]
    return out
