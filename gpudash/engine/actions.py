"""Every action, written once: its title, key, what it needs selected, whether it fits
(``precheck``) and its plan.

The dashboard's keys, footer, palette and help, the greyed-out reasons and the CLI all
read this registry; none of them re-derives what an action needs. Adding an action means
adding one ``ActionSpec`` here.
"""

from __future__ import annotations

from dataclasses import replace

from gpudash.domain.model import HostSnapshot, Unit
from gpudash.domain.owners import (
    OwnerCapability,
)
from gpudash.domain.triage import HostTriage
from gpudash.engine.config_plans import TITLE as FIX_TITLE
from gpudash.engine.config_plans import fix_fits, plan_fix
from gpudash.engine.container_plans import (
    container_only,
    plan_container,
    plan_container_start,
    require_container,
)
from gpudash.engine.gpu_plans import TITLE as RESET_TITLE
from gpudash.engine.gpu_plans import plan_gpu_reset, reset_refusal
from gpudash.engine.node_plans import (
    DRAIN_TITLE,
    RESUME_TITLE,
    drain_refusal,
    plan_node,
    resume_refusal,
)
from gpudash.engine.owner_plans import plan_owner_command
from gpudash.engine.plan import (
    ActionKind,
    ActionPlan,
    Phase,
    PlanError,
    Selection,
    Serving,
    plan_changes,
)
from gpudash.engine.planners import (
    fitting,
    new_plan,
    plan_enable,
    plan_process,
    plan_reap,
    plan_start,
    plan_unit,
    require_unit,
    serving_of,
    start_steps,
    startable,
)
from gpudash.engine.spec import (
    CONTAINER,
    OTHER_KINDS,
    SERVICE,
    ActionSpec,
    Needs,
    Planner,
    container_of,
    container_ref,
    selected_owner,
    unit_of,
    unit_ref,
)
from gpudash.engine.steps import Systemctl
from gpudash.serving.modelservers import port_of, server_kind

__all__ = [
    "ACTION_TITLES", "PROCESS_ACTIONS", "SPECS", "SPECS_BY_NAME", "UNIT_ACTIONS", "ActionSpec",
    "Needs", "plan_action", "plan_swap", "replan", "selected_owner", "selection_for",
]


def plan_swap(spec: ActionSpec, snapshot: HostSnapshot, sel: Selection) -> ActionPlan:
    """Reclaim one model with proof, then start the next and prove it serves.

    What is reclaimed is the selected owner, a service or a container:
    the reclaim phase is that owner's own reclaim plan, so a container is stopped with
    its restart policy off and what escaped it is reaped, as ``reclaim --container`` does.
    """
    if not sel.target:
        raise PlanError("choose the unit to start")
    target = require_unit(snapshot, sel.target)
    reclaim_spec = SPECS[ActionKind.RECLAIM]
    container = None
    if (named := container_of(sel)) is not None:
        owner = require_container(snapshot, named)
        if not owner.can(OwnerCapability.RECLAIM):
            raise PlanError(owner.unable(OwnerCapability.RECLAIM))
        container = owner.container
        assert container is not None
        source_name, source_unit = owner.describe(), None
        picked = Selection(owner=container_ref(container.id))
    else:
        source = require_unit(snapshot, unit_of(sel))
        if target.name == source.name:
            raise PlanError("swap to another unit: use restart to start the same one again")
        source_name, source_unit = source.name, source
        picked = Selection(owner=unit_ref(source.name))
    reclaim = reclaim_spec.plan(snapshot, picked)  # the owner's own reclaim, by its kind
    if not target.is_down:
        raise PlanError(f"{target.name} is already {target.active_state}")
    if target.unit_file_state == "masked":
        raise PlanError(f"{target.name} is masked: systemd will not start it")
    fit = fitting(snapshot, target, sel, reclaim.expected_free_mib,
                  {t.pid for t in reclaim.targets}, f" once {source_name} is reclaimed")
    start = start_steps(target, "start", sel.enable)
    serving = serving_of(snapshot, target, sel)
    enabled = any(isinstance(st, Systemctl) and st.verb == "enable" for st in start)
    back = (rollback_phase(source_unit, target, enabled)
            if source_unit is not None and sel.rollback else None)
    return new_plan(
        spec, snapshot,
        replace(picked, target=target.name, enable=sel.enable, ready_url=sel.ready_url,
                footprint=sel.footprint, force=sel.force, rollback=sel.rollback),
        f"{source_name} -> {target.name}",
        steps=reclaim.steps + start,
        phases=(Phase("reclaim", ActionKind.RECLAIM, reclaim.steps),
                Phase("start", ActionKind.START, start, serving)),
        expected_free_mib=reclaim.expected_free_mib,
        notes=reclaim.notes,
        untouched=reclaim.untouched,
        unit_before=source_unit,
        container_before=container,
        fit=tuple(fit),
        rollback=back,
    )


