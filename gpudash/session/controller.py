"""The action in flight and what came of it, for any front end: no Textual here.

The dashboard asks the controller to run a confirmed plan (in a worker of its own) and
draws what ``shown`` says; the controller audits (intent before anything is sent, outcome
after — also when the run is cancelled), runs or re-verifies through the engine, keeps the
reports, and decides when an outcome a lost link left unknown is re-verified (never
re-sent). Tests drive it without a screen.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from dataclasses import field, replace
from typing import Any, Protocol

from gpudash.domain.model import HostSnapshot
from gpudash.engine import (
    REVERIFY,
    ActionPlan,
    ActionReport,
    ExecOptions,
    Progress,
)
from gpudash.engine.plan import STOPPING
from gpudash.protocol.source import Capability, HostControl, ModelUnit, SourceError
from gpudash.record import record
from gpudash.session.audit import AuditTrail, failed, refusal
from gpudash.state import footprints

log = logging.getLogger("gpudash.session.controller")


@record(frozen=False)
class Shown:
    """What the result panel shows: the plan, its latest progress, then its end."""

    plan: ActionPlan
    progress: Progress | None = None
    report: ActionReport | None = None
    error: str | None = None  # the run failed without a report (a bug: it is logged)


def freshest_memory(snapshot: HostSnapshot | None, shown: Shown | None,
                    host: str) -> HostSnapshot | None:
    """``snapshot`` with each GPU's used memory from the running action's own sample
    where that one is newer: the GPU table and the Action panel say one figure per GPU
    (a loading model showed 24.2 GiB in the table, 28.0 in the panel)."""
    progress = shown.progress if shown is not None else None
    if (snapshot is None or shown is None or progress is None or progress.taken_at is None
            or shown.plan.host != host or progress.taken_at <= snapshot.taken_at):
        return snapshot
    used = progress.used_mib
    gpus = tuple(replace(g, memory_used_mib=used[g.index]) if used.get(g.index) is not None
                 else g for g in snapshot.gpus)
    return replace(snapshot, gpus=gpus)


@record(frozen=False)
class Running:
    plan: ActionPlan
    host: int
    report: ActionReport  # filled as the engine sends: what went out, if it is interrupted
    act: bool  # False: a re-verification, nothing is sent
    action_id: str | None = None  # its audit id; a re-verification keeps its action's


class Guard(Protocol):
    """Told when the engine acts: a front end that cancels it on an interrupt (the CLI)."""

    def start_acting(self) -> bool:
        """False: an interrupt came first (while the intent was written): do not act."""
        ...

    def stop_acting(self) -> None: ...


@record
class Outcome:
    """How a run ended: its report, or (a bug, or the audit refused it) why there is none."""

    report: ActionReport | None
    error: str | None = None
    refused: bool = False  # the intent record could not be written: nothing was sent


@record(frozen=False)
class ActionController:
    options: ExecOptions
    running: Running | None = None
    shown: Shown | None = None
    reports: list[ActionReport] = field(default_factory=list)
    interrupted: ActionReport | None = None  # stopped by the operator quitting
    unverified: dict[int, ActionPlan] = field(default_factory=dict)  # host -> unknown outcome
    unknown_runs: dict[int, tuple[str, ActionReport]] = field(default_factory=dict)
    attempts: dict[int, int] = field(default_factory=dict)  # host -> re-verifications so far
    audit_id: str | None = None  # the last run's action id in the audit file
    audited: bool = True  # ... and whether its intent record was written

    @property
    def busy(self) -> bool:
        return self.running is not None

    @property
    def last_report(self) -> ActionReport | None:
        return self.reports[-1] if self.reports else None

    def begin(self, plan: ActionPlan, host: int, *, act: bool) -> Running:
        """Mark ``plan`` as running on ``host``; ``run`` carries it out."""
        if self.running is not None:
            raise RuntimeError("an action is already running")
        self.running = Running(plan, host, ActionReport(plan), act)
        if not act and host in self.unknown_runs:
            # The same action looked at again: its audit id, and what its first run sent.
            self.running.action_id, earlier = self.unknown_runs[host]
            self.running.report.keep_sent(earlier)
        self.shown = Shown(plan)
        return self.running

    async def run(
        self,
        running: Running,
        control: HostControl,
        on_progress: Callable[[Progress], None],
        on_audit_error: Callable[[str], None],
        *,
        audit_required: bool = True,
        offers_no_audit: bool = False,
        guard: Guard | None = None,
        wait_s: float = 0.0,
    ) -> Outcome:
        """Audit, execute (or re-verify), audit.

        An action whose intent record cannot be written is refused, nothing sent (unless
        ``audit_required`` is False, ``--no-audit``: it acts and its report says so).
        ``offers_no_audit``: the refusal names ``--no-audit`` (the CLI has it).
        ``guard`` is told when the engine starts and stops acting (the CLI's interrupts
        cancel it only then); its start saying no (an interrupt came while the intent was
        written) sends nothing and reports the action interrupted. ``wait_s``: a
        re-verification's delay, in the guarded window.

        Cancellation (the operator quits or interrupts mid-action) is not an error: the
        live report is marked interrupted with what was sent, its outcome audited at once,
        and ``CancelledError`` goes on.
        """
        plan = running.plan
        trail = AuditTrail(plan, self.options.term_timeout, action_id=running.action_id)
        running.action_id = self.audit_id = trail.id
        if running.act:
            self.audited = True
            try:  # synchronously: a quit cannot come between the record and the act
                trail.intent()
            except OSError as exc:  # audit or nothing: not a command is sent
                if audit_required:
                    return Outcome(None, refusal(trail.path, str(exc), cli=offers_no_audit),
                                   refused=True)
                on_audit_error(f"acting without an audit record (--no-audit): {exc}")
                self.audited = False
        if guard is not None and not guard.start_acting():
            return Outcome(self._audit_interrupted(running, trail), None)
        from gpudash.engine.carry_out import execute, reverify  # the run: loaded to act

        engine = execute if running.act else reverify
        try:
            await asyncio.sleep(wait_s)
            report = await engine(plan, control, self.options, on_progress,
                                  report=running.report)
        except asyncio.CancelledError:
            self.interrupted = self._audit_interrupted(running, trail)
            raise
        except Exception as exc:  # the engine must never take the front end down
            log.exception("action %s failed", plan.title)
            report = failed(running.report, exc)  # its summary says what had been sent
            if running.act:  # what it had sent is audited all the same
                try:
                    await asyncio.to_thread(trail.outcome, report)
                except OSError as err:
                    on_audit_error(f"audit file not written: {err}")
            return Outcome(None, report.summary)
        finally:
            if guard is not None:
                guard.stop_acting()
        if not trail.audited:
            trail.unaudited(report)  # the report says so
        try:
            await asyncio.to_thread(trail.outcome, report)
        except OSError as exc:
            on_audit_error(f"audit file not written: {exc}")
        await asyncio.to_thread(learn_from, report)  # a unit that came up serving
        return Outcome(report, None)

    @staticmethod
    def _audit_interrupted(running: Running, trail: AuditTrail) -> ActionReport:
        """The live report as interrupted (before anything was sent, or between the engine's
        steps, it is not marked yet), its outcome audited synchronously: the front end may
        be going away."""
        report = running.report
        if not report.interrupted:
            report.interrupted = True
            sent = report.sent_lines()
            report.summary = ("interrupted before the outcome was verified; sent: "
                              + ("; ".join(sent) if sent else "nothing"))
        if not trail.audited:
            trail.unaudited(report)
        try:
            trail.outcome(report)
        except OSError:
            log.exception("audit outcome of an interrupted action not written")
        return report

    async def carry_out(
        self,
        plan: ActionPlan,
        control: HostControl,
        on_progress: Callable[[Progress], None],
        on_notice: Callable[[str], None],
        *,
        audit_required: bool = True,
        guard: Guard | None = None,
        host: int = 0,
    ) -> Outcome:
        """Run ``plan`` to its end where nobody waits for samples to flow again (the CLI):
        an outcome a lost link left unknown is re-verified here, after ``REVERIFY``'s
        delays, by the same rule as the dashboard's (never re-sent, the same audit id)."""
        running = self.begin(plan, host, act=True)
        result = await self._run_once(running, control, on_progress, on_notice,
                                      audit_required=audit_required, offers_no_audit=True,
                                      guard=guard)
        while result.report is not None and (again := self.take_reverify(host)) is not None:
            attempt = self.attempts[host]
            on_notice(f"{result.report.summary}; re-verifying ({attempt}/{REVERIFY.attempts})")
            result = await self._run_once(self.begin(again, host, act=False), control,
                                          on_progress, on_notice, guard=guard,
                                          wait_s=REVERIFY.delay(attempt))
        return result

    async def _run_once(self, running: Running, control: HostControl,
                        on_progress: Callable[[Progress], None],
                        on_notice: Callable[[str], None], **how: Any) -> Outcome:
        try:
            result = await self.run(running, control, on_progress,
                                    lambda why: on_notice(f"warning: {why}"), **how)
        except asyncio.CancelledError:
            self.finished(running.host, running.report, None)
            raise
        self.finished(running.host, result.report, result.error)
        return result

    def progressed(self, progress: Progress) -> None:
        if self.running is not None and self.shown is not None:
            self.shown.progress = progress

    def finished(self, host: int, report: ActionReport | None, error: str | None) -> None:
        """The run ended: keep its report, and decide whether it is re-verified later."""
        running, self.running = self.running, None
        plan = running.plan if running is not None else None
        if plan is None:
            return
        progress = self.shown.progress if self.shown is not None else None
        self.shown = Shown(plan, progress, report, error)
        if report is None:
            return
        self.reports.append(report)
        if report.unknown and self.attempts.get(host, 0) < REVERIFY.attempts:
            self.unverified[host] = plan  # re-verified when the host's samples flow again
            if running is not None and running.action_id is not None:
                self.unknown_runs[host] = (running.action_id, report)
        else:
            self.unknown_runs.pop(host, None)  # known now, or given up: left to the log
            if not report.unknown:
                self.attempts[host] = 0

    def take_reverify(self, host: int) -> ActionPlan | None:
        """The plan to re-verify now that ``host`` sends samples again (nothing re-sent)."""
        if self.running is not None or host not in self.unverified:
            return None
        self.attempts[host] = self.attempts.get(host, 0) + 1
        return self.unverified.pop(host)


