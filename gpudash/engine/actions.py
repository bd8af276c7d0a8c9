"""Every action, written once: its title, key, what it needs selected, whether it fits
(``precheck``) and its plan.

The dashboard's keys, footer, palette and help, the greyed-out reasons and the CLI all
read this registry; none of them re-derives what an action needs. Adding an action means
adding one ``ActionSpec`` here.
"""

from __future__ import annotations

import signal as _signal
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any

from gpudash.domain.model import HostSnapshot, Process, SourceKind, Unit, unit_name
from gpudash.domain.owners import (
    Capability,
    Owner,
    container_members,
    container_owner,
    owner_of,
    pod_advice,
)
from gpudash.domain.tree import ProcessTree
from gpudash.domain.triage import (
    Flag,
    HostTriage,
    OwnerKind,
    holds,
    label,
    orphan_summaries,
    owner_kind,
    process_flags,
    triage,
)
from gpudash.domain.units import gib
from gpudash.engine.plan import (
    DISABLING,
    STOPPING,
    ActionKind,
    ActionPlan,
    Phase,
    PlanError,
    Selection,
    Serving,
    plan_changes,
)
from gpudash.engine.steps import ContainerCommand, Signal, Step, Systemctl
from gpudash.engine.target import Target, expected_free


class Needs(StrEnum):
    UNIT = "unit"  # a system service (or, where it can, a container): an owner row or a process
    PROCESS = "process"  # one process
    ORPHANS = "orphans"  # orphans of the selected unit, else of the whole host
    UNIT_AND_TARGET = "unit and target"  # a service to reclaim and the one to start (swap)


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
    capability: Capability | None = None
    # the same action for a container: its planner (None: systemd units only)
    container_planner: Callable[[ActionSpec, HostSnapshot, Selection], ActionPlan] | None = None
    # a rare action: hidden (not greyed) where it does not fit, so it costs no footer room
    hidden_unless_fits: bool = False

    @property
    def binding_id(self) -> str:
        return f"gpudash.{self.name}"

    def precheck(self, result: HostTriage, sel: Selection) -> str | None:
        """Why this action does not fit the selection now, or None. Cheap: no planning."""
        snap = result.snapshot
        if not snap.can_act:
            return snap.cannot_act_reason or f"cannot act on {snap.host}"
        if self.needs in (Needs.UNIT, Needs.UNIT_AND_TARGET) and sel.unit is None:
            owner = selected_owner(snap, sel)
            if owner is not None and self.capability is not None:
                if self.container_planner is None or not owner.can(self.capability):
                    return owner.unable(self.capability)
                return None if self.fits is None else self.fits(snap, sel)
            if self.container_planner is not None:
                return "select a system service or a container (its row or one of its processes)"
            return "select a system service (a unit row or one of its processes)"
        if self.needs is Needs.PROCESS and (sel.pid is None or sel.pid == 1):
            return "select a process"
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
            if owner is not None and self.capability is not None:
                if self.container_planner is None or not owner.can(self.capability):
                    raise PlanError(owner.unable(self.capability))
                return self.container_planner(self, snapshot, sel)
        return self.planner(self, snapshot, sel)


def selected_owner(snapshot: HostSnapshot, sel: Selection) -> Owner | None:
    """The container or pod the selection names (None: a unit, a process, or nothing)."""
    if sel.container is not None:
        return container_owner(snapshot, sel.container)
    if sel.pod is not None:
        for p in snapshot.processes:
            o = owner_of(p, snapshot)
            if o.kind is OwnerKind.POD and o.pod_uid == sel.pod:
                return o
    return None


# --- planners ------------------------------------------------------------------------------


def _new_plan(
    spec: ActionSpec, snapshot: HostSnapshot, sel: Selection, subject: str, **parts: Any
) -> ActionPlan:
    return ActionPlan(
        kind=spec.kind,
        title=f"{spec.title}: {subject}",
        host=snapshot.host,
        subject=subject,
        selection=sel,
        used_before_mib=snapshot.used_by_gpu(),
        simulated=snapshot.source is SourceKind.DEMO,
        **parts,
    )


def pin(snapshot: HostSnapshot, p: Process) -> Target:
    """``p`` as a target: its identity (pid, start ticks) within this boot of the host."""
    return Target.of(p, snapshot.boot_id)


