"""``gpudash history [HOST...] [--since 2h] [--json] [--demo]``: what was done, from the
audit file: who did what on which host, the verdict, GiB back per GPU, how long each
phase took; re-verified records joined to their action."""

from __future__ import annotations

import argparse
import time
from datetime import datetime
from pathlib import Path

from gpudash.cli.contract import Exit
from gpudash.cli.terminal import Terminal
from gpudash.domain.units import gib, gib_number
from gpudash.domain.untrusted import json_dumps
from gpudash.record import record
from gpudash.session.audit import audit_path
from gpudash.session.history import Action, History, history

MARKS = {"confirmed": "✔", "warning": "⚠", "failed": "✘", "unknown": "?",
         "interrupted": "■"}


def describe(a: Action) -> list[str]:
    """An action in two lines or so, for people."""
    when = datetime.fromtimestamp(a.started).strftime("%Y-%m-%d %H:%M:%S") if (
        a.started is not None) else "?"
    lines = [f"{when}  {a.host}  {a.operator}  {a.action}  {a.subject}"]
    if a.verdict is None and a.unreadable:
        lines.append("    no outcome that can be read: a record of it was skipped (see above)")
        return lines
    if a.verdict is None:
        lines.append("    no outcome recorded: gpudash ended while acting (see the log)")
        return lines
    verdict = "interrupted" if a.interrupted else a.verdict
    took = f" in {a.seconds:.1f} s" if a.seconds is not None else ""
    back = a.mib_back()
    freed = ""
    if back:
        per = ", ".join(f"GPU{g} {gib_number(m)}" for g, m in sorted(back.items()))
        freed = f": {gib(sum(back.values()))} back ({per} GiB)"
    again = f", re-verified {a.reverified}x" if a.reverified else ""
    lines.append(f"    {MARKS.get(verdict, '?')} {verdict}{took}{freed}{again}")
    if len(a.phases) > 1:
        lines.append("    phases (the host's clock): " + ", ".join(
            f"{ph.get('name', '?')} {ph.get('seconds', '?')} s" for ph in a.phases))
    if a.summary and verdict != "confirmed":
        lines.append(f"    {a.summary}")
    return lines


@record
class Read:
    """The audit's actions as ``history`` and ``report`` select them (hosts, ``--since``)."""

    found: History
    path: Path
    since: float | None  # epoch seconds; None: all


SKIPPED_SHOWN = 10  # damaged lines named one by one; more are counted


def read_actions(args: argparse.Namespace, term: Terminal) -> Read:
    """The actions ``args`` ask for; a damaged line (or a record with a value gpudash
    does not write) is named with its file and line, skipped, never fatal."""
    since = None if args.since is None else time.time() - args.since
    path = audit_path(simulated=True) if args.demo else audit_path()
    found = history([path], hosts=args.hosts, since=since)
    if found.skipped:
        term.say([f"gpudash: {s}" for s in found.skipped[:SKIPPED_SHOWN]])
        more = len(found.skipped) - SKIPPED_SHOWN
        term.error(f"{len(found.skipped)} line(s) of the audit file are not records: skipped"
                   + (f" ({more} not named above)" if more > 0 else ""))
    return Read(found, path, since)


def say_none(read: Read, args: argparse.Namespace, term: Terminal) -> None:
    term.say(f"no actions recorded in {read.path}" + (
        " for those hosts" if args.hosts else "") + (" in that span" if read.since else ""))


def cmd_history(args: argparse.Namespace, term: Terminal) -> int:
    read = read_actions(args, term)
    found = read.found
    if args.json:
        term.result_json(json_dumps({"actions": [a.to_json() for a in found.actions],
                                     "skipped": len(found.skipped)}, indent=2))
        return Exit.OK
    if not found.actions:
        say_none(read, args, term)
        return Exit.OK
    term.result([line for a in found.actions for line in describe(a)])
    return Exit.OK
