"""Log lines as they come from a host: ``journalctl -o json`` records and ``docker logs
--timestamps`` lines decoded, each message cut at ``JOURNAL_MESSAGE_MAX`` bytes, and the
lines of one host passed on at ``JOURNAL_LINES_PER_S`` at most (``LineBudget``).

Everything here is host text: kept to be shown, never run.
"""

from __future__ import annotations

import datetime
import json
import re
import time
from collections.abc import Callable

from gpudash.collector.host.protocol import TRUNCATED
from gpudash.protocol.source import LogLine

JOURNAL_MESSAGE_MAX = 4096  # bytes (UTF-8) of one journal message kept, mark included
JOURNAL_LINES_PER_S = 200.0  # journal lines of one host passed on, after a burst of ...
JOURNAL_BURST = 2000  # ... this many (a follower's 200-line tail, a resume after a drop)


class LineBudget:
    """How many journal lines of one host are passed on: a token bucket shared by every
    journal of the host (the dashboard's view, a start's follower). A unit that writes
    faster has the excess dropped before it is even decoded, and said so."""

    def __init__(self, rate: float = JOURNAL_LINES_PER_S, burst: int = JOURNAL_BURST,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.rate = rate
        self.burst = burst
        self.clock = clock
        self._tokens = float(burst)
        self._at = clock()

    def take(self) -> bool:
        now = self.clock()
        self._tokens = min(float(self.burst), self._tokens + (now - self._at) * self.rate)
        self._at = now
        if self._tokens >= 1.0:
            self._tokens -= 1.0
            return True
        return False


JOURNAL_CURSOR = re.compile(r"[A-Za-z0-9=;_-]{1,400}")


_DOCKER_STAMP = re.compile(
    rb"(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d)(\.\d{1,9})?(Z|[+-]\d\d:\d\d) ")


def container_log_line(raw: bytes, origin: str) -> LogLine:
    """One ``docker logs --timestamps`` line: its RFC 3339 stamp (when it has one) as the
    time, the rest as the message (host text, cut as journal messages are)."""
    raw = raw.rstrip(b"\r\n")
    when = None
    m = _DOCKER_STAMP.match(raw)
    if m is not None:
        try:
            text = m.group(0)[:-1].decode("ascii")
            frac = m.group(7) or b""
            base = text.replace((frac or b"").decode("ascii"), "", 1) if frac else text
            stamp = datetime.datetime.fromisoformat(base.replace("Z", "+00:00"))
            when = stamp.timestamp() + (float(frac) if frac else 0.0)
            raw = raw[m.end():]
        except ValueError:
            when = None
    msg = cut_message(raw.decode("utf-8", "replace"))
    return LogLine(msg, when, origin, None, origin)


def cut_message(msg: str, limit: int = JOURNAL_MESSAGE_MAX) -> str:
    """``msg`` within ``limit`` bytes of UTF-8, ending in ``TRUNCATED`` if it was cut."""
    if len(msg) * 4 <= limit or len(msg.encode("utf-8", "surrogatepass")) <= limit:
        return msg
    room = limit - len(TRUNCATED.encode("utf-8"))
    kept = msg.encode("utf-8", "surrogatepass")[:room].decode("utf-8", "ignore")
    return kept + TRUNCATED


def journal_line(raw: bytes, unit: str) -> LogLine | None:
    """One ``journalctl -o json`` record: its message (a byte array when it is not UTF-8;
    cut at ``JOURNAL_MESSAGE_MAX``), time and cursor; None for what is no record."""
    try:
        rec = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(rec, dict):
        return None
    msg = rec.get("MESSAGE")
    if isinstance(msg, list):  # not UTF-8: journalctl sends the bytes
        head = msg[:JOURNAL_MESSAGE_MAX + 1]
        if all(isinstance(b, int) and 0 <= b < 256 for b in head):
            msg = bytes(head).decode("utf-8", "replace")  # longer than the max: cut below
    if not isinstance(msg, str):
        msg = "" if msg is None else str(msg)[:JOURNAL_MESSAGE_MAX + 1]
    msg = cut_message(msg)
    stamp = rec.get("__REALTIME_TIMESTAMP")
    when = int(stamp) / 1e6 if isinstance(stamp, str) and stamp.isdigit() else None
    cursor = rec.get("__CURSOR")
    return LogLine(msg, when, unit,
                   cursor if isinstance(cursor, str) and JOURNAL_CURSOR.fullmatch(cursor) else None,
                   _origin(rec))


def _origin(rec: dict[str, object]) -> str | None:
    """Who logged a record, as journalctl's short format names it (``systemd[1]``: systemd's
    own lines of the unit, which ``journalctl -u`` shows beside the server's)."""
    ident = rec.get("SYSLOG_IDENTIFIER") or rec.get("_COMM")
    if not isinstance(ident, str) or not ident:
        return None
    pid = rec.get("_PID") or rec.get("SYSLOG_PID")
    ident = cut_message(ident, 64)
    return f"{ident}[{pid}]" if isinstance(pid, str) and pid.isdigit() and len(pid) < 12 else ident
