"""The action engine: plan, execute, verify.

A plan names exactly what will happen (commands, PIDs with their start times, GiB
expected back per GPU) so the operator confirms facts, not intentions. Execution sends
signals only through ``HostControl.signal``, which re-checks each (pid, start time) on the
host itself. Verification follows per-GPU memory until it reaches the planned level and
holds there, or explains, per PID and GPU, what still holds it.
"""

from __future__ import annotations

import signal as _signal
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from gpudash.model import HostSnapshot, Process, Unit, unit_name
from gpudash.source import CommandResult, HostControl, SignalOutcome, SourceError
from gpudash.triage import Flag, OwnerKind, label, owner_kind, process_flags


class ActionKind(StrEnum):
    STOP = "stop"
    DISABLE = "disable"
    STOP_DISABLE = "stop+disable"
    TERMINATE = "terminate"
    KILL = "kill"
    REAP = "reap"
    RECLAIM = "reclaim"


ACTION_TITLES: Mapping[ActionKind, str] = {
    ActionKind.STOP: "Stop unit",
    ActionKind.DISABLE: "Disable unit",
    ActionKind.STOP_DISABLE: "Stop + disable unit",
    ActionKind.TERMINATE: "Terminate process (TERM, then KILL)",
    ActionKind.KILL: "Kill process (KILL)",
    ActionKind.REAP: "Reap orphans",
    ActionKind.RECLAIM: "Reclaim unit (stop + disable + reap + wait)",
}

UNIT_ACTIONS = frozenset(
    {ActionKind.STOP, ActionKind.DISABLE, ActionKind.STOP_DISABLE, ActionKind.RECLAIM}
)
PROCESS_ACTIONS = frozenset({ActionKind.TERMINATE, ActionKind.KILL})


class PlanError(ValueError):
    """The action makes no sense for this selection; the message says why."""


@dataclass(frozen=True, slots=True)
class Target:
    """A process the plan will signal, pinned by (pid, start time)."""

    pid: int
    start_ticks: int | None
    user: str | None
    label: str
    cmdline: str
    gpu_memory_mib: Mapping[int, int | None]

    @classmethod
    def of(cls, p: Process) -> Target:
        return cls(
            p.pid,
            p.start_ticks,
            p.user,
            label(p) or p.name or "?",
            p.cmdline,
            dict(p.gpu_memory_mib),
        )


@dataclass(frozen=True, slots=True)
class Step:
    """One command of a plan: a ``systemctl`` verb, or a signal to a pinned target."""

    verb: str  # stop | disable | signal
    unit: str | None = None
    target: Target | None = None
    sig: int = _signal.SIGTERM
    escalate: bool = False  # TERM first, KILL after the timeout if still alive

    def describe(self, term_timeout: float) -> str:
        if self.target is None:
            return f"systemctl {self.verb} {self.unit}"
        t = self.target
        sig = _signal.Signals(self.sig).name.removeprefix("SIG")
        text = f"kill -{sig} {t.pid}  (start {t.start_ticks}, {t.user or '?'}, {t.label})"
        if self.escalate:
            text += f"; -KILL after {term_timeout:g} s if alive"
        return text


@dataclass(frozen=True, slots=True)
class ActionPlan:
    kind: ActionKind
    host: str
    subject: str  # the unit name or "pid N"
    steps: tuple[Step, ...]
    targets: tuple[Target, ...]
    expected_free_mib: Mapping[int, int]  # per GPU
    used_before_mib: Mapping[int, int | None]
    notes: tuple[str, ...] = ()
    untouched: tuple[Target, ...] = ()  # other holders the plan leaves alone, for the record
    unit_before: Unit | None = None

    @property
    def title(self) -> str:
        return f"{ACTION_TITLES[self.kind]}: {self.subject}"

    @property
    def expected_free_total_mib(self) -> int:
        return sum(self.expected_free_mib.values())

    def target_used_mib(self) -> dict[int, int]:
        """The used memory per GPU that proves the action worked."""
        out: dict[int, int] = {}
        for gpu, before in self.used_before_mib.items():
            if before is not None and self.expected_free_mib.get(gpu):
                out[gpu] = max(0, before - self.expected_free_mib[gpu])
        return out

    def describe(self, term_timeout: float = 10.0) -> list[str]:
        """The plan as lines of plain text, for a confirmation dialog or a terminal."""
        lines = [f"{self.title}  on {self.host}"]
        lines += [f"  $ {s.describe(term_timeout)}" for s in self.steps]
        if self.expected_free_mib:
            per = ", ".join(
                f"GPU{g} {m / 1024:.1f}" for g, m in sorted(self.expected_free_mib.items()) if m
            )
            lines.append(
                f"  Expected back: {self.expected_free_total_mib / 1024:.1f} GiB ({per} GiB)"
            )
        else:
            lines.append("  Expected back: no GPU memory")
        lines += [f"  ! {n}" for n in self.notes]
        if self.untouched:
            shown = self.untouched[:4]
            people = ", ".join(f"{t.pid} ({t.user or '?'}, {t.label})" for t in shown)
            more = len(self.untouched) - len(shown)
            lines.append(f"  Left alone: {people}" + (f" and {more} more" if more else ""))
        return lines


