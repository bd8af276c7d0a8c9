"""The fleet: one row per host — link, GPUs, reclaimable memory, orphans, crash loops and
the last action — sortable, filtered by typing; Enter opens the host, F comes back.

What a row says about a host is ``gpudash.domain.fleet.summarize`` of its triage (the exporter
uses the same definition), its cells ``gpudash.ui.fleet_rows``'s; this screen only draws
them. A host that fails shows its error in its row; a row that cannot be drawn shows why in
its row; neither takes the screen down.
Work per sample: one row, and only its cells that changed.
"""

from __future__ import annotations

import fnmatch
import logging
from collections.abc import Callable

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.events import Key, Resize
from textual.screen import Screen
from textual.widgets import DataTable, Static
from textual.widgets.data_table import ColumnKey

from gpudash.domain.fleet import HostSummary, summarize
from gpudash.domain.triage import HostTriage
from gpudash.domain.units import MIB_PER_GIB
from gpudash.ui.bindings import bindings, help_rows
from gpudash.ui.fleet_rows import (
    COLUMN_HELP,
    STATE_FILTERS,
    FleetRow,
    column_widths,
    error_row,
    fleet_row,
    link_lines,
    mode_of,
)
from gpudash.ui.palette import palette
from gpudash.ui.state import Dashboard
from gpudash.ui.text import clean, literal
from gpudash.ui.throttle import RedrawThrottle

log = logging.getLogger("gpudash.ui.fleet")

# Characters that go to the filter as they are typed (what host names are made of, and
# glob characters); every other key keeps its meaning.
FILTER_CHARS = frozenset("-_.@:*[]")
FLUSH_HZ = 1  # fleet row redraws per second at most: each one renders every visible row again


def _same(a: Text, b: Text) -> bool:
    return a.plain == b.plain and a.style == b.style and a.spans == b.spans


class FleetTable(DataTable[Text]):
    """The fleet's rows, keyed by host index."""

    DEFAULT_CSS = """
    FleetTable { height: 1fr; border: round $primary; }
    """
    # A row cursor: Home/End go to the first/last row (DataTable scrolls sideways).
    BINDINGS = [
        Binding("home", "scroll_top", "First row", show=False),
        Binding("end", "scroll_bottom", "Last row", show=False),
    ]


