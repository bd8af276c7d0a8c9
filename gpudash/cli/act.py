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

from gpudash import audit
from gpudash.cli.contract import Exit
from gpudash.cli.terminal import Terminal
from gpudash.controller import learn_from, serving_request, watch
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
from gpudash.model import SourceKind, unit_name
from gpudash.source import HostSource, SourceError
from gpudash.untrusted import json_dumps

MAX_REPLANS = 3  # the host keeps changing under the prompt: stop asking


PlanMaker = Callable[[HostSource], Coroutine[Any, Any, ActionPlan]]


def options_of(args: argparse.Namespace) -> ExecOptions:
    timeout = args.timeout
    return ExecOptions(term_timeout=args.term_timeout, verify_timeout=min(timeout, 600.0),
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
            unit=unit, enable=args.enable, ready_url=url, footprint=learned))

    return run_action(args, source, term, make)


def run_swap(args: argparse.Namespace, source: HostSource, term: Terminal) -> int:
    """``gpudash swap``: reclaim one model with proof, start the next, prove it serves."""
    async def make(source: HostSource) -> ActionPlan:
        old, new = unit_name(args.from_unit), unit_name(args.to_unit)
        watch(source, new)
        snap = await source.control.sample()
        url, learned = await serving_request(source.control, snap.host, new,
                                             ready_url=args.ready_url,
                                             simulated=snap.source is SourceKind.DEMO)
        return SPECS[ActionKind.SWAP].plan(snap, Selection(
            unit=old, target=new, enable=args.enable, ready_url=url, footprint=learned))

    return run_action(args, source, term, make)


def run_action(
    args: argparse.Namespace, source: HostSource, term: Terminal, make: PlanMaker
) -> int:
    options = options_of(args)
    acting: list[bool] = []
    with asyncio.Runner() as runner:
        try:
            return _run(args, source, term, options, runner, acting, make)
        except KeyboardInterrupt:
            if acting:  # a second Ctrl+C while the first one's report was being written
                term.error("interrupted twice: see the audit file for what was sent")
                return Exit.INTERRUPTED
            term.error("interrupted before anything was sent: nothing done")
            return Exit.CANCELLED
        finally:
            with contextlib.suppress(Exception, KeyboardInterrupt):
                runner.run(source.close())


def _run(
    args: argparse.Namespace, source: HostSource, term: Terminal, options: ExecOptions,
    runner: asyncio.Runner, acting: list[bool], make: PlanMaker,
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
                term.error("not confirmed: nothing done")
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
    acting.append(True)
    return runner.run(_act(args, source, term, options, plan))


async def _replan(source: HostSource, plan: ActionPlan) -> tuple[ActionPlan, list[str]]:
    return replan(plan, await source.control.sample())


async def _act(
    args: argparse.Namespace, source: HostSource, term: Terminal, options: ExecOptions,
    plan: ActionPlan,
) -> int:
    trail = audit.AuditTrail(plan, options.term_timeout)
    try:
        await asyncio.to_thread(trail.intent)
    except OSError as exc:
        term.error(f"warning: audit file not written: {exc}")
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    assert task is not None
    with contextlib.suppress(NotImplementedError, RuntimeError):
        loop.add_signal_handler(signal.SIGTERM, task.cancel)  # `timeout`, systemd, CI
    line = term.progress()
    report = ActionReport(plan)
    try:
        report = await execute(plan, source.control, options, line, report=report)
        for attempt in range(1, REVERIFY.attempts + 1):
            if not report.unknown:
                break
            # The link dropped mid-action: nothing is re-sent; look again once it is back.
            line.close()
            term.error(f"{report.summary}; re-verifying ({attempt}/{REVERIFY.attempts})")
            await asyncio.sleep(REVERIFY.delay(attempt))
            report = await reverify(plan, source.control, options, line)
    except asyncio.CancelledError:
        if not report.interrupted:  # cancelled between the engine's steps
            report.interrupted = True
            sent = report.sent_lines()
            report.summary = ("interrupted before the outcome was verified; sent: "
                              + ("; ".join(sent) if sent else "nothing"))
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
        line.close()
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.remove_signal_handler(signal.SIGTERM)
    try:
        trail.outcome(report)  # synchronously: it must land even while being interrupted
    except OSError as exc:
        term.error(f"warning: audit file not written: {exc}")
    learn_from(report)
    if args.json:
        term.result_json(json_dumps(audit.outcome_record(report, trail.id), indent=2))
    else:
        term.result("\n".join(report.describe()))
    if report.interrupted:
        return Exit.INTERRUPTED if report.sent_anything else Exit.CANCELLED
    if report.unknown:
        return Exit.UNKNOWN
    return Exit.OK if report.confirmed else Exit.NOT_FREED