# --- planning ----------------------------------------------------------------------------


def _mem_sum(targets: Iterable[Target]) -> dict[int, int]:
    out: dict[int, int] = {}
    for t in targets:
        for gpu, mib in t.gpu_memory_mib.items():
            if mib:
                out[gpu] = out.get(gpu, 0) + mib
    return out


def _holders_left_alone(snapshot: HostSnapshot, targets: Iterable[Target]) -> tuple[Target, ...]:
    pinned = {t.pid for t in targets}
    return tuple(
        Target.of(p) for p in snapshot.processes if p.holds_gpu_memory and p.pid not in pinned
    )


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
    return p


def _unit_members(snapshot: HostSnapshot, unit: Unit) -> list[Process]:
    return [p for p in snapshot.processes if p.unit == unit.name]


def plan_action(
    snapshot: HostSnapshot,
    kind: ActionKind,
    *,
    unit: str | None = None,
    pid: int | None = None,
) -> ActionPlan:
    """Build the exact plan for ``kind`` on the given unit or pid, from one snapshot."""
    if not snapshot.can_act:
        raise PlanError(snapshot.cannot_act_reason or f"cannot act on {snapshot.host}")
    before = snapshot.used_by_gpu()
    notes: list[str] = []

    if kind in UNIT_ACTIONS:
        u = _require_unit(snapshot, unit)
        members = _unit_members(snapshot, u)
        steps: list[Step] = []
        targets: list[Target] = []
        if kind in (ActionKind.STOP, ActionKind.STOP_DISABLE, ActionKind.RECLAIM):
            steps.append(Step("stop", unit=u.name))
        if kind in (ActionKind.DISABLE, ActionKind.STOP_DISABLE, ActionKind.RECLAIM):
            steps.append(Step("disable", unit=u.name))
        expected: dict[int, int] = {}
        if kind is ActionKind.RECLAIM:
            # Everything of the unit's cgroup that is alive now is pinned; stop takes the
            # main, the signals take what KillMode or re-parenting left behind.
            targets = [Target.of(p) for p in members if p.start_ticks is not None and p.pid != 1]
            steps += [Step("signal", target=t, escalate=True) for t in targets]
            expected = _mem_sum(targets)
        elif kind in (ActionKind.STOP, ActionKind.STOP_DISABLE):
            killed = members if u.kill_mode in (None, "control-group", "mixed") else [
                p for p in members if p.pid == u.main_pid
            ]
            expected = _mem_sum(Target.of(p) for p in killed)
            left = [p for p in members if p not in killed and p.holds_gpu_memory]
            if left:
                notes.append(
                    f"KillMode={u.kill_mode}: stop signals only the main process; "
                    f"{len(left)} worker(s) holding "
                    f"{sum(p.total_gpu_memory_mib for p in left) / 1024:.1f} GiB will stay. "
                    "Use reclaim, or reap orphans afterwards."
                )
        if u.is_down and kind is not ActionKind.DISABLE and kind is not ActionKind.RECLAIM:
            notes.append(f"{u.name} is already {u.active_state}.")
        if kind is ActionKind.DISABLE:
            notes.append("Disable changes only what happens at boot; nothing stops now.")
        plan_targets = tuple(targets)
        return ActionPlan(
            kind,
            snapshot.host,
            u.name,
            tuple(steps),
            plan_targets,
            expected,
            before,
            tuple(notes),
            _holders_left_alone(snapshot, plan_targets or [Target.of(p) for p in members]),
            u,
        )

    if kind in PROCESS_ACTIONS:
        p = _require_process(snapshot, pid)
        if p.pid == 1:
            raise PlanError("refusing to signal PID 1")
        t = Target.of(p)
        sig = _signal.SIGKILL if kind is ActionKind.KILL else _signal.SIGTERM
        owner = snapshot.unit(p.unit) if p.unit else None
        if owner is not None and owner.main_pid == p.pid and not owner.is_down:
            if (owner.restart or "no").lower() != "no":
                notes.append(
                    f"pid {p.pid} is the main process of {owner.name} "
                    f"(Restart={owner.restart}): systemd will respawn it. Stop the unit instead."
                )
        return ActionPlan(
            kind,
            snapshot.host,
            f"pid {p.pid}",
            (Step("signal", target=t, sig=sig, escalate=kind is ActionKind.TERMINATE),),
            (t,),
            _mem_sum([t]),
            before,
            tuple(notes),
            _holders_left_alone(snapshot, [t]),
            owner,
        )

    if kind is ActionKind.REAP:
        flags = process_flags(snapshot)
        orphans = [
            p
            for p in snapshot.processes
            if Flag.ORPHAN in flags[p.pid]
            and p.start_ticks is not None
            and (unit is None or p.unit == unit_name(unit))
        ]
        if not orphans:
            where = f" of {unit_name(unit)}" if unit else ""
            raise PlanError(f"no orphaned processes{where} hold GPU memory on {snapshot.host}")
        targets = [Target.of(p) for p in orphans]
        return ActionPlan(
            kind,
            snapshot.host,
            f"{len(targets)} orphan(s)" + (f" of {unit_name(unit)}" if unit else ""),
            tuple(Step("signal", target=t, escalate=True) for t in targets),
            tuple(targets),
            _mem_sum(targets),
            before,
            (),
            _holders_left_alone(snapshot, targets),
            snapshot.unit(unit_name(unit)) if unit else None,
        )
    raise PlanError(f"unknown action {kind}")


