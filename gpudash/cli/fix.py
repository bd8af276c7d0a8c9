"""``gpudash fix HOST --unit U [--dry-run] [--yes] [--json] [--revert]``.

The cause of the seed's trap is the unit's configuration: ``fix`` writes one drop-in of
gpudash's own (``/etc/systemd/system/U.d/50-gpudash.conf``) with the settings that remove
every finding of the unit lint, shown first as a diff of ``systemctl cat U``; reloads
systemd; and proves on a fresh ``systemctl show`` that the unit reports them. ``--revert``
removes exactly that file and reloads. Planned, confirmed, audited as every action.
"""

from __future__ import annotations

import argparse

from gpudash.cli import act, dryrun
from gpudash.cli.closing import CommandLoop, close_all
from gpudash.cli.contract import Exit
from gpudash.cli.terminal import Terminal
from gpudash.domain.model import unit_name
from gpudash.domain.untrusted import json_dumps
from gpudash.engine import ActionKind, Selection, unit_ref
from gpudash.protocol.source import HostSource
from gpudash.session.lifecycle import Ended, Request


def run_fix(args: argparse.Namespace, source: HostSource, term: Terminal) -> int:
    request = Request(ActionKind.FIX, Selection(owner=unit_ref(unit_name(args.unit)),
                                                revert=args.revert))
    if not args.dry_run:
        return act.run_action(args, source, term, request)
    with CommandLoop() as runner:
        plan = act.prepared(args, source, request, runner)
        runner.run(close_all([source]))  # it logs what fails
    if isinstance(plan, Ended):
        term.error(plan.said())
        return act.EXIT_OF[plan.kind]
    doc = dryrun.show(args, plan, term)
    if args.json:
        term.result_json(json_dumps(doc, indent=2))
    return Exit.OK
