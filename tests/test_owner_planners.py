"""An owner kind brings its planners through the registries, not through the engine's
types (issue 31: "``ActionSpec`` maps kinds to planners"): a kind registered in
``owners.KINDS`` and named in an action's ``planners`` is offered the action, titled in its
own words and planned by its own planner; a kind with only a ``command`` rides the generic
owner command. Neither ``ActionSpec`` nor ``Selection`` grows a field for it.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Mapping
from enum import StrEnum

import pytest

import gpudash.domain.owners as owners_pkg
from gpudash.domain.model import HostSnapshot, Process, Unit
from gpudash.domain.owners import KINDS, BaseRules, Owner, OwnerCapability, OwnerRef
from gpudash.domain.triage import triage
from gpudash.engine import SPECS, ActionKind, PlanError
from gpudash.engine import plan as plan_module
from gpudash.engine import spec as spec_module
from gpudash.engine.actions import selection_for
from gpudash.engine.plan import ActionPlan, Selection
from gpudash.engine.planners import new_plan, pin
from gpudash.engine.spec import ActionSpec, selected_owner
from gpudash.engine.steps import OwnerCommand
from gpudash.engine.target import expected_free


class WidgetKind(StrEnum):
    """A kind gpudash does not know: no value of ``OwnerKind``, no field anywhere."""

    WIDGET = "widget"


class WidgetRules(BaseRules):
    """Widgets: a process whose claim is ``widget:ID`` is that widget's; it can be folded
    (stopped) with ``widgetctl fold ID``."""

    kind = WidgetKind.WIDGET  # type: ignore[assignment]

    def recognize(self, p: Process, snapshot: HostSnapshot, units: Mapping[str, Unit]
                  ) -> Owner | None:
        claimed = p.claimed
        if claimed is None or claimed[0] != self.kind.value:
            return None
        return Owner(self.kind, "widget " + claimed[1], self)

    def selector(self, owner: Owner) -> OwnerRef | None:
        return OwnerRef(self.kind.value, owner.key.removeprefix("widget "))

    def describe(self, owner: Owner) -> str:
        return owner.key

    def capabilities(self, owner: Owner) -> frozenset[OwnerCapability]:
        return frozenset({OwnerCapability.STOP})

    def command(self, capability: OwnerCapability, key: str) -> tuple[str, ...] | None:
        return ("widgetctl", "fold", key) if capability is OwnerCapability.STOP else None

    def title(self, capability: OwnerCapability, action: str) -> str | None:
        return "Fold widget" if action == "stop" else None


def plan_fold(spec: ActionSpec, snapshot: HostSnapshot, sel: Selection) -> ActionPlan:
    """The widget kind's own stop: fold it, every process of it pinned for the record."""
    owner = selected_owner(snapshot, sel)
    if owner is None:
        raise PlanError("no such widget here")
    key = owner.key.removeprefix("widget ")
    members = [pin(snapshot, p) for p in snapshot.processes if p.claim == f"widget:{key}"]
    return new_plan(spec, snapshot, sel, f"{spec.title_of(owner.kind)} {key}",
                    steps=(OwnerCommand("widget", "fold", key, ("widgetctl", "fold", "-q", key)),),
                    expected_free_mib=expected_free(snapshot, members))


def widget_host() -> HostSnapshot:
    procs = (Process(pid=40, ppid=1, start_ticks=400, name="widgetd", claim="widget:w7",
                     gpu_memory_mib={0: 3000}),
             Process(pid=41, ppid=40, start_ticks=401, name="widget-worker",
                     claim="widget:w7", gpu_memory_mib={1: 2000}))
    return HostSnapshot("gpu01", 0.0, processes=procs)


