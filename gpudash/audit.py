"""The audit file on the operator's machine: one JSON line per action, appended.

``$XDG_STATE_HOME/gpudash/audit.jsonl`` (``~/.local/state/gpudash/audit.jsonl``).
An audit that cannot be written is reported by the caller, never fatal.
"""

from __future__ import annotations

import getpass
import json
import os
from pathlib import Path
from typing import Any

from gpudash.engine import ActionReport


def state_dir() -> Path:
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "gpudash"


def audit_path() -> Path:
    return state_dir() / "audit.jsonl"


def record_of(report: ActionReport) -> dict[str, Any]:
    """The report as a JSON-ready record."""
    plan = report.plan
    return {
        "time": report.events[0][0] if report.events else None,
        "operator": _operator(),
        "host": plan.host,
        "action": plan.kind.value,
        "subject": plan.subject,
        "plan": plan.describe(report.term_timeout),
        "targets": [{"pid": t.pid, "start_ticks": t.start_ticks} for t in plan.targets],
        "commands": [{"argv": list(c.argv), "rc": c.returncode} for c in report.commands],
        "signals": [{"pid": p, "signal": s, "outcome": o.value} for p, s, o in report.signals],
        "gpus": [
            {
                "index": g.index,
                "before_mib": g.before_mib,
                "target_mib": g.target_mib,
                "after_mib": g.after_mib,
                "confirmed": g.confirmed,
            }
            for g in report.gpus
        ],
        "leftovers": [
            {"pid": lo.pid, "gpu": lo.gpu, "mib": lo.mib, "reason": lo.reason}
            for lo in report.leftovers
        ],
        "confirmed": report.confirmed,
        "unknown": report.unknown,
        "summary": report.summary,
    }


def append(report: ActionReport, path: Path | None = None) -> Path:
    """Append one record; returns the file written. Raises OSError if it cannot."""
    target = path or audit_path()
    target.parent.mkdir(parents=True, exist_ok=True)
    with target.open("a", encoding="utf-8") as fh:
        fh.write(json.dumps(record_of(report), ensure_ascii=False) + "\n")
    return target


def _operator() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return str(os.getuid())
