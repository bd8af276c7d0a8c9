"""The verdict on a picked signal: was it delivered, and what did the process do then.

A picked signal promises nothing back (a HUP may reload, a STOP pauses), so the proof is
what the host shows: delivered to the pinned process (or why not), then, after a few
seconds' watch, whether it exited, paused or runs on, and what its GPUs hold now.
"""

from __future__ import annotations

from gpudash.domain.model import HostSnapshot
from gpudash.domain.units import gib
from gpudash.engine.goals import alive
from gpudash.engine.plan import ActionPlan
from gpudash.engine.report import ActionReport, GpuOutcome
from gpudash.engine.target import Target
from gpudash.protocol.source import SignalOutcome

WHY_NOT = {
    SignalOutcome.GONE: "it had exited already",
    SignalOutcome.MISMATCH: "another process has this pid now; it was not signalled",
    SignalOutcome.DENIED: "the host refused the signal (permission denied)",
}
PAUSED = "T"  # /proc state of a stopped process


def target_of(plan: ActionPlan) -> tuple[Target, str]:
    (step,) = plan.signals
    return step.target, step.name


def outcome_of(report: ActionReport, pid: int) -> SignalOutcome | None:
    """The last outcome recorded for ``pid`` (None: nothing recorded)."""
    found = [o for p, _sig, o in report.signals if p == pid]
    return found[-1] if found else None


def memory_back(plan: ActionPlan, snap: HostSnapshot, slack_mib: int) -> bool:
    """Every GPU the target held is down by what it held (driver noise allowed)."""
    t, _name = target_of(plan)
    return all(memory_back_on(plan, snap, g, slack_mib) for g, m in t.gpu_memory_mib.items()
               if m)


def memory_back_on(plan: ActionPlan, snap: HostSnapshot, gpu: int, slack_mib: int) -> bool:
    t, _name = target_of(plan)
    before, held = plan.used_before_mib.get(gpu), t.gpu_memory_mib.get(gpu)
    after = snap.used_by_gpu().get(gpu)
    if before is None or not held or after is None:
        return after is not None
    return after <= before - held + slack_mib


def watched_enough(plan: ActionPlan, report: ActionReport, snap: HostSnapshot,
                   slack_mib: int) -> bool:
    """Nothing more to wait for: not delivered, exited with its memory back, or paused by a
    STOP (a HUP or USR1 is watched the whole window: it may exit late, or not at all)."""
    t, name = target_of(plan)
    outcome = outcome_of(report, t.pid)
    if outcome in WHY_NOT:
        return True
    p = alive(snap, t)
    if p is None:
        return memory_back(plan, snap, slack_mib)
    return name == "SIGSTOP" and p.state == PAUSED


def conclude_signal(plan: ActionPlan, report: ActionReport, snap: HostSnapshot,
                    watched_s: float, slack_mib: int) -> None:
    """Fill ``report``: confirmed when the signal was delivered to the planned process; the
    summary says what the process did within ``watched_s`` seconds."""
    t, name = target_of(plan)
    short = name.removeprefix("SIG")
    outcome = outcome_of(report, t.pid)
    who = f"pid {t.pid} ({t.label})"
    if outcome in WHY_NOT:
        report.confirmed = False
        report.summary = f"NOT sent: {short} to {who}: {WHY_NOT[outcome]}"
        return
    p = alive(snap, t)
    held = sum(m for m in (p.gpu_memory_mib.values() if p else ()) if m)
    if p is None:
        gpus = [g for g, m in sorted(t.gpu_memory_mib.items()) if m]
        after = snap.used_by_gpu()
        before = plan.used_before_mib
        report.gpus = [
            GpuOutcome(g, before.get(g), max(0, (before.get(g) or 0) - (t.gpu_memory_mib[g] or 0)),
                       after.get(g), memory_back_on(plan, snap, g, slack_mib))
            for g in gpus
        ]
        freed = sum(g.freed_mib or 0 for g in report.gpus)
        then = f"it exited; {gib(freed)} back on {len(gpus)} GPU(s)" if gpus else "it exited"
        if gpus and not all(g.confirmed for g in report.gpus):
            report.warnings.append(
                f"pid {t.pid} exited but its GPUs still hold memory: see the holders")
    elif p.state == PAUSED:
        then = (f"it is paused (state T), still holding {gib(held)}: "
                "CONT resumes it")
    elif p.state == "D":
        then = (f"it is in D state (waits on the driver), holding {gib(held)}: the signal "
                "is pending until the driver call returns")
    else:
        then = (f"after {watched_s:.0f} s it still runs (state {p.state or '?'}), "
                f"holding {gib(held)}")
    if outcome is SignalOutcome.SENT:
        report.confirmed = True
        report.summary = f"delivered: {short} to {who}; {then}"
    else:  # a re-verification after the link dropped as it went out
        report.confirmed = False
        report.summary = f"whether {short} reached {who} is unknown (link lost); {then}"
    report.summary += "".join(f"; {w}" for w in report.warnings)
