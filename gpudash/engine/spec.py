"""What an action is: its spec (title, key, what it needs selected, whether it fits,
its planner), asked by the dashboard, the CLI and the engine alike.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from enum import StrEnum

from gpudash.domain.model import HostSnapshot, unit_name
from gpudash.domain.owners import (
    ContainerRules,
    Owner,
    OwnerCapability,
    OwnerRef,
    ServiceRules,
    container_members,
    owner_named,
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
from gpudash.record import record


class Needs(StrEnum):
    UNIT = "unit"  # a system service (or, where it can, a container): an owner row or a process
    PROCESS = "process"  # one process
    ORPHANS = "orphans"  # orphans of the selected unit, else of the whole host
    UNIT_AND_TARGET = "unit and target"  # a service to reclaim and the one to start (swap)
    GPU = "gpu"  # one GPU: the unattributed row (memory no process holds)
    NODE = "node"  # the host itself as a Slurm node: whatever is selected


Planner = Callable[["ActionSpec", HostSnapshot, Selection], ActionPlan]

# The key of ``ActionSpec.planners`` for the owners of every kind the map does not name:
# on an owner-wide action, the generic owner command (``plan_owner_command``: a Slurm job's
# ``scancel``, what any kind whose rules give a ``command`` runs); on an action on no owner
# (a process, the orphans, a GPU, the node), its one planner.
OTHER_KINDS = "*"
SERVICE = ServiceRules.kind.value  # the kind ``Selection.unit`` names: a system service
CONTAINER = ContainerRules.kind.value
OWNER_NEEDS = frozenset({Needs.UNIT, Needs.UNIT_AND_TARGET})  # acted on as a whole


@record
class ActionSpec:
    kind: ActionKind
    name: str  # the action's name in the UI: binding id ``gpudash.<name>``, ``action_<name>``
    title: str
    key: str  # default key
    label: str  # short footer label
    needs: Needs
    # its planner per kind of owner it acts on, by the kind's name (``OwnerRules.kind``:
    # "service" plans a systemd unit's, "container" a container's); ``OTHER_KINDS``: the
    # owners of every other kind, or, on an action on no owner, everything
    planners: Mapping[str, Planner]
    # what else must hold, read from the snapshot alone (cheap): a reason, or None
    fits: Callable[[HostSnapshot, Selection], str | None] | None = None
    # what the selected owner must be able to do; an owner is offered the specs whose
    # capability it has (a container: those its runtime has)
    capability: OwnerCapability | None = None
    # a rare action: hidden (not greyed) where it does not fit, so it costs no footer room
    hidden_unless_fits: bool = False
    # a rare action: its key, help row and palette entry, no room in the footer
    in_footer: bool = True

    def planner_of(self, kind: str | None) -> Planner | None:
        """The planner for an owner of ``kind`` (None: no owner is selected): the kind's
        own, else the one for every other kind; None: not this action's."""
        if kind is not None and kind in self.planners:
            return self.planners[kind]
        if kind is None and self.needs in OWNER_NEEDS:
            return None
        return self.planners.get(OTHER_KINDS)

    @property
    def binding_id(self) -> str:
        return f"gpudash.{self.name}"

    def title_of(self, kind: str | None) -> str:
        """Its title on an owner of ``kind``: the kind's own words where its rules have
        them ("Stop container", "Cancel job (scancel)")."""
        rules = rules_of(kind) if kind is not None else None
        if rules is not None and self.capability is not None:
            return rules.title(self.capability, self.kind.value) or self.title
        return self.title

    def title_for(self, sel: Selection) -> str:
        """Its title for what is selected (``title_of`` its owner's kind)."""
        return self.title_of(selected_kind(sel))

    def _select(self) -> str:
        what = " or a container" if CONTAINER in self.planners else ""
        rows = "its row" if what else "a unit row"
        return f"select a system service{what} ({rows} or one of its processes)"

    def precheck(self, result: HostTriage, sel: Selection) -> str | None:
        """Why this action does not fit the selection now, or None. Cheap: no planning.
        A unit's fit is judged with what was learned of its stops here (the triage's), as
        its plan will be."""
        snap = result.snapshot
        sel = _with_learned(result, sel)
        if not snap.can_act:
            return snap.cannot_act_reason or f"cannot act on {snap.host}"
        kind = selected_kind(sel)
        if self.needs in OWNER_NEEDS and kind != SERVICE:  # a unit's planner judges it
            owner = selected_owner(snap, sel)
            if owner is not None and self.capability is not None:
                if self.planner_of(kind) is None or not owner.can(self.capability):
                    return owner.unable(self.capability)
                return None if self.fits is None else self.fits(snap, sel)
            return self._select()
        if self.needs is Needs.PROCESS and not sel.pids and (sel.pid is None or sel.pid == 1):
            return "select a process"
        if self.needs is Needs.GPU and sel.gpu is None:
            return "select the unattributed row (memory no process holds)"
        if self.needs is Needs.ORPHANS:
            orphans = result.orphans()
            unit, container = unit_of(sel), container_of(sel)
            if unit is not None:
                orphans = tuple(p for p in orphans if p.unit == unit)
            elif container is not None:
                c = snap.container(container)
                members = {p.pid for p in container_members(snap, c)} if c else set()
                orphans = tuple(p for p in orphans if p.pid in members)
            if not orphans:
                where = f" of {unit or container}" if unit or container else ""
                return f"no orphaned processes{where} hold GPU memory"
        return None if self.fits is None else self.fits(snap, sel)

    def plan(self, snapshot: HostSnapshot, sel: Selection) -> ActionPlan:
        """The exact plan for ``sel`` on ``snapshot``; ``PlanError`` says why not."""
        if not snapshot.can_act:
            raise PlanError(snapshot.cannot_act_reason or f"cannot act on {snapshot.host}")
        kind = selected_kind(sel)
        planner = self.planner_of(kind)
        if self.needs in OWNER_NEEDS and kind not in (SERVICE, None):
            owner = selected_owner(snapshot, sel)
            if owner is not None and self.capability is not None and (
                    planner is None or not owner.can(self.capability)):
                raise PlanError(owner.unable(self.capability))
        if planner is None:
            raise PlanError(self._select())
        return planner(self, snapshot, sel)  # where the owner is not there, it says so


