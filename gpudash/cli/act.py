"""``gpudash reclaim``, ``start``, ``swap``: plan, ask, act, follow, report — and never
lose an action.

The loop runs in a ``CommandLoop`` (an ``asyncio.Runner``) so the connection survives
between its steps while the prompt runs outside it: Ctrl+C at ``Proceed?`` ends at once
with nothing done. Once something may have been sent, Ctrl+C or SIGTERM cancel the action;
the engine keeps what was sent in the report, which is audited and printed like any other
(exit 6). Once the verdict is printed, nothing left running keeps gpudash from exiting.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
from collections.abc import Iterator, Sequence
from dataclasses import replace
from typing import Any

from gpudash.cli import dryrun
from gpudash.cli.closing import CommandLoop, close_all
from gpudash.cli.contract import Exit
from gpudash.cli.terminal import Terminal
from gpudash.domain.model import unit_name
from gpudash.domain.owners import cli_selected
from gpudash.domain.untrusted import json_dumps
from gpudash.engine import (
    ActionKind,
    ActionPlan,
    ActionReport,
    ExecOptions,
    Selection,
    container_ref,
    unit_of,
    unit_ref,
)
from gpudash.protocol.source import HostSource
from gpudash.session import audit
from gpudash.session.controller import ActionController, Outcome
from gpudash.session.lifecycle import (
    Candidate,
    Ended,
    Ending,
    Picked,
    Request,
    confirm,
    prepare,
)
from gpudash.state import logfile

# What ends an action before anything is sent, as an exit status (gpudash.cli.contract).
EXIT_OF = {Ending.PLAN: Exit.USAGE, Ending.UNREACHABLE: Exit.CONNECT,
           Ending.NOBODY: Exit.CANCELLED, Ending.DECLINED: Exit.CANCELLED,
           Ending.NOT_PICKED: Exit.CANCELLED, Ending.KEEPS_CHANGING: Exit.CANCELLED,
           Ending.BUSY: Exit.CANCELLED}


def options_of(args: argparse.Namespace) -> ExecOptions:
    timeout = args.timeout
    # reclaim: --timeout is how long the memory may take to come back. start/swap: it is
    # the loading's (30 min by default); a swap's reclaim phase keeps at most 10 min.
    starts = hasattr(args, "enable")
    return ExecOptions(term_timeout=getattr(args, "term_timeout", 10.0),
                       verify_timeout=min(timeout, 600.0) if starts else timeout,
                       poll=min(0.5, max(0.05, args.interval / 2)), serve_timeout=timeout,
                       stop_crash_loop=not getattr(args, "leave_crashing", False))


def run_reclaim(args: argparse.Namespace, source: HostSource, term: Terminal) -> int:
    return run_action(args, source, term, Request(ActionKind.RECLAIM, selected(args, "reclaim")))


def selected(args: argparse.Namespace, command: str, **fields: Any) -> Selection:
    """What ``command``'s owner flags name (each kind's own: ``cli_selectors``), with
    ``fields`` beside."""
    selection = Selection(**fields)
    owner = cli_selected(command, vars(args))
    return selection if owner is None else replace(selection, owner=owner)


def run_reset(args: argparse.Namespace, source: HostSource, term: Terminal) -> int:
    """``gpudash reset``: nvidia-smi --gpu-reset of a GPU nothing holds, proven."""
    return run_action(args, source, term, Request(ActionKind.GPU_RESET, Selection(gpu=args.gpu)))


def run_drain(args: argparse.Namespace, source: HostSource, term: Terminal) -> int:
    """``gpudash drain``: the host's Slurm node drained with a reason, proven by scontrol."""
    return run_action(args, source, term, Request(ActionKind.DRAIN, Selection(),
                                                  reason=args.reason))


def run_resume(args: argparse.Namespace, source: HostSource, term: Terminal) -> int:
    """``gpudash resume``: the host's drained Slurm node takes jobs again, proven."""
    return run_action(args, source, term, Request(ActionKind.RESUME, Selection()))


def run_start(args: argparse.Namespace, source: HostSource, term: Terminal) -> int:
    """``gpudash start``: start a unit (and enable it) and prove it serves; or start a
    stopped container and prove it runs."""
    selection = selected(args, "start", force=args.force)
    if (unit := unit_of(selection)) is not None:
        selection = replace(selection, owner=unit_ref(unit_name(unit)))
    return run_action(args, source, term, Request(
        ActionKind.START, selection, enable=args.enable, ready_url=args.ready_url))


def run_swap(args: argparse.Namespace, source: HostSource, term: Terminal) -> int:
    """``gpudash swap``: reclaim one model with proof, start the next, prove it serves."""
    old = (unit_ref(unit_name(args.from_unit)) if args.from_unit is not None else
           container_ref(args.from_container) if args.from_container is not None else None)
    return run_action(args, source, term, Request(
        ActionKind.SWAP, Selection(owner=old,
                                   target=unit_name(args.to_unit), force=args.force,
                                   rollback=not args.no_rollback),
        enable=args.enable, ready_url=args.ready_url))


