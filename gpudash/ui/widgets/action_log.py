"""The action log: what was done, when, on which host, with what outcome.

A row shows as much of the outcome as fits; Enter on a row opens it in full, with the
report's lines (per GPU, escalations, what still holds memory).
"""

from __future__ import annotations

import glob
import time
from collections.abc import Sequence
from dataclasses import dataclass

from rich.text import Text
from textual.binding import Binding
from textual.widgets import DataTable

from gpudash.session.audit import audit_path
from gpudash.session.history import history
from gpudash.ui.text import clean, literal


@dataclass(frozen=True, slots=True)
class LogEntry:
    at: float
    host: str
    action: str
    outcome: str
    ok: bool | None  # None: not an outcome (cancelled, refused)
    details: tuple[str, ...] = ()  # the report's lines, for the detail view


class ActionLog(DataTable[Text]):
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
        self._layout: tuple[bool, bool] | None = None  # (host column, narrow)

    def on_mount(self) -> None:
        self.border_title = "Action log"
        self.border_subtitle = "Enter: full entry"
        self.fit(hosts=True, narrow=False)

    def fit(self, *, hosts: bool, narrow: bool) -> None:
        """The columns for the screen: the host only with several hosts (the header names
        one), a shorter action when narrow, so that the outcome keeps room at 80 columns."""
        if self._layout == (hosts, narrow):
            return
        self._layout = (hosts, narrow)
        row = self.cursor_row
        self.clear(columns=True)
        self.add_column("Time", key="time", width=8)
        if hosts:
            self.add_column("Host", key="host", width=14)
        self.add_column("Action", key="action", width=24 if narrow else 40)
        self.add_column("Outcome", key="outcome", width=100)
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
        self._add_row(len(self.entries) - 1, entry, style)
        # After the next refresh: the table knows its new height only then, and a short
        # log must scroll to the newest entry.
        self.call_after_refresh(self.move_cursor, row=self.row_count - 1, animate=False)

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


RECENT_S = 24 * 3600  # the Action log starts with the audit's last day of these hosts
RECENT_MAX = 20


def recent_entries(hosts: Sequence[str], now: float) -> list[LogEntry]:
    """The audit's actions on ``hosts`` in the last day (the newest ``RECENT_MAX``), as
    the Action log shows them: what was done before this dashboard started."""
    found = history([audit_path(), audit_path(simulated=True)],
                    hosts=[glob.escape(h) for h in hosts], since=now - RECENT_S,
                    tail_bytes=1 << 20)
    out = []
    for a in found.actions[-RECENT_MAX:]:
        ok = None if a.verdict in (None, "interrupted") else a.verdict != "failed"
        out.append(LogEntry(a.started or 0.0, a.host, f"{a.action} {a.subject}",
                            f"{a.verdict or 'no outcome'} (earlier, by {a.operator})", ok,
                            (a.summary,)))
    return out
