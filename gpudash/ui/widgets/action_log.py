"""The action log: what was done, when, on which host, with what outcome."""

from __future__ import annotations

import time
from dataclasses import dataclass

from rich.text import Text
from textual.widgets import DataTable

from gpudash.ui.text import literal


@dataclass(frozen=True, slots=True)
class LogEntry:
    at: float
    host: str
    action: str
    outcome: str
    ok: bool | None  # None: not an outcome (cancelled, refused)


class ActionLog(DataTable[Text]):
    """One row per action, newest last."""

    DEFAULT_CSS = """
    ActionLog { height: 7; }
    """

    def __init__(self, **kwargs: object) -> None:
        super().__init__(cursor_type="row", **kwargs)  # type: ignore[arg-type]
        self.entries: list[LogEntry] = []

    def on_mount(self) -> None:
        self.add_column("Time", key="time", width=8)
        self.add_column("Host", key="host", width=14)
        self.add_column("Action", key="action", width=40)
        self.add_column("Outcome", key="outcome", width=100)
        self.border_title = "Action log"

    def add(self, entry: LogEntry, ok_style: str, bad_style: str) -> None:
        self.entries.append(entry)
        style = "" if entry.ok is None else ok_style if entry.ok else bad_style
        self.add_row(
            Text(time.strftime("%H:%M:%S", time.localtime(entry.at))),
            literal(entry.host),
            literal(entry.action),
            literal(entry.outcome, style=style),
            key=str(len(self.entries)),
        )
        self.move_cursor(row=self.row_count - 1)
