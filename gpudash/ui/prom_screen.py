"""The fleet from Prometheus: the fleet table (``gpudash.ui.fleet_table``) filled from
``gpudash.fleetprom`` refreshes instead of SSH feeds. Enter opens the row's host over SSH
(its name from the ``ssh_name`` template); q there comes back to this table.

While Prometheus fails, the header says why and when the next try is, and the rows are the
last good ones, marked stale; nothing here waits on the network.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import field
from operator import attrgetter

from rich.text import Text

from gpudash.fleetprom.fleet import FeedState
from gpudash.fleetprom.rows import PromHost
from gpudash.fleetprom.sshname import SshNameError, SshNameTemplate
from gpudash.fleetprom.visit import Visit
from gpudash.record import record
from gpudash.ui.bindings import bindings, help_rows
from gpudash.ui.fleet_rows import FleetColumn, FleetRow, column_widths, mode_of
from gpudash.ui.fleet_table import FleetApp, FleetTableScreen
from gpudash.ui.palette import palette
from gpudash.ui.prom_rows import (
    GIB,
    PROM_COLUMN_HELP,
    PROM_COLUMNS,
    PROM_FILTERS,
    prom_row,
    row_status,
)
from gpudash.ui.text import literal


@record(frozen=False)
class TableMemory:
    """What the table keeps while a host is open (a new table is made on coming back)."""

    filter_text: str = ""
    sort_key: str = "reclaim"
    descending: bool = True
    cursor: str | None = None  # the host name under the cursor
    state: FeedState | None = None
    # what opening each host over SSH found, by SSH name (the last time it was opened)
    visits: dict[str, Visit] = field(default_factory=dict)


# What a host's row shows but its age: the same, and a new scrape only moves the age
_TIMES = ("scraped_at", "sampled_at")
_figures = attrgetter(*(f for f in PromHost.__dataclass_fields__ if f not in _TIMES))
_times = attrgetter(*_TIMES)


class PromFleetScreen(FleetTableScreen):
    """Every host Prometheus has, in one table."""

    BINDINGS = bindings("fleet")
    STATES = PROM_FILTERS

    def __init__(self, app: FleetApp, url: str, ssh: SshNameTemplate,
                 open_host: Callable[[str], None], memory: TableMemory,
                 clock: Callable[[], float] = time.time) -> None:
        super().__init__(app, id="prom-fleet")
        self.url = url
        self.ssh = ssh
        self.open_host = open_host
        self.clock = clock
        self.memory = memory
        self.filter_text = memory.filter_text
        self.sort_key, self.descending = memory.sort_key, memory.descending
        self.hosts: list[PromHost] = []
        self._visits: dict[str, Visit | None] = {}  # by host name (visit_of)
        self.state = FeedState(None)
        if memory.state is not None:
            self.update(memory.state)

    def on_mount(self) -> None:
        super().on_mount()
        if self.memory.cursor is not None:
            self.cursor_to(self.memory.cursor)

    def cursor_to(self, name: str) -> None:
        names = [self.hosts[i].name for i in self._shown]
        if name in names:
            self.table.move_cursor(row=names.index(name), animate=False)

    def remember(self) -> TableMemory:
        index = self._cursor_index() if self.ready else None
        return TableMemory(self.filter_text, self.sort_key, self.descending,
                           None if index is None else self.hosts[index].name, self.state,
                           self.memory.visits)

    # --- rows ----------------------------------------------------------------------------

    def update(self, state: FeedState) -> None:
        """A refresh's news: new rows (or the same ones, now failing)."""
        was_failing = self.state.error is not None
        self.state = state
        hosts = list(state.fleet.hosts) if state.fleet is not None else []
        if [h.name for h in hosts] != [h.name for h in self.hosts]:
            cursor = self._cursor_index() if self.ready else None
            name = None if cursor is None else self.hosts[cursor].name
            self.hosts = hosts
            if self.ready:
                self.refresh_all()
                if name is not None:
                    self.cursor_to(name)
            return
        failing = state.error is not None
        now = self.clock()
        visible = self.visible_hosts()
        rows = self._rows
        for i, (old, new) in enumerate(zip(self.hosts, hosts, strict=True)):
            visit = self.visit_of(i)
            same = (was_failing == failing and _figures(old) == _figures(new)
                    and (visit is None or visit.newer_than(old) == visit.newer_than(new)))
            if same and _times(old) == _times(new):
                continue
            self.hosts[i] = new
            if not same:
                self.host_changed(i)
                continue
            # a new scrape, the same figures (most hosts, every read): only its age moved,
            # unless it changed state (stale -> up); "up" stays up when scraped again
            row = rows.get(i)
            if (row is not None and not failing and row.link_text.startswith("up ")
                    and (new.scraped_at or 0.0) >= (old.scraped_at or 0.0)):
                self.host_aged(i, visible)
            else:
                self.link_moved(i, row_status(new, self.visit_of(i), now, failing)[0],
                                visible)
        self.refresh_header()

    def host_count(self) -> int:
        return len(self.hosts)

    def host_name(self, index: int) -> str:
        return self.hosts[index].name

    def mode_of(self, width: int) -> str:
        return mode_of(width)

    def column_layout(self, width: int, crash_len: int) -> list[tuple[FleetColumn, str, int]]:
        return column_widths(width, crash_len, PROM_COLUMNS)

    def _make_row(self, index: int) -> FleetRow:
        return prom_row(self.hosts[index], self.clock(), self.state.error is not None,
                        palette(self.app), self.visit_of(index))

    def visit_of(self, index: int) -> Visit | None:
        """What opening host ``index`` over SSH found, if it was opened. Asked for every
        host at every refresh and tick: its SSH name is worked out once per host name."""
        if not self.memory.visits:
            return None
        host = self.hosts[index].name
        if host not in self._visits:
            name, _why = self.ssh_name(index)
            self._visits[host] = None if name is None else self.memory.visits.get(name)
        return self._visits[host]

    def ssh_name(self, index: int) -> tuple[str | None, str]:
        """(the SSH name, or None and why not)."""
        try:
            return self.ssh.name(dict(self.hosts[index].labels)), ""
        except SshNameError as exc:
            return None, str(exc)

    def detail_text(self, index: int, row: FleetRow) -> str | None:
        name, why = self.ssh_name(index)
        host = self.hosts[index]
        where = ", ".join(f"{k}={v}" for k, v in host.labels)
        opens = f"Enter opens ssh {name}" if name else f"cannot open: {why}"
        visit = self.visit_of(index)
        last = f" · last there: {visit.action}" if visit is not None and visit.action else ""
        return (f"{row.link_text} · {opens} · {'+'.join(host.sources) or 'no series'} "
                f"({where}){last}")

    def tick(self) -> None:
        """Once a second: ages move (drawn where on screen), a changed order is applied."""
        if not self.ready:
            return
        now = self.clock()
        failing = self.state.error is not None
        visible = self.visible_hosts()
        for i, host in enumerate(self.hosts):
            row = self._rows.get(i)
            text = row_status(host, self.visit_of(i), now, failing)[0]
            if row is None or text != row.link_text:
                self.link_moved(i, text, visible)
        self.apply_layout()

    def _draw_header(self) -> None:
        pal = palette(self.app)
        out = Text()
        out.append(" gpudash ", style="bold reverse")
        out.append(" fleet ", style="bold")
        out.append_text(literal(self.url, style="dim"))
        if self.state.fleet is not None:  # which queries the rows come from (docs/prometheus)
            out.append(" recorded" if self.state.fleet.source == "recorded"
                       else " raw (no gpudash-records.yml)", style="dim")
        out.append(f"  │ {len(self.hosts)} hosts", style="bold")
        # as PromHost.states says, without its clock: neither depends on the time
        down = sum(h.target_down or h.link_up is False for h in self.hosts)
        if down:
            out.append(f"  │ {down} down", style=f"bold {pal.error}")
        alerting = sum(bool(h.alerts) for h in self.hosts)
        if alerting:
            out.append(f"  │ {alerting} alerting", style=f"bold {pal.error}")
        reclaim = sum(h.reclaimable_bytes or 0.0 for h in self.hosts)
        out.append(f"  │ {reclaim / GIB:.1f} GiB reclaimable",
                   style=f"bold {pal.orphan}" if reclaim else "dim")
        error = self.state.error
        if error is not None:
            wait = ("" if self.state.retry_at is None
                    else f", retry in {max(0.0, self.state.retry_at - time.monotonic()):.0f} s")
            shown = " (rows as last read: stale)" if self.hosts else ""
            out.append("  │ ")
            out.append_text(literal(f"prometheus {error}{wait}{shown}",
                                    style=f"bold {pal.error}"))
        elif self.state.fleet is None:
            out.append("  │ reading…", style=pal.warning)
        self._filter_said(out)
        self.header.update(out)

    # --- keys ----------------------------------------------------------------------------

    def back_key(self) -> str:
        return self.keys_of.key_of("quit")

    def open_row(self, index: int) -> None:
        name, why = self.ssh_name(index)
        if name is None:
            self.app.notify(f"{self.hosts[index].name}: {why}", title="Cannot open",
                            severity="warning", markup=False)
            return
        self.open_host(name)

    def help_rows(self) -> list[tuple[str, str, bool | None]]:
        """The help screen's rows: the fleet's keys, then the app's."""
        return help_rows("fleet", self.keys_of.keymap, 1, {})

    def help_sections(self) -> list[tuple[str, list[tuple[str, str]]]]:
        return [("Filter words", list(PROM_FILTERS.items())),
                ("Columns", list(PROM_COLUMN_HELP))]
