"""The action log: what was done, when, on which host, with what outcome.

A row shows as much of the outcome as fits; Enter on a row opens it in full, with the
report's lines (per GPU, escalations, what still holds memory).
"""

from __future__ import annotations

import glob
import time
from collections.abc import Sequence

from rich.text import Text
from textual.binding import Binding

from gpudash.engine import SPECS, ActionKind
from gpudash.record import record
from gpudash.session.audit import audit_path
from gpudash.session.history import history
from gpudash.ui.text import clean, literal
from gpudash.ui.widgets.celltable import CellTable


@record
class LogEntry:
    at: float
    host: str
    action: str
    outcome: str
    ok: bool | None  # None: not an outcome (cancelled, refused)
    details: tuple[str, ...] = ()  # the report's lines, for the detail view


class ActionLog(CellTable):
    """One row per action, newest last."""

    DEFAULT_CSS = """
    ActionLog { height: 7; }
    """
    BINDINGS = [
        Binding("home", "scroll_top", "First", show=False),
        Binding("end", "scroll_bottom", "Last", show=False),
    ]

    def __init__(self, **kwargs: object) -> None:
        super().__init__(cursor_type="row", **kwargs)  # type: ignore[arg-type]
        self.entries: list[LogEntry] = []
        self._styles: list[str] = []  # each entry's outcome style
        # (host column, narrow, action width, room): the columns as last laid out
        self._layout: tuple[bool, bool, int, int] | None = None

    def on_mount(self) -> None:
        self.border_title = "Action log"
        self.border_subtitle = "Enter: full entry"
        self.fit(hosts=True, narrow=False)

    def fit(self, *, hosts: bool, narrow: bool, width: int = 0) -> None:
        """The columns for the screen: the host only with several hosts (the header names
        one); Action as wide as its entries need, up to two fifths of the table (it names
        each target: it sat at 40 columns beside 120 empty ones at 200x50), 24 when
        narrow so that the outcome keeps room at 80 columns; Outcome the rest."""
        room = max(0, width - 4 - 10 - (16 if hosts else 0))  # borders, Time, Host
        longest = max((len(e.action) for e in self.entries), default=0)
        action = 24 if narrow else max(24, min(longest + 1, room * 2 // 5 or 40))
        layout = (hosts, narrow, action, room)
        if self._layout == layout:
            return
        self._layout = layout
        row = self.cursor_row
        self.clear(columns=True)
        self.add_column("Time", key="time", width=8)
        if hosts:
            self.add_column("Host", key="host", width=14)
        self.add_column("Action", key="action", width=action)
        self.add_column("Outcome", key="outcome", width=max(40, room - action - 2))
        for index, (entry, style) in enumerate(zip(self.entries, self._styles, strict=True)):
            self._add_row(index, entry, style)
        if self.row_count:
            self.move_cursor(row=min(row, self.row_count - 1), animate=False)

    def _add_row(self, index: int, entry: LogEntry, style: str) -> None:
        cells = [Text(time.strftime("%H:%M:%S", time.localtime(entry.at)))]
        if self._layout is None or self._layout[0]:
            cells.append(literal(entry.host))
        cells += [literal(entry.action), literal(entry.outcome, style=style)]
        self.add_row(*cells, key=str(index + 1))

    def add(self, entry: LogEntry, ok_style: str, bad_style: str) -> None:
        self.entries.append(entry)
        style = "" if entry.ok is None else ok_style if entry.ok else bad_style
        self._styles.append(style)
        if self._layout is not None and not self._layout[1] and \
                len(entry.action) >= self._action_width():  # it names a longer target
            hosts, narrow, _action, room = self._layout
            self._layout = None  # laid out again, every row with it
            self.fit(hosts=hosts, narrow=narrow, width=room + 4 + 10 + (16 if hosts else 0))
        else:
            self._add_row(len(self.entries) - 1, entry, style)
        # After the next refresh: the table knows its new height only then, and a short
        # log must scroll to the newest entry.
        self.call_after_refresh(self.move_cursor, row=self.row_count - 1, animate=False)

    def _action_width(self) -> int:
        return self._layout[2] if self._layout is not None else 40

    def entry_at(self, row: int) -> LogEntry | None:
        return self.entries[row] if 0 <= row < len(self.entries) else None

    @staticmethod
    def detail(entry: LogEntry) -> Text:
        """The whole entry, wrapped; host text shown literally."""
        out = Text()
        out.append(time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(entry.at)), style="dim")
        out.append(f"  {clean(entry.host)}\n", style="dim")
        out.append(clean(entry.action), style="bold")
        out.append("\n")
        out.append(clean(entry.outcome))
        for line in entry.details:
            out.append("\n")
            out.append(clean(line))
        return out


RECENT_MAX = 20


def entry_title(kind: str, subject: str) -> str:
    """What an entry's Action cell says: the action, short, and its target (two rows of
    "Fix unit config (gpudash's drop-in): vl…" on two units looked the same)."""
    try:
        label = SPECS[ActionKind(kind)].label
    except ValueError:
        label = kind
    return f"{label} {subject}".strip()


def start_of_today(now: float) -> float:
    day = time.localtime(now)
    return time.mktime((day.tm_year, day.tm_mon, day.tm_mday, 0, 0, 0, 0, 0, -1))


def recent_entries(hosts: Sequence[str], now: float) -> list[LogEntry]:
    """The audit's actions on ``hosts`` today (the newest ``RECENT_MAX``), as the Action
    log shows them: what was done before this dashboard started, marked as earlier. Not
    the demo's: its simulated host starts over on every run, and earlier runs' swaps
    contradicted the screen."""
    found = history([audit_path()], hosts=[glob.escape(h) for h in hosts],
                    since=start_of_today(now), tail_bytes=1 << 20)
    out = []
    for a in found.actions[-RECENT_MAX:]:
        ok = None if a.verdict in (None, "interrupted") else a.verdict != "failed"
        out.append(LogEntry(a.started or 0.0, a.host, entry_title(a.action, a.subject),
                            f"{a.verdict or 'no outcome'} (earlier, by {a.operator})", ok,
                            (a.summary,)))
    return out