def _left_alone(snapshot: HostSnapshot, pinned: Iterable[Target]) -> tuple[Target, ...]:
    pids = {t.pid for t in pinned}
    return tuple(pin(snapshot, p) for p in snapshot.processes if holds(p) and p.pid not in pids)


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
    if p.pid == 1:
        raise PlanError("refusing to signal PID 1")
    return p


def _members(snapshot: HostSnapshot, unit: Unit) -> list[Process]:
    return [p for p in snapshot.processes if p.unit == unit.name]


def plan_unit(spec: ActionSpec, snapshot: HostSnapshot, sel: Selection) -> ActionPlan:
    """stop / disable / stop+disable / reclaim of one system service."""
    u = _require_unit(snapshot, sel.unit)
    kind = spec.kind
    members = _members(snapshot, u)
    steps: list[Step] = []
    notes: list[str] = []
    if kind in STOPPING:
        steps.append(Systemctl("stop", u.name))
    if kind in DISABLING:
        steps.append(Systemctl("disable", u.name))
    targets: list[Target] = []
    expected: dict[int, int] = {}
    if kind is ActionKind.RECLAIM:
        # Everything of the unit's cgroup that is alive now is pinned; stop takes the
        # main, the signals take what KillMode or re-parenting left behind.
        targets = [pin(snapshot, p) for p in members if p.start_ticks is not None and p.pid != 1]
        steps += [Signal(t, escalate=True) for t in targets]
        expected = expected_free(snapshot, targets)
    elif kind in STOPPING:
        killed = members if u.kill_mode in (None, "control-group", "mixed") else [
            p for p in members if p.pid == u.main_pid
        ]
        expected = expected_free(snapshot, (pin(snapshot, p) for p in killed))
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
    return _new_plan(
        spec, snapshot, Selection(unit=u.name), u.name,
        steps=tuple(steps),
        expected_free_mib=expected,
        notes=tuple(notes),
        untouched=_left_alone(snapshot, targets or [pin(snapshot, p) for p in members]),
        unit_before=u,
    )


def _process_notes(snapshot: HostSnapshot, p: Process, owner: Unit | None) -> list[str]:
    """What signalling one process will do beyond it: respawn, a person's work, a TP group."""
    notes: list[str] = []
    if owner is not None and owner.main_pid == p.pid and not owner.is_down:
        if (owner.restart or "no").lower() != "no":
            notes.append(
                f"pid {p.pid} is the main process of {owner.name} "
                f"(Restart={owner.restart}): systemd will respawn it. Stop the unit instead."
            )
    notes += _container_kill_notes(snapshot, p)
    kind = owner_kind(p.unit)
    if kind is OwnerKind.CONTAINER:
        return notes
    if kind is OwnerKind.SESSION:
        notes.append(
            f"pid {p.pid} belongs to {p.user or '?'}'s login session ({p.unit}): "
            "this is a person's live work, not a service. Make sure they know."
        )
    elif kind is OwnerKind.SERVICE and owner is not None and not owner.is_down:
        flags = process_flags(snapshot)
        peers = [
            q for q in _members(snapshot, owner)
            if q.pid != p.pid and q.holds_gpu_memory and Flag.ORPHAN not in flags[q.pid]
        ]
        if p.holds_gpu_memory and peers and Flag.ORPHAN not in flags[p.pid]:
            notes.append(
                f"pid {p.pid} is one of {len(peers) + 1} GPU processes of the running "
                f"{owner.name}: killing one worker of a tensor-parallel group makes the others "
                "hang or crash. Stop or reclaim the unit instead."
            )
    return notes


def plan_process(spec: ActionSpec, snapshot: HostSnapshot, sel: Selection) -> ActionPlan:
    """terminate / kill of one pinned process."""
    p = _require_process(snapshot, sel.pid)
    t = pin(snapshot, p)
    kill = spec.kind is ActionKind.KILL
    owner = snapshot.unit(p.unit) if p.unit else None
    container = owner_of(p, snapshot).container
    if container is not None:
        owner = None  # a container's scope unit does not restart it: its runtime does
    return _new_plan(
        spec, snapshot, Selection(pid=p.pid), f"pid {p.pid}",
        container_before=container,
        steps=(Signal(t, _signal.SIGKILL if kill else _signal.SIGTERM, escalate=not kill),),
        expected_free_mib=expected_free(snapshot, [t]),
        notes=tuple(_process_notes(snapshot, p, owner)),
        untouched=_left_alone(snapshot, [t]),
        unit_before=owner,
    )


