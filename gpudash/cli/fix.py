"""``gpudash fix HOST --unit U [--dry-run] [--yes] [--json] [--revert]``.

The cause of the seed's trap is the unit's configuration: ``fix`` writes one drop-in of
gpudash's own (``/etc/systemd/system/U.d/50-gpudash.conf``) with the settings that remove
every finding of the unit lint, shown first as a diff of ``systemctl cat U``; reloads
systemd; and proves on a fresh ``systemctl show`` that the unit reports them. ``--revert``
removes exactly that file and reloads. Planned, confirmed, audited as every action.
"""

from __future__ import annotations

import argparse
from typing import Any

from gpudash.cli import act
from gpudash.cli.closing import CommandLoop, close_all
from gpudash.cli.contract import Exit
from gpudash.cli.terminal import Terminal
from gpudash.domain.model import unit_name
from gpudash.domain.untrusted import json_dumps
from gpudash.engine import ActionKind, ActionPlan, Selection
from gpudash.protocol.source import HostSource
from gpudash.session.lifecycle import Ended, Request


def run_fix(args: argparse.Namespace, source: HostSource, term: Terminal) -> int:
    request = Request(ActionKind.FIX, Selection(unit=unit_name(args.unit), revert=args.revert))
    if not args.dry_run:
        return act.run_action(args, source, term, request)
    with CommandLoop() as runner:
        plan = act.prepared(args, source, request, runner)
        runner.run(close_all([source]))  # it logs what fails
    if isinstance(plan, Ended):
        term.error(plan.why)
        return act.EXIT_OF[plan.kind]
    lines = plan.describe(args.term_timeout)
    term.say(lines)
    term.say("--dry-run: nothing sent")
    if args.json:
        term.result_json(json_dumps(dry_run_document(plan, lines), indent=2))
    return Exit.OK


def dry_run_document(plan: ActionPlan, lines: list[str]) -> dict[str, Any]:
    return {"dry_run": True, "host": plan.host, "action": plan.kind.value,
            "subject": plan.subject, "revert": plan.selection.revert, "plan": lines,
            "diff": list(plan.preview),
            "settings": [f"[{s}] {k}={v}" for s, k, v in plan.settings]}