def selected_kind(sel: Selection) -> str | None:
    """The kind of owner ``sel`` names, by its rules' name (None: none, only a process, a
    GPU...)."""
    return sel.owner.kind if sel.owner is not None else None


def selected_owner(snapshot: HostSnapshot, sel: Selection) -> Owner | None:
    """The owner ``sel`` names, as its kind finds it on ``snapshot`` (None: none named, or
    not there)."""
    return None if sel.owner is None else owner_named(snapshot, sel.owner)


def key_of(sel: Selection, kind: str) -> str | None:
    """The key of the owner ``sel`` names where it is of ``kind``, else None."""
    return sel.owner.key if sel.owner is not None and sel.owner.kind == kind else None


def unit_of(sel: Selection) -> str | None:
    """The system service ``sel`` names (the systemd planners' owner), or None."""
    return key_of(sel, SERVICE)


def container_of(sel: Selection) -> str | None:
    """The container (name or id) ``sel`` names, or None."""
    return key_of(sel, CONTAINER)


def unit_ref(name: str) -> OwnerRef:
    """A system service, as a selection names it."""
    return OwnerRef(SERVICE, name)


def container_ref(name_or_id: str) -> OwnerRef:
    """A container, as a selection names it."""
    return OwnerRef(CONTAINER, name_or_id)


def _with_learned(result: HostTriage, sel: Selection) -> Selection:
    """``sel`` with what the triage learned of its unit's stops, where it says nothing."""
    unit = unit_of(sel)
    if unit is None or sel.learned is not None:
        return sel
    known = result.learned.get(unit_name(unit))
    return sel if known is None else replace(sel, learned=known)