def plan_reap(spec: ActionSpec, snapshot: HostSnapshot, sel: Selection) -> ActionPlan:
    """TERM (then KILL) every orphan holding GPU memory, of one unit or of the host."""
    unit = unit_name(sel.unit) if sel.unit else None
    result = triage(snapshot)
    container = snapshot.container(sel.container) if sel.container else None
    if sel.container and container is None:
        raise PlanError(f"container {sel.container} is not known on {snapshot.host}")
    members = {p.pid for p in container_members(snapshot, container)} if container else None
    orphans = [
        p for p in snapshot.processes
        if p.pid in result.orphans_of and p.start_ticks is not None
        and (unit is None or p.unit == unit) and (members is None or p.pid in members)
    ]
    where = f" of {unit}" if unit else (f" of {container.label}" if container else "")
    if not orphans:
        raise PlanError(f"no orphaned processes{where} hold GPU memory on {snapshot.host}")
    targets = [pin(snapshot, p) for p in orphans]
    # what each orphaned subtree was, in the words of its owner's rules
    tree = ProcessTree.of(snapshot)
    notes = orphan_summaries(orphans, result.orphans_of, tree)
    return _new_plan(
        spec, snapshot, Selection(unit=unit, container=container.id if container else None),
        f"{len(targets)} orphan(s){where}",
        steps=tuple(Signal(t, escalate=True) for t in targets),
        expected_free_mib=expected_free(snapshot, targets),
        notes=tuple(notes),
        untouched=_left_alone(snapshot, targets),
        unit_before=snapshot.unit(unit) if unit else None,
    )


def _serving(snapshot: HostSnapshot, unit: Unit, sel: Selection) -> Serving:
    return Serving(unit.name, sel.ready_url, dict(sel.footprint or {}))


def _start_steps(unit: Unit, verb: str, enable: bool) -> tuple[Step, ...]:
    steps: list[Step] = [Systemctl(verb, unit.name)]
    if enable and not (unit.unit_file_state or "").startswith("enabled"):
        steps.append(Systemctl("enable", unit.name))
    return tuple(steps)


def _startable(snapshot: HostSnapshot, sel: Selection) -> str | None:
    u = snapshot.unit(sel.unit) if sel.unit else None
    if u is None:
        return None  # the planner says what is wrong with it
    if not u.is_down:
        return f"{u.name} is already {u.active_state}: restart it, or swap to it"
    if u.unit_file_state == "masked":
        return f"{u.name} is masked: systemd will not start it"
    return None


def plan_start(spec: ActionSpec, snapshot: HostSnapshot, sel: Selection) -> ActionPlan:
    """start / restart of a service, followed until it serves (or shown crashing)."""
    u = _require_unit(snapshot, sel.unit)
    notes: list[str] = []
    why_not = _startable(snapshot, sel) if spec.kind is ActionKind.START else None
    if why_not:
        raise PlanError(why_not)
    if spec.kind is ActionKind.RESTART and (u.kill_mode or "") in ("process", "none"):
        held = [p for p in _members(snapshot, u) if p.holds_gpu_memory and p.pid != u.main_pid]
        if held:
            notes.append(f"KillMode={u.kill_mode}: a restart leaves {len(held)} worker(s) "
                         "holding GPU memory behind; swap (reclaim, then start) instead.")
    if u.unit_file_state == "masked":
        raise PlanError(f"{u.name} is masked: systemd will not start it")
    steps = _start_steps(u, spec.kind.value, sel.enable)
    serving = _serving(snapshot, u, sel)
    return _new_plan(
        spec, snapshot, Selection(unit=u.name, enable=sel.enable, ready_url=sel.ready_url,
                                  footprint=sel.footprint), u.name,
        steps=steps,
        phases=(Phase("start", spec.kind, steps, serving),),
        notes=tuple(notes),
        unit_before=u,
    )


def plan_enable(spec: ActionSpec, snapshot: HostSnapshot, sel: Selection) -> ActionPlan:
    u = _require_unit(snapshot, sel.unit)
    notes = ["Enable changes only what happens at boot; nothing starts now."]
    if (u.unit_file_state or "").startswith("enabled"):
        notes.append(f"{u.name} is already {u.unit_file_state}.")
    return _new_plan(spec, snapshot, Selection(unit=u.name), u.name,
                     steps=(Systemctl("enable", u.name),), notes=tuple(notes), unit_before=u)