def run_action(
    args: argparse.Namespace, source: HostSource, term: Terminal, request: Request,
    runner: CommandLoop | None = None,
) -> int:
    """Plan, ask, act, report (``gpudash.session.lifecycle``); in ``runner`` (the one the
    source was used in so far: its connection lives in that loop), else in its own."""
    options = options_of(args)
    finished: list[int] = []  # the exit code, once the report is printed and audited
    with contextlib.ExitStack() as stack:
        if runner is None:
            runner = stack.enter_context(CommandLoop())
        try:
            if getattr(args, "dry_run", False):
                return _dry_run(args, source, term, runner, request)
            return _run(args, source, term, options, runner, finished, request)
        except KeyboardInterrupt:
            if finished:  # after the last line was printed: the verdict stands
                return finished[0]
            # _act handles every interrupt from its intent record to its last line, so
            # this one came before: at the prompt, or while planning.
            term.error("interrupted before anything was sent: nothing done")
            return Exit.CANCELLED
        finally:
            with contextlib.suppress(Exception, KeyboardInterrupt):
                runner.run(close_all([source]))


class Prompt:
    """The CLI's ports of the action session: the plan on stderr, the question on the
    terminal (``--yes``: the plan only). A CLI swap names its target: nothing to pick."""

    def __init__(self, term: Terminal, *, asks: bool) -> None:
        self.term = term
        self.asks = asks

    async def confirm(self, plan: ActionPlan, lines: list[str]) -> bool | None:
        self.term.say(lines)
        if not self.asks:
            return True
        with _ctrl_c_at_once():
            return self.term.confirm()

    async def pick(self, source: str, candidates: Sequence[Candidate],
                   enable: bool) -> Picked | None:
        return None


@contextlib.contextmanager
def _ctrl_c_at_once() -> Iterator[None]:
    """Ctrl+C at the prompt ends gpudash at once, nothing done. (In the event loop,
    asyncio's own handler would only cancel the task, and the read would go on.)"""
    try:
        previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    except ValueError:  # not the main thread: leave it as it is
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def prepared(args: argparse.Namespace, source: HostSource, request: Request,
             runner: CommandLoop) -> ActionPlan | Ended:
    """The plan of ``request`` on ``source`` as it is now (a dry run shows it), in
    ``runner``."""
    return runner.run(prepare(request, source.control, source.name,
                              Prompt(Terminal(), asks=False), args.settings.models))


def _dry_run(args: argparse.Namespace, source: HostSource, term: Terminal,
             runner: CommandLoop, request: Request) -> int:
    """The plan as it would be confirmed, on stdout; nothing sent, nothing audited."""
    plan = prepared(args, source, request, runner)
    if isinstance(plan, Ended):
        term.error(plan.said())
        return EXIT_OF[plan.kind]
    doc = dryrun.show(args, plan, term)
    if args.json:
        term.result_json(json_dumps(doc, indent=2))
    return Exit.OK


def _run(
    args: argparse.Namespace, source: HostSource, term: Terminal, options: ExecOptions,
    runner: CommandLoop, finished: list[int], request: Request,
) -> int:
    ports = Prompt(term, asks=not args.yes)
    control = source.control
    plan = runner.run(prepare(request, control, source.name, ports, args.settings.models))
    if not isinstance(plan, Ended):
        plan = runner.run(confirm(plan, control, ports, options.term_timeout))
    if isinstance(plan, Ended):
        term.error(plan.said())
        return EXIT_OF[plan.kind]
    return runner.run(_act(args, source, term, options, plan, finished))


async def _act(
    args: argparse.Namespace, source: HostSource, term: Terminal, options: ExecOptions,
    plan: ActionPlan, finished: list[int],
) -> int:
    controller = ActionController(options)
    line = term.progress()

    def notice(text: str) -> None:
        line.close()
        term.error(text)

    with _Interrupts() as interrupts:
        # From here to the last line printed an interrupt never ends gpudash mid-write: it
        # cancels the engine while it acts, and before or after that it only sets a flag.
        try:
            outcome = await controller.carry_out(
                plan, source.control, line, notice, audit_required=not args.no_audit,
                guard=interrupts)
        except asyncio.CancelledError:  # our own interrupt: the controller audited it
            outcome = Outcome(controller.interrupted or ActionReport(plan))
        finally:
            interrupts.stop_acting()
            line.close()
        if outcome.refused:
            term.error(outcome.error or "refused: nothing was sent")
            finished.append(Exit.NOT_AUDITED)
        elif outcome.report is None:  # a bug: what was sent is audited, the traceback logged
            term.error(f"internal error: the action {outcome.error} (the traceback is in "
                       f"{logfile.log_path()})")
            finished.append(Exit.INTERNAL)
        else:
            finished.append(_finish(args, term, outcome.report, controller))
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


def _finish(args: argparse.Namespace, term: Terminal, report: ActionReport,
            controller: ActionController) -> int:
    if args.json:
        term.result_json(json_dumps(audit.outcome_record(
            report, controller.audit_id, audited=controller.audited), indent=2))
    else:
        term.result(report.describe())
    return Exit(report.exit_status)
