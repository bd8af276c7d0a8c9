"""The fleet: one row per host — link, GPUs, reclaimable memory, orphans, crash loops and
the last action — sortable, filtered by typing; Enter opens the host, F comes back.

What a row says about a host is ``gpudash.domain.fleet.summarize`` of its triage (the exporter
uses the same definition), its cells ``gpudash.ui.fleet_rows``'s; the table itself (order,
filter, cursor, redraws) is ``gpudash.ui.fleet_table``'s. A host that fails shows its error
in its row; a row that cannot be drawn shows why in its row; neither takes the screen down.
"""

from __future__ import annotations

import logging

from rich.text import Text

from gpudash.domain.fleet import HostSummary, summarize
from gpudash.domain.triage import HostTriage
from gpudash.domain.units import MIB_PER_GIB
from gpudash.ui.bindings import bindings, help_rows
from gpudash.ui.fleet_rows import (
    COLUMN_HELP,
    STATE_FILTERS,
    FleetColumn,
    FleetRow,
    column_widths,
    error_row,
    fleet_row,
    mode_of,
)
from gpudash.ui.fleet_table import FILTER_CHARS, FLUSH_HZ, FleetTable, FleetTableScreen
from gpudash.ui.palette import palette
from gpudash.ui.state import Dashboard
from gpudash.ui.text import clean

__all__ = ["FILTER_CHARS", "FLUSH_HZ", "FleetScreen", "FleetTable"]

log = logging.getLogger("gpudash.ui.fleet")