def _fit(snapshot: HostSnapshot, reclaim: ActionPlan, footprint: Mapping[int, int]
         ) -> tuple[list[str], list[str]]:
    """(fit lines, problems) of ``footprint`` beside what stays once ``reclaim`` ran."""
    if not footprint:
        return ["footprint not learned on this host yet: the fit is not checked (it is "
                "learned when the model serves)"], []
    lines, problems = [], []
    planned = {t.pid for t in reclaim.targets}
    for gpu, need in sorted(footprint.items()):
        g = snapshot.gpu(gpu)
        if g is None or g.memory_total_mib is None or g.memory_used_mib is None:
            problems.append(f"GPU{gpu}: not reported by the host")
            continue
        free = g.memory_total_mib - g.memory_used_mib + reclaim.expected_free_mib.get(gpu, 0)
        if need <= free:
            continue
        staying = [p for p in snapshot.processes if p.pid not in planned
                   and (p.gpu_memory_mib.get(gpu) or gpu in p.device_gpus)]
        who = ", ".join(f"{p.user or '?'}'s {label(p) or p.name} (pid {p.pid}) holds "
                        f"{gib(p.gpu_memory_mib.get(gpu))}" for p in staying) or "nobody listed"
        problems.append(f"GPU{gpu}: needs {gib(need)}, {gib(free)} will be free; {who}")
    if not problems:
        lines.append(f"fits: up to {gib(max(footprint.values()))} per GPU on "
                     f"{len(footprint)} GPU(s), learned when it last served here")
    return lines, problems


def plan_swap(spec: ActionSpec, snapshot: HostSnapshot, sel: Selection) -> ActionPlan:
    """Reclaim one model with proof, then start the next and prove it serves.

    What is reclaimed is a service (``sel.unit``) or a container (``sel.container``):
    the reclaim phase is that owner's own reclaim plan, so a container is stopped with
    its restart policy off and what escaped it is reaped, as ``reclaim --container`` does.
    """
    if not sel.target:
        raise PlanError("choose the unit to start")
    target = _require_unit(snapshot, sel.target)
    reclaim_spec = SPECS[ActionKind.RECLAIM]
    container = None
    if sel.unit is None and sel.container is not None:
        owner = _require_container(snapshot, sel.container)
        if not owner.can(Capability.RECLAIM):
            raise PlanError(owner.unable(Capability.RECLAIM))
        container = owner.container
        assert container is not None and reclaim_spec.container_planner is not None
        reclaim = reclaim_spec.container_planner(reclaim_spec, snapshot,
                                                 Selection(container=container.id))
        source_name, source_unit = owner.describe(), None
        picked = Selection(container=container.id)
    else:
        source = _require_unit(snapshot, sel.unit)
        if target.name == source.name:
            raise PlanError("swap to another unit: use restart to start the same one again")
        reclaim = reclaim_spec.planner(reclaim_spec, snapshot, Selection(unit=source.name))
        source_name, source_unit = source.name, source
        picked = Selection(unit=source.name)
    if not target.is_down:
        raise PlanError(f"{target.name} is already {target.active_state}")
    if target.unit_file_state == "masked":
        raise PlanError(f"{target.name} is masked: systemd will not start it")
    fit, problems = _fit(snapshot, reclaim, sel.footprint or {})
    if problems:
        raise PlanError(f"{target.name} does not fit once {source_name} is reclaimed: "
                        + "; ".join(problems))
    start = _start_steps(target, "start", sel.enable)
    serving = _serving(snapshot, target, sel)
    return _new_plan(
        spec, snapshot,
        replace(picked, target=target.name, enable=sel.enable, ready_url=sel.ready_url,
                footprint=sel.footprint),
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
    )


# --- containers ------------------------------------------------------------------------------


def _container_only(snapshot: HostSnapshot, sel: Selection) -> str | None:
    if sel.container is None:
        return "select a stopped container"
    c = snapshot.container(sel.container)
    if c is not None and not c.is_down:
        return f"{c.label} is {c.state}: stop or reclaim it first"
    return None


CONTAINER_STOP_TIMEOUT_S = 10  # docker stop's own default between SIGTERM and SIGKILL


