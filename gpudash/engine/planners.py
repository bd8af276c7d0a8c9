"""The planners of the systemd and process actions: stop, disable, reclaim, terminate,
kill, reap, start, enable, and the fit of a model that is to start.

Each builds the exact plan from one snapshot, or raises ``PlanError`` saying why not.
"""

from __future__ import annotations

import signal as _signal
from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any

from gpudash.domain.model import HostSnapshot, Process, SourceKind, Unit, unit_name
from gpudash.domain.orphan_words import orphan_summaries
from gpudash.domain.owners import (
    Found,
    OwnerRef,
    container_members,
    owner_of,
    owners,
    rules_of,
    service_unit,
)
from gpudash.domain.tree import ProcessTree
from gpudash.domain.triage import (
    Flag,
    holds,
    process_flags,
    triage,
)
from gpudash.domain.units import gib
from gpudash.engine import fit
from gpudash.engine.plan import (
    DISABLING,
    STOPPING,
    ActionKind,
    ActionPlan,
    Phase,
    PlanError,
    Selection,
    Serving,
)
from gpudash.engine.signals import pickable
from gpudash.engine.spec import ActionSpec, container_of, container_ref, unit_of, unit_ref
from gpudash.engine.steps import Signal, Step, Systemctl
from gpudash.engine.target import Target, expected_free