# --- execution and verification ----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Progress:
    """What the engine is doing now, and where each GPU's memory stands."""

    phase: str  # commands | signals | waiting | verifying | done
    message: str
    used_mib: Mapping[int, int | None]
    target_mib: Mapping[int, int]
    stable: Mapping[int, int]  # consecutive samples at target, per GPU


@dataclass(frozen=True, slots=True)
class GpuOutcome:
    index: int
    before_mib: int | None
    target_mib: int
    after_mib: int | None
    confirmed: bool

    @property
    def freed_mib(self) -> int | None:
        if self.before_mib is None or self.after_mib is None:
            return None
        return self.before_mib - self.after_mib


@dataclass(frozen=True, slots=True)
class Leftover:
    """Something that still holds memory the plan expected back, and why."""

    pid: int | None
    gpu: int | None  # None: a planned process still alive, on no GPU in particular
    mib: int | None
    reason: str  # alive | D state | zombie | respawned | unknown holder | timeout | ...
    detail: str = ""

    @property
    def where(self) -> str:
        return "no GPU named" if self.gpu is None else f"GPU{self.gpu}"


@dataclass(slots=True)
class ActionReport:
    plan: ActionPlan
    events: list[tuple[float, str]] = field(default_factory=list)
    commands: list[CommandResult] = field(default_factory=list)
    signals: list[tuple[int, str, SignalOutcome]] = field(default_factory=list)
    escalated: list[int] = field(default_factory=list)  # pids that ignored TERM and got KILL
    term_timeout: float = 10.0  # what the execution used, for describing the plan afterwards
    gpus: list[GpuOutcome] = field(default_factory=list)
    leftovers: list[Leftover] = field(default_factory=list)
    confirmed: bool = False
    unknown: bool = False  # the link dropped: the outcome must be re-verified
    reverified: bool = False  # this report comes from reverify(), after a link loss
    summary: str = ""

    def log(self, text: str) -> None:
        self.events.append((time.time(), text))

    def describe(self) -> list[str]:
        lines = [f"{self.plan.title} on {self.plan.host}: {self.summary}"]
        for g in self.gpus:
            freed = "N/A" if g.freed_mib is None else f"{g.freed_mib / 1024:.1f} GiB"
            after = "N/A" if g.after_mib is None else f"{g.after_mib} MiB"
            mark = "ok" if g.confirmed else "NOT FREED"
            lines.append(f"  GPU{g.index}: freed {freed}, now {after} (target <= "
                         f"{g.target_mib} MiB)  {mark}")
        for pid in self.escalated:
            lines.append(f"  pid {pid} ignored SIGTERM: escalated to SIGKILL")
        for lo in self.leftovers:
            who = f"pid {lo.pid}" if lo.pid is not None else "unknown holder"
            mib = "?" if lo.mib is None else f"{lo.mib} MiB"
            lines.append(f"  still held: {lo.where} {mib} by {who}: {lo.reason} {lo.detail}")
        return lines


