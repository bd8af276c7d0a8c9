"""The verdict on a freeing phase: what came back, and who still holds what, and why.

Pure functions of the plan and the last sample: they fill the report ``run`` returns.
"""

from __future__ import annotations

from gpudash.domain.model import HostSnapshot, Process
from gpudash.domain.owners import claimed_container
from gpudash.domain.triage import label
from gpudash.domain.units import gib
from gpudash.engine.actions import PROCESS_ACTIONS, UNIT_ACTIONS
from gpudash.engine.goals import (
    GoalState,
    GoalStatus,
    MemoryAtMost,
    ProcessesGone,
    alive,
    respawned,
)
from gpudash.engine.plan import DISABLING, STOPPING, ActionKind, ActionPlan
from gpudash.engine.report import ActionReport, GpuOutcome, Leftover, container_state, unit_state
from gpudash.engine.target import Target
from gpudash.protocol.source import SignalOutcome

NOT_SENT = {
    SignalOutcome.MISMATCH: (
        "pid reused", "another process has this pid now; it was not signalled"
    ),
    SignalOutcome.DENIED: ("permission denied", "the host refused the signal; nothing was sent"),
}



def conclude(
    plan: ActionPlan, report: ActionReport, snap: HostSnapshot, *, memory: MemoryAtMost,
    statuses: list[GoalStatus], kind: ActionKind, skipped: list[Target],
) -> None:
    """Fill ``report``'s verdict of one freeing phase from its last sample: per GPU,
every holder left explained, the unit's and container's state, one summary line."""
    after = snap.used_by_gpu()
    before = plan.used_before_mib
    report.gpus = [
        GpuOutcome(gpu, before.get(gpu), target, after.get(gpu), memory.confirmed(gpu))
        for gpu, target in sorted(memory.targets_mib.items())
    ]
    outcome = {pid: o for pid, _sig, o in report.signals}
    not_sent = [
        Leftover(t.pid, None, sum(m for m in t.gpu_memory_mib.values() if m) or None,
                 *NOT_SENT[outcome[t.pid]])
        for t in skipped
    ]
    bad = [g.index for g in report.gpus if not g.confirmed]
    explained = not_sent + (explain(plan, snap, bad) if bad else [])
    survivors = still_alive(plan, snap, {lo.pid for lo in explained})
    report.leftovers = explained + survivors
    if plan.unit_before is not None:
        report.unit_after = snap.unit(plan.unit_before.name)
    if plan.container_before is not None:
        report.container_after = snap.container(plan.container_before.id)
    # What the unit's goals say went differently from the plan.
    problems = [s.detail for s in statuses
                if s.state is not GoalState.MET and s.title not in (
                    MemoryAtMost.title, ProcessesGone.title)]
    report.warnings = left_behind(plan, kind, snap)
    memory_ok = not bad and not survivors and not not_sent
    report.confirmed = memory_ok and not problems
    parts = list(problems)
    if not_sent:
        parts.append(f"NOT confirmed: {len(not_sent)} planned process(es) not signalled "
                     f"({', '.join(sorted({lo.reason for lo in not_sent}))})")
    if bad:
        parts.append(
            f"NOT confirmed: GPU {', '.join(map(str, bad))} still hold memory "
            f"({len(report.leftovers)} holder(s) explained below)"
        )
    if survivors:
        parts.append(f"NOT confirmed: {len(survivors)} planned process(es) still alive")
    if memory_ok and report.gpus:
        freed = sum(g.freed_mib or 0 for g in report.gpus)
        word = "memory" if problems else "confirmed"  # never "confirmed" beside a problem
        parts.append(f"{word}: {gib(freed)} back on {len(report.gpus)} GPU(s)")
    elif problems:
        pass  # the problem is the result: nothing "done" to add to it
    elif memory_ok and kind in UNIT_ACTIONS and report.unit_after is not None:
        done = " and ".join(w for k, w in ((STOPPING, "stopped"), (DISABLING, "disabled"),
                                           ({ActionKind.ENABLE}, "enabled"))
                            if kind in k)
        parts.append(f"{done}: {unit_state(report.unit_after)}")
    elif memory_ok and report.container_after is not None and plan.kind not in (
        PROCESS_ACTIONS
    ):
        parts.append(f"done: {container_state(report.container_after)}")
    elif memory_ok:
        parts.append("done; no GPU memory was expected back")
    parts += report.warnings
    report.summary = "; ".join(parts)


def left_behind(plan: ActionPlan, kind: ActionKind, snap: HostSnapshot) -> list[str]:
    """GPU memory the unit's processes still hold that this action never meant to free.

    Stop + disable of a KillMode=process unit does what it says, and still leaves the
    workers holding everything: the report must say so, not just "done".
    """
    if kind not in UNIT_ACTIONS or plan.unit_before is None:
        return []
    planned = {t.identity for t in plan.targets}
    held = [p for p in snap.processes
            if p.unit == plan.unit_before.name and p.holds_gpu_memory
            and p.identity not in planned]
    if not held:
        return []
    total = sum(p.total_gpu_memory_mib for p in held)
    u = snap.unit(plan.unit_before.name)
    orphaned = u is not None and u.is_down
    what = "orphaned process(es)" if orphaned else "process(es)"
    advice = "reap them (or reclaim the unit)" if orphaned else "stop or reclaim the unit"
    return [f"{len(held)} {what} of {plan.unit_before.name} still hold {gib(total)}: {advice}"]