def _require_container(snapshot: HostSnapshot, ref: str | None) -> Owner:
    if not ref:
        raise PlanError("select a container first")
    owner = container_owner(snapshot, ref)
    if owner is None or owner.container is None:
        raise PlanError(f"container {ref} is not known on {snapshot.host} (its runtime did "
                        "not report it)")
    return owner


def plan_container(spec: ActionSpec, snapshot: HostSnapshot, sel: Selection) -> ActionPlan:
    """stop / restart policy off / stop + policy off / reclaim / remove of one container."""
    owner = _require_container(snapshot, sel.container)
    c = owner.container
    assert c is not None
    kind = spec.kind
    members = container_members(snapshot, c)
    steps: list[Step] = []
    notes: list[str] = []

    def command(verb: str) -> ContainerCommand:
        return ContainerCommand(c.runtime, verb, c.id, c.label, CONTAINER_STOP_TIMEOUT_S)

    # Policy off first: a container whose main process dies while it is being stopped
    # must not be restarted by the daemon meanwhile.
    if kind in DISABLING:
        if owner.can(Capability.DISABLE):
            if (c.restart_policy or "no") != "no" or kind is ActionKind.DISABLE:
                steps.append(command("no-restart"))
        else:
            notes.append(f"{c.runtime} cannot turn a restart policy off here (podman update "
                         f"has no --restart): it stays {c.restart_policy or 'unknown'}; "
                         f"{c.runtime} stop marks it stopped, so it stays down until started.")
    if kind in STOPPING and not c.is_down:
        steps.append(command("stop"))
    if kind is ActionKind.REMOVE:
        if not c.is_down:
            raise PlanError(f"{owner.describe()} is {c.state}: stop or reclaim it first")
        steps.append(command("rm"))
    alive_members = [p for p in members if p.start_ticks is not None and p.pid != 1]
    targets: list[Target] = []
    if kind is ActionKind.RECLAIM:
        # Whatever of its cgroup is alive now is pinned; stop takes the container, the
        # signals take what escaped it (re-parented to PID 1, or left by a removed one).
        targets = [pin(snapshot, p) for p in alive_members]
        steps += [Signal(t, escalate=True) for t in targets]
        expected = expected_free(snapshot, targets)
    elif kind in STOPPING:
        escaped = [p for p in alive_members if p.ppid == 1]
        kept = [p for p in alive_members if p not in escaped]
        expected = expected_free(snapshot, (pin(snapshot, p) for p in kept))
        if any(holds(p) for p in escaped):
            notes.append(f"{len(escaped)} process(es) escaped from {owner.describe()} to PID 1: "
                         f"{c.runtime} stop will not end them; reclaim, or reap afterwards.")
    else:
        expected = {}
    if kind is ActionKind.DISABLE:
        notes.append("Restart policy off changes only what the daemon does when it exits; "
                     "nothing stops now.")
    if c.is_down and kind in STOPPING:
        notes.append(f"{owner.describe()} is already {c.state}.")
    plan = _new_plan(
        spec, snapshot, Selection(container=c.id), owner.describe(),
        steps=tuple(steps),
        expected_free_mib=expected,
        notes=tuple(notes),
        untouched=_left_alone(snapshot, targets or [pin(snapshot, p) for p in members]),
        container_before=c,
    )
    return replace(plan, title=f"{CONTAINER_TITLES.get(kind, spec.title)}: {plan.subject}")


CONTAINER_TITLES = {  # what each owner-wide action does to a container
    ActionKind.STOP: "Stop container",
    ActionKind.DISABLE: "Restart policy off",
    ActionKind.STOP_DISABLE: "Stop container + restart policy off",
    ActionKind.RECLAIM: "Reclaim container (stop + restart policy off + reap + wait)",
    ActionKind.REMOVE: "Remove container",
}


def _container_kill_notes(snapshot: HostSnapshot, p: Process) -> list[str]:
    """Killing a container's main process: its runtime's restart policy brings it back."""
    owner = owner_of(p, snapshot)
    if owner.kind is OwnerKind.POD:
        return [f"pid {p.pid}: " + pod_advice(owner)]
    c = owner.container
    if owner.kind is OwnerKind.CONTAINER and c is not None and owner.respawner:
        return [f"pid {p.pid} belongs to {owner.describe()} (restart policy "
                f"{c.restart_policy}): {c.runtime} will restart it. Stop or reclaim the "
                "container instead."]
    return []


