"""What proves a freeing phase: the goals its samples are checked against."""

from __future__ import annotations

from gpudash.engine.actions import PROCESS_ACTIONS
from gpudash.engine.goals import (
    ContainerDown,
    ContainerNoRespawn,
    ContainerPolicyOff,
    ContainerRemoved,
    Goal,
    MemoryAtMost,
    NoRespawn,
    ProcessesGone,
    UnitDown,
    UnitEnabled,
    UnitNotEnabled,
)
from gpudash.engine.plan import DISABLING, STOPPING, ActionKind, ActionPlan, Phase
from gpudash.engine.steps import ContainerCommand


def respawn_watch(plan: ActionPlan) -> bool:
    """Signalling a unit's main process with a restart policy: watch for the respawn."""
    u = plan.unit_before
    return (
        plan.kind in PROCESS_ACTIONS
        and u is not None
        and not u.is_down
        and u.main_pid in {t.pid for t in plan.targets}
        and (u.restart or "no").lower() != "no"
    )


def container_respawn_watch(plan: ActionPlan) -> bool:
    """Signalling a container's main process under a restart policy: watch for the restart."""
    c = plan.container_before
    return (
        plan.kind in PROCESS_ACTIONS
        and c is not None
        and not c.is_down
        and c.main_pid in {t.pid for t in plan.targets}
        and (c.restart_policy or "no") != "no"
    )


def freeing_goals(plan: ActionPlan, phase: Phase, respawn_watch_s: float,
                  memory: MemoryAtMost, gone: ProcessesGone) -> list[Goal]:
    """What proves ``phase`` of ``plan`` (a freeing one): memory back, processes gone,
    and whatever the unit's and the container's state must show after it."""
    kind = phase.kind
    goals: list[Goal] = [memory, gone]
    if respawn_watch(plan) and plan.unit_before is not None:
        goals.append(NoRespawn(plan.unit_before, respawn_watch_s))
    if plan.unit_before is not None and kind in STOPPING:
        goals.append(UnitDown(plan.unit_before.name))
    if plan.unit_before is not None and kind in DISABLING:
        goals.append(UnitNotEnabled(plan.unit_before.name))
    if plan.unit_before is not None and kind is ActionKind.ENABLE:
        goals.append(UnitEnabled(plan.unit_before.name))
    c = plan.container_before
    if c is not None:
        if container_respawn_watch(plan):
            goals.append(ContainerNoRespawn(c, respawn_watch_s))
        if kind in STOPPING:
            goals.append(ContainerDown(c))
        if kind in DISABLING and any(isinstance(s, ContainerCommand) and
                                     s.verb == "no-restart" for s in phase.steps):
            goals.append(ContainerPolicyOff(c))
        if kind is ActionKind.REMOVE:
            goals.append(ContainerRemoved(c))
    return goals