def still_alive(plan: ActionPlan, snap: HostSnapshot, explained: set[int | None]) -> list[Leftover]:
    """Planned processes still alive that no GPU's shortfall already names.

    Memory alone is not the proof: a target whose memory the driver cannot attribute
    (N/A) or that holds none must still be gone.
    """
    out: list[Leftover] = []
    for t in plan.targets:
        p = alive(snap, t)
        if p is None or p.pid in explained:
            continue
        reason = {"D": "D state (uninterruptible; waits on the driver)"}.get(p.state or "", "alive")
        out.append(Leftover(p.pid, None, p.total_gpu_memory_mib or None, reason,
                            label(p) or p.name))
    return out


def explain(plan: ActionPlan, snap: HostSnapshot, gpus: list[int]) -> list[Leftover]:
    """Say, per GPU still above target, which process holds it and why."""
    out: list[Leftover] = []
    pinned = {t.identity for t in plan.targets}
    pinned_pids = {t.pid for t in plan.targets}
    left_alone = {t.pid for t in plan.untouched}
    unit_now = snap.unit(plan.unit_before.name) if plan.unit_before is not None else None
    was_respawned = (plan.unit_before is not None and unit_now is not None
                     and respawned(plan.unit_before, unit_now))
    for gpu in gpus:
        explained = False
        for p in snap.processes:
            mib = p.gpu_memory_mib.get(gpu)
            if mib == 0 or gpu not in p.gpu_memory_mib:
                continue
            if p.identity in pinned:
                reason = {"D": "D state (uninterruptible; waits on the driver)", "Z": "zombie"}.get(
                    p.state or "", "alive"
                )
                out.append(Leftover(p.pid, gpu, mib, reason, label(p) or p.name))
                explained = True
            elif p.pid in left_alone:
                continue
            elif p.pid in pinned_pids:
                out.append(Leftover(p.pid, gpu, mib, *NOT_SENT[SignalOutcome.MISMATCH]))
                explained = True
            elif gpu in p.device_gpus:
                out.append(Leftover(p.pid, gpu, mib, f"holds /dev/nvidia{gpu}",
                                    f"{label(p) or p.name}: a process forked from a CUDA "
                                    "process keeps its memory; the driver does not list it"))
                explained = True
            elif (c := plan.container_before) is not None and _in_container(p, c.id):
                now = snap.container(c.id)
                again = now is not None and (now.restart_count or 0) > (c.restart_count or 0)
                why = (f"restarted by {c.runtime} (RestartCount {now.restart_count})"
                       if again and now is not None else "new process of the container")
                out.append(Leftover(p.pid, gpu, mib, why, label(p) or p.name))
                explained = True
            elif plan.unit_before is not None and p.unit == plan.unit_before.name:
                why = "respawned" if was_respawned else "new process of the unit"
                out.append(Leftover(p.pid, gpu, mib, why, label(p) or p.name))
                explained = True
            else:
                out.append(Leftover(p.pid, gpu, mib, "new holder", label(p) or p.name))
                explained = True
        if not explained:
            out.append(
                Leftover(
                    None,
                    gpu,
                    None,
                    "unknown holder",
                    "no process holds it that gpudash can see: the driver has not released "
                    "it yet, or a process outside this view holds it (another container, or "
                    "a device holder gpudash could not read without root)",
                )
            )
    return out


def _in_container(p: Process, container_id: str) -> bool:
    claimed = claimed_container(p)
    return claimed is not None and claimed[1] == container_id and not p.in_user_subtree


def phases_summary(report: ActionReport) -> str:
    """One line for a plan of several phases: each phase's outcome, in order."""
    done = report.phases
    parts = [f"{ph.name}: {ph.summary.removeprefix('confirmed: ')}" for ph in done]
    if len(done) < len(report.plan.phases):
        parts.append(f"{report.plan.phases[len(done)].name}: not started")
    ok = all(ph.confirmed for ph in done) and len(done) == len(report.plan.phases)
    return ("confirmed: " if ok else "NOT confirmed: ") + " | ".join(parts)


def failed_start(report: ActionReport) -> bool:
    """A swap's start phase ran and its unit does not serve (what a rollback answers)."""
    return bool(report.phases) and report.phases[-1].name == "start" and not (
        report.phases[-1].confirmed) and not report.unknown


def nothing_serves(report: ActionReport) -> list[str]:
    """After a swap whose new unit does not serve: whether anything serves now."""
    if not any(ph.name == "start" and not ph.confirmed for ph in report.phases):
        return []
    back = report.rollback
    if back is not None and back.serving:
        return [f"rolled back: {back.unit} serves again"]
    plan = report.plan
    old = plan.unit_before.name if plan.unit_before is not None else (
        plan.container_before.label if plan.container_before is not None else "the old model")
    new = report.serving.unit if report.serving is not None else "the new unit"
    why = ("the rollback did not serve either" if back is not None
           else "no rollback" if plan.rollback is None else "the rollback was not tried")
    return [f"nothing serves on this host now: {old} was reclaimed, {new} does not serve, "
            f"{why}"]