def outcome_line(report: ActionReport) -> str:
    """A report in one line, for the action log."""
    outcome = report.summary
    if report.escalated:
        outcome += "; TERM ignored, escalated to SIGKILL: " + ", ".join(map(str, report.escalated))
    if report.leftovers:
        outcome += "; still held: " + "; ".join(
            f"{lo.where} by {'?' if lo.pid is None else lo.pid} ({lo.reason})"
            for lo in report.leftovers
        )
    return outcome


# --- starting a model: what proves it serves, learned where it served --------------------


async def serving_request(
    control: HostControl, host: str, unit: str, *, ready_url: str | None = None,
    simulated: bool = False, models: Sequence[str] = (), read: ModelUnit | None = None,
) -> tuple[str | None, dict[int, int] | None]:
    """(ready URL, learned footprint) for starting ``unit`` on ``host``.

    The URL is ``--ready-url`` when given, else the unit's port as the host reports it
    (``http://127.0.0.1:PORT/health``); the footprint is what it took when it last
    served here (None: never seen serving). ``models``: the settings' unit globs that are
    model servers, as the front end read them once. ``read``: the unit as the host
    already said it (a swap's picker read them all): the host is not asked again.
    """
    learned = footprints.lookup(host, unit, footprints.store_path(simulated=simulated))
    url = ready_url
    if url is None and read is None and Capability.MODEL_UNITS in control.capabilities:
        try:
            read = next((m for m in await control.model_units(models) if m.name == unit),
                        None)
        except (SourceError, NotImplementedError) as exc:
            log.info("model units of %s not read: %s", host, exc)
    if url is None and read is not None and read.port is not None:
        url = f"http://127.0.0.1:{read.port}/health"
    return url, (dict(learned.mib_per_gpu) if learned else None)