# --- the registry --------------------------------------------------------------------------

SPECS: dict[ActionKind, ActionSpec] = {
    spec.kind: spec
    for spec in (
        ActionSpec(ActionKind.STOP, "stop_unit", "Stop unit", "s", "Stop",
                   Needs.UNIT, plan_unit, capability=Capability.STOP,
                   container_planner=plan_container),
        ActionSpec(ActionKind.DISABLE, "disable_unit", "Disable unit", "d", "Disable",
                   Needs.UNIT, plan_unit, capability=Capability.DISABLE,
                   container_planner=plan_container),
        ActionSpec(ActionKind.STOP_DISABLE, "stop_disable", "Stop + disable unit", "D",
                   "Stop+disable", Needs.UNIT, plan_unit, capability=Capability.STOP,
                   container_planner=plan_container),
        ActionSpec(ActionKind.TERMINATE, "terminate", "Terminate process (TERM, then KILL)",
                   "t", "Terminate", Needs.PROCESS, plan_process),
        ActionSpec(ActionKind.KILL, "kill", "Kill process (KILL)", "k", "Kill", Needs.PROCESS,
                   plan_process),
        ActionSpec(ActionKind.REAP, "reap", "Reap orphans", "o", "Reap orphans", Needs.ORPHANS,
                   plan_reap),
        ActionSpec(ActionKind.RECLAIM, "reclaim", "Reclaim unit (stop + disable + reap + wait)",
                   "r", "Reclaim", Needs.UNIT, plan_unit,
                   capability=Capability.RECLAIM, container_planner=plan_container),
        ActionSpec(ActionKind.START, "start_unit", "Start unit and follow it to serving", "u",
                   "Start", Needs.UNIT, plan_start, _startable, capability=Capability.START),
        ActionSpec(ActionKind.RESTART, "restart_unit", "Restart unit and follow it to serving",
                   "R", "Restart", Needs.UNIT, plan_start, capability=Capability.START),
        ActionSpec(ActionKind.ENABLE, "enable_unit", "Enable unit (start at boot)", "e",
                   "Enable", Needs.UNIT, plan_enable, capability=Capability.START),
        ActionSpec(ActionKind.SWAP, "swap", "Swap model (reclaim, start the next, prove it "
                   "serves)", "w", "Swap", Needs.UNIT_AND_TARGET, plan_swap,
                   capability=Capability.RECLAIM, container_planner=plan_swap),
        ActionSpec(ActionKind.REMOVE, "remove_container", "Remove a stopped container "
                   "(docker rm)", "X", "Remove", Needs.UNIT, plan_container,
                   _container_only, capability=Capability.REMOVE,
                   container_planner=plan_container, hidden_unless_fits=True),
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
    return SPECS[kind].plan(snapshot, Selection(unit=unit, pid=pid, container=container))


def selection_for(result: HostTriage | None, owner_key: str | None, pid: int | None
                  ) -> Selection:
    """What the operator points at (an owner's row, or one of its processes) as the engine
    takes it: a service by its unit, a container by its id, a pod by its UID."""
    group = result.group(owner_key) if result is not None and owner_key else None
    owner = group.owner if group is not None else None
    if owner is None or group is None:
        return Selection(pid=pid)
    if owner.kind is OwnerKind.SERVICE and group.unit is not None:
        return Selection(unit=group.key, pid=pid)
    if owner.kind is OwnerKind.CONTAINER and owner.container is not None:
        return Selection(container=owner.container.id, pid=pid)
    if owner.kind is OwnerKind.POD:
        return Selection(pod=owner.pod_uid, pid=pid)
    return Selection(pid=pid)


def replan(plan: ActionPlan, snapshot: HostSnapshot) -> tuple[ActionPlan, list[str]]:
    """``plan`` built again from a fresh ``snapshot``, and what changed that matters.

    A plan confirmed in a dialog left open for a while must not run on a stale baseline
    (memory that moved meanwhile would read as "NOT confirmed"), nor signal a set of
    processes the operator did not see. Raises ``PlanError`` when the action no longer
    makes sense (the process is gone, nothing left to reap).
    """
    fresh = SPECS[plan.kind].plan(snapshot, plan.selection)
    return fresh, plan_changes(plan, fresh)
