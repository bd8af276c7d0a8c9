"""What every phase of a run is made of: its state, shown live, and its dealings with the host.

``RunIO`` keeps one run's numbers (memory per GPU, who is still alive, the host's clock)
and does the host's side of every phase: commands and pinned signals sent and recorded
(one interrupted in flight is recorded as such: it may have reached the host), TERM
escalated to KILL, and the goals checked on each sample until they hold (``_verify``).
``gpudash.engine.run.Run`` puts the phases together from these.
"""

from __future__ import annotations

import asyncio
import signal as _signal
from collections import deque
from collections.abc import Awaitable

from gpudash.domain.model import HostSnapshot
from gpudash.engine.goals import (
    Goal,
    GoalState,
    GoalStatus,
    MemoryAtMost,
    ProcessesGone,
    alive,
)
from gpudash.engine.journal import LOG_TAIL
from gpudash.engine.options import ExecOptions, ProgressFn
from gpudash.engine.plan import ActionPlan, Phase
from gpudash.engine.report import ActionReport, Progress
from gpudash.engine.steps import (
    ContainerCommand,
    DaemonReload,
    DropIn,
    GpuReset,
    NodeCommand,
    OwnerCommand,
)
from gpudash.engine.target import Target
from gpudash.protocol.source import (
    CommandResult,
    HostControl,
    SignalOutcome,
    SourceError,
)
from gpudash.serving.logsigns import load_progress

__all__ = ["RunIO"]


