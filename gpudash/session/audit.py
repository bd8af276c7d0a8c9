"""The audit file on the operator's machine: what every action meant to do and what it did.

``$XDG_STATE_HOME/gpudash/audit.jsonl`` (``~/.local/state/gpudash/audit.jsonl``), one JSON
line per record. Each action writes an ``intent`` record (its plan) *before* anything is
sent and an ``outcome`` record (its report, also when interrupted) after, linked by the
action id, so an action that dies half-way still left its trace. Lines are ASCII-only
JSON (host text with lone surrogates or escapes cannot break the writer nor a reader's
terminal), appended with ``O_APPEND`` to a 0600 file in a 0700 directory. Actions on the
demo host go to ``audit-demo.jsonl``: they touched nothing real.

No command or signal is sent unless the intent record was written whole and is on disk:
a caller whose ``intent()`` raises refuses the action (``--no-audit`` acts anyway and
says so in the report). An outcome that cannot be written is reported by the caller.
"""

from __future__ import annotations

import json
import os
import pwd
import time
import uuid
from pathlib import Path
from typing import Any

from gpudash.domain.model import Container
from gpudash.engine import ActionPlan, ActionReport
from gpudash.engine.report import ServingOutcome
from gpudash.state import files
from gpudash.state.paths import state_dir


def audit_path(*, simulated: bool = False) -> Path:
    return state_dir() / ("audit-demo.jsonl" if simulated else "audit.jsonl")


def _plan_fields(plan: ActionPlan, term_timeout: float) -> dict[str, Any]:
    return {
        **operator(),
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


def outcome_record(report: ActionReport, action_id: str | None = None, *,
                   audited: bool = True) -> dict[str, Any]:
    """The report as a JSON-ready record (also the CLI's ``--json`` output). ``audited``:
    False when the action ran without its intent record (``--no-audit``)."""
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
        "container_before": _container(report.plan.container_before),
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
        "serving": _serving(report.serving),
        "rollback": _serving(report.rollback),  # a failed swap's old unit, started again
        "boots": dict(report.boots),  # after a rollback: each unit's enablement, as read
        "memory": report.memory.to_json(),  # each GPU's used MiB over the action, bounded
        "stop_s": report.stop_s,  # the unit's stop until its memory was back (learned)
        "escalated": list(report.escalated),  # pids that ignored SIGTERM and got SIGKILL
        "verdict": report.verdict,
        "confirmed": report.confirmed,
        "unknown": report.unknown,
        "interrupted": report.interrupted,
        "summary": report.summary,
        "audited": audited,
    }


def _container(c: Container | None) -> dict[str, Any] | None:
    """What a container was before the action (its restart policy: what a start puts
    back after gpudash turned it off)."""
    return None if c is None else {"id": c.id, "runtime": c.runtime, "name": c.name,
                                   "state": c.state, "restart_policy": c.restart_policy}


def _serving(sv: ServingOutcome | None) -> dict[str, Any] | None:
    return None if sv is None else {
        "unit": sv.unit,
        "serving": sv.serving,
        "ready_url": sv.ready_url,
        "ready_status": sv.ready_status,
        "ready_error": sv.ready_error,
        "ready_s": sv.ready_s,
        "mib_per_gpu": {str(g): m for g, m in sorted(sv.mib_per_gpu.items())},
        "failure_line": sv.failure_line,
        "stopped": sv.stopped,
    }


def write(record: dict[str, Any], path: Path) -> Path:
    """Append one record as one line, whole and on disk (fsync) before this returns;
    returns ``path``. Raises OSError if it cannot: the caller then sends nothing.

    The file and its directory follow ``gpudash.state.files``: never through a symbolic
    link, a regular file, 0600 in a 0700 directory owned by the effective user (one left
    readable by an older gpudash is made private)."""
    line = (json.dumps(record, ensure_ascii=True) + "\n").encode("ascii")
    files.append_line(path, line, sync=True)  # one write of one line: never interleaved
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
        self.intent_error: str | None = None  # why the intent record is not on disk

    def intent(self) -> Path:
        """Write the intent record; raises OSError (and remembers why) if it cannot."""
        try:
            return write(intent_record(self.plan, self.id, self.term_timeout), self.path)
        except OSError as exc:
            self.intent_error = str(exc)
            raise

    def outcome(self, report: ActionReport) -> Path:
        return write(outcome_record(report, self.id, audited=self.audited), self.path)

    @property
    def audited(self) -> bool:
        return self.intent_error is None

    def unaudited(self, report: ActionReport) -> None:
        """``--no-audit`` acted although the intent record could not be written: the report
        (and the outcome record, if it can be written) says so."""
        report.warnings.append(f"not audited (--no-audit): the intent record could not be "
                               f"written to {self.path}: {self.intent_error}")


def refusal(path: Path, why: str, *, cli: bool = True) -> str:
    """What the operator is told when an action is refused for want of its audit record."""
    anyway = ("act anyway with --no-audit (the report says so)" if cli else
              "the CLI's --no-audit acts anyway")
    return (f"refused: the audit record could not be written to {path} ({why}); nothing "
            f"was sent. Fix that, or {anyway}")


NO_LOGINUID = 4294967295  # (uid_t)-1: no login session behind the process


def operator(proc: Path = Path("/proc/self")) -> dict[str, Any]:
    """Who acts: the login behind the process and the user it runs as.

    ``operator`` is the name of the login uid the kernel keeps for the session
    (``/proc/self/loginuid``: set at login, kept through sudo and su, not settable by the
    user), else sudo's ``SUDO_USER`` (trusted only as root: only sudo sets it there),
    else the effective user. Never ``LOGNAME``/``USER``: anyone can set those."""
    euid = os.geteuid()
    login_uid = _login_uid(proc)
    sudo_user = (os.environ.get("SUDO_USER") or None) if euid == 0 else None
    if login_uid is not None:
        login = _user_name(login_uid)
    else:
        login = sudo_user or _user_name(euid)
    return {"operator": login, "login_uid": login_uid, "sudo_user": sudo_user,
            "effective_user": _user_name(euid), "effective_uid": euid}


def _login_uid(proc: Path) -> int | None:
    try:
        text = (proc / "loginuid").read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        return None
    if not text.isdigit() or int(text) == NO_LOGINUID:
        return None
    return int(text)


def _user_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)