class FleetScreen(Screen[None]):
    """Every host in one table. Typing filters by host name or link state; ``>`` sorts
    by the next column, ``<`` reverses; Enter opens the host (``F`` there comes back)."""

    BINDINGS = bindings("fleet")

    DEFAULT_CSS = """
    FleetScreen { layout: vertical; }
    FleetScreen #fleet-header { height: 1; background: $panel; }
    FleetScreen #fleet-keys { height: 1; background: $panel; color: $text-muted; }
    FleetScreen #fleet-detail { height: auto; max-height: 4; padding: 0 1; display: none; }
    FleetScreen #fleet-detail.shown { display: block; }
    """

    def __init__(self, dashboard: Dashboard) -> None:
        super().__init__(id="fleet")
        self.dashboard = dashboard
        self.filter_text = ""
        self.sort_key = "reclaim"
        self.descending = True
        self.ready = False
        self._rows: dict[int, FleetRow] = {}
        self._columns_dirty = False  # a cell outgrew its column: laid out at the next tick
        self._summaries: dict[int, tuple[HostTriage, HostSummary | None]] = {}
        self._shown: list[int] = []  # host indices in table order
        self._order_dirty = False
        self._mode = ""
        self._row_errors: dict[int, str] = {}
        self._heights: dict[int, int] = {}  # lines of each shown row (a long error wraps)
        self._left_for_host = False
        self._rows_redraw = RedrawThrottle(self, self._redraw_rows, FLUSH_HZ, leading=False)

    def compose(self) -> ComposeResult:
        yield Static(id="fleet-header")
        yield FleetTable(id="fleet-table", cursor_type="row", zebra_stripes=True)
        yield Static(id="fleet-detail")  # the cursor host's link state in full
        yield Static(id="fleet-keys")

    def on_mount(self) -> None:
        self.table = self.query_one(FleetTable)
        self.header = self.query_one("#fleet-header", Static)
        self.keys = self.query_one("#fleet-keys", Static)
        self.detail = self.query_one("#fleet-detail", Static)
        self.table.border_title = "Fleet"
        self.ready = True
        self.refresh_all()

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

    def leave_for_host(self) -> None:
        """A host's screen replaces the fleet (Enter, the palette): see on_screen_resume."""
        self._left_for_host = True

    def on_resize(self, event: Resize) -> None:
        if self.ready:  # Link and Last action take what the terminal has
            self.rebuild(columns=True)

    # --- rows ----------------------------------------------------------------------------

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

    def row(self, index: int) -> FleetRow:
        """The row of host ``index`` as last drawn (made now if it never was)."""
        if index not in self._rows:
            self._rows[index] = self._make_row(index)
        return self._rows[index]

    def _matches(self, index: int) -> bool:
        text = self.filter_text.lower()
        if not text:
            return True
        name = self.dashboard.views[index].name.lower()
        if any(c in text for c in "*[]"):
            return fnmatch.fnmatchcase(name, text)
        row = self.row(index)
        return (text in name or row.link_text.lower().startswith(text)
                or (text in STATE_FILTERS and text in row.states))

    def _order(self) -> list[int]:
        shown = [i for i in range(len(self.dashboard.views)) if self._matches(i)]
        key = self.sort_key

        def by(i: int) -> tuple[object, ...]:
            return self.row(i).sort.get(key, (-1,))

        shown.sort(key=lambda i: self.row(i).sort["host"])
        shown.sort(key=by, reverse=self.descending)  # stable: ties stay by name
        return shown

    def _columns(self) -> None:
        self._mode = mode_of(self.app.size.width)
        self.table.clear(columns=True)
        crash = max((self.row(i).cells["crash"].cell_len
                     for i in range(len(self.dashboard.views))), default=0)
        for col, title, width in column_widths(self.app.size.width, crash):
            arrow = ("▼" if self.descending else "▲") if col.key == self.sort_key else ""
            self.table.add_column(f"{title}{arrow}", key=col.key, width=width)

    def _crash_room(self, crash_len: int) -> int:
        """How wide the Crash loop column would be for a cell that long."""
        return next(w for c, _t, w in column_widths(self.app.size.width, crash_len)
                    if c.key == "crash")

    def _crash_width(self) -> int:
        column = self.table.columns.get(ColumnKey("crash"))
        return column.width if column is not None else 0

    def _link_width(self) -> int:
        column = self.table.columns.get(ColumnKey("link"))
        return column.width if column is not None else 44

    def rebuild(self, *, columns: bool = False) -> None:
        """Filter and sort every row again; the cursor stays on its host."""
        if not self.ready:
            return
        try:
            cursor = self._cursor_index()
            with self.app.batch_update():
                if columns or not self.table.columns:
                    self._columns()
                else:
                    self.table.clear()
                keys = [str(k.value) for k in self.table.columns]
                self._shown = self._order()
                self._heights = {}
                for i in self._shown:
                    row = self.row(i)
                    height = self._heights[i] = link_lines(row, self._link_width())
                    self.table.add_row(*(row.cells[k] for k in keys), key=str(i),
                                       height=height)
                if cursor is not None and cursor in self._shown:
                    self.table.move_cursor(row=self._shown.index(cursor), animate=False)
            self._order_dirty = False
            self.refresh_header()
        except Exception as exc:  # noqa: BLE001 - logged; the screen stays
            self.dashboard.drawing_failed("fleet table", exc)

    def refresh_all(self) -> None:
        self._rows = {i: self._make_row(i) for i in range(len(self.dashboard.views))}
        self.rebuild(columns=True)

    def host_changed(self, index: int) -> None:
        """A host has news: its row is redrawn (only the cells that changed) at the next
        flush, at most ``FLUSH_HZ`` times a second for all the hosts that changed: every
        cell update makes the table render its visible rows again, so 256 hosts' samples
        are drawn together, not one by one."""
        if self.ready:
            self._rows_redraw.ask(index)

    def _redraw_rows(self, hosts: set[int]) -> None:
        """Redraw the rows of the hosts that changed since the last redraw."""
        if not self.ready:
            return
        with self.app.batch_update():
            for index in sorted(hosts):
                self._redraw_row(index)

    def _redraw_row(self, index: int) -> None:
        old = self._rows.get(index)
        new = self._rows[index] = self._make_row(index)
        try:
            visible = index in self._shown
            if visible != self._matches(index):
                self._order_dirty = True
            if old is not None and old.sort.get(self.sort_key) != new.sort.get(self.sort_key):
                self._order_dirty = True
            if visible and link_lines(new, self._link_width()) != self._heights.get(index):
                self._order_dirty = True  # its error got longer or shorter: rows are re-laid
            if self._crash_room(new.cells["crash"].cell_len) > self._crash_width():
                self._columns_dirty = True  # a longer unit name: the column takes the room
            if visible and index == self._cursor_index():
                self._subtitle(index)
            if visible:
                for col in self.table.columns:
                    key = str(col.value)
                    if old is None or not _same(old.cells[key], new.cells[key]):
                        self.table.update_cell(str(index), key, new.cells[key])
        except Exception as exc:  # noqa: BLE001 - logged; the screen stays
            self.dashboard.drawing_failed("fleet row", exc)

    def tick(self) -> None:
        """Once a second: ages and retry countdowns move, a changed order is applied (a
        sorted table does not jump at every sample)."""
        if not self.ready:
            return
        app = self.dashboard
        now = app.clock()
        for i, view in enumerate(app.views):
            row = self._rows.get(i)
            if row is None or view.status(now, app.stale_after)[0] != row.link_text:
                self.host_changed(i)
        if self._columns_dirty:
            self._columns_dirty = False
            self.rebuild(columns=True)
        elif self._order_dirty:
            self.rebuild()
        else:
            self.refresh_header()

    def refresh_header(self) -> None:
        try:
            self._draw_header()
        except Exception as exc:  # noqa: BLE001 - logged; the screen stays
            self.dashboard.drawing_failed("fleet header", exc)

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
        if self.filter_text:
            out.append("  │ filter: ")
            out.append_text(literal(self.filter_text, style="bold"))
            out.append(f" ({len(self._shown)} shown)", style="dim")
        self.header.update(out)
        self.keys.update(self._key_line())

    def _key_line(self) -> Text:
        key: Callable[[str], str] = self.dashboard.key_of
        if self._mode == "narrow":
            text = (f" type: filter  enter open ({key('fleet')} back)  "
                    f"{key('fleet.sort')} sort  {key('fleet.reverse')} reverse  "
                    f"{key('help')} help  {key('quit')} quit")
        else:
            text = (f" type to filter  esc clear  enter open host ({key('fleet')} comes back)"
                    f"  {key('fleet.sort')} sort by next column  {key('fleet.reverse')} "
                    f"reverse  {key('help')} help  {key('quit')} quit")
        return Text(text)

    # --- keys ----------------------------------------------------------------------------

    def _cursor_index(self) -> int | None:
        if not self._shown or self.table.row_count == 0:
            return None
        row = self.table.cursor_row
        return self._shown[row] if 0 <= row < len(self._shown) else None

    def on_key(self, event: Key) -> None:
        """Host-name characters go to the filter, backspace takes one back; the quit key
        (``q``) quits here as on the host screen (the filter matches anywhere in a name:
        type the rest of it)."""
        char = event.character
        quit_keys = self.dashboard.keymap.get("gpudash.quit", "q").split(",")
        if event.key in (k.strip() for k in quit_keys):
            return
        if event.key == "backspace" and self.filter_text:
            self.filter_text = self.filter_text[:-1]
        elif char is not None and len(char) == 1 and event.is_printable and (
            char.isalnum() or char in FILTER_CHARS
        ):
            self.filter_text += char
        else:
            return
        event.stop()
        event.prevent_default()
        self.rebuild()

    def action_clear_filter(self) -> None:
        if self.filter_text:
            self.filter_text = ""
            self.rebuild()

    def action_sort_next(self) -> None:
        keys = [str(c.value) for c in self.table.columns]
        at = keys.index(self.sort_key) if self.sort_key in keys else -1
        self.sort_by(keys[(at + 1) % len(keys)])

    def action_sort_reverse(self) -> None:
        self.descending = not self.descending
        self.rebuild(columns=True)

    def sort_by(self, key: str) -> None:
        """Sort by column ``key``: names A to Z, numbers biggest first."""
        self.sort_key = key
        self.descending = key not in ("host", "link")
        self.rebuild(columns=True)

    def on_data_table_header_selected(self, event: DataTable.HeaderSelected) -> None:
        key = str(event.column_key.value)
        if key == self.sort_key:
            self.action_sort_reverse()
        else:
            self.sort_by(key)

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        """The link state (an error) in full under the table, wrapped, for the row under
        the cursor: its row wraps it too, but in at most LINK_LINES_MAX lines."""
        if event.row_key.value is not None:
            self._subtitle(int(event.row_key.value))

    def _subtitle(self, index: int) -> None:
        row = self._rows.get(index)
        if row is None or row.link_text == "connected":
            self.detail.update("")
            self.detail.set_class(False, "shown")
        else:
            name = self.dashboard.views[index].name
            status = row.link_text.replace(f"error: {name}: ", "error: ", 1)
            text = literal(name, style="bold")
            text.append(": ")
            text.append(clean(status))
            text.no_wrap, text.overflow = False, "fold"
            self.detail.update(text)
            self.detail.set_class(True, "shown")

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        if event.row_key.value is not None:
            self.dashboard.open_host(int(event.row_key.value))

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