@pytest.fixture
def widgets(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(owners_pkg, "KINDS", (WidgetRules(), *KINDS))


def test_a_new_kind_is_planned_by_its_own_planner_through_the_registries(
        widgets: None, monkeypatch: pytest.MonkeyPatch) -> None:
    stop = SPECS[ActionKind.STOP]
    monkeypatch.setitem(SPECS, ActionKind.STOP, dataclasses.replace(
        stop, planners={**stop.planners, WidgetKind.WIDGET.value: plan_fold}))
    stop = SPECS[ActionKind.STOP]
    snap = widget_host()
    result = triage(snap)
    group = result.group_of(40)
    assert group is not None and group.owner is not None
    assert group.owner.kind == "widget"
    sel = selection_for(result, group.key, 40)
    assert stop.precheck(result, sel) is None
    assert stop.title_for(sel) == "Fold widget"
    plan = stop.plan(snap, sel)
    assert [c.argv for c in plan.commands] == [("widgetctl", "fold", "-q", "w7")]
    assert plan.title == "Stop unit: Fold widget w7"  # planned by plan_fold, not the generic
    assert dict(plan.expected_free_mib) == {0: 3000, 1: 2000}
    # what the kind cannot do is greyed with its own reason, and refused when planned
    disable = SPECS[ActionKind.DISABLE]
    assert disable.precheck(result, sel) == "widget w7 cannot disable: signal its processes"
    with pytest.raises(PlanError, match="cannot disable"):
        disable.plan(snap, sel)


def test_a_new_kind_with_a_command_rides_the_generic_owner_planner(widgets: None) -> None:
    snap = widget_host()
    result = triage(snap)
    group = result.group_of(41)
    assert group is not None
    sel = selection_for(result, group.key, None)
    stop = SPECS[ActionKind.STOP]
    assert stop.precheck(result, sel) is None
    plan = stop.plan(snap, sel)
    assert [c.argv for c in plan.commands] == [("widgetctl", "fold", "w7")]
    assert plan.title == "Fold widget: widget w7"
    assert {t.pid for t in plan.targets} == set()  # its manager ends them: none signalled
    assert dict(plan.expected_free_mib) == {0: 3000, 1: 2000}


KIND_WORDS = {word for rules in KINDS for word in rules.kind.value.split()} - {"no"}


def _per_kind(cls: type) -> list[str]:
    return [f.name for f in dataclasses.fields(cls) if f.name.split("_")[0] in KIND_WORDS]


def test_an_action_spec_has_no_field_per_owner_kind() -> None:
    """Its planners are one map by kind; a ``container_planner``, a ``container_title`` or
    an ``owner_planner`` coming back fails here."""
    assert _per_kind(ActionSpec) == []
    hints = typing.get_type_hints(ActionSpec, vars(spec_module))
    planning = [name for name, hint in hints.items() if "ActionPlan" in str(hint)]
    assert planning == ["planners"]
    assert not [name for name in vars(ActionSpec) if name.endswith("_planner")
                or name == "planner_for"]


def test_a_selection_names_its_owner_by_kind_and_key_only() -> None:
    """Which owner is one ``OwnerRef``; a ``unit``, ``container``, ``pod`` or ``job``
    field coming back fails here. (``unit_text`` is no owner: the text of the unit's
    configuration a fix was planned from.)"""
    assert [name for name in _per_kind(Selection) if name != "unit_text"] == []
    hints = typing.get_type_hints(Selection, vars(plan_module))
    assert hints["owner"] == OwnerRef | None
    named = [name for name, hint in hints.items() if "OwnerRef" in str(hint)]
    assert named == ["owner"]


# the typed views the model binds (``schema.TYPED``: a container, a pod), the systemd unit
# a process is in, and the user whose own systemd it is under: any kind's
OWNER_VIEWS = {"unit", "container", "pod", "user", "user_uid"}


def test_an_owner_carries_no_identity_of_one_kind() -> None:
    """A container's id and runtime, a pod's UID are read by their kind's rules from the
    claim that named the owner (``Owner.claimed``), not fields of every owner."""
    names = {f.name for f in dataclasses.fields(Owner)}
    assert not names & {"container_id", "runtime", "pod_uid"}
    assert [name for name in _per_kind(Owner) if name not in OWNER_VIEWS] == []