def rollback_phase(old: Unit, new: Unit, enabled_new: bool) -> Phase:
    """Put back what the swap changed: ``new`` stopped (and disabled again where the swap
    enabled it: a failed model must not boot beside the old one), then ``old`` started
    again (enabled again if it was), proven as any start: its own port's /health, from its
    ExecStart."""
    port = port_of(old.exec_start, server_kind(old.exec_start)) if old.exec_start else None
    url = f"http://127.0.0.1:{port}/health" if port else None
    enable = (old.unit_file_state or "").startswith("enabled")
    steps = (Systemctl("stop", new.name),
             *((Systemctl("disable", new.name),) if enabled_new else ()),
             Systemctl("start", old.name),
             *((Systemctl("enable", old.name),) if enable else ()))
    return Phase("rollback", ActionKind.START, steps, Serving(old.name, url))


# --- the registry --------------------------------------------------------------------------

# the planners of an owner-wide action, by owner kind (``OwnerRules.kind``): a system
# service's, a container's; ``OTHER_KINDS``: every other kind's own command
UNIT_OR_CONTAINER = {SERVICE: plan_unit, CONTAINER: plan_container}
STARTS = {SERVICE: plan_start, CONTAINER: plan_container_start}


def _any(planner: Planner) -> dict[str, Planner]:
    """An action on no owner (a process, the orphans, a GPU, the node): one planner."""
    return {OTHER_KINDS: planner}