@dataclass(frozen=True, slots=True)
class ExecOptions:
    term_timeout: float = 10.0  # seconds between TERM and KILL
    verify_timeout: float = 60.0  # give up following memory after this
    poll: float = 0.5
    settle: int = 3  # consecutive samples at target that count as confirmed
    slack_mib: int = 64  # driver bookkeeping noise tolerated above target
    respawn_watch: float = 5.0  # after signalling a unit's main, watch this long for a respawn


ProgressFn = Callable[[Progress], None]


def _alive(snapshot: HostSnapshot, t: Target) -> Process | None:
    p = snapshot.process(t.pid)
    if p is None or p.start_ticks != t.start_ticks or p.state == "Z":
        return None
    return p


async def execute(
    plan: ActionPlan,
    control: HostControl,
    options: ExecOptions | None = None,
    progress: ProgressFn | None = None,
) -> ActionReport:
    """Carry out ``plan`` and follow the memory until it is confirmed back or explained."""
    return await _run(plan, control, options or ExecOptions(), progress, act=True)


async def reverify(
    plan: ActionPlan,
    control: HostControl,
    options: ExecOptions | None = None,
    progress: ProgressFn | None = None,
) -> ActionReport:
    """After a link loss left ``plan``'s outcome unknown: follow the memory again, act never.

    Nothing is re-sent: a signal that may or may not have arrived is not repeated on a
    guess. The report says what the host shows now, per GPU and per pinned process.
    """
    report = await _run(plan, control, options or ExecOptions(), progress, act=False)
    report.reverified = True
    if not report.unknown:
        report.summary = "re-verified after reconnecting: " + report.summary
    return report


async def _run(
    plan: ActionPlan,
    control: HostControl,
    opts: ExecOptions,
    progress: ProgressFn | None,
    *,
    act: bool,
) -> ActionReport:
    report = ActionReport(plan, term_timeout=opts.term_timeout)
    targets_mib = plan.target_used_mib()
    used: dict[int, int | None] = dict(plan.used_before_mib)
    stable: dict[int, int] = {g: 0 for g in targets_mib}

    def tell(phase: str, message: str) -> None:
        report.log(message)
        if progress is not None:
            progress(Progress(phase, message, dict(used), dict(targets_mib), dict(stable)))

    try:
        # 1. systemctl verbs, in plan order; a failed stop ends the action.
        for step in plan.steps if act else ():
            if step.target is not None:
                continue
            assert step.unit is not None
            tell("commands", f"systemctl {step.verb} {step.unit}")
            result = await control.systemctl(step.verb, step.unit)
            report.commands.append(result)
            if result.returncode is None:
                report.unknown = True
                why = result.output.strip() or "link lost"
                report.summary = f"systemctl {step.verb} {step.unit}: {why}; outcome unknown"
                tell("done", report.summary)
                return report
            if not result.ok:
                report.summary = (
                    f"systemctl {step.verb} {step.unit} failed ({result.returncode}): "
                    f"{result.output.strip()[:200]}"
                )
                tell("done", report.summary)
                return report

        # 2. signals, each pinned to its planned identity; escalate TERM -> KILL.
        if act:
            await _signal_targets(plan, control, opts, report, tell)
        if report.unknown:
            return report

        # 3. follow memory until every GPU sits at its target for `settle` samples.
        elapsed = 0.0
        snap: HostSnapshot | None = None
        while True:
            snap = await control.sample()
            used.update(snap.used_by_gpu())
            for gpu, target in targets_mib.items():
                now = used.get(gpu)
                ok = now is not None and now <= target + opts.slack_mib
                stable[gpu] = stable[gpu] + 1 if ok else 0
            alive = [t for t in plan.targets if _alive(snap, t)]
            if all(v >= opts.settle for v in stable.values()) and not alive:
                if _respawn_watch(plan) and not _respawned(plan, snap) and (
                    elapsed < opts.respawn_watch
                ):
                    tell("verifying", "watching whether systemd respawns the unit")
                else:
                    tell("verifying", "memory back on every GPU; confirmed")
                    break
            waiting = [g for g, v in stable.items() if v < opts.settle]
            if waiting:
                tell("verifying", f"waiting for GPU {', '.join(map(str, waiting))}")
            if alive:
                tell("verifying", f"waiting for {len(alive)} planned process(es) to exit")
            if elapsed >= opts.verify_timeout:
                break
            await control.sleep(opts.poll)
            elapsed += opts.poll
        _finish(plan, report, snap, targets_mib, stable, opts)
        tell("done", report.summary)
        return report
    except SourceError as exc:
        report.unknown = True
        report.summary = f"outcome unknown: {exc}; re-verify after reconnecting"
        tell("done", report.summary)
        return report


