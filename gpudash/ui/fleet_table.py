"""A table of hosts, one row each, sortable and filtered by typing: what the SSH fleet
(``gpudash.ui.fleet_screen``) and the fleet from Prometheus (``gpudash.ui.prom_screen``)
share. A subclass says how many hosts there are, each one's name and row
(``gpudash.ui.fleet_rows.FleetRow``), its columns, its header, and what Enter does; this
screen keeps the order, the filter, the cursor and the redraws.

Work per change: one row, drawn again only if it is on screen. The table
(``gpudash.ui.widgets.line_table``) draws only the rows on screen and reorders by taking a
new list of host indices: a sort or a filter at 5,000 hosts re-adds nothing. A host whose
only news is its age ("up 3 s" -> "up 4 s") is ``host_aged``: its row is made again when
it is drawn, not once a second for every host.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable, Mapping
from typing import Protocol

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.events import Key, Resize
from textual.screen import Screen
from textual.widgets import Static
from textual.widgets.data_table import ColumnKey

from gpudash.ui.fleet_rows import STATE_FILTERS, FleetColumn, FleetRow, link_lines
from gpudash.ui.text import clean, literal
from gpudash.ui.throttle import RedrawThrottle
from gpudash.ui.widgets.line_table import LineTable

# Characters that go to the filter as they are typed (what host names are made of, and
# glob characters); every other key keeps its meaning.
FILTER_CHARS = frozenset("-_.@:*[]")
FLUSH_HZ = 1  # fleet row redraws per second at most: each one renders every visible row again


def _word(text: str) -> str:
    return text.split(" ", 1)[0]


class FleetApp(Protocol):
    """What the table asks of the app that shows it."""

    @property
    def keymap(self) -> Mapping[str, str]:
        """binding id -> keys, of the user's keymap file."""
        ...

    def key_of(self, action: str) -> str:
        """The key the user presses for ``action``, after their keymap."""
        ...

    def drawing_failed(self, where: str, exc: Exception) -> None:
        """A redraw failed: log it, say it once."""
        ...


class FleetTable(LineTable):
    """The fleet's rows, keyed by host index (``get_row(str(index))``: its cells)."""

    DEFAULT_CSS = """
    FleetTable { height: 1fr; border: round $primary; }
    """
    # A row cursor: Home/End go to the first/last row.
    BINDINGS = [
        Binding("home", "scroll_top", "First row", show=False),
        Binding("end", "scroll_bottom", "Last row", show=False),
    ]


