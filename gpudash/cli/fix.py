"""``gpudash fix HOST --unit U [--dry-run] [--yes] [--json] [--revert]``.

The cause of the seed's trap is the unit's configuration: ``fix`` writes one drop-in of
gpudash's own (``/etc/systemd/system/U.d/50-gpudash.conf``) with the settings that remove
every finding of the unit lint, shown first as a diff of ``systemctl cat U``; reloads
systemd; and proves on a fresh ``systemctl show`` that the unit reports them. ``--revert``
removes exactly that file and reloads. Planned, confirmed, audited as every action.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
from typing import Any

from gpudash.cli import act
from gpudash.cli.contract import Exit
from gpudash.cli.terminal import Terminal
from gpudash.domain.model import unit_name
from gpudash.domain.untrusted import json_dumps
from gpudash.engine import SPECS, ActionKind, ActionPlan, PlanError, Selection
from gpudash.protocol.source import Capability, HostSource, SourceError


def planner(args: argparse.Namespace) -> act.PlanMaker:
    async def make(source: HostSource) -> ActionPlan:
        control = source.control
        if Capability.DROP_IN not in control.capabilities:
            raise PlanError(f"{source.name}: this host cannot be given a drop-in")
        unit = unit_name(args.unit)
        control.watch_unit(unit)
        snap = await control.sample()
        text = await control.unit_text(unit)
        return SPECS[ActionKind.FIX].plan(snap, Selection(unit=unit, revert=args.revert,
                                                          unit_text=text))

    return make


def run_fix(args: argparse.Namespace, source: HostSource, term: Terminal) -> int:
    make = planner(args)
    if not args.dry_run:
        return act.run_action(args, source, term, make)
    with asyncio.Runner() as runner:
        try:
            plan = runner.run(make(source))
        except PlanError as exc:
            term.error(str(exc))
            return Exit.USAGE
        except SourceError as exc:
            term.error(f"{source.name}: {exc}")
            return Exit.CONNECT
        finally:
            with contextlib.suppress(Exception):
                runner.run(source.close())
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
