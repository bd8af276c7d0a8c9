"""Actions on an owner of a kind with its own command (a Slurm job: ``scancel``).

The owner is the one a claim names (``Selection.owner``: ``slurm job``, ``42``); its kind's
rules say whether it can, and build the command. What proves it: the memory its processes
hold now comes back (slurmd ends them), every process of it pinned for the record.
"""

from __future__ import annotations

from dataclasses import replace

from gpudash.domain.model import HostSnapshot
from gpudash.engine.plan import ActionPlan, PlanError, Selection
from gpudash.engine.planners import left_alone, new_plan, pin
from gpudash.engine.spec import ActionSpec, selected_owner
from gpudash.engine.steps import OwnerCommand
from gpudash.engine.target import expected_free


def plan_owner_command(spec: ActionSpec, snapshot: HostSnapshot, sel: Selection
                       ) -> ActionPlan:
    ref = sel.owner
    owner = selected_owner(snapshot, sel)
    if ref is None or owner is None:
        raise PlanError(f"{ref or 'the owner'}: none of its processes is on {snapshot.host}")
    capability = spec.capability
    kind, key, claim = ref.kind, ref.key, str(ref)
    argv = owner.rules.command(capability, key) if capability is not None else None
    if capability is None or argv is None or not owner.can(capability):
        raise PlanError(owner.unable(capability) if capability is not None
                        else f"{owner.describe()}: not an action on it")
    members = [p for p in snapshot.processes if p.claim == claim and p.start_ticks is not None]
    pinned = [pin(snapshot, p) for p in members]
    holding = sum(1 for p in members if p.holds_gpu_memory)
    # what the job runs besides (a script's `sleep`, a data loader) comes and goes between
    # two samples: not counted here, or a confirm would read as a changed plan
    notes = (f"{owner.describe()}: {holding} process(es) holding GPU memory; its manager "
             "ends them and whatever else it runs, the memory they hold is expected back.",)
    plan = new_plan(spec, snapshot, Selection(owner=ref), owner.describe(),
                    steps=(OwnerCommand(kind, capability.value, key, argv),),
                    expected_free_mib=expected_free(snapshot, pinned),
                    notes=notes, untouched=left_alone(snapshot, pinned))
    return replace(plan, title=f"{spec.title_of(owner.kind)}: {plan.subject}")
