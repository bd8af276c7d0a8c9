"""What was done, from the audit file: each action joined from its records.

An action leaves an intent record before anything is sent and an outcome record after;
a re-verification (the link dropped mid-action) writes further outcome records with the
same id, the last of which says how it ended. ``actions`` joins them; a line that is not
a record, or a record with a value that is not what gpudash writes (a time of ``1e300``
or ``NaN``, a GPU index ``"x"``), is skipped and named (its file and line), never fatal:
the file is append-only, written by several gpudash at once, may end in a line a crash
cut short, and can be edited by hand. The records around it are told as usual.
"""

from __future__ import annotations

import fnmatch
import json
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import field
from pathlib import Path
from typing import Any

from gpudash.engine.series import from_json
from gpudash.record import record

# What a record's values may be, or the record is skipped: a time datetime can show (the
# epoch to the end of year 9999), a GPU index as the series keys it, MiB a float holds.
MAX_TIME = 253402300799.0
MAX_GPU_INDEX = 999
MAX_MIB = 1 << 50
MAX_PHASE_S = 1e9
_TEXT_FIELDS = ("host", "operator", "action", "subject", "verdict", "summary")
_FLAG_FIELDS = ("demo", "interrupted")

_SPAN = re.compile(r"^(\d+(?:\.\d+)?)\s*(s|m|h|d|w)?$")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_span(text: str) -> float:
    """``90s``, ``30m``, ``2h``, ``1d``, ``1w`` (a bare number: seconds) as seconds;
    ``ValueError`` otherwise."""
    m = _SPAN.match(text.strip().lower())
    if m is None:
        raise ValueError(f"not a span of time: {text!r} (e.g. 30m, 2h, 1d)")
    return float(m.group(1)) * _UNIT_S[m.group(2) or "s"]


@record(frozen=False)
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
    verdict: str | None = None  # None: no outcome recorded (or none could be read)
    summary: str = ""
    interrupted: bool = False
    reverified: int = 0  # outcome records before the last one (link lost, looked again)
    unreadable: int = 0  # records of it skipped (a value not as gpudash writes it)
    gpus: list[dict[str, Any]] = field(default_factory=list)
    phases: list[dict[str, Any]] = field(default_factory=list)
    sent: list[str] = field(default_factory=list)
    # each GPU's used MiB over the action: (seconds from its first sample, MiB per GPU);
    # empty for records older than the series or a series that does not parse
    memory: list[tuple[float, dict[int, int | None]]] = field(default_factory=list)

    @property
    def seconds(self) -> float | None:
        """How long it took, one figure for history and report: on the host's clock where
        its memory series has it (the span the report draws; the demo's simulated
        seconds), else between its records on this machine's clock. (A demo reclaim was
        "0.7 s" in history, wall time, and "13.1 s" in the report.)"""
        if self.memory:
            return self.memory[-1][0]
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
            "records_skipped": self.unreadable,
            "mib_back_by_gpu": {str(g): m for g, m in sorted(self.mib_back().items())},
            "phases": self.phases, "sent": self.sent,
        }


@record
class Skipped:
    """A line of an audit file that is not told: where, and why."""

    path: Path
    line: int | None  # None: read from the file's end (no line number counted)
    why: str

    def __str__(self) -> str:
        where = f"line {self.line}" if self.line is not None else "a line near its end"
        return f"{self.path} {where}: {self.why}: skipped"


@record(frozen=False)
class History:
    actions: list[Action]
    skipped: list[Skipped]  # lines that were not a record, or not one that can be told


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
    numbered, skipped = _records(path, tail_bytes)
    return [rec for _n, rec in numbered], len(skipped)


def _records(path: Path, tail_bytes: int | None
             ) -> tuple[list[tuple[int | None, dict[str, Any]]], list[Skipped]]:
    """(line number, record) of each record of ``path``; the lines that are not records."""
    text = _read(path, tail_bytes)
    if text is None:
        return [], []
    records: list[tuple[int | None, dict[str, Any]]] = []
    skipped: list[Skipped] = []
    # "\n" only: a record is one line of ASCII JSON; str.splitlines would also split at
    # characters a damaged line may hold, and so miscount the lines after it
    for number, line in enumerate(text.split("\n"), 1):
        n = number if tail_bytes is None else None
        if not line.strip():
            continue
        try:
            rec = json.loads(line, parse_constant=_no_constant, parse_float=_finite)
        except (ValueError, RecursionError) as exc:
            why = str(exc) if isinstance(exc, _NotFinite) else "not a JSON line (cut short?)"
            skipped.append(Skipped(path, n, why))
            continue
        if isinstance(rec, dict) and isinstance(rec.get("id"), str) and rec.get(
                "record") in ("intent", "outcome"):
            records.append((n, rec))
        else:
            skipped.append(Skipped(path, n, "not an intent or outcome record"))
    return records, skipped