def term_ignored(report: ActionReport) -> dict[str, int]:
    """Service -> how many of its processes ignored this action's SIGTERM (escalated to
    SIGKILL): the unit lint says what a stop of that unit does to them."""
    units = {t.pid: t.unit for ph in report.plan.run_phases for t in
             (s.target for s in ph.signals)}
    out: dict[str, int] = {}
    for pid in report.escalated:
        unit = units.get(pid)
        if unit is not None and unit.endswith(".service"):
            out[unit] = out.get(unit, 0) + 1
    return out


def learn_from(report: ActionReport) -> footprints.Footprint | None:
    """Keep what a unit took when it came up serving: the next swap checks the fit; how
    long a unit's stop took until its memory was back: the unit lint checks
    ``TimeoutStopSec`` against it; which of its processes ignored SIGTERM. A container
    stopped with proof leaves what it held: its next start checks the fit."""
    stopped = report.plan.unit_before
    if report.stop_s is not None and stopped is not None:
        try:
            footprints.learn_stop(report.plan.host, stopped.name, report.stop_s,
                                  footprints.store_path(simulated=report.plan.simulated))
        except (OSError, ValueError):
            log.exception("stop time of %s not saved", stopped.name)
    for unit, count in term_ignored(report).items():
        try:
            footprints.learn_term_ignored(report.plan.host, unit, count,
                                          footprints.store_path(simulated=report.plan.simulated))
        except (OSError, ValueError):
            log.exception("SIGTERM ignored by %s not saved", unit)
    c = report.plan.container_before
    if c is not None and report.confirmed and report.plan.kind in STOPPING and (
            report.plan.expected_free_mib):
        try:
            return footprints.learn(report.plan.host, f"{c.runtime}:{c.label}",
                                    report.plan.expected_free_mib, None,
                                    footprints.store_path(simulated=report.plan.simulated))
        except (OSError, ValueError):
            log.exception("footprint of %s not saved", c.label)
            return None
    sv = report.serving
    if sv is None or not sv.serving or not sv.mib_per_gpu:
        return None
    path = footprints.store_path(simulated=report.plan.simulated)
    try:
        return footprints.learn(report.plan.host, sv.unit, sv.mib_per_gpu, sv.ready_s, path)
    except (OSError, ValueError):
        log.exception("footprint of %s not saved", sv.unit)
        return None