def new_plan(
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


def left_alone(snapshot: HostSnapshot, pinned: Iterable[Target]) -> tuple[Target, ...]:
    pids = {t.pid for t in pinned}
    return tuple(pin(snapshot, p) for p in snapshot.processes if holds(p) and p.pid not in pids)


def require_unit(snapshot: HostSnapshot, name: str | None) -> Unit:
    if not name:
        raise PlanError("select a unit first")
    full = unit_name(name)
    if not service_unit(full):
        raise PlanError(f"{full} is not a system service; signal its processes instead")
    unit = snapshot.unit(full)
    if unit is None:
        raise PlanError(f"unit {full} is not known on {snapshot.host}")
    return unit


def require_process(snapshot: HostSnapshot, pid: int | None) -> Process:
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


def members_of(snapshot: HostSnapshot, unit: Unit) -> list[Process]:
    return [p for p in snapshot.processes if p.unit == unit.name]


def plan_unit(spec: ActionSpec, snapshot: HostSnapshot, sel: Selection) -> ActionPlan:
    """stop / disable / stop+disable / reclaim of one system service."""
    u = require_unit(snapshot, unit_of(sel))
    kind = spec.kind
    members = members_of(snapshot, u)
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
    return new_plan(
        spec, snapshot, Selection(owner=unit_ref(u.name)), u.name,
        steps=tuple(steps),
        expected_free_mib=expected,
        notes=tuple(notes),
        untouched=left_alone(snapshot, targets or [pin(snapshot, p) for p in members]),
        unit_before=u,
    )


def _process_notes(snapshot: HostSnapshot, p: Process, owner: Unit | None,
                   ends: bool = True) -> list[str]:
    """What signalling one process will do beyond it: respawn, a person's work, a TP group
    (``ends``: the signal usually ends it; else only whose work it is)."""
    notes: list[str] = []
    if ends and owner is not None and owner.main_pid == p.pid and not owner.is_down:
        if (owner.restart or "no").lower() != "no":
            notes.append(
                f"pid {p.pid} is the main process of {owner.name} "
                f"(Restart={owner.restart}): systemd will respawn it. Stop the unit instead."
            )
    notes += container_kill_notes(snapshot, p)
    mine = owner_of(p, snapshot)
    if mine.personal:
        notes.append(
            f"pid {p.pid} belongs to {p.user or '?'}'s login session ({p.unit}): "
            "this is a person's live work, not a service. Make sure they know."
        )
    elif ends and mine.service is not None and owner is not None and not owner.is_down:
        flags = process_flags(snapshot)
        peers = [
            q for q in members_of(snapshot, owner)
            if q.pid != p.pid and q.holds_gpu_memory and Flag.ORPHAN not in flags[q.pid]
        ]
        if p.holds_gpu_memory and peers and Flag.ORPHAN not in flags[p.pid]:
            notes.append(
                f"pid {p.pid} is one of {len(peers) + 1} GPU processes of the running "
                f"{owner.name}: killing one worker of a tensor-parallel group makes the others "
                "hang or crash. Stop or reclaim the unit instead."
            )
    return notes


def _signal_of(spec: ActionSpec, sel: Selection, t: Target) -> tuple[Signal, bool]:
    """(the step that signals ``t``, whether the signal ends it)."""
    if spec.kind is ActionKind.SIGNAL:
        picked = pickable(sel.signal)
        if picked is None:
            raise PlanError("pick a signal to send" if sel.signal is None else
                            f"signal {sel.signal} is not one gpudash sends")
        return Signal(t, picked.sig), picked.ends
    kill = spec.kind is ActionKind.KILL
    return Signal(t, _signal.SIGKILL if kill else _signal.SIGTERM, escalate=not kill), True


def plan_tagged(spec: ActionSpec, snapshot: HostSnapshot, sel: Selection) -> ActionPlan:
    """terminate / kill / a picked signal of every tagged process: each pinned, in one
    plan (each still in the sample, or nothing is planned), each one's warnings said."""
    procs = [require_process(snapshot, pid) for pid in sorted(set(sel.pids))]
    targets = [pin(snapshot, p) for p in procs]
    steps, notes = [], []
    for p, t in zip(procs, targets, strict=True):
        step, ends = _signal_of(spec, sel, t)
        steps.append(step)
        unit = snapshot.unit(p.unit) if p.unit and owner_of(p, snapshot).container is None \
            else None
        notes += [n for n in _process_notes(snapshot, p, unit, ends) if n not in notes]
    pids = ", ".join(str(p.pid) for p in procs[:6]) + (", …" if len(procs) > 6 else "")
    name = f" {steps[0].name}" if spec.kind is ActionKind.SIGNAL else ""
    subject = f"{len(procs)} tagged processes{name} (pid {pids})"
    return new_plan(
        spec, snapshot, Selection(pids=tuple(p.pid for p in procs), signal=sel.signal),
        subject, steps=tuple(steps),
        expected_free_mib=({} if spec.kind is ActionKind.SIGNAL
                           else expected_free(snapshot, targets)),
        notes=tuple(notes), untouched=left_alone(snapshot, targets))


def plan_process(spec: ActionSpec, snapshot: HostSnapshot, sel: Selection) -> ActionPlan:
    """terminate / kill / a picked signal of one pinned process (of each tagged one)."""
    if sel.pids:
        return plan_tagged(spec, snapshot, sel)
    p = require_process(snapshot, sel.pid)
    t = pin(snapshot, p)
    step, ends = _signal_of(spec, sel, t)
    owner = snapshot.unit(p.unit) if p.unit else None
    container = owner_of(p, snapshot).container
    if container is not None:
        owner = None  # a container's scope unit does not restart it: its runtime does
    # a picked signal is named in the subject: history showed STOP then CONT as two
    # identical "signal pid N" lines
    subject = f"{step.name} to pid {p.pid}" if spec.kind is ActionKind.SIGNAL else f"pid {p.pid}"
    plan = new_plan(
        spec, snapshot, Selection(pid=p.pid, signal=sel.signal), subject,
        container_before=container,
        steps=(step,),
        expected_free_mib=({} if spec.kind is ActionKind.SIGNAL
                           else expected_free(snapshot, [t])),
        notes=tuple(_process_notes(snapshot, p, owner, ends)),
        untouched=left_alone(snapshot, [t]),
        unit_before=owner,
    )
    if spec.kind is ActionKind.SIGNAL:  # the log and the audit name the signal
        plan = replace(plan, title=f"Send {step.name}: pid {p.pid}")
    return plan


def plan_reap(spec: ActionSpec, snapshot: HostSnapshot, sel: Selection) -> ActionPlan:
    """TERM (then KILL) every orphan holding GPU memory, of one unit or of the host; or
    what is left of one owner of another kind that reap names (a Slurm job), as its kind
    says."""
    named, ref = container_of(sel), sel.owner
    rules = rules_of(ref.kind) if ref is not None else None
    if ref is not None and unit_of(sel) is None and named is None and (
            rules is None or any("reap" in s.helps for s in rules.cli)):
        return _plan_leftovers(spec, snapshot, sel, ref)
    unit = unit_name(u) if (u := unit_of(sel)) else None
    result = triage(snapshot)
    container = snapshot.container(named) if named else None
    if named and container is None:
        raise PlanError(f"container {named} is not known on {snapshot.host}")
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
    return new_plan(
        spec, snapshot, Selection(owner=unit_ref(unit) if unit else
                                  container_ref(container.id) if container else None),
        f"{len(targets)} orphan(s){where}",
        steps=tuple(Signal(t, escalate=True) for t in targets),
        expected_free_mib=expected_free(snapshot, targets),
        notes=tuple(notes),
        untouched=left_alone(snapshot, targets),
        unit_before=snapshot.unit(unit) if unit else None,
    )


def _plan_leftovers(spec: ActionSpec, snapshot: HostSnapshot, sel: Selection, ref: OwnerRef
                    ) -> ActionPlan:
    kind, key, claim = ref.kind, ref.key, str(ref)
    rules = rules_of(kind)
    if rules is None or not key:
        raise PlanError(f"{claim}: not an owner gpudash knows (KIND:KEY, e.g. slurm job:42)")
    result = triage(snapshot)
    found = Found(owners(snapshot), result.orphans_of, result.strays)
    why = rules.leftovers(key, snapshot, found, sel.gpus, sel.strays)
    chosen = [p for p in snapshot.processes if p.pid in why and p.start_ticks is not None]
    targets = [pin(snapshot, p) for p in chosen]
    mine = set(sel.gpus or ())
    reported = [s.why for pid, s in sorted(result.strays.items())
                if pid not in why and (not mine or mine & set(_held(snapshot, pid)))]
    notes = tuple(why[p.pid] for p in chosen) + tuple(
        f"left alone (reported only): {w}" for w in reported)
    if not targets:
        said = "; ".join(notes) or "nothing of it holds GPU memory"
        raise PlanError(f"no orphaned processes or leftovers of {kind} {key} hold GPU "
                        f"memory on {snapshot.host}: {said}")
    return new_plan(
        spec, snapshot, Selection(owner=ref, gpus=sel.gpus, strays=sel.strays),
        f"{len(targets)} leftover(s) of {kind} {key}",
        steps=tuple(Signal(t, escalate=True) for t in targets),
        expected_free_mib=expected_free(snapshot, targets),
        notes=notes,
        untouched=left_alone(snapshot, targets),
    )


def _held(snapshot: HostSnapshot, pid: int) -> tuple[int, ...]:
    p = snapshot.process(pid)
    if p is None:
        return ()
    return tuple(g for g, mib in p.gpu_memory_mib.items() if mib is None or mib > 0)


def serving_of(snapshot: HostSnapshot, unit: Unit, sel: Selection) -> Serving:
    return Serving(unit.name, sel.ready_url, dict(sel.footprint or {}))


def start_steps(unit: Unit, verb: str, enable: bool) -> tuple[Step, ...]:
    steps: list[Step] = [Systemctl(verb, unit.name)]
    if enable and not (unit.unit_file_state or "").startswith("enabled"):
        steps.append(Systemctl("enable", unit.name))
    return tuple(steps)


def startable(snapshot: HostSnapshot, sel: Selection) -> str | None:
    """Why the selected unit (or container) cannot be started now, or None."""
    named = container_of(sel)
    if named is not None:
        c = snapshot.container(named)
        if c is not None and not c.is_down:
            return f"{c.label} is already {c.state}: restart it instead, or swap it"
        return None
    u = snapshot.unit(unit) if (unit := unit_of(sel)) else None
    if u is None:
        return None  # the planner says what is wrong with it
    if not u.is_down:
        return f"{u.name} is already {u.active_state}: restart it, or swap to it"
    if u.unit_file_state == "masked":
        return f"{u.name} is masked: systemd will not start it"
    return None


def plan_start(spec: ActionSpec, snapshot: HostSnapshot, sel: Selection) -> ActionPlan:
    """start / restart of a service, followed until it serves (or shown crashing)."""
    u = require_unit(snapshot, unit_of(sel))
    notes: list[str] = []
    why_not = startable(snapshot, sel) if spec.kind is ActionKind.START else None
    if why_not:
        raise PlanError(why_not)
    if spec.kind is ActionKind.RESTART and (u.kill_mode or "") in ("process", "none"):
        held = [p for p in members_of(snapshot, u) if p.holds_gpu_memory and p.pid != u.main_pid]
        if held:
            notes.append(f"KillMode={u.kill_mode}: a restart leaves {len(held)} worker(s) "
                         "holding GPU memory behind; swap (reclaim, then start) instead.")
    if u.unit_file_state == "masked":
        raise PlanError(f"{u.name} is masked: systemd will not start it")
    freed: dict[int, int] = {}
    freed_pids: set[int] = set()
    if spec.kind is ActionKind.RESTART:  # what the stop gives back before the start
        stays = (u.kill_mode or "") in ("process", "none")
        for p in members_of(snapshot, u):
            if not stays or p.pid == u.main_pid:
                freed_pids.add(p.pid)
                for gpu, mib in p.gpu_memory_mib.items():
                    freed[gpu] = freed.get(gpu, 0) + (mib or 0)
    fit_lines = fitting(snapshot, u, sel, freed, freed_pids)
    steps = start_steps(u, spec.kind.value, sel.enable)
    serving = serving_of(snapshot, u, sel)
    return new_plan(
        spec, snapshot, Selection(owner=unit_ref(u.name), enable=sel.enable,
                                  ready_url=sel.ready_url, footprint=sel.footprint,
                                  force=sel.force), u.name,
        steps=steps,
        phases=(Phase("start", spec.kind, steps, serving),),
        notes=tuple(notes),
        unit_before=u,
        fit=fit_lines,
    )


def plan_enable(spec: ActionSpec, snapshot: HostSnapshot, sel: Selection) -> ActionPlan:
    u = require_unit(snapshot, unit_of(sel))
    notes = ["Enable changes only what happens at boot; nothing starts now."]
    if (u.unit_file_state or "").startswith("enabled"):
        notes.append(f"{u.name} is already {u.unit_file_state}.")
    return new_plan(spec, snapshot, Selection(owner=unit_ref(u.name)), u.name,
                     steps=(Systemctl("enable", u.name),), notes=tuple(notes), unit_before=u)


def fitting(snapshot: HostSnapshot, unit: Unit, sel: Selection, freed_mib: Mapping[int, int],
            freed_pids: set[int], after: str = "") -> tuple[str, ...]:
    """The plan's fit lines for starting ``unit``; ``PlanError`` naming every GPU short of
    room and who holds it, unless ``sel.force`` (then the plan says it was forced)."""
    lines, problems = fit.check(snapshot, fit.need_of(unit, snapshot, sel.footprint),
                                freed_mib, freed_pids)
    if not problems:
        return tuple(lines)
    if not sel.force:
        raise does_not_fit(unit.name, problems, after)
    return ("FORCED: started although it does not fit: " + "; ".join(problems),)


def does_not_fit(what: str, problems: list[str], after: str = "") -> PlanError:
    """The refusal of a start that does not fit: the owners in the way first, what is
    short, their processes; one line (the message), or one line each (``lines``)."""
    head = f"{what} does not fit{after} (nothing done; --force starts it anyway)"
    return PlanError(f"{head}: " + "; ".join(problems),
                     (f"{head}:", *(f"  {p}" for p in problems)), forceable=True)


def container_kill_notes(snapshot: HostSnapshot, p: Process) -> list[str]:
    """Killing a container's main process: its runtime's restart policy brings it back."""
    owner = owner_of(p, snapshot)
    note = owner.rules.kill_note(owner, p)
    return [] if note is None else [note]