class _NotFinite(ValueError):
    """NaN or an infinity in a record: gpudash writes none, and none can be told."""


def _no_constant(text: str) -> float:
    raise _NotFinite(f"a value is {text}")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _NotFinite(f"a value is {text[:40]} (too large for a number)")
    return value


def _real(value: object, low: float, high: float) -> bool:
    """A finite number from ``low`` to ``high`` (a bool is not one)."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return False
    try:
        return low <= value <= high and math.isfinite(value)
    except OverflowError:  # an int too large for a float
        return False


def _show(value: object) -> str:
    return json.dumps(value)[:40] if isinstance(value, (int, float, str, bool)) or (
        value is None) else type(value).__name__


def why_unreadable(rec: dict[str, Any]) -> str | None:
    """Why the record cannot be told as it is (a value not as gpudash writes it), or None.

    Every value the history reads is checked here, once, so that what is told never meets
    a value it cannot show (``datetime`` of ``1e300``, ``int("x")``, NaN seconds)."""
    when = rec.get("time")
    if when is not None and not _real(when, 0, MAX_TIME):
        return f"time {_show(when)} is not a time"
    for name in _TEXT_FIELDS:
        if rec.get(name) is not None and not isinstance(rec.get(name), str):
            return f"{name} {_show(rec.get(name))} is not text"
    for name in _FLAG_FIELDS:
        if rec.get(name) is not None and not isinstance(rec.get(name), bool):
            return f"{name} {_show(rec.get(name))} is not true or false"
    sent = rec.get("sent")
    if sent is not None and not (isinstance(sent, list) and all(
            isinstance(s, str) for s in sent)):
        return "sent is not a list of text"
    return _gpus_unreadable(rec.get("gpus")) or _phases_unreadable(rec.get("phases"))


def _gpus_unreadable(gpus: object) -> str | None:
    if gpus is None:
        return None
    if not isinstance(gpus, list) or not all(isinstance(g, dict) for g in gpus):
        return "gpus is not a list of objects"
    for g in gpus:
        index = g.get("index")
        if not isinstance(index, int) or not _real(index, 0, MAX_GPU_INDEX):
            return f"GPU index {_show(index)} is not one"
        for name in ("before_mib", "after_mib", "target_mib"):
            mib = g.get(name)
            if mib is not None and not (isinstance(mib, int) and _real(mib, 0, MAX_MIB)):
                return f"GPU{index} {name} {_show(mib)} is not a number of MiB"
    return None


def _phases_unreadable(phases: object) -> str | None:
    if phases is None:
        return None
    if not isinstance(phases, list) or not all(isinstance(ph, dict) for ph in phases):
        return "phases is not a list of objects"
    for ph in phases:
        name, seconds = ph.get("name"), ph.get("seconds")
        if name is not None and not isinstance(name, str):
            return f"phase name {_show(name)} is not text"
        if seconds is not None and not _real(seconds, 0, MAX_PHASE_S):
            return f"phase {name} seconds {_show(seconds)} is not a number of seconds"
    return None


def _text(value: object, default: str = "") -> str:  # (checked: text, or absent)
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
    skipped: list[Skipped] = []
    damaged: dict[str, int] = {}  # action id: its records skipped
    for path in paths:
        found, bad = _records(path, tail_bytes)
        skipped += bad
        for number, rec in found:
            why = why_unreadable(rec)
            if why is None:
                records.append(rec)
            else:
                skipped.append(Skipped(path, number, why))
                damaged[rec["id"]] = damaged.get(rec["id"], 0) + 1
    joined = join(records)
    for a in joined:
        a.unreadable = damaged.get(a.id, 0)
    actions = [
        a for a in joined
        if (not hosts or any(fnmatch.fnmatchcase(a.host, h) for h in hosts))
        and (since is None or (a.started or 0.0) >= since)
    ]
    return History(actions, skipped)