class RunIO:
    """A run's state and its dealings with the host, which every phase shares."""

    def __init__(
        self,
        plan: ActionPlan,
        control: HostControl,
        opts: ExecOptions,
        progress: ProgressFn | None,
        report: ActionReport | None,
    ) -> None:
        self.plan = plan
        self.control = control
        self.opts = opts
        self.progress = progress
        self.report = report if report is not None else ActionReport(plan)
        self.report.term_timeout = opts.term_timeout
        self.memory = MemoryAtMost(plan.target_used_mib(), opts.settle, opts.slack_mib)
        self.gone = ProcessesGone(plan.targets)
        self.used: dict[int, int | None] = dict(plan.used_before_mib)
        self.alive: tuple[int, ...] = tuple(t.pid for t in plan.targets)
        self.term_left: float | None = None
        self.statuses: list[GoalStatus] = []
        self.phase: Phase = plan.run_phases[0]
        self.loading: tuple[str, ...] = ()
        self.log_tail: deque[str] = deque(maxlen=LOG_TAIL)
        self.host_now: float | None = None  # the last sample's time on the host's clock
        self.first_now = 0.0  # the first sample's
        # a unit's stop, on control.clock(): when systemctl stop went out, and the first
        # sample since which its memory has stayed back (None: not back, or no stop)
        self.stop_began: float | None = None
        self.stop_back: float | None = None

    # --- telling ---------------------------------------------------------------------

    def tell(self, phase: str, message: str) -> None:
        self.report.log(message)
        if self.progress is not None:
            self.progress(Progress(
                phase, message, dict(self.used), dict(self.memory.targets_mib),
                dict(self.memory.stable), self.alive, self.term_left,
                tuple(self.report.escalated), self.phase.name if self.plan.phases else "",
                self.loading, tuple(self.log_tail), self.host_now,
            ))

    def _since(self, began: float | None) -> float:
        """Host seconds from ``began`` (the first sample's time when None) to the last."""
        if self.host_now is None:
            return 0.0
        return max(0.0, self.host_now - (self.first_now if began is None else began))

    def observe(self, snap: HostSnapshot) -> None:
        """Every sample updates what the progress shows, in every phase."""
        if self.host_now is None:
            self.first_now = snap.taken_at
        self.host_now = snap.taken_at
        self.used.update(snap.used_by_gpu())
        self.report.memory.add(snap.taken_at, snap.used_by_gpu())
        if self.stop_began is not None:
            back = all((m := snap.used_by_gpu().get(g)) is not None
                       and m <= t + self.memory.slack_mib
                       for g, t in self.memory.targets_mib.items())
            self.stop_back = (self.stop_back or self.control.clock()) if back else None
        self.alive = tuple(t.pid for t in self.plan.targets if alive(snap, t))

    async def _systemctl(self, verb: str, unit: str) -> CommandResult:
        return await self._send(("systemctl", verb, unit), self.control.systemctl(verb, unit))

    async def _container(self, step: ContainerCommand) -> CommandResult:
        return await self._send(
            (step.runtime, step.verb, step.container),
            self.control.container(step.runtime, step.verb, step.container, step.stop_timeout,
                                   step.policy))

    async def _send(self, argv: tuple[str, ...], call: Awaitable[CommandResult]
                    ) -> CommandResult:
        """Await one command on the host and record it. Interrupted (or the link lost)
        before its answer, it is recorded with no answer: it may have reached the host."""
        try:
            result = await call
        except asyncio.CancelledError:
            self.report.record_command(
                CommandResult(argv, None, "interrupted before its answer: may have run"))
            raise
        except SourceError as exc:
            self.report.record_command(CommandResult(argv, None, str(exc)))
            raise
        self.report.record_command(result)
        return result

    async def _signal(self, t: Target, name: str, sig: int) -> SignalOutcome:
        """Send one pinned signal and record it; interrupted or cut off in flight, it is
        ``UNKNOWN``."""
        try:
            outcome = await self.control.signal(t.pid, t.start_ticks, sig, boot_id=t.boot_id)
        except (asyncio.CancelledError, SourceError):  # it may have reached the host
            self.report.record_signal(t.pid, name, SignalOutcome.UNKNOWN)
            raise
        self.report.record_signal(t.pid, name, outcome)
        return outcome

    async def _commands(self) -> bool:
        """The phase's systemctl verbs, in order. False when the action ended here."""
        report = self.report
        for step in self.phase.commands:
            if isinstance(step, ContainerCommand):
                said = step.describe(self.opts.term_timeout).split("  (")[0]
                self.tell("commands", said)
                result = await self._container(step)
            elif isinstance(step, DropIn):
                said = f"{step.verb} {step.path}"
                self.tell("commands", said)
                argv = ("tee", step.path) if step.text is not None else ("rm", step.path)
                result = await self._send(argv, self.control.drop_in(step.unit, step.text))
            elif isinstance(step, OwnerCommand):
                said = step.describe(self.opts.term_timeout)
                self.tell("commands", said)
                result = await self._send(step.argv, self.control.owner_command(
                    step.kind, step.verb, step.key))
            elif isinstance(step, NodeCommand):
                said = step.describe(self.opts.term_timeout)
                self.tell("commands", said)
                result = await self._send(step.argv, self.control.node_state(
                    step.verb, step.node, step.reason))
            elif isinstance(step, GpuReset):
                said = " ".join(step.argv)
                self.tell("commands", said)
                result = await self._send(step.argv, self.control.gpu_reset(step.gpu))
            elif isinstance(step, DaemonReload):
                said = "systemctl daemon-reload"
                self.tell("commands", said)
                result = await self._send(("systemctl", "daemon-reload"),
                                          self.control.daemon_reload(step.unit))
            else:
                said = f"systemctl {step.verb} {step.unit}"
                self.tell("commands", said)
                result = await self._systemctl(step.verb, step.unit)
            if result.returncode is None:
                report.unknown = True
                why = result.output.strip() or "link lost"
                report.summary = f"{said}: {why}; outcome unknown"
                self.tell("done", report.summary)
                return False
            if not result.ok:
                report.summary = (
                    f"{said} failed ({result.returncode}): "
                    f"{result.output.strip()[:200]}"
                )
                self.tell("done", report.summary)
                return False
        return True

    async def _signal_targets(self) -> None:
        """Each signal pinned to its planned identity; TERM escalates to KILL if ignored."""
        report, opts = self.report, self.opts
        steps = list(self.phase.signals)
        if not steps:
            return
        if any(c.verb == "stop" for c in self.phase.commands):
            # systemctl stop has returned; let the sample show who survived it.
            snap = await self.control.sample()
            self.observe(snap)
            steps = [s for s in steps if alive(snap, s.target)]
        escalate: list[Target] = []
        for step in steps:
            t = step.target
            outcome = await self._signal(t, step.name, step.sig)
            self.tell("signals", f"{step.name} {t.pid} ({t.label}): {outcome.value}")
            if outcome is SignalOutcome.UNKNOWN:
                report.unknown = True
                report.summary = "link lost while signalling: outcome unknown; re-verify"
                return
            if outcome is SignalOutcome.SENT and step.escalate:
                escalate.append(t)
        began = self.control.clock()
        waited = 0.0
        while escalate and waited < opts.term_timeout:
            await self.control.sleep(min(opts.poll, opts.term_timeout - waited))
            waited = self.control.clock() - began  # what passed, not what was asked for
            snap = await self.control.sample()
            self.observe(snap)
            escalate = [t for t in escalate if alive(snap, t)]
            if escalate:
                self.term_left = max(0.0, opts.term_timeout - waited)
                gpus = sorted({g for t in escalate for g, m in t.gpu_memory_mib.items() if m})
                on = f" on GPU {', '.join(map(str, gpus))}" if gpus else ""
                self.tell("waiting", f"waiting for {len(escalate)} process(es) to exit after "
                          f"TERM: pid {', '.join(str(t.pid) for t in escalate)}{on}")
        self.term_left = None
        for t in escalate:
            outcome = await self._signal(t, "SIGKILL", _signal.SIGKILL)
            report.escalated.append(t.pid)
            self.tell("signals", f"escalated: SIGKILL {t.pid} ({t.label}) ignored TERM for "
                      f"{opts.term_timeout:g} s: {outcome.value}")
            if outcome is SignalOutcome.UNKNOWN:
                report.unknown = True
                report.summary = "link lost while signalling: outcome unknown; re-verify"
                return

    async def _verify(
        self, goals: list[Goal], within_s: float, *, loading: bool = False
    ) -> HostSnapshot:
        """Check every goal on each sample until the waited ones are met, one fails for
        good, or ``within_s`` seconds pass on the host. Every goal's last status is kept."""
        clock = self.control.clock  # the deadline on the host's clock, however long a
        start = clock()  # sample or a probe took (a 1 s probe stretched 5 s to 11 s)
        elapsed = 0.0
        while True:
            began = clock()
            snap = await self.control.sample()
            self.observe(snap)
            for goal in goals:
                await goal.observe(self.control)
            self.statuses = [g.check(snap, elapsed) for g in goals]
            waited = [s for g, s in zip(goals, self.statuses, strict=True) if g.waited]
            if any(s.state is GoalState.FAILED for s in waited):
                return snap
            pending = [s for s in waited if s.state is not GoalState.MET]
            if loading:
                progress = load_progress(self.log_tail)
                self.loading = tuple(s.detail or s.title for s in self.statuses) + (
                    (progress.describe(),) if progress else ())
            if not pending:
                self.tell("verifying", "every goal met")
                return snap
            if loading:
                self.tell("loading", "; ".join(self.loading))
            else:
                for status in pending:
                    self.tell("verifying", status.detail or status.title)
            if elapsed >= within_s:
                return snap
            # one look per poll, however long the look took (a sample and a ready probe
            # over SSH): a URL that starts answering is seen within one interval
            await self.control.sleep(max(0.0, min(self.opts.poll - (clock() - began),
                                                  within_s - (clock() - start))))
            elapsed = clock() - start