class FleetScreen(FleetTableScreen):
    """Every host in one table. Typing filters by host name or link state; ``>`` sorts
    by the next column, ``<`` reverses; Enter opens the host (``F`` there comes back)."""

    BINDINGS = bindings("fleet")

    def __init__(self, dashboard: Dashboard) -> None:
        super().__init__(dashboard, id="fleet")
        self.dashboard = dashboard
        self._summaries: dict[int, tuple[HostTriage, HostSummary | None]] = {}
        self._row_errors: dict[int, str] = {}
        self._left_for_host = False

    def on_screen_resume(self) -> None:
        if not self.ready:
            return
        if self._left_for_host:
            # back from a host's screen (F): the filter is cleared, so the host just looked
            # at or acted on is never hidden, and the cursor is on it
            self._left_for_host = False
            self.filter_text = ""
            self.refresh_all()
            index = self.dashboard.current_host
            if index in self._shown:
                self.table.move_cursor(row=self._shown.index(index), animate=False)
            return
        self.refresh_all()  # rows went stale while a host was on screen

    def action_reap_shown(self) -> None:
        """Reap the orphans of the hosts shown with orphans (``gpudash.ui.fleet_acting``)."""
        from gpudash.ui.fleet_acting import reap_hosts

        hosts = [i for i in self._shown if "orphans" in self.row(i).states]
        self.app.run_worker(reap_hosts(self.app, self.dashboard, hosts), group="fleet reap",
                            exclusive=True, exit_on_error=False)

    def action_reclaim_shown(self) -> None:
        """Reclaim one unit (picked) on every host shown that has it."""
        from gpudash.ui.fleet_acting import act_on_hosts, reclaim, units_held
        from gpudash.ui.fleet_pick import UnitPicker

        hosts = list(self._shown)
        units = units_held(self.dashboard, hosts)
        if not units:
            self.app.notify("No service holds GPU memory on the hosts shown.",
                            title="Reclaim a unit on the hosts shown", markup=False)
            return

        def picked(unit: str | None) -> None:
            if unit is not None:
                self.app.run_worker(act_on_hosts(self.app, self.dashboard, hosts,
                                                 reclaim(unit)),
                                    group="fleet reclaim", exclusive=True, exit_on_error=False)

        self.app.push_screen(UnitPicker(units, len(hosts)), picked)

    def leave_for_host(self) -> None:
        """A host's screen replaces the fleet (Enter, the palette): see on_screen_resume."""
        self._left_for_host = True

    # --- rows ----------------------------------------------------------------------------

    def host_count(self) -> int:
        return len(self.dashboard.views)

    def host_name(self, index: int) -> str:
        return self.dashboard.views[index].name

    def mode_of(self, width: int) -> str:
        return mode_of(width)

    def column_layout(self, width: int, crash_len: int) -> list[tuple[FleetColumn, str, int]]:
        return column_widths(width, crash_len)

    def _summary(self, index: int) -> HostSummary | None:
        result = self.dashboard.views[index].triage
        if result is None:
            return None
        cached = self._summaries.get(index)
        if cached is None or cached[0] is not result:  # one summary per new triage
            cached = (result, summarize(result))
            self._summaries[index] = cached
        return cached[1]

    def _make_row(self, index: int) -> FleetRow:
        app = self.dashboard
        view = app.views[index]
        pal = palette(self.app)
        try:
            row = fleet_row(view, self._summary(index), app.last_actions.get(view.name),
                            app.clock(), app.stale_after, pal)
            self._row_errors.pop(index, None)
            return row
        except Exception as exc:  # noqa: BLE001 - one host's row never ends the screen
            why = f"{type(exc).__name__}: {exc}"
            if self._row_errors.get(index) != why:  # logged once, not once per sample
                self._row_errors[index] = why
                log.exception("fleet row of %s failed", view.name)
            return error_row(view, exc, pal)

    def detail_text(self, index: int, row: FleetRow) -> str | None:
        if row.link_text == "connected":
            return None
        name = self.dashboard.views[index].name
        return row.link_text.replace(f"error: {name}: ", "error: ", 1)

    def tick(self) -> None:
        """Once a second: ages and retry countdowns move, a changed order is applied (a
        sorted table does not jump at every sample)."""
        if not self.ready:
            return
        app = self.dashboard
        now = app.clock()
        visible = self.visible_hosts()
        for i, view in enumerate(app.views):
            row = self._rows.get(i)
            text = view.status(now, app.stale_after)[0]
            if row is None or text != row.link_text:
                self.link_moved(i, text, visible)
        self.apply_layout()

    def _draw_header(self) -> None:
        app = self.dashboard
        pal = palette(self.app)
        views = app.views
        now = app.clock()
        states = [v.status(now, app.stale_after)[1] for v in views]
        reclaim = sum(s.reclaimable_mib for _t, s in self._summaries.values() if s is not None)
        out = Text()
        out.append(" gpudash ", style="bold reverse")
        out.append(" fleet ", style="bold")
        if app.read_only:
            out.append(" READ-ONLY ", style=f"bold reverse {pal.warning}")
            out.append(" ")
        out.append(f"{len(views)} hosts", style="bold")
        out.append(f"  │ {states.count('ok')} connected", style=pal.success)
        if states.count("error"):
            out.append(f"  │ {states.count('error')} failing", style=f"bold {pal.error}")
        if states.count("warn"):
            out.append(f"  │ {states.count('warn')} waiting", style=pal.warning)
        out.append(f"  │ {reclaim / MIB_PER_GIB:.1f} GiB reclaimable",
                   style=f"bold {pal.orphan}" if reclaim else "dim")
        self._filter_said(out)
        self.header.update(out)

    # --- keys ----------------------------------------------------------------------------

    def open_row(self, index: int) -> None:
        self.dashboard.open_host(index)

    def action_host(self, index: int) -> None:
        """Open host ``index`` (the palette's host entries)."""
        self.dashboard.open_host(index)

    def palette_commands(self) -> list[tuple[str, str, str, bool]]:
        """(title, help, action, available) of what the command palette offers here: the
        hosts (the fleet acts on no host: open one first)."""
        return [(f"Host: {clean(v.name)}", "open it", f"host({i})", True)
                for i, v in enumerate(self.dashboard.views)]

    def help_rows(self) -> list[tuple[str, str, bool | None]]:
        """The help screen's rows: the fleet's keys, then the app's."""
        return help_rows("fleet", self.dashboard.keymap, len(self.dashboard.views), {})

    def help_sections(self) -> list[tuple[str, list[tuple[str, str]]]]:
        """What the help screen explains after the keys: the filter's state words and
        what each column says."""
        return [("Filter words", list(STATE_FILTERS.items())), ("Columns", list(COLUMN_HELP))]

