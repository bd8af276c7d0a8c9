"""``gpudash reclaim``, ``start``, ``swap``: plan, ask, act, follow, report — and never
lose an action.

The loop runs in an ``asyncio.Runner`` so the connection survives between its steps while
the prompt runs outside it: Ctrl+C at ``Proceed?`` ends at once with nothing done. Once
something may have been sent, Ctrl+C or SIGTERM cancel the action; the engine keeps what
was sent in the report, which is audited and printed like any other (exit 6).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
from collections.abc import Callable, Coroutine
from typing import Any

from gpudash.cli.contract import Exit
from gpudash.cli.terminal import Terminal
from gpudash.domain.model import SourceKind, unit_name
from gpudash.domain.untrusted import json_dumps
from gpudash.engine import (
    REVERIFY,
    SPECS,
    ActionKind,
    ActionPlan,
    ActionReport,
    ExecOptions,
    PlanError,
    Selection,
    execute,
    plan_action,
    replan,
    reverify,
)
from gpudash.protocol.source import HostSource, SourceError
from gpudash.session import audit
from gpudash.session.controller import learn_from, serving_request, watch

MAX_REPLANS = 3  # the host keeps changing under the prompt: stop asking


PlanMaker = Callable[[HostSource], Coroutine[Any, Any, ActionPlan]]


def options_of(args: argparse.Namespace) -> ExecOptions:
    timeout = args.timeout
    # reclaim: --timeout is how long the memory may take to come back. start/swap: it is
    # the loading's (30 min by default); a swap's reclaim phase keeps at most 10 min.
    starts = hasattr(args, "enable")
    return ExecOptions(term_timeout=args.term_timeout,
                       verify_timeout=min(timeout, 600.0) if starts else timeout,
                       poll=min(0.5, max(0.05, args.interval / 2)), serve_timeout=timeout,
                       stop_crash_loop=not getattr(args, "leave_crashing", False))


def run_reclaim(args: argparse.Namespace, source: HostSource, term: Terminal) -> int:
    async def make(source: HostSource) -> ActionPlan:
        return plan_action(await source.control.sample(), ActionKind.RECLAIM, unit=args.unit,
                           container=getattr(args, "container", None))

    return run_action(args, source, term, make)


def run_start(args: argparse.Namespace, source: HostSource, term: Terminal) -> int:
    """``gpudash start``: start a unit (and enable it) and prove it serves."""
    async def make(source: HostSource) -> ActionPlan:
        unit = unit_name(args.unit)
        watch(source, unit)
        snap = await source.control.sample()
        url, learned = await serving_request(source.control, snap.host, unit,
                                             ready_url=args.ready_url,
                                             simulated=snap.source is SourceKind.DEMO)
        return SPECS[ActionKind.START].plan(snap, Selection(
            unit=unit, enable=args.enable, ready_url=url, footprint=learned,
            force=args.force))

    return run_action(args, source, term, make)


def run_swap(args: argparse.Namespace, source: HostSource, term: Terminal) -> int:
    """``gpudash swap``: reclaim one model with proof, start the next, prove it serves."""
    async def make(source: HostSource) -> ActionPlan:
        old = unit_name(args.from_unit) if args.from_unit is not None else None
        new = unit_name(args.to_unit)
        watch(source, new)
        snap = await source.control.sample()
        url, learned = await serving_request(source.control, snap.host, new,
                                             ready_url=args.ready_url,
                                             simulated=snap.source is SourceKind.DEMO)
        return SPECS[ActionKind.SWAP].plan(snap, Selection(
            unit=old, container=args.from_container, target=new, enable=args.enable,
            ready_url=url, footprint=learned, force=args.force,
            rollback=not args.no_rollback))

    return run_action(args, source, term, make)


def run_action(
    args: argparse.Namespace, source: HostSource, term: Terminal, make: PlanMaker,
    runner: asyncio.Runner | None = None,
) -> int:
    """Plan, ask, act, report; in ``runner`` (the one the source was used in so far: its
    connection lives in that loop), else in a runner of its own."""
    options = options_of(args)
    finished: list[int] = []  # the exit code, once the report is printed and audited
    with contextlib.ExitStack() as stack:
        if runner is None:
            runner = stack.enter_context(asyncio.Runner())
        try:
            return _run(args, source, term, options, runner, finished, make)
        except KeyboardInterrupt:
            if finished:  # after the last line was printed: the verdict stands
                return finished[0]
            # _act handles every interrupt from its intent record to its last line, so
            # this one came before: at the prompt, or while planning.
            term.error("interrupted before anything was sent: nothing done")
            return Exit.CANCELLED
        finally:
            with contextlib.suppress(Exception, KeyboardInterrupt):
                runner.run(source.close())


def _run(
    args: argparse.Namespace, source: HostSource, term: Terminal, options: ExecOptions,
    runner: asyncio.Runner, finished: list[int], make: PlanMaker,
) -> int:
    try:
        plan = runner.run(make(source))
    except PlanError as exc:
        term.error(str(exc))
        return Exit.USAGE
    except SourceError as exc:
        term.error(f"{source.name}: {exc}")
        return Exit.CONNECT
    if args.yes:
        term.say(plan.describe(options.term_timeout))
    else:
        for asked in range(1, MAX_REPLANS + 1):
            term.say(plan.describe(options.term_timeout))
            answer = term.confirm()
            if answer is None:
                term.error("not a terminal and no --yes: nothing done")
                return Exit.CANCELLED
            if not answer:
                term.error("declined: nothing done")
                return Exit.CANCELLED
            try:  # the answer may come minutes later: act on the host as it is now
                plan, changes = runner.run(_replan(source, plan))
            except PlanError as exc:
                term.error(f"the host changed while you read the plan: {exc}; nothing done")
                return Exit.USAGE
            except SourceError as exc:
                term.error(f"{source.name}: {exc}; nothing done")
                return Exit.CONNECT
            if not changes:
                break
            term.say(["", "The host changed while you read the plan:"]
                     + [f"  * {c}" for c in changes])
            if asked == MAX_REPLANS:
                term.error("the plan keeps changing; nothing done")
                return Exit.CANCELLED
    return runner.run(_act(args, source, term, options, plan, finished))


async def _replan(source: HostSource, plan: ActionPlan) -> tuple[ActionPlan, list[str]]:
    return replan(plan, await source.control.sample())


async def _act(
    args: argparse.Namespace, source: HostSource, term: Terminal, options: ExecOptions,
    plan: ActionPlan, finished: list[int],
) -> int:
    trail = audit.AuditTrail(plan, options.term_timeout)
    report = ActionReport(plan)
    line = term.progress()
    with _Interrupts() as interrupts:
        # From here to the last line printed an interrupt never ends gpudash mid-write: it
        # cancels the engine while it acts, and before or after that it only sets a flag.
        try:
            trail.intent()  # synchronously: no interrupt between the record and the act
        except OSError as exc:
            if not args.no_audit:  # audit or nothing
                term.error(audit.refusal(trail.path, str(exc)))
                finished.append(Exit.NOT_AUDITED)
                return Exit.NOT_AUDITED
            term.error(f"warning: acting without an audit record (--no-audit): {exc}")
        stopped = False
        try:
            if not interrupts.start_acting():
                stopped = True  # interrupted while the intent was written: nothing sent
            else:
                report = await execute(plan, source.control, options, line, report=report)
                for attempt in range(1, REVERIFY.attempts + 1):
                    if not report.unknown:
                        break
                    # The link dropped mid-action: nothing is re-sent; look again once back.
                    line.close()
                    term.error(f"{report.summary}; re-verifying ({attempt}/{REVERIFY.attempts})")
                    await asyncio.sleep(REVERIFY.delay(attempt))
                    again = await reverify(plan, source.control, options, line)
                    again.keep_sent(report)  # the outcome record keeps what went out
                    report = again
        except asyncio.CancelledError:
            stopped = True  # our own interrupt: the report below says what was sent
        except Exception as exc:  # a bug, after commands may have reached the host: audit them
            audit.failed(report, exc)
            line.close()
            term.error(report.summary)
            try:
                trail.outcome(report)
            except OSError as err:
                term.error(f"warning: audit file not written: {err}")
            raise
        finally:
            interrupts.stop_acting()
            line.close()
        if stopped and not report.interrupted:
            # before anything was sent, or between the engine's steps
            report.interrupted = True
            sent = report.sent_lines()
            report.summary = ("interrupted before the outcome was verified; sent: "
                              + ("; ".join(sent) if sent else "nothing"))
        if not trail.audited:
            trail.unaudited(report)  # the report says so (and the outcome, if it lands)
        finished.append(_finish(args, term, trail, report))
        return finished[0]


class _Interrupts:
    """Ctrl+C, SIGTERM (``timeout``, systemd, CI) and SIGHUP (the operator's SSH session
    dropped) while an action runs.

    While acting, the first one cancels the action (the engine then reports what was
    sent); before acting it means "do not start", after acting it changes nothing: the
    verdict is known and is printed and audited whole. Python-level handlers run between
    two bytecodes, so they only set flags and schedule the cancellation on the loop.
    """

    SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

    def __init__(self) -> None:
        self.loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        assert task is not None
        self.task = task
        self.acting = False
        self.arrived = False  # an interrupt came (at any time)
        self.cancelled = False  # ... while acting, and the action was told to stop
        self.previous: dict[int, Any] = {}

    def __enter__(self) -> _Interrupts:
        with contextlib.suppress(ValueError):  # not the main thread: leave them as they are
            for sig in self.SIGNALS:
                self.previous[sig] = signal.signal(sig, self._on_signal)
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)

    def _on_signal(self, signum: int, frame: object) -> None:
        if self.acting and not self.cancelled:  # a second one must not cancel the report
            self.cancelled = True
            self.loop.call_soon_threadsafe(self.task.cancel)
        self.arrived = True

    def start_acting(self) -> bool:
        """False when an interrupt came first (while the intent was written): do not act."""
        self.acting = True
        return not self.arrived

    def stop_acting(self) -> None:
        self.acting = False


def _finish(
    args: argparse.Namespace, term: Terminal, trail: audit.AuditTrail, report: ActionReport,
) -> int:
    try:
        trail.outcome(report)  # synchronously: it must land even while being interrupted
    except OSError as exc:
        term.error(f"warning: audit file not written: {exc}")
    learn_from(report)
    if args.json:
        term.result_json(json_dumps(audit.outcome_record(report, trail.id,
                                                         audited=trail.audited), indent=2))
    else:
        term.result("\n".join(report.describe()))
    return Exit(report.exit_status)
