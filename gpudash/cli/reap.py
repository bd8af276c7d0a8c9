"""``gpudash reap HOST... [--unit U | --container C | --job J] [--dry-run] [--yes] [--json]``.

Every ORPHAN of each host (of the owner, if one is named): planned, confirmed, signalled
with the PID guard, its memory proven back, reported and audited as ``reclaim`` is; what
a cron job, a Slurm epilog (``--slurm-epilog``: ``gpudash.cli.epilog``) or an alert's
remediation runs. Several hosts are reaped one
after the other, each with its own plan and verdict. A host with nothing to reap is fine
(exit 0): the state the caller wants already holds.
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Sequence
from typing import Any

from gpudash.cli import act, dryrun, epilog
from gpudash.cli.closing import CommandLoop, close_all
from gpudash.cli.contract import Exit, worst
from gpudash.cli.terminal import Terminal
from gpudash.domain.owners import cli_selected
from gpudash.domain.untrusted import json_dumps
from gpudash.engine import ActionKind, ActionPlan
from gpudash.protocol.source import HostSource
from gpudash.session.lifecycle import Ended, Ending, Request

NOTHING = "no orphaned processes"  # the planner's words when there is nothing to reap


class _Collected(Terminal):
    """The real terminal, except that a host's JSON result is kept for one document."""

    def __init__(self, term: Terminal) -> None:
        super().__init__(term.stdout, term.stderr, term.stdin)
        self.documents: list[Any] = []

    def result_json(self, document: str) -> None:
        self.documents.append(json.loads(document))


def run_reap(args: argparse.Namespace, sources: Sequence[HostSource], term: Terminal) -> int:
    args.owner = cli_selected("reap", vars(args))  # a unit's, a container's, a job's
    args.gpus = None
    if getattr(args, "slurm_epilog", False):
        try:
            gpus = epilog.prepare(args, os.environ)
        except epilog.EpilogError as exc:
            term.error(str(exc))
            return Exit.USAGE
        if gpus is None:
            term.say(f"Slurm job {args.owner.key}: no GPUs on this node: "
                     "nothing to reap")
            return Exit.OK
        code = _reap(args, sources, term)
        return epilog.verdict(code, args.owner.key, term, os.environ)
    return _reap(args, sources, term)


def _reap(args: argparse.Namespace, sources: Sequence[HostSource], term: Terminal) -> int:
    out = _Collected(term) if args.json else term
    results: list[dict[str, Any]] = []
    for source in sources:
        if len(sources) > 1 and not args.json:
            term.say(f"== {source.name}")
        code, document, error = _one(args, source, out)
        results.append({"host": source.name, "exit": code, "report": document,
                        "error": error})
    code = worst(r["exit"] for r in results)
    if args.json:
        term.result_json(json_dumps({"command": "reap", "exit": code, "hosts": results},
                                    indent=2))
    return code


def _one(args: argparse.Namespace, source: HostSource, out: Terminal
         ) -> tuple[int, Any, str | None]:
    """Reap one host: (exit code, its JSON document or None, why nothing was done). One
    event loop for the whole host: its connection lives in it."""
    request = Request(ActionKind.REAP, act.selected(
        args, "reap", owner=args.owner, gpus=args.gpus,
        strays=not getattr(args, "leave_strays", False)))
    before = len(out.documents) if isinstance(out, _Collected) else 0
    with CommandLoop() as runner:
        plan = act.prepared(args, source, request, runner)
        if isinstance(plan, Ended) or args.dry_run:
            runner.run(close_all([source]))  # it logs what fails
        if isinstance(plan, Ended):
            if plan.kind is Ending.UNREACHABLE:
                out.error(plan.why)
                return Exit.CONNECT, None, plan.why
            if NOTHING in plan.why:
                out.say(f"{source.name}: nothing to reap: {plan.why}")
                return Exit.OK, None, plan.why
            out.error(f"{source.name}: {plan.why}")
            return Exit.USAGE, None, plan.why
        if args.dry_run:
            return Exit.OK, _dry_run(args, plan, out), None
        # planned again from a fresh sample, as every action is, before it is confirmed
        code = act.run_action(args, source, out, request, runner=runner)
    document = out.documents.pop() if isinstance(out, _Collected) and len(
        out.documents) > before else None
    return code, document, None


def _dry_run(args: argparse.Namespace, plan: ActionPlan, out: Terminal) -> Any:
    """The plan, shown on stdout (with --json, returned for the one document); nothing is
    sent."""
    doc = dryrun.show(args, plan, out)
    return doc if args.json else None