class FleetTableScreen(Screen[None]):
    """Hosts in one table. Typing filters by host name or state; ``>`` sorts by the next
    column, ``<`` reverses; Enter opens the host (``open_row``)."""

    DEFAULT_CSS = """
    FleetTableScreen { layout: vertical; }
    FleetTableScreen #fleet-header { height: 1; background: $panel; }
    FleetTableScreen #fleet-keys { height: 1; background: $panel; color: $text-muted; }
    FleetTableScreen #fleet-detail { height: auto; max-height: 4; padding: 0 1;
                                     display: none; }
    FleetTableScreen #fleet-detail.shown { display: block; }
    """
    # filter words that pick hosts by state (a host whose name contains the word shows too)
    STATES: Mapping[str, str] = STATE_FILTERS

    def __init__(self, keys: FleetApp, *, id: str) -> None:  # noqa: A002 - Textual's name
        super().__init__(id=id)
        self.keys_of: FleetApp = keys
        self.filter_text = ""
        self.sort_key = "reclaim"
        self.descending = True
        self.ready = False
        self._rows: dict[int, FleetRow] = {}
        self._aged: set[int] = set()  # rows whose age text moved: made again when drawn
        self._by_name: list[int] = []  # host indices by name: the order ties keep
        self._crash_len = 0  # the longest Crash loop cell the columns were laid out for
        self._columns_dirty = False  # a cell outgrew its column: laid out at the next tick
        self._shown: list[int] = []  # host indices in table order
        self._order_dirty = False
        self._mode = ""
        self._heights: dict[int, int] = {}  # lines of each shown row (a long error wraps)
        self._rows_redraw = RedrawThrottle(self, self._redraw_rows, FLUSH_HZ, leading=False)

    # --- what a subclass says ------------------------------------------------------------

    def host_count(self) -> int:
        raise NotImplementedError

    def host_name(self, index: int) -> str:
        raise NotImplementedError

    def _make_row(self, index: int) -> FleetRow:
        raise NotImplementedError

    def column_layout(self, width: int, crash_len: int) -> list[tuple[FleetColumn, str, int]]:
        raise NotImplementedError

    def _draw_header(self) -> None:
        raise NotImplementedError

    def open_row(self, index: int) -> None:
        raise NotImplementedError

    def mode_of(self, width: int) -> str:
        raise NotImplementedError

    def back_key(self) -> str:
        """The key that comes back to the table from an opened host."""
        return self.keys_of.key_of("fleet")

    def detail_text(self, index: int, row: FleetRow) -> str | None:
        """What the line under the table says of the cursor's host (None: nothing)."""
        return None if row.link_text == "connected" else row.link_text

    # --- the table -----------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        yield Static(id="fleet-header")
        yield FleetTable(self._drawn_cells, id="fleet-table")
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

    def on_resize(self, event: Resize) -> None:
        if self.ready:  # Link and Last action take what the terminal has
            self.rebuild(columns=True)

    def row(self, index: int) -> FleetRow:
        """The row of host ``index`` as last made (made now if it never was): what the
        filter and the order read (an aged row's age text may be a second behind)."""
        if index not in self._rows:
            self._rows[index] = self._make_row(index)
        return self._rows[index]

    def _drawn_cells(self, index: int) -> Mapping[str, Text]:
        """The cells the table draws for host ``index``: an aged row made again first."""
        if index in self._aged or index not in self._rows:
            self._aged.discard(index)
            self._rows[index] = self._make_row(index)
        return self._rows[index].cells

    def _matches(self, index: int) -> bool:
        return self._matches_row(index, self.row(index), self.filter_text.lower())

    def _matches_row(self, index: int, row: FleetRow, text: str) -> bool:
        if not text:
            return True
        name = self.host_name(index).lower()
        if any(c in text for c in "*[]"):
            return fnmatch.fnmatchcase(name, text)
        return (text in name or row.link_text.lower().startswith(text)
                or (text in self.STATES and text in row.states))

    def _order(self) -> list[int]:
        count = self.host_count()
        if len(self._rows) < count:  # some never made: made now
            for i in range(count):
                self.row(i)
        rows = self._rows
        if len(self._by_name) != count:  # names are fixed until refresh_all
            self._by_name = sorted(range(count), key=lambda i: rows[i].sort["host"])
        text = self.filter_text.lower()
        shown = ([i for i in self._by_name if self._matches_row(i, rows[i], text)]
                 if text else list(self._by_name))
        key = self.sort_key
        # stable: ties stay by name
        shown.sort(key=lambda i: rows[i].sort.get(key, (-1,)), reverse=self.descending)
        return shown

    def _columns(self, *, recount: bool = True) -> None:
        """The columns laid out for the terminal's width (``recount``: the Crash loop
        column's longest cell counted again; a sort changes only the titles' arrow)."""
        self._mode = self.mode_of(self.app.size.width)
        if recount:
            self._crash_len = max((self.row(i).cells["crash"].cell_len
                                   for i in range(self.host_count())), default=0)
        crash = self._crash_len
        self.table.set_columns([
            (col.key, title + (("▼" if self.descending else "▲") if col.key == self.sort_key
                               else ""), width)
            for col, title, width in self.column_layout(self.app.size.width, crash)])

    def _crash_room(self, crash_len: int) -> int:
        """How wide the Crash loop column would be for a cell that long."""
        return next(w for c, _t, w in self.column_layout(self.app.size.width, crash_len)
                    if c.key == "crash")

    def _crash_width(self) -> int:
        column = self.table.columns.get(ColumnKey("crash"))
        return column.width if column is not None else 0

    def _link_width(self) -> int:
        column = self.table.columns.get(ColumnKey("link"))
        return column.width if column is not None else 44

    def rebuild(self, *, columns: bool = False, titles: bool = False) -> None:
        """Filter and sort every row again; the cursor stays on its host. ``columns``:
        laid out again; ``titles``: only their sort arrow moved."""
        if not self.ready:
            return
        try:
            cursor = self._cursor_index()
            with self.app.batch_update():
                if columns or not self.table.columns:
                    self._columns()
                elif titles:
                    self._columns(recount=False)
                self._shown = self._order()
                width = self._link_width()
                rows = self._rows
                # rows taller than one line (a long error); a cell of n characters is
                # at most 2n cells wide: shorter ones need no measuring
                self._heights = {i: h for i in self._shown
                                 if len(rows[i].cells["link"]) * 2 > width
                                 and (h := link_lines(rows[i], width)) > 1}
                self.table.set_order(self._shown, self._heights, cursor=cursor)
            self._order_dirty = False
            self.refresh_header()
        except Exception as exc:  # noqa: BLE001 - logged; the screen stays
            self.keys_of.drawing_failed("fleet table", exc)

    def refresh_all(self) -> None:
        self._rows = {i: self._make_row(i) for i in range(self.host_count())}
        self._by_name = []
        self._aged.clear()
        self.rebuild(columns=True)

    def host_changed(self, index: int) -> None:
        """A host has news: its row is redrawn (only the cells that changed) at the next
        flush, at most ``FLUSH_HZ`` times a second for all the hosts that changed: every
        cell update makes the table render its visible rows again, so 256 hosts' samples
        are drawn together, not one by one."""
        if self.ready:
            self._rows_redraw.ask(index)

    def host_aged(self, index: int, visible: frozenset[int]) -> None:
        """Only the age in host ``index``'s link text moved (its first word, what the
        filter and the Link order read, is the same): its row is made again when it is
        next drawn (now, if it is among the rows on screen, ``visible``), not for every
        host every second."""
        if not self.ready:
            return
        self._aged.add(index)
        if index in visible:
            self._rows_redraw.ask(index)

    def link_moved(self, index: int, text: str, visible: frozenset[int]) -> None:
        """Host ``index``'s link text is ``text`` now: aged, or news if its state changed."""
        row = self._rows.get(index)
        if row is None or _word(row.link_text) != _word(text):
            self.host_changed(index)
        elif row.link_text != text:
            self.host_aged(index, visible)

    def visible_hosts(self) -> frozenset[int]:
        """The hosts whose rows are on screen now."""
        return frozenset(self.table.visible_rows()) if self.ready else frozenset()

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
        self._aged.discard(index)
        try:
            visible = index in self._shown
            if visible != self._matches(index):
                self._order_dirty = True
            if old is not None and old.sort.get(self.sort_key) != new.sort.get(self.sort_key):
                self._order_dirty = True
            if visible and link_lines(new, self._link_width()) != self._heights.get(index, 1):
                self._order_dirty = True  # its error got longer or shorter: rows are re-laid
            crash = new.cells["crash"].cell_len
            if crash > self._crash_len and self._crash_room(crash) > self._crash_width():
                self._columns_dirty = True  # a longer unit name: the column takes the room
            if visible and index == self._cursor_index():
                self._subtitle(index)
            if visible:
                self.table.row_changed(index)
        except Exception as exc:  # noqa: BLE001 - logged; the screen stays
            self.keys_of.drawing_failed("fleet row", exc)

    def apply_layout(self) -> None:
        """A changed order or a column that outgrew its width, applied now (once a
        second: a sorted table does not jump at every sample)."""
        if self._columns_dirty:
            self._columns_dirty = False
            self.rebuild(columns=True)
        elif self._order_dirty:
            self.rebuild()
        else:
            self.refresh_header()

    def refresh_header(self) -> None:
        if not self.ready:  # news before the screen is mounted: on_mount draws it all
            return
        try:
            self._draw_header()
            self.keys.update(self._key_line())
        except Exception as exc:  # noqa: BLE001 - logged; the screen stays
            self.keys_of.drawing_failed("fleet header", exc)

    def _filter_said(self, out: Text) -> None:
        if self.filter_text:
            out.append("  │ filter: ")
            out.append_text(literal(self.filter_text, style="bold"))
            out.append(f" ({len(self._shown)} shown)", style="dim")

    def _key_line(self) -> Text:
        key: Callable[[str], str] = self.keys_of.key_of
        if self._mode == "narrow":
            text = (f" type: filter  enter open ({self.back_key()} back)  "
                    f"{key('fleet.sort')} sort  {key('fleet.reverse')} reverse  "
                    f"{key('help')} help  {key('quit')} quit")
        else:
            text = (f" type to filter  esc clear  enter open host ({self.back_key()} comes back)"
                    f"  {key('fleet.sort')} sort by next column  {key('fleet.reverse')} "
                    f"reverse  {key('help')} help  {key('quit')} quit")
        return Text(text)

    # --- keys ----------------------------------------------------------------------------

    def _cursor_index(self) -> int | None:
        return self.table.cursor_id if self._shown else None

    def on_key(self, event: Key) -> None:
        """Host-name characters go to the filter, backspace takes one back; the quit key
        (``q``) quits here as on the host screen (the filter matches anywhere in a name:
        type the rest of it)."""
        char = event.character
        quit_keys = self.keys_of.keymap.get("gpudash.quit", "q").split(",")
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
        self.rebuild(titles=True)

    def sort_by(self, key: str) -> None:
        """Sort by column ``key``: names A to Z, numbers biggest first."""
        self.sort_key = key
        self.descending = key not in ("host", "link")
        self.rebuild(titles=True)

    def on_line_table_header_selected(self, event: LineTable.HeaderSelected) -> None:
        key = event.key
        if key == self.sort_key:
            self.action_sort_reverse()
        else:
            self.sort_by(key)

    def on_line_table_highlighted(self, event: LineTable.Highlighted) -> None:
        """The link state (an error) in full under the table, wrapped, for the row under
        the cursor: its row wraps it too, but in at most LINK_LINES_MAX lines."""
        self._subtitle(event.row_id)

    def _subtitle(self, index: int) -> None:
        row = self._rows.get(index)
        said = None if row is None else self.detail_text(index, row)
        if not said:
            self.detail.update("")
            self.detail.set_class(False, "shown")
        else:
            name = self.host_name(index)
            text = literal(name, style="bold")
            text.append(": ")
            text.append(clean(said))
            text.no_wrap, text.overflow = False, "fold"
            self.detail.update(text)
            self.detail.set_class(True, "shown")

    def on_line_table_selected(self, event: LineTable.Selected) -> None:
        self.open_row(event.row_id)
