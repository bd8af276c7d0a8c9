"""The audit file on the operator's machine: what every action meant to do and what it did.

``$XDG_STATE_HOME/gpudash/audit.jsonl`` (``~/.local/state/gpudash/audit.jsonl``), one JSON
line per record. Each action writes an ``intent`` record (its plan) *before* anything is
sent and an ``outcome`` record (its report, also when interrupted) after, linked by the
action id, so an action that dies half-way still left its trace. Lines are ASCII-only
JSON (host text with lone surrogates or escapes cannot break the writer nor a reader's
terminal), appended with ``O_APPEND`` to a 0600 file in a 0700 directory. Actions on the
demo host go to ``audit-demo.jsonl``: they touched nothing real.

An audit that cannot be written is reported by the caller, never fatal.
"""

from __future__ import annotations

import getpass
import json
import os
import stat
import time
import uuid
from pathlib import Path
from typing import Any

from gpudash.engine import ActionPlan, ActionReport
from gpudash.state.paths import state_dir


def audit_path(*, simulated: bool = False) -> Path:
    return state_dir() / ("audit-demo.jsonl" if simulated else "audit.jsonl")


def _plan_fields(plan: ActionPlan, term_timeout: float) -> dict[str, Any]:
    return {
        "operator": _operator(),
        "host": plan.host,
        "demo": plan.simulated,
        "action": plan.kind.value,
        "subject": plan.subject,
        "plan": plan.describe(term_timeout),
        "targets": [{"pid": t.pid, "start_ticks": t.start_ticks} for t in plan.targets],
    }


def intent_record(plan: ActionPlan, action_id: str, term_timeout: float) -> dict[str, Any]:
    """What is about to be sent, written before the first command."""
    return {"record": "intent", "id": action_id, "time": time.time(),
            **_plan_fields(plan, term_timeout)}


def outcome_record(report: ActionReport, action_id: str | None = None) -> dict[str, Any]:
    """The report as a JSON-ready record (also the CLI's ``--json`` output)."""
    return {
        "record": "outcome",
        "id": action_id,
        "time": report.events[-1][0] if report.events else time.time(),
        **_plan_fields(report.plan, report.term_timeout),
        "commands": [{"argv": list(c.argv), "rc": c.returncode} for c in report.commands],
        "signals": [{"pid": p, "signal": s, "outcome": o.value} for p, s, o in report.signals],
        "sent": report.sent_lines(),  # both, in the order they were sent
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
        "warnings": list(report.warnings),
        "container_after": None if report.container_after is None else {
            "id": report.container_after.id,
            "runtime": report.container_after.runtime,
            "name": report.container_after.name,
            "state": report.container_after.state,
            "restart_policy": report.container_after.restart_policy,
            "restart_count": report.container_after.restart_count,
        },
        "phases": [{"name": ph.name, "confirmed": ph.confirmed, "seconds": round(ph.seconds, 1),
                    "summary": ph.summary} for ph in report.phases],
        "serving": None if report.serving is None else {
            "unit": report.serving.unit,
            "serving": report.serving.serving,
            "ready_url": report.serving.ready_url,
            "ready_status": report.serving.ready_status,
            "ready_s": report.serving.ready_s,
            "mib_per_gpu": {str(g): m for g, m in sorted(report.serving.mib_per_gpu.items())},
            "failure_line": report.serving.failure_line,
            "stopped": report.serving.stopped,
        },
        "verdict": report.verdict,
        "confirmed": report.confirmed,
        "unknown": report.unknown,
        "interrupted": report.interrupted,
        "summary": report.summary,
    }


def write(record: dict[str, Any], path: Path) -> Path:
    """Append one record as one line; returns ``path``. Raises OSError if it cannot.

    A directory or file left readable by an older gpudash (0755, 0644) is made private
    first: the modes given to mkdir and open apply only to what they create."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    if stat.S_IMODE(path.parent.stat().st_mode) != 0o700:
        path.parent.chmod(0o700)
    line = (json.dumps(record, ensure_ascii=True) + "\n").encode("ascii")
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        if stat.S_IMODE(os.fstat(fd).st_mode) != 0o600:
            os.fchmod(fd, 0o600)
        os.write(fd, line)  # one write of one line: appends from two gpudash never interleave
    finally:
        os.close(fd)
    return path


def failed(report: ActionReport, exc: BaseException) -> ActionReport:
    """``report`` (live, with what was sent) as the outcome of an action that raised:
    its verdict is ``failed`` and its summary says why and what had reached the host."""
    report.confirmed = False
    sent = report.sent_lines()
    report.summary = (
        f"failed unexpectedly ({type(exc).__name__}: {exc}); sent: "
        + ("; ".join(sent) if sent else "nothing")
    )
    report.log(report.summary)
    return report


class AuditTrail:
    """The two records of one action, to the file its plan belongs in."""

    def __init__(
        self, plan: ActionPlan, term_timeout: float, path: Path | None = None,
        action_id: str | None = None,
    ) -> None:
        self.plan = plan
        self.term_timeout = term_timeout
        self.id = action_id or uuid.uuid4().hex  # a re-verification continues its action
        self.path = path or audit_path(simulated=plan.simulated)

    def intent(self) -> Path:
        return write(intent_record(self.plan, self.id, self.term_timeout), self.path)

    def outcome(self, report: ActionReport) -> Path:
        return write(outcome_record(report, self.id), self.path)


def _operator() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return str(os.getuid())
