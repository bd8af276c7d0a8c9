"""``--dry-run``: an action's plan, exactly as it would be confirmed, and nothing sent.

A dry run's plan *is* its result: it goes to stdout (``reclaim --dry-run > plan.txt``,
``fix --dry-run > fix.diff``), or with ``--json`` one document there; stderr says that
nothing was sent. One definition for reclaim, start, swap, fix and reap.
"""

from __future__ import annotations

import argparse
from typing import Any

from gpudash.cli.terminal import Terminal
from gpudash.engine import ActionKind, ActionPlan

NOTHING_SENT = "--dry-run: nothing sent"


def document(plan: ActionPlan, lines: list[str]) -> dict[str, Any]:
    """The plan as JSON: what would be sent and to whom, and what should come back."""
    out: dict[str, Any] = {
        "dry_run": True, "host": plan.host, "action": plan.kind.value,
        "subject": plan.subject, "plan": lines,
        "targets": [{"pid": t.pid, "start_ticks": t.start_ticks, "user": t.user,
                     "label": t.label} for t in plan.targets],
        "expected_free_mib": {str(g): m for g, m in sorted(plan.expected_free_mib.items())},
    }
    if plan.kind in (ActionKind.DRAIN, ActionKind.RESUME):
        out.update(node=plan.subject.removeprefix("node "), reason=plan.selection.reason)
    if plan.kind is ActionKind.FIX:
        out.update(revert=plan.selection.revert, diff=list(plan.preview),
                   settings=[f"[{s}] {k}={v}" for s, k, v in plan.settings])
    return out


def show(args: argparse.Namespace, plan: ActionPlan, term: Terminal) -> dict[str, Any]:
    """Print the plan (stdout: it is the result) unless ``--json`` wants the document
    (which is returned, for the caller to print alone or among several hosts')."""
    lines = plan.describe(getattr(args, "term_timeout", 10.0))
    if not args.json:
        term.result(lines)
    term.error(NOTHING_SENT)
    return document(plan, lines)