SPECS: dict[ActionKind, ActionSpec] = {
    spec.kind: spec
    for spec in (
        ActionSpec(ActionKind.STOP, "stop_unit", "Stop unit", "s", "Stop", Needs.UNIT,
                   {**UNIT_OR_CONTAINER, OTHER_KINDS: plan_owner_command},
                   capability=OwnerCapability.STOP),
        ActionSpec(ActionKind.DISABLE, "disable_unit", "Disable unit", "d", "Disable",
                   Needs.UNIT, UNIT_OR_CONTAINER, capability=OwnerCapability.DISABLE),
        ActionSpec(ActionKind.STOP_DISABLE, "stop_disable", "Stop + disable unit", "D",
                   "Stop+disable", Needs.UNIT, UNIT_OR_CONTAINER,
                   capability=OwnerCapability.STOP),
        ActionSpec(ActionKind.TERMINATE, "terminate", "Terminate process (TERM, then KILL)",
                   "t", "Terminate", Needs.PROCESS, _any(plan_process)),
        ActionSpec(ActionKind.KILL, "kill", "Kill process (KILL)", "k", "Kill", Needs.PROCESS,
                   _any(plan_process)),
        ActionSpec(ActionKind.SIGNAL, "send_signal", "Send a signal", "S",
                   "Signal", Needs.PROCESS, _any(plan_process), in_footer=False),
        ActionSpec(ActionKind.REAP, "reap", "Reap orphans", "o", "Reap orphans", Needs.ORPHANS,
                   _any(plan_reap)),
        ActionSpec(ActionKind.RECLAIM, "reclaim", "Reclaim unit (stop + disable + reap + wait)",
                   "r", "Reclaim", Needs.UNIT, UNIT_OR_CONTAINER,
                   capability=OwnerCapability.RECLAIM),
        ActionSpec(ActionKind.START, "start_unit", "Start unit and follow it to serving", "u",
                   "Start", Needs.UNIT, STARTS, startable, capability=OwnerCapability.START),
        ActionSpec(ActionKind.RESTART, "restart_unit", "Restart unit and follow it to serving",
                   "R", "Restart", Needs.UNIT, STARTS, capability=OwnerCapability.START),
        ActionSpec(ActionKind.ENABLE, "enable_unit", "Enable unit (start at boot)", "e",
                   "Enable", Needs.UNIT, {SERVICE: plan_enable},
                   capability=OwnerCapability.START),
        ActionSpec(ActionKind.SWAP, "swap", "Swap model (reclaim, start the next, prove it "
                   "serves)", "w", "Swap", Needs.UNIT_AND_TARGET,
                   {SERVICE: plan_swap, CONTAINER: plan_swap},
                   capability=OwnerCapability.RECLAIM),
        ActionSpec(ActionKind.REMOVE, "remove_container", "Remove a stopped container "
                   "(docker rm)", "X", "Remove", Needs.UNIT, {CONTAINER: plan_container},
                   container_only, capability=OwnerCapability.REMOVE, hidden_unless_fits=True),
        ActionSpec(ActionKind.FIX, "fix_unit", FIX_TITLE, "c", "Fix config", Needs.UNIT,
                   {SERVICE: plan_fix}, fix_fits, hidden_unless_fits=True, in_footer=False),
        ActionSpec(ActionKind.GPU_RESET, "gpu_reset", RESET_TITLE, "G", "Reset GPU", Needs.GPU,
                   _any(plan_gpu_reset), reset_refusal, hidden_unless_fits=True),
        ActionSpec(ActionKind.DRAIN, "drain_node", DRAIN_TITLE, "N", "Drain node", Needs.NODE,
                   _any(plan_node), drain_refusal, hidden_unless_fits=True),
        ActionSpec(ActionKind.RESUME, "resume_node", RESUME_TITLE, "ctrl+n", "Resume node",
                   Needs.NODE, _any(plan_node), resume_refusal, hidden_unless_fits=True),
    )
}
SPECS_BY_NAME = {spec.name: spec for spec in SPECS.values()}
UNIT_ACTIONS = frozenset(k for k, s in SPECS.items() if s.needs is Needs.UNIT)
PROCESS_ACTIONS = frozenset(k for k, s in SPECS.items() if s.needs is Needs.PROCESS)
ACTION_TITLES = {k: s.title for k, s in SPECS.items()}


def plan_action(
    snapshot: HostSnapshot, kind: ActionKind, *, unit: str | None = None, pid: int | None = None,
    container: str | None = None,
) -> ActionPlan:
    """Build the exact plan for ``kind`` on the given unit, container or pid, from one
    snapshot."""
    owner = (unit_ref(unit) if unit is not None else
             container_ref(container) if container is not None else None)
    return SPECS[kind].plan(snapshot, Selection(owner=owner, pid=pid))


def selection_for(result: HostTriage | None, owner_key: str | None, pid: int | None, *,
                  gpu: int | None = None) -> Selection:
    """What the operator points at (an owner's row, or one of its processes; ``gpu``: the
    memory no process holds on that GPU) as the engine takes it, as its kind names it
    (``OwnerRules.selector``): a service by its unit, a container by its id, a pod by its
    UID, a Slurm job by its id."""
    if gpu is not None:
        return Selection(gpu=gpu)
    group = result.group(owner_key) if result is not None and owner_key else None
    owner = group.owner if group is not None else None
    return Selection(pid=pid, owner=owner.selector if owner is not None else None)


def replan(plan: ActionPlan, snapshot: HostSnapshot) -> tuple[ActionPlan, list[str]]:
    """``plan`` built again from a fresh ``snapshot``, and what changed that matters.

    A plan confirmed in a dialog left open for a while must not run on a stale baseline
    (memory that moved meanwhile would read as "NOT confirmed"), nor signal a set of
    processes the operator did not see. Raises ``PlanError`` when the action no longer
    makes sense (the process is gone, nothing left to reap).
    """
    fresh = SPECS[plan.kind].plan(snapshot, plan.selection)
    return fresh, plan_changes(plan, fresh)
