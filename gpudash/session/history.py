"""What was done, from the audit file: each action joined from its records.

An action leaves an intent record before anything is sent and an outcome record after;
a re-verification (the link dropped mid-action) writes further outcome records with the
same id, the last of which says how it ended. ``actions`` joins them; a record that does
not parse is skipped and counted, never fatal (the file is append-only, written by
several gpudash at once, and may end in a line a crash cut short).
"""

from __future__ import annotations

import fnmatch
import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpudash.engine.series import from_json

_SPAN = re.compile(r"^(\d+(?:\.\d+)?)\s*(s|m|h|d|w)?$")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_span(text: str) -> float:
    """``90s``, ``30m``, ``2h``, ``1d``, ``1w`` (a bare number: seconds) as seconds;
    ``ValueError`` otherwise."""
    m = _SPAN.match(text.strip().lower())
    if m is None:
        raise ValueError(f"not a span of time: {text!r} (e.g. 30m, 2h, 1d)")
    return float(m.group(1)) * _UNIT_S[m.group(2) or "s"]


@dataclass(slots=True)
class Action:
    """One action as the audit tells it."""

    id: str
    host: str = "?"
    operator: str = "?"
    action: str = "?"
    subject: str = ""
    demo: bool = False
    started: float | None = None  # the intent's time
    ended: float | None = None  # the last outcome's time
    verdict: str | None = None  # None: no outcome recorded
    summary: str = ""
    interrupted: bool = False
    reverified: int = 0  # outcome records before the last one (link lost, looked again)
    gpus: list[dict[str, Any]] = field(default_factory=list)
    phases: list[dict[str, Any]] = field(default_factory=list)
    sent: list[str] = field(default_factory=list)
    # each GPU's used MiB over the action: (seconds from its first sample, MiB per GPU);
    # empty for records older than the series or a series that does not parse
    memory: list[tuple[float, dict[int, int | None]]] = field(default_factory=list)

    @property
    def seconds(self) -> float | None:
        if self.started is None or self.ended is None:
            return None
        return max(0.0, self.ended - self.started)

    def mib_back(self) -> dict[int, int]:
        """Per GPU, what came back (before less after), where both are known."""
        out: dict[int, int] = {}
        for g in self.gpus:
            before, after = g.get("before_mib"), g.get("after_mib")
            if isinstance(before, int) and isinstance(after, int) and before > after:
                out[int(g.get("index", -1))] = before - after
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id, "host": self.host, "operator": self.operator,
            "action": self.action, "subject": self.subject, "demo": self.demo,
            "started": self.started, "ended": self.ended, "seconds": self.seconds,
            "verdict": self.verdict, "interrupted": self.interrupted,
            "reverified": self.reverified, "summary": self.summary,
            "mib_back_by_gpu": {str(g): m for g, m in sorted(self.mib_back().items())},
            "phases": self.phases, "sent": self.sent,
        }


@dataclass(slots=True)
class History:
    actions: list[Action]
    skipped: int  # lines that were not a record


def _read(path: Path, tail_bytes: int | None) -> str | None:
    """The file's text, or only its last ``tail_bytes`` (from the first whole line)."""
    try:
        with path.open("rb") as f:
            if tail_bytes is not None and f.seek(0, 2) > tail_bytes:
                f.seek(-tail_bytes, 2)
                f.readline()  # a line cut by the seek is not a record
            elif tail_bytes is not None:
                f.seek(0)
            return f.read().decode("utf-8", errors="replace")
    except FileNotFoundError:
        return None


def read_records(path: Path, tail_bytes: int | None = None
                 ) -> tuple[list[dict[str, Any]], int]:
    """The records of ``path`` in file order (of its last ``tail_bytes`` if given), and how
    many lines were not records."""
    text = _read(path, tail_bytes)
    if text is None:
        return [], 0
    records: list[dict[str, Any]] = []
    skipped = 0
    for line in text.splitlines():
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except ValueError:
            skipped += 1
            continue
        if isinstance(rec, dict) and isinstance(rec.get("id"), str) and rec.get(
                "record") in ("intent", "outcome"):
            records.append(rec)
        else:
            skipped += 1
    return records, skipped


def _text(value: object, default: str = "") -> str:
    return value if isinstance(value, str) else default


def _time(value: object) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(
        value, bool) else None


def join(records: Iterable[dict[str, Any]]) -> list[Action]:
    """Each action's intent and outcomes as one ``Action``, oldest first."""
    by_id: dict[str, Action] = {}
    for rec in records:
        a = by_id.setdefault(rec["id"], Action(rec["id"]))
        a.host = _text(rec.get("host"), a.host)
        a.operator = _text(rec.get("operator"), a.operator)
        a.action = _text(rec.get("action"), a.action)
        a.subject = _text(rec.get("subject"), a.subject)
        a.demo = bool(rec.get("demo", a.demo))
        when = _time(rec.get("time"))
        if rec["record"] == "intent":
            a.started = when if a.started is None else a.started
            continue
        if a.verdict is not None:
            a.reverified += 1
        a.ended = when
        if a.started is None:
            a.started = when  # an outcome without its intent (the file was cut): its time
        a.verdict = _text(rec.get("verdict"), "unknown")
        a.summary = _text(rec.get("summary"))
        a.interrupted = bool(rec.get("interrupted"))
        a.gpus = [g for g in rec.get("gpus") or [] if isinstance(g, dict)]
        a.phases = [ph for ph in rec.get("phases") or [] if isinstance(ph, dict)]
        a.sent = [s for s in rec.get("sent") or [] if isinstance(s, str)] or a.sent
        # the action's own run, not a later re-verification's look, is the curve to draw
        a.memory = a.memory or from_json(rec.get("memory"))
    return sorted(by_id.values(), key=lambda a: (a.started or 0.0, a.id))


def history(paths: Sequence[Path], *, hosts: Sequence[str] = (), since: float | None = None,
            tail_bytes: int | None = None) -> History:
    """The actions of the audit files ``paths``, of ``hosts`` (names or globs) if given,
    started at or after ``since`` (epoch seconds) if given (``tail_bytes``: read only the
    end of each file, as the dashboard does at start)."""
    records: list[dict[str, Any]] = []
    skipped = 0
    for path in paths:
        found, bad = read_records(path, tail_bytes)
        records += found
        skipped += bad
    actions = [
        a for a in join(records)
        if (not hosts or any(fnmatch.fnmatchcase(a.host, h) for h in hosts))
        and (since is None or (a.started or 0.0) >= since)
    ]
    return History(actions, skipped)