async def _signal_targets(
    plan: ActionPlan,
    control: HostControl,
    opts: ExecOptions,
    report: ActionReport,
    tell: Callable[[str, str], None],
) -> None:
    steps = [s for s in plan.steps if s.target is not None]
    if not steps:
        return
    if any(s.verb == "stop" for s in plan.steps):
        # systemctl stop has returned; let the sample show who survived it.
        snap = await control.sample()
        steps = [s for s in steps if s.target is not None and _alive(snap, s.target)]
    escalate: list[Target] = []
    for step in steps:
        t = step.target
        assert t is not None
        outcome = await control.signal(t.pid, t.start_ticks, step.sig)
        report.signals.append((t.pid, _signal.Signals(step.sig).name, outcome))
        tell("signals", f"{_signal.Signals(step.sig).name} {t.pid} ({t.label}): {outcome.value}")
        if outcome is SignalOutcome.UNKNOWN:
            report.unknown = True
            report.summary = "link lost while signalling: outcome unknown; re-verify"
            return
        if outcome is SignalOutcome.SENT and step.escalate:
            escalate.append(t)
    waited = 0.0
    while escalate and waited < opts.term_timeout:
        await control.sleep(opts.poll)
        waited += opts.poll
        snap = await control.sample()
        escalate = [t for t in escalate if _alive(snap, t)]
        if escalate:
            tell("waiting", f"{len(escalate)} process(es) still alive after TERM ({waited:g} s)")
    for t in escalate:
        outcome = await control.signal(t.pid, t.start_ticks, _signal.SIGKILL)
        report.signals.append((t.pid, "SIGKILL", outcome))
        report.escalated.append(t.pid)
        tell("signals", f"escalated: SIGKILL {t.pid} ({t.label}) ignored TERM: {outcome.value}")
        if outcome is SignalOutcome.UNKNOWN:
            report.unknown = True
            report.summary = "link lost while signalling: outcome unknown; re-verify"
            return


def _finish(
    plan: ActionPlan,
    report: ActionReport,
    snap: HostSnapshot | None,
    targets_mib: Mapping[int, int],
    stable: Mapping[int, int],
    opts: ExecOptions,
) -> None:
    after = snap.used_by_gpu() if snap else {}
    for gpu, target in sorted(targets_mib.items()):
        report.gpus.append(
            GpuOutcome(
                gpu,
                plan.used_before_mib.get(gpu),
                target,
                after.get(gpu),
                stable.get(gpu, 0) >= opts.settle,
            )
        )
    if snap is not None and any(not g.confirmed for g in report.gpus):
        report.leftovers = _explain(plan, snap, [g.index for g in report.gpus if not g.confirmed])
    if snap is not None:
        report.leftovers += _survivors(plan, snap, {lo.pid for lo in report.leftovers})
    problems = _unit_problems(plan, snap)
    memory_ok = all(g.confirmed for g in report.gpus) and not any(
        lo.gpu is None for lo in report.leftovers
    )
    report.confirmed = memory_ok and not problems
    survivors = [lo for lo in report.leftovers if lo.gpu is None]
    bad = [g.index for g in report.gpus if not g.confirmed]
    parts = list(problems)
    if bad:
        parts.append(
            f"NOT confirmed: GPU {', '.join(map(str, bad))} still hold memory "
            f"({len(report.leftovers)} holder(s) explained below)"
        )
    if survivors:
        parts.append(f"NOT confirmed: {len(survivors)} planned process(es) still alive")
    if not targets_mib and not survivors:
        parts.append("no GPU memory was expected back")
    elif memory_ok:
        freed = sum(g.freed_mib or 0 for g in report.gpus)
        parts.append(f"confirmed: {freed / 1024:.1f} GiB back on {len(report.gpus)} GPU(s)")
    report.summary = "; ".join(parts)


