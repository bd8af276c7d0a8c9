"""What an action is: its spec (title, key, what it needs selected, whether it fits,
its planner), asked by the dashboard, the CLI and the engine alike.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from enum import StrEnum

from gpudash.domain.model import HostSnapshot, unit_name
from gpudash.domain.owners import (
    Owner,
    OwnerCapability,
    container_members,
    container_owner,
    owner_of,
    rules_of,
)
from gpudash.domain.triage import (
    HostTriage,
)
from gpudash.engine.plan import (
    ActionKind,
    ActionPlan,
    PlanError,
    Selection,
)


class Needs(StrEnum):
    UNIT = "unit"  # a system service (or, where it can, a container): an owner row or a process
    PROCESS = "process"  # one process
    ORPHANS = "orphans"  # orphans of the selected unit, else of the whole host
    UNIT_AND_TARGET = "unit and target"  # a service to reclaim and the one to start (swap)
    GPU = "gpu"  # one GPU: the unattributed row (memory no process holds)
    NODE = "node"  # the host itself as a Slurm node: whatever is selected


@dataclass(frozen=True, slots=True)
class ActionSpec:
    kind: ActionKind
    name: str  # the action's name in the UI: binding id ``gpudash.<name>``, ``action_<name>``
    title: str
    key: str  # default key
    label: str  # short footer label
    needs: Needs
    planner: Callable[[ActionSpec, HostSnapshot, Selection], ActionPlan]
    # what else must hold, read from the snapshot alone (cheap): a reason, or None
    fits: Callable[[HostSnapshot, Selection], str | None] | None = None
    # what the selected owner must be able to do; containers are offered the specs whose
    # capability their runtime has (stop, restart policy off, remove, reclaim)
    capability: OwnerCapability | None = None
    # the same action for a container: its planner (None: systemd units only)
    container_planner: Callable[[ActionSpec, HostSnapshot, Selection], ActionPlan] | None = None
    # a rare action: hidden (not greyed) where it does not fit, so it costs no footer room
    hidden_unless_fits: bool = False
    # a rare action: its key, help row and palette entry, no room in the footer
    in_footer: bool = True
    container_title: str | None = None  # what it is called where a container is selected
    # the same action for an owner a claim names (a Slurm job): its kind's own command
    owner_planner: Callable[[ActionSpec, HostSnapshot, Selection], ActionPlan] | None = None

    def planner_for(self, sel: Selection
                    ) -> Callable[[ActionSpec, HostSnapshot, Selection], ActionPlan] | None:
        """The planner of an owner that is no unit: a claim's, or a container's."""
        return self.owner_planner if sel.owner is not None else self.container_planner

    @property
    def binding_id(self) -> str:
        return f"gpudash.{self.name}"

    def title_for(self, sel: Selection) -> str:
        """Its title for what is selected: a container's own words on a container, an owner
        kind's on its owner ("Cancel job (scancel)")."""
        if sel.unit is None and sel.container is not None and self.container_title:
            return self.container_title
        rules = rules_of(sel.owner.partition(":")[0]) if sel.owner else None
        if rules is not None and self.capability is not None:
            return rules.title(self.capability) or self.title
        return self.title

    def precheck(self, result: HostTriage, sel: Selection) -> str | None:
        """Why this action does not fit the selection now, or None. Cheap: no planning.
        A unit's fit is judged with what was learned of its stops here (the triage's), as
        its plan will be."""
        snap = result.snapshot
        sel = _with_learned(result, sel)
        if not snap.can_act:
            return snap.cannot_act_reason or f"cannot act on {snap.host}"
        if self.needs in (Needs.UNIT, Needs.UNIT_AND_TARGET) and sel.unit is None:
            owner = selected_owner(snap, sel)
            if owner is not None and self.capability is not None:
                if self.planner_for(sel) is None or not owner.can(self.capability):
                    return owner.unable(self.capability)
                return None if self.fits is None else self.fits(snap, sel)
            if self.container_planner is not None:
                return "select a system service or a container (its row or one of its processes)"
            return "select a system service (a unit row or one of its processes)"
        if self.needs is Needs.PROCESS and not sel.pids and (sel.pid is None or sel.pid == 1):
            return "select a process"
        if self.needs is Needs.GPU and sel.gpu is None:
            return "select the unattributed row (memory no process holds)"
        if self.needs is Needs.ORPHANS:
            orphans = result.orphans()
            if sel.unit is not None:
                orphans = tuple(p for p in orphans if p.unit == sel.unit)
            elif sel.container is not None:
                c = snap.container(sel.container)
                members = {p.pid for p in container_members(snap, c)} if c else set()
                orphans = tuple(p for p in orphans if p.pid in members)
            if not orphans:
                where = f" of {sel.unit or sel.container}" if sel.unit or sel.container else ""
                return f"no orphaned processes{where} hold GPU memory"
        return None if self.fits is None else self.fits(snap, sel)

    def plan(self, snapshot: HostSnapshot, sel: Selection) -> ActionPlan:
        """The exact plan for ``sel`` on ``snapshot``; ``PlanError`` says why not."""
        if not snapshot.can_act:
            raise PlanError(snapshot.cannot_act_reason or f"cannot act on {snapshot.host}")
        if sel.unit is None and self.needs in (Needs.UNIT, Needs.UNIT_AND_TARGET):
            owner = selected_owner(snapshot, sel)
            planner = self.planner_for(sel)
            if owner is not None and self.capability is not None:
                if planner is None or not owner.can(self.capability):
                    raise PlanError(owner.unable(self.capability))
                return planner(self, snapshot, sel)
            if sel.owner is not None and planner is not None:
                return planner(self, snapshot, sel)  # it says what is missing
        return self.planner(self, snapshot, sel)


def selected_owner(snapshot: HostSnapshot, sel: Selection) -> Owner | None:
    """The container, pod or claimed owner (a Slurm job) the selection names (None: a
    unit, a process, or nothing)."""
    if sel.owner is not None:
        for p in snapshot.processes:
            if p.claim == sel.owner:
                o = owner_of(p, snapshot)
                if o.selector.get("owner") == sel.owner:
                    return o
        return None
    if sel.container is not None:
        return container_owner(snapshot, sel.container)
    if sel.pod is not None:
        for p in snapshot.processes:
            o = owner_of(p, snapshot)
            if o.selector.get("pod") == sel.pod:
                return o
    return None


def _with_learned(result: HostTriage, sel: Selection) -> Selection:
    """``sel`` with what the triage learned of its unit's stops, where it says nothing."""
    if sel.unit is None or sel.learned is not None:
        return sel
    known = result.learned.get(unit_name(sel.unit))
    return sel if known is None else replace(sel, learned=known)
