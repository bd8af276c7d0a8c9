"""One run of a plan: commands, pinned signals, then goals checked (``engine.carry_out``
starts one).

Signals go out only through ``HostControl.signal``, which re-checks each (pid, start time)
on the host itself. Verification checks the plan's goals (``gpudash.engine.goals``) on
every sample until they hold, or explains, per PID and GPU, what still holds memory.
Whatever ends an action early (a failed command, a lost link, cancellation) the report
says what was sent. What every phase does with the host (commands and signals sent and
recorded, the goals checked on each sample) is ``gpudash.engine.run_io``.
"""

from __future__ import annotations

import asyncio
import logging

from gpudash.domain.model import HostSnapshot
from gpudash.engine.config_proof import UnitConfigured
from gpudash.engine.container_plans import container_ready_url
from gpudash.engine.goals import (
    ContainerLoaded,
    ContainerRunning,
    Goal,
    GoalState,
    MemoryAtMost,
    MemoryLoaded,
    ProcessesGone,
    Ready,
    UnitUp,
    unit_memory,
)
from gpudash.engine.journal import failure_from_log, follow_journal, task_stack
from gpudash.engine.node_proof import node_goal
from gpudash.engine.plan import NODE_STATES, ActionKind, Phase, Serving
from gpudash.engine.proof import freeing_goals
from gpudash.engine.report import (
    ActionReport,
    PhaseOutcome,
    ServingOutcome,
)
from gpudash.engine.run_io import RunIO
from gpudash.engine.signal_proof import conclude_signal, watched_enough
from gpudash.engine.steps import Systemctl
from gpudash.engine.target import Target, mem_sum
from gpudash.engine.verdict import NOT_SENT, conclude, failed_start, nothing_serves, phases_summary
from gpudash.protocol.source import (
    ContainerOwner,
    SourceError,
)

__all__ = ["Run"]

log = logging.getLogger("gpudash.engine")

FOLLOWER_STOP_S = 2.0  # how long the verdict waits for a cancelled follower to finish


CONTAINER_STARTS = frozenset({ActionKind.START, ActionKind.RESTART})