def _respawned(plan: ActionPlan, snap: HostSnapshot) -> bool:
    assert plan.unit_before is not None
    u = snap.unit(plan.unit_before.name)
    return u is not None and u.main_pid not in (None, plan.unit_before.main_pid)


def _respawn_watch(plan: ActionPlan) -> bool:
    """Signalling a unit's main process with a restart policy: watch for the respawn."""
    u = plan.unit_before
    return (
        plan.kind in PROCESS_ACTIONS
        and u is not None
        and not u.is_down
        and u.main_pid in {t.pid for t in plan.targets}
        and (u.restart or "no").lower() != "no"
    )


def _unit_problems(plan: ActionPlan, snap: HostSnapshot | None) -> list[str]:
    """What the unit's state says went differently from the plan."""
    if snap is None or plan.unit_before is None:
        return []
    u = snap.unit(plan.unit_before.name)
    if u is None:
        return []
    out: list[str] = []
    if plan.kind in (ActionKind.STOP, ActionKind.STOP_DISABLE, ActionKind.RECLAIM) and (
        not u.is_down
    ):
        out.append(f"{u.name} is {u.active_state} after stop")
    # static/indirect/generated/transient units cannot be disabled and do not start at
    # boot by themselves: only an enabled (or linked) unit file is a problem.
    if plan.kind in (ActionKind.DISABLE, ActionKind.STOP_DISABLE, ActionKind.RECLAIM) and (
        (u.unit_file_state or "").startswith(("enabled", "linked"))
    ):
        out.append(f"{u.name} is still {u.unit_file_state} after disable")
    if _respawn_watch(plan) and _respawned(plan, snap):
        out.append(
            f"systemd respawned {u.name}: new MainPID {u.main_pid}, NRestarts {u.n_restarts} "
            "(stop the unit instead)"
        )
    return out


def _survivors(plan: ActionPlan, snap: HostSnapshot, explained: set[int | None]) -> list[Leftover]:
    """Planned processes still alive that no GPU's shortfall already names.

    Memory alone is not the proof: a target whose memory the driver cannot attribute
    (N/A) or that holds none must still be gone.
    """
    out: list[Leftover] = []
    for t in plan.targets:
        p = _alive(snap, t)
        if p is None or p.pid in explained:
            continue
        reason = {"D": "D state (uninterruptible; waits on the driver)"}.get(p.state or "", "alive")
        out.append(Leftover(p.pid, None, p.total_gpu_memory_mib or None, reason,
                            label(p) or p.name))
    return out


def _explain(plan: ActionPlan, snap: HostSnapshot, gpus: list[int]) -> list[Leftover]:
    """Say, per GPU still above target, which process holds it and why."""
    out: list[Leftover] = []
    pinned = {(t.pid, t.start_ticks) for t in plan.targets}
    pinned_pids = {t.pid for t in plan.targets}
    left_alone = {t.pid for t in plan.untouched}
    unit_now = snap.unit(plan.unit_before.name) if plan.unit_before else None
    respawned = (
        plan.unit_before is not None
        and unit_now is not None
        and unit_now.main_pid not in (None, plan.unit_before.main_pid)
    )
    for gpu in gpus:
        explained = False
        for p in snap.processes:
            mib = p.gpu_memory_mib.get(gpu)
            if mib == 0 or gpu not in p.gpu_memory_mib:
                continue
            if (p.pid, p.start_ticks) in pinned:
                reason = {"D": "D state (uninterruptible; waits on the driver)", "Z": "zombie"}.get(
                    p.state or "", "alive"
                )
                out.append(Leftover(p.pid, gpu, mib, reason, label(p) or p.name))
                explained = True
            elif p.pid in left_alone:
                continue
            elif p.pid in pinned_pids:
                out.append(Leftover(p.pid, gpu, mib, "pid reused",
                                    "another process has this pid now; it was not signalled"))
                explained = True
            elif plan.unit_before is not None and p.unit == plan.unit_before.name:
                why = "respawned" if respawned else "new process of the unit"
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
                    "no listed process holds it: the driver has not released it yet, or a "
                    "process outside this view (another container) holds it",
                )
            )
    return out
