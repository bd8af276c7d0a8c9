"""A Slurm node drained with a reason, or resumed: for the operator who decides the node is
unhealthy (or healthy again).

Planned only on a Slurm node whose state Slurm said (the host's facts of itself), a drain
only where it is not drained already, a resume only where it is. The plan names the node,
the reason exactly as Slurm is given it, and the jobs running there, which a drain lets
finish (it ends none of them). What proves it: ``scontrol show node`` (read afresh on
every sample) reporting DRAIN with that reason, or no DRAIN any more
(``gpudash.engine.node_proof``).
"""

from __future__ import annotations

from gpudash.domain.model import HostSnapshot
from gpudash.domain.owners.slurm import allocated
from gpudash.domain.owners.slurm_node import (
    DRAIN,
    RESUME,
    is_drained,
    node_argv,
    node_of,
    running_jobs,
    state_of,
)
from gpudash.domain.unheld import NOTABLE_MIB
from gpudash.domain.units import gib
from gpudash.engine.plan import ActionKind, ActionPlan, PlanError, Selection
from gpudash.engine.planners import new_plan
from gpudash.engine.spec import ActionSpec
from gpudash.engine.steps import NodeCommand

DRAIN_TITLE = "Drain the Slurm node (no new jobs; running ones finish)"
RESUME_TITLE = "Resume the Slurm node (it takes jobs again)"
VERB = {ActionKind.DRAIN: DRAIN, ActionKind.RESUME: RESUME}


def node_refusal(snapshot: HostSnapshot, sel: Selection, kind: ActionKind) -> str | None:
    """Why the node may not be drained (resumed) now, or None. The reason is asked after."""
    try:
        _node(snapshot, kind)
    except PlanError as exc:
        return str(exc)
    return None


def drain_refusal(snapshot: HostSnapshot, sel: Selection) -> str | None:
    return node_refusal(snapshot, sel, ActionKind.DRAIN)


def resume_refusal(snapshot: HostSnapshot, sel: Selection) -> str | None:
    return node_refusal(snapshot, sel, ActionKind.RESUME)


def _node(snapshot: HostSnapshot, kind: ActionKind) -> str:
    node, why = node_of(snapshot)
    if node is None:
        raise PlanError(why or f"{snapshot.host} is not a Slurm node")
    drained = is_drained(snapshot)
    if kind is ActionKind.DRAIN and drained:
        raise PlanError(f"{node} is drained already: {state_of(snapshot)}; resume it first "
                        "to drain it with another reason")
    if kind is ActionKind.RESUME and not drained:
        raise PlanError(f"{node} is not drained ({state_of(snapshot)}): nothing to resume")
    return node


def plan_node(spec: ActionSpec, snapshot: HostSnapshot, sel: Selection) -> ActionPlan:
    """The drain (with ``sel.reason``) or the resume of the host's Slurm node."""
    node = _node(snapshot, spec.kind)
    verb = VERB[spec.kind]
    if verb == DRAIN and sel.reason is None:
        raise PlanError("a drain needs a reason (--reason): it is what sinfo -R shows")
    try:
        argv = node_argv(verb, node, sel.reason if verb == DRAIN else None)
    except ValueError as exc:
        raise PlanError(f"{node} not drained: {exc}") from None
    running = running_jobs(snapshot)
    if verb == DRAIN:
        notes = [f"Slurm starts no new job on {node}; a drain ends no job"]
        if running:
            notes.append(f"{len(running)} job(s) run there; the drain lets them finish (the "
                         "node is DRAINING until they end):")
            notes += [f"  {line}" for line in running]
        else:
            notes.append(f"no job runs on {node} now: it is DRAINED at once")
        notes.append(f"proven when scontrol show node {node} reports DRAIN with this reason")
        reason = sel.reason
    else:
        notes = [f"Slurm may start jobs on {node} again (now {state_of(snapshot)})",
                 *_held_outside_jobs(snapshot),
                 f"proven when scontrol show node {node} no longer reports DRAIN"]
        reason = None
    return new_plan(spec, snapshot, Selection(reason=reason), f"node {node}",
                    steps=(NodeCommand(verb, node, reason, argv),), notes=tuple(notes))


def _held_outside_jobs(snapshot: HostSnapshot) -> list[str]:
    """What a resumed node hands the next job: memory on GPUs no running job has."""
    given = allocated(snapshot)
    return [f"GPU {g} holds {gib(mib)} and no running job has it: the next job given it may "
            "run out of memory (gpudash reap first)"
            for g, mib in sorted(snapshot.used_by_gpu().items())
            if mib is not None and mib >= NOTABLE_MIB and g not in given]