class Run(RunIO):
    """One execution of a plan: the report being filled and the numbers shown live."""

    def _goals(self) -> list[Goal]:
        """What proves the current (freeing) phase."""
        return freeing_goals(self.plan, self.phase, self.opts.respawn_watch, self.memory,
                             self.gone)

    # --- the run ---------------------------------------------------------------------

    async def go(self, *, act: bool) -> ActionReport:
        report = self.report
        try:
            for phase in self.plan.run_phases:
                self.phase = phase
                began = self.host_now
                ok = await self._run_phase(phase, act)
                if self.plan.phases:
                    report.phases.append(PhaseOutcome(
                        phase.name, ok, report.summary, self._since(began)))
                if not ok or report.unknown:
                    break
            back = self.plan.rollback
            if act and back is not None and failed_start(report) and self.opts.stop_crash_loop:
                await self._roll_back(back)
            if len(self.plan.phases) > 1:
                report.summary = phases_summary(report)
                report.warnings += nothing_serves(report)
                report.confirmed = all(ph.confirmed for ph in report.phases) and len(
                    report.phases) == len(self.plan.phases)
            self.tell("done", report.summary)
            return report
        except SourceError as exc:
            report.unknown, report.confirmed = True, False
            done = "; ".join(f"{ph.name} confirmed" for ph in report.phases if ph.confirmed)
            report.summary = (f"outcome unknown: {exc}; re-verify after reconnecting"
                              + (f" ({done} before the link dropped)" if done else ""))
            self.tell("done", report.summary)
            return report
        except asyncio.CancelledError:
            report.interrupted = True
            sent = report.sent_lines()
            report.summary = (
                "interrupted before the outcome was verified; sent: "
                + ("; ".join(sent) if sent else "nothing")
            )
            report.log(report.summary)
            raise

    async def _run_phase(self, phase: Phase, act: bool) -> bool:
        """One phase, as its kind is carried out and proven."""
        if phase.kind is ActionKind.FIX:
            return await self._config_phase(act)
        if phase.kind in NODE_STATES:
            return await self._node_phase(act)
        if phase.kind is ActionKind.SIGNAL:
            return await self._signal_phase(act)
        if phase.kind in CONTAINER_STARTS and phase.serving is None and (
                self.plan.container_before is not None):
            return await self._container_start_phase(act)
        if phase.serving is None:
            return await self._freeing_phase(act)
        return await self._serving_phase(phase.serving, act)

    async def _freeing_phase(self, act: bool) -> bool:
        """Commands, pinned signals, then memory back and processes gone (or explained)."""
        report = self.report
        unit = self.plan.unit_before
        stops_unit = unit is not None and any(
            isinstance(c, Systemctl) and c.verb == "stop" and c.unit == unit.name
            for c in self.phase.commands)
        if act and stops_unit:
            self.stop_began = self.control.clock()
        try:
            return await self._free(act)
        finally:
            if report.confirmed and self.stop_began is not None and self.stop_back is not None:
                report.stop_s = round(max(0.0, self.stop_back - self.stop_began), 1)
            self.stop_began = None  # what follows (a start) is no part of the stop

    async def _free(self, act: bool) -> bool:
        report = self.report
        if act and not await self._commands():
            return False
        if not act and await self._started_since():
            # Re-verifying a swap whose next model was started meanwhile: the GPUs hold
            # the new model now, so this phase is proven by what left, not by free memory.
            self.memory = MemoryAtMost({}, self.opts.settle, self.opts.slack_mib)
        if act:
            await self._signal_targets()
            if report.unknown:
                return False
        skipped = self._not_sent()
        if skipped:  # their memory will not come back: wait only for the rest's
            self._expect_only([t for t in self.plan.targets if t not in skipped])
        if act and skipped and len(skipped) == len(self.plan.targets) and not (
            self.phase.commands
        ):
            snap = await self.control.sample()  # nothing went out: conclude at once
            self.observe(snap)
            self.statuses = [g.check(snap, 0.0) for g in self._goals()]
            self._conclude(snap, skipped)
        else:
            self._conclude(await self._verify(self._goals(), self.opts.verify_timeout), skipped)
        return report.confirmed

    async def _config_phase(self, act: bool) -> bool:
        """gpudash's drop-in written (or removed) and reloaded, then proven on fresh
        samples: ``systemctl cat`` lists it (or not) and ``systemctl show`` agrees."""
        report, plan = self.report, self.plan
        if act and not await self._commands():
            return False
        unit = plan.unit_before.name if plan.unit_before is not None else plan.subject
        goal = UnitConfigured(unit, plan.settings, not plan.selection.revert,
                              plan.selection.learned)
        snap = await self._verify([goal], self.opts.verify_timeout)
        report.unit_after = snap.unit(unit)
        status = self.statuses[0]
        report.confirmed = status.state is GoalState.MET
        if report.confirmed:
            report.summary = f"confirmed: {status.detail}"
            report.warnings += [n for n in plan.notes if "next stop or restart" in n]
        else:
            report.summary = f"NOT confirmed: {status.detail or status.title}"
        return report.confirmed

    async def _node_phase(self, act: bool) -> bool:
        """A Slurm node drained or resumed (``scontrol update``), then proven on fresh
        samples: ``scontrol show node`` reports it so. Nothing is freed."""
        report, opts = self.report, self.opts
        self.memory = MemoryAtMost({}, opts.settle, opts.slack_mib)
        if act and not await self._commands():
            return False
        await self._verify([node_goal(self.plan)], opts.verify_timeout)
        status = self.statuses[0]
        report.confirmed = status.state is GoalState.MET
        report.summary = (f"confirmed: {status.detail}" if report.confirmed
                          else f"NOT confirmed: {status.detail or status.title}")
        return report.confirmed

    async def _signal_phase(self, act: bool) -> bool:
        """A picked signal, pinned; then watched (``respawn_watch`` seconds at most on the
        host's clock) for what the process did: exited, paused, or runs on."""
        report, opts = self.report, self.opts
        self.memory = MemoryAtMost({}, opts.settle, opts.slack_mib)  # nothing is promised
        if act:
            await self._signal_targets()
            if report.unknown:
                return False
        clock = self.control.clock
        start = clock()
        while True:
            snap = await self.control.sample()
            self.observe(snap)
            watched = clock() - start
            if watched >= opts.respawn_watch or watched_enough(self.plan, report, snap,
                                                                 opts.slack_mib):
                break
            self.tell("verifying", "watching what the process does with the signal")
            await self.control.sleep(min(opts.poll, opts.respawn_watch - watched))
        conclude_signal(self.plan, report, snap, watched, opts.slack_mib)
        return report.confirmed

    async def _container_start_phase(self, act: bool) -> bool:
        """``docker start`` / ``restart`` (the restart policy put back first), then proven
        on fresh samples: running, not restarted by its runtime, its memory back, and where
        it publishes a port (or a ready URL is given), that URL answering 200 from the
        container's own listener."""
        report, plan, opts = self.report, self.plan, self.opts
        c = plan.container_before
        assert c is not None
        self.memory = MemoryAtMost({}, opts.settle, opts.slack_mib)  # nothing is freed now
        key = f"{c.runtime}:{c.label}"
        outcome = report.serving = ServingOutcome(key, container=True)
        if act and not await self._commands():
            return False
        began = self.host_now
        loaded = ContainerLoaded(c, plan.selection.footprint or {}, opts.settle)
        goals: list[Goal] = [ContainerRunning(c, opts.settle), loaded]
        url = container_ready_url(c, plan.selection.ready_url)
        ready = Ready(url, owner=ContainerOwner(c.id, c.runtime)) if url else None
        if ready is not None:
            goals.append(ready)
            outcome.ready_url = url
        snap = await self._verify(goals, opts.serve_timeout)
        report.container_after = snap.container(c.id)
        outcome.mib_per_gpu = dict(loaded.now)
        if ready is not None:
            outcome.ready_status, outcome.ready_error = ready.status, ready.error
        state = "ready" if ready is not None else "running"
        if all(st.state is GoalState.MET for st in self.statuses):
            outcome.serving = True
            outcome.ready_s = self._since(began)
            report.confirmed = True
            report.summary = (f"confirmed: {c.label} {state} after {outcome.ready_s:.0f} s: "
                              + "; ".join(st.detail for st in self.statuses if st.detail))
            return True
        report.confirmed = False
        report.summary = f"{c.label} NOT confirmed {state}: " + "; ".join(
            st.detail or st.title for st in self.statuses if st.state is not GoalState.MET)
        return False

    async def _started_since(self) -> bool:
        """Whether a later phase's unit is up already (only asked when re-verifying)."""
        later = [ph.serving.unit for ph in self.plan.run_phases
                 if ph.serving is not None and ph is not self.phase]
        if not later:
            return False
        snap = await self.control.sample()
        self.observe(snap)
        return any((u := snap.unit(name)) is not None and not u.is_down for name in later)

    async def _serving_phase(self, serving: Serving, act: bool) -> bool:
        """Start (and enable) the unit, then follow it loading until it serves — or crashes,
        when it is stopped (unless told not to) and the log line that explains it named."""
        report, opts = self.report, self.opts
        outcome = report.serving = ServingOutcome(serving.unit, ready_url=serving.ready_url)
        self.log_tail.clear()  # this unit's own log (a rollback follows a second unit)
        self.memory = MemoryAtMost({}, opts.settle, opts.slack_mib)  # nothing is freed now
        if act and not await self._commands():
            return False
        if not act and not await self._was_started(serving.unit):
            return False
        goals: list[Goal] = [UnitUp(serving.unit, 0, opts.settle),
                             MemoryLoaded(serving.unit, serving.footprint, opts.settle)]
        ready = Ready(serving.ready_url, owner=serving.unit) if serving.ready_url else None
        if ready is not None:
            goals.append(ready)
        began = self.host_now
        snap = await self._verify_following(serving.unit, goals)
        outcome.log_tail = tuple(self.log_tail)
        by_title = dict(zip((g.title for g in goals), self.statuses, strict=True))
        if ready is not None:
            outcome.ready_status, outcome.ready_error = ready.status, ready.error
        outcome.mib_per_gpu = unit_memory(snap, serving.unit)
        if all(st.state is GoalState.MET for st in self.statuses):
            outcome.serving = True
            outcome.ready_s = self._since(began)
            report.confirmed = True
            report.summary = (f"{serving.unit} serving after {outcome.ready_s:.0f} s: "
                              + "; ".join(st.detail for st in self.statuses if st.detail))
            return True
        report.confirmed = False
        await self._not_serving(serving.unit, outcome,
                                by_title[UnitUp.title].state is GoalState.FAILED, act)
        return False

    async def _roll_back(self, phase: Phase) -> None:
        """The new unit does not serve: start the old one again and prove it serves."""
        report, tried, began = self.report, self.report.serving, self.host_now
        self.phase = phase
        assert phase.serving is not None
        ok = await self._serving_phase(phase.serving, act=True)
        report.rollback, report.serving = report.serving, tried
        report.phases.append(PhaseOutcome(phase.name, ok, report.summary, self._since(began)))
        snap = await self.control.sample()  # the old unit as it is now: started, enabled
        report.unit_after = snap.unit(phase.serving.unit) or report.unit_after
        for name in (phase.serving.unit, *(c.unit for c in phase.commands
                                           if isinstance(c, Systemctl))):
            u = snap.unit(name)
            if u is not None and name not in report.boots:
                report.boots[name] = u.unit_file_state or "unknown"

    async def _was_started(self, unit: str) -> bool:
        """Re-verifying: whether the unit was started at all before the link dropped."""
        snap = await self.control.sample()
        self.observe(snap)
        u = snap.unit(unit)
        if u is None or u.is_down:
            self.report.confirmed = False
            self.report.summary = (f"{unit} is "
                                   f"{'unknown' if u is None else u.active_state}: not started")
            return False
        return True

    async def _verify_following(self, unit: str, goals: list[Goal]) -> HostSnapshot:
        """``_verify`` the loading unit with its journal followed meanwhile."""
        follower = asyncio.ensure_future(follow_journal(self.control, unit, self.log_tail))
        try:
            return await self._verify(goals, self.opts.serve_timeout, loading=True)
        finally:
            follower.cancel()
            # The log is a help: a follower caught in a dead link's teardown must not hold
            # the verdict (a cut link once left the CLI waiting here for good).
            await asyncio.wait({follower}, timeout=FOLLOWER_STOP_S)
            if not follower.done():
                log.warning("the journal follower of %s did not stop within %.0f s: %s",
                            unit, FOLLOWER_STOP_S, task_stack(follower))

    async def _not_serving(self, unit: str, outcome: ServingOutcome, crashed: bool,
                           act: bool) -> None:
        """Why the unit does not serve, from its log; a crash loop is stopped."""
        report, opts = self.report, self.opts
        lines, found = await failure_from_log(self.control, unit, list(self.log_tail), crashed)
        if found is not None and list(self.log_tail) != lines:
            outcome.log_tail = tuple(lines)
        if found is not None:
            outcome.failure_line, outcome.failure_advice = found.line, found.advice
        if crashed and act and opts.stop_crash_loop:
            result = await self._systemctl("stop", unit)
            outcome.stopped = result.ok
        waiting = [st.detail or st.title for st in self.statuses if st.state is not GoalState.MET]
        why = "crashed" if crashed else f"not serving within {opts.serve_timeout:g} s"
        report.summary = f"{unit} NOT serving: {why}: " + "; ".join(waiting)
        if outcome.failure_line:
            report.summary += f"; log: {outcome.failure_line}"
        elif lines:  # no known failure: where the log stopped says where it is stuck
            report.summary += f"; last log line: {lines[-1].strip()[:300]}"
        if outcome.stopped:
            report.summary += f"; {unit} stopped (it was crash-looping)"

    def _expect_only(self, targets: list[Target]) -> None:
        """Wait for the memory of ``targets`` alone (the others were never signalled)."""
        expected = mem_sum(targets)
        before = self.plan.used_before_mib
        self.memory = MemoryAtMost(
            {g: max(0, (before.get(g) or 0) - expected[g])
             for g in self.memory.targets_mib if expected.get(g)},
            self.opts.settle, self.opts.slack_mib,
        )
        self.gone = ProcessesGone(targets)

    def _not_sent(self) -> list[Target]:
        """Planned targets whose signal was refused on the host (pid reused, denied)."""
        outcome = {pid: o for pid, _sig, o in self.report.signals}
        return [t for t in self.plan.targets if outcome.get(t.pid) in NOT_SENT]

    # --- the verdict -----------------------------------------------------------------

    def _conclude(self, snap: HostSnapshot, skipped: list[Target]) -> None:
        conclude(self.plan, self.report, snap, memory=self.memory, statuses=self.statuses,
                 kind=self.phase.kind, skipped=skipped)

